// `talaria serve` driven by the official TypeScript SDK's network clients: its WebSocket
// client (`experimental/ws-client`, with the `ws` package as Node's WebSocket) and its
// streamable-HTTP client (`experimental/http-client`), each through a whole session.
import { test } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { WebSocket } from "ws";
import { client, methods, PROTOCOL_VERSION } from "@agentclientprotocol/sdk";
import { createWebSocketStream } from "@agentclientprotocol/sdk/experimental/ws-client";
import { createHttpStream } from "@agentclientprotocol/sdk/experimental/http-client";
import { recorded, script, startServe, texts } from "../support.mjs";

const wsUrl = (url) => url.replace(/^http/, "ws");

// Connects an SDK client over `stream`, runs `body(ctx, updates, asked)`.
async function session(stream, body) {
  const updates = [];
  const asked = [];
  const app = client({ name: "talaria-serve-tests" })
    .onRequest(methods.client.session.requestPermission, ({ params }) => {
      asked.push(params);
      return { outcome: { outcome: "selected", optionId: params.options.find((o) => o.kind === "allow_once").optionId } };
    })
    .onNotification(methods.client.session.update, ({ params }) => updates.push(params.update));
  return app.connectWith(stream, async (ctx) => {
    const init = await ctx.request(methods.agent.initialize, { protocolVersion: PROTOCOL_VERSION, clientCapabilities: {} });
    assert.equal(init.agentInfo.name, "talaria");
    assert.equal(init.agentCapabilities.loadSession, true);
    return body(ctx, updates, asked);
  });
}

async function until(predicate, what) {
  for (let i = 0; i < 400; i++) {
    if (predicate()) return;
    await new Promise((ok) => setTimeout(ok, 25));
  }
  assert.fail(`never saw ${what}`);
}

// A whole session over one transport: a streamed answer, a tool call asked and allowed,
// a cancelled turn; then the session loaded from a second connection.
async function wholeSession(connect) {
  const workspace = mkdtempSync(join(tmpdir(), "talaria-serve-ws-"));
  const server = await startServe();
  await script([
    { type: "text", chunks: ["Hello ", "over ", "the network."], delay_ms: 5 },
    { type: "tool_calls", calls: [{ id: "w1", name: "write_file", arguments: '{"path":"made.txt","content":"hi\\n"}' }] },
    { type: "text", chunks: ["Written."] },
    { type: "hang", chunks: ["partial"] },
  ]);
  try {
    let sessionId;
    await session(connect(server), async (ctx, updates, asked) => {
      ({ sessionId } = await ctx.request(methods.agent.session.new, { cwd: workspace, mcpServers: [] }));
      const first = await ctx.request(methods.agent.session.prompt, { sessionId, prompt: [{ type: "text", text: "greet" }] });
      assert.equal(first.stopReason, "end_turn");
      assert.deepEqual(texts(updates, "agent_message_chunk"), ["Hello ", "over ", "the network."]);
      const second = await ctx.request(methods.agent.session.prompt, { sessionId, prompt: [{ type: "text", text: "write" }] });
      assert.equal(second.stopReason, "end_turn");
      assert.equal(asked.length, 1, "the write was asked about");
      assert.equal(asked[0].toolCall.toolCallId, "w1");
      const pending = ctx.request(methods.agent.session.prompt, { sessionId, prompt: [{ type: "text", text: "slow" }] });
      await until(() => texts(updates, "agent_message_chunk").includes("partial"), "the partial answer");
      await ctx.notify(methods.agent.session.cancel, { sessionId });
      assert.equal((await pending).stopReason, "cancelled");
      await ctx.request(methods.agent.session.close, { sessionId });
    });
    // Another connection loads it: the history is replayed.
    await session(connect(server), async (ctx, updates) => {
      await ctx.request(methods.agent.session.load, { sessionId, cwd: workspace, mcpServers: [] });
      const replayed = texts(updates, "agent_message_chunk").join("");
      assert.match(replayed, /Hello over the network\./);
      assert.match(replayed, /Written\./);
      assert.ok(texts(updates, "user_message_chunk").includes("greet"));
    });
    const requests = await recorded();
    assert.match(JSON.stringify(requests.at(-1).body.messages), /slow/);
  } finally {
    assert.equal(await server.stop(), 0, "talaria serve stops cleanly on SIGTERM");
    rmSync(workspace, { recursive: true, force: true });
  }
}

test("the SDK's WebSocket client drives a whole session on talaria serve", async () => {
  await wholeSession((server) =>
    createWebSocketStream(`${wsUrl(server.url)}`, {
      WebSocket,
      headers: { Authorization: `Bearer ${server.token}` },
    }),
  );
});

test("the SDK's streamable-HTTP client drives a whole session on talaria serve", async () => {
  await wholeSession((server) =>
    createHttpStream(server.url, { headers: { Authorization: `Bearer ${server.token}` } }),
  );
});

test("a browser-style WebSocket gives its token as a subprotocol", async () => {
  const server = await startServe();
  try {
    await session(
      createWebSocketStream(wsUrl(server.url), { WebSocket, protocols: ["acp", `bearer.${server.token}`] }),
      async () => {},
    );
    await assert.rejects(
      new Promise((ok, fail) => {
        const socket = new WebSocket(wsUrl(server.url), ["acp", "bearer.wrong-token-of-some-length"]);
        socket.once("open", ok);
        socket.once("error", fail);
        socket.once("unexpected-response", (_, response) => fail(new Error(`status ${response.statusCode}`)));
      }),
      /401/,
    );
  } finally {
    await server.stop();
  }
});

test("two connections on one session follow the store's claim: the live one keeps it", async () => {
  const workspace = mkdtempSync(join(tmpdir(), "talaria-serve-ws-"));
  const server = await startServe();
  const auth = { Authorization: `Bearer ${server.token}` };
  try {
    await session(createHttpStream(server.url, { headers: auth }), async (first) => {
      const { sessionId } = await first.request(methods.agent.session.new, { cwd: workspace, mcpServers: [] });
      // While the first client is there, a second connection cannot load the session.
      await session(createWebSocketStream(wsUrl(server.url), { WebSocket, headers: auth }), async (second) => {
        await assert.rejects(
          second.request(methods.agent.session.load, { sessionId, cwd: workspace, mcpServers: [] }),
          /in use|open in another/i,
        );
      });
      // The first still has it.
      await first.request(methods.agent.session.setMode, { sessionId, modeId: "ask" });
    });
  } finally {
    await server.stop();
    rmSync(workspace, { recursive: true, force: true });
  }
});
