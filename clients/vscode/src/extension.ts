// The extension's entry: settings, the "Talaria" output channel, the chat view, commands,
// and one session controller per window (re-created when the settings change).
import * as vscode from "vscode";

import { launcher, type AgentSettings } from "./agentProcess.js";
import { ChatView } from "./chatView.js";
import { OPEN_SETTINGS, SessionController } from "./controller.js";
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
      await controller.newSession();
      view?.refresh();
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
      if (!event.affectsConfiguration("talaria")) return;
      await controller.dispose();
      controller = makeController();
      view?.refresh();
    }),
  );
  void placeInSecondarySideBar(context);
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
