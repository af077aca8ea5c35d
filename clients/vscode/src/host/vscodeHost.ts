// The editor as the agent's hands: reads come from open documents' buffers (saved or not)
// and otherwise from disk; writes are WorkspaceEdits (undoable, shown in the editor, then
// saved); commands run in VS Code terminals (pseudoterminals the user can watch); edits'
// diffs open in VS Code's diff editor.
import * as vscode from "vscode";
import {
  RequestError,
  type CreateTerminalRequest,
  type CreateTerminalResponse,
  type KillTerminalRequest,
  type ReadTextFileRequest,
  type ReadTextFileResponse,
  type ReleaseTerminalRequest,
  type TerminalOutputRequest,
  type TerminalOutputResponse,
  type WaitForTerminalExitRequest,
  type WaitForTerminalExitResponse,
  type WriteTextFileRequest,
} from "@agentclientprotocol/sdk";

import type { EditorHost } from "../controller.js";
import { TerminalProcess, shownCommand } from "./terminalProcess.js";

/** Lines `line` (1-based) onwards, at most `limit` of them. */
export function sliceLines(text: string, line?: number | null, limit?: number | null): string {
  if (!line && !limit) return text;
  const lines = text.split("\n");
  const start = Math.max((line ?? 1) - 1, 0);
  const end = limit ? start + limit : lines.length;
  return lines.slice(start, end).join("\n");
}

type Running = { process: TerminalProcess; terminal: vscode.Terminal };

export class VscodeHost implements EditorHost {
  private readonly terminals = new Map<string, Running>();
  private nextTerminal = 1;

  /** Asks before opening an address the agent sent (an MCP server's sign-in page). */
  async openAddress(message: string, url: string): Promise<boolean> {
    const open = "Open in Browser";
    const chosen = await vscode.window.showInformationMessage(`${message}\n${url}`, open, "Not Now");
    if (chosen !== open) return false;
    return vscode.env.openExternal(vscode.Uri.parse(url, true));
  }

  async readTextFile(params: ReadTextFileRequest): Promise<ReadTextFileResponse> {
    const uri = vscode.Uri.file(params.path);
    const open = vscode.workspace.textDocuments.find((d) => d.uri.fsPath === uri.fsPath);
    let text: string;
    if (open) {
      text = open.getText();
    } else {
      try {
        text = new TextDecoder().decode(await vscode.workspace.fs.readFile(uri));
      } catch {
        throw RequestError.resourceNotFound(params.path);
      }
    }
    return { content: sliceLines(text, params.line, params.limit) };
  }

  async writeTextFile(params: WriteTextFileRequest): Promise<void> {
    const uri = vscode.Uri.file(params.path);
    const edit = new vscode.WorkspaceEdit();
    let exists = true;
    try {
      await vscode.workspace.fs.stat(uri);
    } catch {
      exists = false;
    }
    if (exists) {
      const document = await vscode.workspace.openTextDocument(uri);
      const whole = new vscode.Range(document.positionAt(0), document.positionAt(document.getText().length));
      edit.replace(uri, whole, params.content);
    } else {
      edit.createFile(uri, { ignoreIfExists: true, contents: new TextEncoder().encode(params.content) });
    }
    if (!(await vscode.workspace.applyEdit(edit))) {
      throw RequestError.internalError(undefined, `VS Code refused the edit of ${params.path}`);
    }
    const document = await vscode.workspace.openTextDocument(uri);
    if (document.isDirty) await document.save();
    await vscode.window.showTextDocument(document, { preview: true, preserveFocus: true });
  }

  async createTerminal(
    params: CreateTerminalRequest,
    onOutput: (text: string) => void = () => {},
  ): Promise<CreateTerminalResponse> {
    const id = `term-${this.nextTerminal++}`;
    const written = new vscode.EventEmitter<string>();
    const closed = new vscode.EventEmitter<void>();
    const shown = shownCommand(params);
    // What the command prints before VS Code opens the panel is kept and written on open
    // (a pseudo-terminal drops writes until then).
    let early: string[] | undefined = [`\x1b[2m$ ${shown}\x1b[0m\r\n`];
    const write = (text: string) => (early ? early.push(text) : written.fire(text));
    const process = new TerminalProcess(params, (text) => {
      write(text.replace(/\r?\n/g, "\r\n"));
      onOutput(text);
    });
    const pty: vscode.Pseudoterminal = {
      onDidWrite: written.event,
      onDidClose: closed.event,
      open: () => {
        const kept = early ?? [];
        early = undefined;
        for (const text of kept) written.fire(text);
      },
      close: () => process.kill(),
    };
    const terminal = vscode.window.createTerminal({ name: `Talaria: ${shown.slice(0, 40)}`, pty });
    terminal.show(true);
    void process.exited.then((status) => {
      const how = status.signal ? `killed by ${status.signal}` : `exit code ${status.exitCode}`;
      write(`\r\n\x1b[2m[${how}]\x1b[0m\r\n`);
    });
    this.terminals.set(id, { process, terminal });
    return { terminalId: id };
  }

  private running(id: string): Running {
    const running = this.terminals.get(id);
    if (!running) throw RequestError.resourceNotFound(id);
    return running;
  }

  async terminalOutput(params: TerminalOutputRequest): Promise<TerminalOutputResponse> {
    const { output, truncated, exitStatus } = this.running(params.terminalId).process.snapshot();
    return { output, truncated, exitStatus: exitStatus ?? null };
  }

  async waitForTerminalExit(params: WaitForTerminalExitRequest): Promise<WaitForTerminalExitResponse> {
    const status = await this.running(params.terminalId).process.exited;
    return { exitCode: status.exitCode, signal: status.signal };
  }

  async killTerminal(params: KillTerminalRequest): Promise<void> {
    this.running(params.terminalId).process.kill();
  }

  /** Kills the command if it still runs and forgets it; the terminal stays for the user. */
  async releaseTerminal(params: ReleaseTerminalRequest): Promise<void> {
    const running = this.terminals.get(params.terminalId);
    if (!running) return;
    running.process.kill();
    this.terminals.delete(params.terminalId);
  }

  dispose(): void {
    for (const { process } of this.terminals.values()) process.kill();
    this.terminals.clear();
  }
}

/** Serves the two sides of the diffs the diff editor shows. */
export class DiffDocuments implements vscode.TextDocumentContentProvider {
  static readonly scheme = "talaria-diff";
  private readonly texts = new Map<string, string>();
  private next = 1;

  provideTextDocumentContent(uri: vscode.Uri): string {
    return this.texts.get(uri.query) ?? "";
  }

  /** Opens `oldText` ↔ `newText` of `path` in the diff editor. */
  async open(path: string, oldText: string, newText: string): Promise<void> {
    const name = path.split("/").pop() ?? path;
    const left = this.add(path, oldText);
    const right = this.add(path, newText);
    await vscode.commands.executeCommand("vscode.diff", left, right, `${name} (Talaria's edit)`);
  }

  private add(path: string, text: string): vscode.Uri {
    const key = String(this.next++);
    this.texts.set(key, text);
    return vscode.Uri.from({ scheme: DiffDocuments.scheme, path, query: key });
  }
}
