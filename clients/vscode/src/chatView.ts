// The chat webview: renders the controller's state (items by id, as they change), and turns
// what the user does there (prompt, Stop, permission buttons, pickers, sessions, mentions,
// pasted images, Open diff) into controller calls.
import * as vscode from "vscode";
import type { ContentBlock } from "@agentclientprotocol/sdk";

import { ALL_ITEMS, findCard } from "./chatState.js";
import type { SessionController } from "./controller.js";
import type { DiffDocuments } from "./host/vscodeHost.js";
import { renderAttachment, renderItem, renderPlan, renderUsage } from "./render.js";
import type { FromView, ToView } from "./viewMessages.js";

export class ChatView implements vscode.WebviewViewProvider {
  static readonly id = "talaria.chat";
  private view?: vscode.WebviewView;

  constructor(
    private readonly extensionUri: vscode.Uri,
    private readonly controller: () => SessionController,
    private readonly diffs: DiffDocuments,
  ) {}

  resolveWebviewView(view: vscode.WebviewView): void {
    this.view = view;
    const dist = vscode.Uri.joinPath(this.extensionUri, "dist");
    view.webview.options = { enableScripts: true, localResourceRoots: [dist] };
    const script = view.webview.asWebviewUri(vscode.Uri.joinPath(dist, "webview.js"));
    const style = view.webview.asWebviewUri(vscode.Uri.joinPath(dist, "webview.css"));
    const nonce = Math.random().toString(36).slice(2) + Date.now().toString(36);
    view.webview.html = `<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; img-src ${view.webview.cspSource} data:; style-src ${view.webview.cspSource}; script-src 'nonce-${nonce}';">
<link rel="stylesheet" href="${style}"></head>
<body><script nonce="${nonce}" src="${script}"></script></body></html>`;
    view.webview.onDidReceiveMessage((message: FromView) => void this.handle(message));
  }

  /** Sends the whole chat again (after a reset, a load, or the view opening). */
  refresh(): void {
    const controller = this.controller();
    this.post({
      type: "reset",
      items: controller.state.items.map((item) => ({ id: item.id, html: renderItem(item, controller.state.terminals) })),
    });
    this.postHeader();
  }

  /** Sends what changed. */
  changed(ids: string[]): void {
    if (ids.includes(ALL_ITEMS)) {
      this.refresh();
      return;
    }
    const state = this.controller().state;
    for (const id of ids) {
      if (id === "*") continue;
      const item = state.items.find((i) => i.id === id);
      if (item) this.post({ type: "item", id, html: renderItem(item, state.terminals) });
    }
    if (ids.includes("*")) this.postHeader();
  }

  private postHeader(): void {
    const controller = this.controller();
    const state = controller.state;
    this.post({
      type: "header",
      busy: state.busy,
      usage: renderUsage(state),
      plan: renderPlan(state),
      title: state.title ?? "",
      commands: state.commands.map((c) => ({ name: c.name, description: c.description, hint: c.input?.hint ?? "" })),
      options: state.configOptions
        .filter((o) => o.type === "select")
        .map((o) => ({
          id: o.id,
          name: o.name,
          value: String(o.currentValue),
          choices: flatChoices(o.options),
        })),
      acceptsImages: controller.acceptsImages,
      canList: controller.canList,
      canSteer: controller.canSteer,
      canRewind: controller.canRewind,
      attachment: attachmentHeader(state),
    });
  }

  private post(message: ToView): void {
    void this.view?.webview.postMessage(message);
  }

