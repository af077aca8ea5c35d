// Starts `talaria acp` as a subprocess in the workspace folder: its stdout/stdin become the
// ACP stream, its stderr goes to the log (the "Talaria" output channel). No VS Code.
import { spawn } from "node:child_process";
import { access, constants } from "node:fs/promises";
import { delimiter, isAbsolute, join } from "node:path";
import { Readable, Writable } from "node:stream";
import { ndJsonStream } from "@agentclientprotocol/sdk";

import { StartError, type AgentTarget, type Launcher } from "./controller.js";

export type AgentSettings = {
  /** The binary (a path, or a name looked up on PATH). */
  path: string;
  args: string[];
  env: Record<string, string>;
  /** `TALARIA_HOME`, when set. */
  home?: string;
};

export function launcher(settings: AgentSettings, cwd: string, log: (text: string) => void): Launcher {
  return async (): Promise<AgentTarget> => {
    await checkBinary(settings.path);
    const env: Record<string, string | undefined> = { ...process.env, ...settings.env };
    if (settings.home) env.TALARIA_HOME = settings.home;
    const args = settings.args.length ? settings.args : ["acp"];
    const child = spawn(settings.path, args, { cwd, env, stdio: ["pipe", "pipe", "pipe"] });
    child.stderr.setEncoding("utf8");
    child.stderr.on("data", (text: string) => log(text));
    const exited = new Promise<string>((resolve) => {
      child.once("error", (error: NodeJS.ErrnoException) => {
        if (error.code === "ENOENT") {
          log(`cannot start ${settings.path}: not found\n`);
          resolve(`the binary ${settings.path} was not found`);
        } else {
          log(`cannot start ${settings.path}: ${error.message}\n`);
          resolve(error.message);
        }
      });
      child.once("exit", (code, signal) => resolve(signal ? `signal ${signal}` : `exit code ${code}`));
    });
    const stream = ndJsonStream(
      Writable.toWeb(child.stdin) as WritableStream<Uint8Array>,
      Readable.toWeb(child.stdout) as ReadableStream<Uint8Array>,
    );
    return { target: stream, exited, kill: () => child.kill() };
  };
}

/** Throws a StartError naming the binary when it cannot be found on PATH or at its path. */
export async function checkBinary(path: string): Promise<void> {
  const candidates =
    isAbsolute(path) || path.includes("/")
      ? [path]
      : (process.env.PATH ?? "").split(delimiter).map((dir) => join(dir, path));
  for (const candidate of candidates) {
    try {
      await access(candidate, constants.X_OK);
      return;
    } catch {
      // try the next one
    }
  }
  throw new StartError(
    `The Talaria binary “${path}” was not found. Install Talaria or set “talaria.path” in the settings.`,
  );
}
