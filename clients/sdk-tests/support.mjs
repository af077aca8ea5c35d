// Shared by the SDK suites: the scripted mock LLM (started once per file), and a real
// talaria process driven by the official ACP TypeScript SDK as its client.
import { before, after } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { Readable, Writable } from "node:stream";
import { createInterface } from "node:readline";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { client, methods, ndJsonStream, PROTOCOL_VERSION } from "@agentclientprotocol/sdk";

const root = resolve(import.meta.dirname, "../..");
const targetDir = process.env.CARGO_TARGET_DIR ?? join(root, "target");
const talariaBin = process.env.TALARIA_BIN ?? join(targetDir, "debug", "talaria");
const mockBin = process.env.TALARIA_MOCK_BIN ?? join(targetDir, "debug", "talaria-mock-llm");

let mock;
/** The mock LLM's address (set once it listens). */
export let mockUrl;

before(async () => {
  mock = spawn(mockBin, [], { stdio: ["pipe", "pipe", "inherit"] });
  const line = await new Promise((ok, fail) => {
    createInterface({ input: mock.stdout }).once("line", ok);
    mock.once("error", fail);
  });
  mockUrl = `http://127.0.0.1:${JSON.parse(line).port}`;
});

after(() => mock?.stdin.end());

export async function script(replies) {
  const response = await fetch(`${mockUrl}/_mock/script`, { method: "POST", body: JSON.stringify(replies) });
  assert.equal(response.status, 200);
}

export async function recorded() {
  return (await fetch(`${mockUrl}/_mock/requests`)).json();
}

// The agent's environment: a home of its own, the mock as its model.
function agentEnv(home, extra = {}) {
  return {
    PATH: process.env.PATH,
    HOME: home,
    TALARIA_HOME: join(home, "talaria"),
    OPENAI_BASE_URL: `${mockUrl}/v1`,
    OPENAI_API_KEY: "sdk-key",
    TALARIA_MODEL: "mock-model",
    TALARIA_LOG: "warn",
    // A title from the model would add a request to every script.
    TALARIA_TITLES: "off",
    ...extra,
  };
}

// Spawns talaria (`talaria ...args`), connects the SDK client, runs
// `body(ctx, updates, workspace)`, then closes.
export async function withTalaria(body, args = ["acp"], options = {}) {
  const home = mkdtempSync(join(tmpdir(), "talaria-sdk-home-"));
  const workspace = mkdtempSync(join(tmpdir(), "talaria-sdk-ws-"));
  const child = spawn(talariaBin, args, { stdio: ["pipe", "pipe", "inherit"], env: agentEnv(home, options.env) });
  const exited = new Promise((ok) => child.once("exit", (code) => ok(code)));
  const updates = [];
  const app = client({ name: "talaria-sdk-tests" })
    .onRequest(methods.client.session.requestPermission, ({ params }) => ({
      outcome: { outcome: "selected", optionId: params.options.find((o) => o.kind === "allow_once").optionId },
    }))
    .onNotification(methods.client.session.update, ({ params }) => {
      updates.push(params.update);
    })
    .onRequest(methods.client.elicitation.create, ({ params }) =>
      options.onElicitation ? options.onElicitation(params) : { action: "decline" },
    )
    .onNotification(methods.client.elicitation.complete, ({ params }) => {
      updates.push({ sessionUpdate: "_elicitation_complete", elicitationId: params.elicitationId });
    });
  // Requests no SDK type names (extensions): `[method, handler]`, params passed as they came.
  for (const [method, handler] of options.extensionRequests ?? []) {
    app.onRequest(method, (params) => params, handler);
  }
  const stream = ndJsonStream(Writable.toWeb(child.stdin), Readable.toWeb(child.stdout));
  try {
    await app.connectWith(stream, async (ctx) => {
      const init = await ctx.request(methods.agent.initialize, {
        protocolVersion: PROTOCOL_VERSION,
        clientCapabilities: options.clientCapabilities ?? {},
      });
      assert.equal(init.protocolVersion, 1);
      assert.equal(init.agentInfo.name, "talaria");
      await body(ctx, updates, workspace);
    });
  } finally {
    child.stdin.end();
  }
  const code = await exited;
  // Temporary directories left behind pile up in /tmp, where every sandboxed command's
  // policy grants each entry on its own (the sandbox bench then measures the leftovers).
  rmSync(home, { recursive: true, force: true });
  rmSync(workspace, { recursive: true, force: true });
  assert.equal(code, 0, "talaria exits 0 when its input closes");
}

// Starts `talaria serve --listen 127.0.0.1:0 ...args` on a fresh home; resolves with its
// address, token and a way to stop it (which waits for it to exit).
export async function startServe(args = [], options = {}) {
  const home = options.home ?? mkdtempSync(join(tmpdir(), "talaria-serve-home-"));
  const child = spawn(talariaBin, ["serve", "--listen", "127.0.0.1:0", ...args], {
    stdio: ["ignore", "pipe", "inherit"],
    env: agentEnv(home, options.env),
  });
  const exited = new Promise((ok) => child.once("exit", (code, signal) => ok(code ?? signal)));
  const line = await new Promise((ok, fail) => {
    createInterface({ input: child.stdout }).once("line", ok);
    child.once("exit", (code) => fail(new Error(`talaria serve exited ${code}`)));
  });
  const url = line.match(/listening on (\S+)/)[1];
  const token = readFileSync(join(home, "talaria", "serve.token"), "utf8").trim();
  return {
    url,
    token,
    home,
    child,
    async stop() {
      child.kill("SIGTERM");
      const code = await exited;
      if (!options.home) rmSync(home, { recursive: true, force: true });
      return code;
    },
  };
}

export const texts = (updates, kind) => updates.filter((u) => u.sessionUpdate === kind).map((u) => u.content.text);

