// The extension's entry: settings, the "Talaria" output channel, the chat view, commands,
// and one session controller per window (re-created when the settings change): a local
// `talaria acp`'s, or one attached to a session of a `talaria serve` (Attach to a Session…).
import * as vscode from "vscode";

import { launcher, type AgentSettings } from "./agentProcess.js";
import { ChatView } from "./chatView.js";
import { ATTACH, describe, OPEN_SETTINGS, SessionController, TAKE_CONTROL } from "./controller.js";
import { parseAttachLink, serveLauncher, serverAddress, type AttachLink } from "./serveConnection.js";
import { DiffDocuments, VscodeHost } from "./host/vscodeHost.js";

function readSettings(): AgentSettings {
  const config = vscode.workspace.getConfiguration("talaria");
  const home = config.get<string>("home", "").trim();
  return {
    path: config.get<string>("path", "talaria").trim() || "talaria",
    args: config.get<string[]>("args", []),
    env: config.get<Record<string, string>>("env", {}),
    home: home || undefined,
  };
}

export function activate(context: vscode.ExtensionContext): void {
  const output = vscode.window.createOutputChannel("Talaria");
  const host = new VscodeHost();
  const diffs = new DiffDocuments();
  const cwd = vscode.workspace.workspaceFolders?.[0]?.uri.fsPath ?? process.cwd();
  let view: ChatView | undefined;
  const makeController = () => {
    const controller = new SessionController(
      launcher(readSettings(), cwd, (text) => output.append(text)),
      host,
      cwd,
      (line) => output.appendLine(line),
    );
    controller.onChange((ids) => view?.changed(ids));
    return controller;
  };
  let controller = makeController();
  view = new ChatView(context.extensionUri, () => controller, diffs);
  /** Puts `next` in place of the current controller (which is closed first). */
  const replace = async (next: SessionController) => {
    await controller.dispose();
    controller = next;
    view?.refresh();
  };
  const attach = async (link: AttachLink) => {
    const attached = new SessionController(
      serveLauncher(link, (text) => output.append(text)),
      host,
      cwd,
      (line) => output.appendLine(line),
      link.sessionId,
    );
    attached.onChange((ids) => view?.changed(ids));
    await replace(attached);
    await vscode.commands.executeCommand(`${ChatView.id}.focus`);
    if (await attached.ensureStarted()) output.appendLine(`attached to ${link.sessionId} at ${link.url}`);
    view?.refresh();
  };

  context.subscriptions.push(
    output,
    { dispose: () => host.dispose() },
    { dispose: () => void controller.dispose() },
    vscode.workspace.registerTextDocumentContentProvider(DiffDocuments.scheme, diffs),
    vscode.window.registerWebviewViewProvider(ChatView.id, view, { webviewOptions: { retainContextWhenHidden: true } }),
    vscode.commands.registerCommand("talaria.openChat", async () => {
      await vscode.commands.executeCommand(`${ChatView.id}.focus`);
    }),
    vscode.commands.registerCommand("talaria.newSession", async () => {
      // An attached session is left: the new session is a local one.
      if (controller.attached) await replace(makeController());
      await controller.newSession();
      view?.refresh();
    }),
    vscode.commands.registerCommand(ATTACH, async (given?: string) => {
      const link = given ? parseOrSay(given) : await askForLink();
      if (link) await attach(link);
    }),
    vscode.commands.registerCommand(TAKE_CONTROL, async () => {
      if (!controller.attached) {
        void vscode.window.showInformationMessage("Talaria: take control of a session you attached to (Talaria: Attach to a Session…).");
        return;
      }
      await controller.takeControl();
    }),
    vscode.commands.registerCommand("talaria.detach", async () => {
      if (controller.attached) await replace(makeController());
    }),
    vscode.commands.registerCommand("talaria.closeSession", async () => {
      await controller.closeSession();
      view?.refresh();
    }),
    vscode.commands.registerCommand("talaria.stop", () => controller.cancel()),
    vscode.commands.registerCommand("talaria.showLog", () => output.show()),
    vscode.commands.registerCommand(OPEN_SETTINGS, () =>
      vscode.commands.executeCommand("workbench.action.openSettings", "talaria"),
    ),
    vscode.workspace.onDidChangeConfiguration(async (event) => {
      // An attached session does not use the settings: it stays.
      if (!event.affectsConfiguration("talaria") || controller.attached) return;
      await controller.dispose();
      controller = makeController();
      view?.refresh();
    }),
  );
  void placeInSecondarySideBar(context);
}

/** The link, read; what is wrong with it said to the user. */
function parseOrSay(text: string): AttachLink | undefined {
  try {
    return parseAttachLink(text);
  } catch (error) {
    void vscode.window.showErrorMessage(`Talaria: ${describe(error)}`);
    return undefined;
  }
}

/**
 * Asks for the link a `talaria serve` session is shared by; given a server's address
 * alone, asks for its token and the session's id.
 */
async function askForLink(): Promise<AttachLink | undefined> {
  const text = await vscode.window.showInputBox({
    title: "Talaria: Attach to a Session",
    prompt: "The session's link (http://HOST:PORT/#token=TOKEN&session=SESSION_ID), or the server's address",
    placeHolder: "http://127.0.0.1:8765/#token=…&session=…",
    ignoreFocusOut: true,
    validateInput: (value) => {
      if (!value.trim()) return undefined;
      try {
        serverAddress(value);
        return undefined;
      } catch (error) {
        return describe(error);
      }
    },
  });
  if (!text) return undefined;
  if (text.includes("#")) return parseOrSay(text);
  const token = await vscode.window.showInputBox({
    title: "Talaria: Attach to a Session",
    prompt: "The server's token (in its $TALARIA_HOME/serve.token)",
    password: true,
    ignoreFocusOut: true,
  });
  if (!token) return undefined;
  const sessionId = await vscode.window.showInputBox({
    title: "Talaria: Attach to a Session",
    prompt: "The session's id",
    ignoreFocusOut: true,
  });
  if (!sessionId) return undefined;
  return { url: serverAddress(text), token: token.trim(), sessionId: sessionId.trim() };
}

/**
 * VS Code 1.100 lets extensions contribute view containers to the activity bar and the panel
 * only; the chat belongs beside the editor, so on first activation it is moved to the
 * secondary side bar (where VS Code keeps it, and where the user may move it from).
 */
async function placeInSecondarySideBar(context: vscode.ExtensionContext): Promise<void> {
  const key = "talaria.placedInSecondarySideBar";
  if (context.globalState.get<boolean>(key)) return;
  try {
    await vscode.commands.executeCommand("vscode.moveViews", {
      viewIds: [ChatView.id],
      destinationId: "workbench.panel.chat",
    });
    await context.globalState.update(key, true);
  } catch (error) {
    console.warn(`Talaria: the chat stays in its own container: ${String(error)}`);
  }
}

export function deactivate(): void {}
