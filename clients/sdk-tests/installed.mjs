// Drives an installed Talaria (from a release archive, the PyPI wheel or the npm package)
// with the official ACP TypeScript SDK, on an empty HOME, through a prompt with a tool call
// against the project's mock model:
//
//   node installed.mjs <label> <command> [args…]      e.g. node installed.mjs npx npx talaria-agent acp
//
// The tool call runs a command, so the sandbox helper installed beside the binary is proven
// too. Prints how long the first answer took from the agent's start; exits non-zero on any
// failure.
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { Readable, Writable } from "node:stream";
import { createInterface } from "node:readline";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { client, methods, ndJsonStream, PROTOCOL_VERSION } from "@agentclientprotocol/sdk";

const [label, command, ...args] = process.argv.slice(2);
if (!command) {
  console.error("usage: node installed.mjs <label> <command> [args…]");
  process.exit(2);
}
const root = resolve(import.meta.dirname, "../..");
const targetDir = process.env.CARGO_TARGET_DIR ?? join(root, "target");
const mockBin = process.env.TALARIA_MOCK_BIN ?? join(targetDir, "debug", "talaria-mock-llm");

const mock = spawn(mockBin, [], { stdio: ["pipe", "pipe", "inherit"] });
const line = await new Promise((ok, fail) => {
  createInterface({ input: mock.stdout }).once("line", ok);
  mock.once("error", fail);
});
const mockUrl = `http://127.0.0.1:${JSON.parse(line).port}`;
const marker = `installed-${label}-answers`;
const scripted = await fetch(`${mockUrl}/_mock/script`, {
  method: "POST",
  body: JSON.stringify([
    {
      type: "tool_calls",
      calls: [
        {
          id: "installed_call",
          name: "terminal",
          arguments: JSON.stringify({ command: `echo ${marker}; grep NoNewPrivs /proc/self/status` }),
        },
      ],
    },
    { type: "text", chunks: ["Done: ", marker] },
  ]),
});
assert.equal(scripted.status, 200);

const home = mkdtempSync(join(tmpdir(), "talaria-installed-home-"));
const workspace = mkdtempSync(join(tmpdir(), "talaria-installed-ws-"));
const started = performance.now();
const child = spawn(command, [...args], {
  stdio: ["pipe", "pipe", "inherit"],
  cwd: workspace,
  env: {
    PATH: process.env.PATH,
    HOME: home,
    OPENAI_BASE_URL: `${mockUrl}/v1`,
    OPENAI_API_KEY: "installed-key",
    TALARIA_MODEL: "mock-model",
    TALARIA_TITLES: "off",
    TALARIA_LOG: "warn",
    // npx and uvx settings the caller passes through (offline sources, caches).
    ...Object.fromEntries(
      Object.entries(process.env).filter(([k]) => /^(npm_config_|UV_|PIP_)/i.test(k)),
    ),
  },
});
const exited = new Promise((ok) => child.once("exit", (code) => ok(code)));
const updates = [];
let firstAnswerMs;
const app = client({ name: "talaria-installed-check" })
  .onRequest(methods.client.session.requestPermission, ({ params }) => ({
    outcome: { outcome: "selected", optionId: params.options.find((o) => o.kind === "allow_once").optionId },
  }))
  .onNotification(methods.client.session.update, ({ params }) => {
    if (firstAnswerMs === undefined && params.update.sessionUpdate === "agent_message_chunk") {
      firstAnswerMs = performance.now() - started;
    }
    updates.push(params.update);
  });
const stream = ndJsonStream(Writable.toWeb(child.stdin), Readable.toWeb(child.stdout));
try {
  await app.connectWith(stream, async (ctx) => {
    const init = await ctx.request(methods.agent.initialize, {
      protocolVersion: PROTOCOL_VERSION,
      clientCapabilities: { auth: { terminal: true } },
    });
    assert.equal(init.agentInfo.name, "talaria");
    assert.ok(init.authMethods.some((m) => m.type === "terminal"), "a terminal auth method");
    const { sessionId } = await ctx.request(methods.agent.session.new, { cwd: workspace, mcpServers: [] });
    const result = await ctx.request(methods.agent.session.prompt, {
      sessionId,
      prompt: [{ type: "text", text: "run the check" }],
    });
    assert.equal(result.stopReason, "end_turn");
    const done = updates.find((u) => u.sessionUpdate === "tool_call_update" && u.status === "completed");
    assert.ok(done, `the tool call completed: ${JSON.stringify(updates)}`);
    const output = done.content.map((c) => c.content?.text ?? "").join("\n");
    assert.match(output, new RegExp(marker));
    // The command ran in the OS sandbox, through the helper installed beside the binary.
    assert.match(output, /NoNewPrivs:\s*1/, output);
    const answer = updates
      .filter((u) => u.sessionUpdate === "agent_message_chunk")
      .map((u) => u.content.text)
      .join("");
    assert.ok(answer.includes(marker), answer);
  });
} finally {
  child.stdin.end();
  mock.stdin.end();
}
const code = await exited;
rmSync(home, { recursive: true, force: true });
rmSync(workspace, { recursive: true, force: true });
assert.equal(code, 0, `${label}: exits 0 when its input closes`);
console.log(`${label}: ok; first answer ${Math.round(firstAnswerMs)} ms after the start`);
