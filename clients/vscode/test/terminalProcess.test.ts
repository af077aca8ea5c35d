// The commands the agent runs in terminals: output kept to the byte limit, exit status,
// and kill reaching the whole process group.
import { test } from "node:test";
import assert from "node:assert/strict";

import { TerminalProcess, shownCommand } from "../src/host/terminalProcess.js";

test("output and exit status are reported, and what was shown streamed as it came", async () => {
  const shown: string[] = [];
  const run = new TerminalProcess({ command: "sh", args: ["-c", "echo one; echo two >&2; exit 3"] }, (t) => shown.push(t));
  const status = await run.exited;
  assert.deepEqual(status, { exitCode: 3, signal: null });
  const snapshot = run.snapshot();
  assert.match(snapshot.output, /one/);
  assert.match(snapshot.output, /two/);
  assert.equal(snapshot.truncated, false);
  assert.match(shown.join(""), /one/);
});

test("output beyond the byte limit drops the oldest bytes, never half a character", async () => {
  const run = new TerminalProcess({ command: "printf 'ééééé12345'", outputByteLimit: 6 });
  await run.exited;
  const snapshot = run.snapshot();
  assert.equal(snapshot.truncated, true);
  assert.equal(snapshot.output, "12345");
});

test("kill stops the command and what it started", async () => {
  const run = new TerminalProcess({ command: "sh", args: ["-c", "sleep 30 & sleep 30"] });
  await new Promise((ok) => setTimeout(ok, 100));
  run.kill();
  const status = await run.exited;
  assert.equal(status.signal, "SIGKILL");
});

test("the terminal shows the command as typed, not the sandbox helper's arguments", () => {
  const typed = "for i in 1 2 3; do echo step-$i; done";
  const spec = {
    command: "/usr/lib/talaria/talaria-sandbox",
    args: ["__sandbox", "/bin/bash", "-c", typed],
    _meta: { talaria: { command: typed } },
  };
  assert.equal(shownCommand(spec), typed);
  assert.equal(shownCommand({ command: "make", args: ["test"] }), "make test");
  assert.equal(shownCommand({ command: "ls", _meta: { talaria: { command: 7 } } }), "ls");
});