  private async handle(message: FromView): Promise<void> {
    const controller = this.controller();
    switch (message.type) {
      case "ready":
        this.refresh();
        void controller.ensureStarted().then(() => this.postHeader());
        break;
      case "prompt":
        await controller.prompt(await this.blocks(message), message.text, [
          ...message.mentions,
          ...message.images.map((_, i) => `image ${i + 1}`),
        ]);
        break;
      case "steer":
        await controller.steer(await this.blocks(message), message.text);
        break;
      case "queue":
        controller.queue(await this.blocks(message), message.text, [
          ...message.mentions,
          ...message.images.map((_, i) => `image ${i + 1}`),
        ]);
        break;
      case "stop":
        await controller.cancel();
        break;
      case "rewind":
        if (await controller.rewind(message.itemId, { restoreFiles: message.restoreFiles })) this.refresh();
        break;
      case "edit": {
        const resubmit = await this.blocks({ ...message, type: "prompt" });
        if (await controller.rewind(message.itemId, { restoreFiles: false, resubmit, shown: message.text })) this.refresh();
        break;
      }
      case "permission":
        controller.answerPermission(message.toolCallId, message.optionId);
        break;
      case "question": {
        const problem = controller.answerQuestion(message.id, message.action, message.content);
        if (problem) this.post({ type: "questionProblem", id: message.id, problem });
        break;
      }
      case "openDiff": {
        const card = findCard(controller.state, message.toolCallId);
        const content = card?.content[message.index];
        if (content?.type === "diff") await this.diffs.open(content.path, content.oldText ?? "", content.newText);
        break;
      }
      case "setOption":
        await controller.setConfigOption(message.configId, message.value);
        break;
      case "newSession":
        // The command: an attached session is left for a local one.
        await vscode.commands.executeCommand("talaria.newSession");
        break;
      case "takeControl":
        await controller.takeControl();
        break;
      case "leave":
        await vscode.commands.executeCommand("talaria.detach");
        break;
      case "listSessions": {
        const sessions = await controller.listSessions();
        this.post({
          type: "sessions",
          sessions: sessions.map((s) => ({ id: s.sessionId, title: s.title ?? s.sessionId, updatedAt: s.updatedAt ?? "" })),
        });
        break;
      }
      case "loadSession":
        await controller.loadSession(message.sessionId);
        this.refresh();
        break;
      case "searchFiles": {
        const pattern = `**/*${message.query.replace(/[[\]{}*?]/g, "")}*`;
        const found = await vscode.workspace.findFiles(pattern, "**/{node_modules,.git,target}/**", 20);
        this.post({ type: "files", files: found.map((uri) => vscode.workspace.asRelativePath(uri)) });
        break;
      }
      case "command":
        await vscode.commands.executeCommand(message.command);
        break;
    }
  }

  /** The prompt as ACP content: text, open documents embedded, other files linked, images. */
  private async blocks(message: Extract<FromView, { type: "prompt" | "steer" | "queue" }>): Promise<ContentBlock[]> {
    const blocks: ContentBlock[] = [{ type: "text", text: message.text }];
    const folder = vscode.workspace.workspaceFolders?.[0]?.uri;
    const embedded =
      this.controller().agentInfo?.agentCapabilities?.promptCapabilities?.embeddedContext === true;
    for (const mention of message.mentions) {
      const uri = folder ? vscode.Uri.joinPath(folder, mention) : vscode.Uri.file(mention);
      const open = vscode.workspace.textDocuments.find((d) => d.uri.fsPath === uri.fsPath);
      if (open && embedded) {
        blocks.push({
          type: "resource",
          resource: { uri: uri.toString(), text: open.getText(), mimeType: "text/plain" },
        });
      } else {
        blocks.push({ type: "resource_link", uri: uri.toString(), name: mention });
      }
    }
    if (this.controller().acceptsImages) {
      for (const image of message.images) blocks.push({ type: "image", mimeType: image.mimeType, data: image.data });
    }
    return blocks;
  }
}

/** The header's line about an attached session. */
function attachmentHeader(state: import("./chatState.js").ChatState) {
  const shown = renderAttachment(state);
  const controller = state.attachment?.role === "controller";
  return shown && { ...shown, controller, offerControl: !controller && !state.attachment?.ended };
}

type SelectChoices = Extract<
  import("@agentclientprotocol/sdk").SessionConfigOption,
  { type: "select" }
>["options"];

function flatChoices(options: SelectChoices): { value: string; name: string }[] {
  const out: { value: string; name: string }[] = [];
  for (const option of options) {
    if ("value" in option) out.push({ value: String(option.value), name: option.name });
    else if ("options" in option) for (const inner of option.options) out.push({ value: String(inner.value), name: inner.name });
  }
  return out;
}
