// One command the agent runs through `terminal/create`: a child process in its own process
// group, its output kept up to the agent's byte limit (oldest bytes dropped first) and
// streamed to whoever shows it, its exit awaited, killed with its whole group. No VS Code.
import { spawn, type ChildProcess } from "node:child_process";

export type ExitStatus = { exitCode: number | null; signal: string | null };

export type TerminalSpec = {
  command: string;
  args?: string[];
  cwd?: string | null;
  env?: { name: string; value: string }[];
  outputByteLimit?: number | null;
  _meta?: { [key: string]: unknown } | null;
};

/**
 * The command as the user would have typed it: Talaria runs commands through its sandbox
 * helper and names the command itself in `_meta.talaria.command`; any other agent's command
 * is shown as it is run.
 */
export function shownCommand(spec: TerminalSpec): string {
  const talaria = spec._meta?.talaria;
  const named = talaria && typeof talaria === "object" ? (talaria as { command?: unknown }).command : undefined;
  if (typeof named === "string" && named.trim() !== "") return named;
  return [spec.command, ...(spec.args ?? [])].join(" ");
}

export class TerminalProcess {
  private output = Buffer.alloc(0);
  private truncated = false;
  private readonly child: ChildProcess;
  private status?: ExitStatus;
  readonly exited: Promise<ExitStatus>;

  constructor(
    spec: TerminalSpec,
    private readonly show: (text: string) => void = () => {},
  ) {
    const env = { ...process.env };
    for (const variable of spec.env ?? []) env[variable.name] = variable.value;
    // A bare command line (no arguments) runs through the shell, as a terminal would.
    const shell = !spec.args || spec.args.length === 0;
    this.child = spawn(spec.command, spec.args ?? [], {
      cwd: spec.cwd ?? undefined,
      env,
      shell,
      detached: true,
      stdio: ["ignore", "pipe", "pipe"],
    });
    const limit = spec.outputByteLimit ?? undefined;
    const take = (chunk: Buffer) => {
      this.show(chunk.toString("utf8"));
      this.output = Buffer.concat([this.output, chunk]);
      if (limit !== undefined && this.output.length > limit) {
        let start = this.output.length - limit;
        // Never cut a UTF-8 character in half.
        while (start < this.output.length && (this.output[start] & 0xc0) === 0x80) start += 1;
        this.output = this.output.subarray(start);
        this.truncated = true;
      }
    };
    this.child.stdout?.on("data", take);
    this.child.stderr?.on("data", take);
    this.exited = new Promise((resolve) => {
      this.child.once("error", (error) => {
        take(Buffer.from(`${error.message}\n`));
        this.status = { exitCode: 127, signal: null };
        resolve(this.status);
      });
      this.child.once("close", (code, signal) => {
        this.status ??= { exitCode: code, signal: signal ?? null };
        resolve(this.status);
      });
    });
  }

  /** The output so far, whether bytes were dropped, and the exit status once it ended. */
  snapshot(): { output: string; truncated: boolean; exitStatus?: ExitStatus } {
    return { output: this.output.toString("utf8"), truncated: this.truncated, exitStatus: this.status };
  }

  /** Kills the command and everything it started. */
  kill(): void {
    if (this.status || this.child.pid === undefined) return;
    try {
      process.kill(-this.child.pid, "SIGKILL");
    } catch {
      this.child.kill("SIGKILL");
    }
  }
}
