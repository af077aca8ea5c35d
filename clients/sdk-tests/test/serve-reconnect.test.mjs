// `talaria serve` when clients go away mid-turn: a permission question asked while no
// client is attached waits for the one that comes back (WebSocket, `?connection=&after=`),
// and a session's SSE stream cut mid-answer is taken up with `Last-Event-ID` (each event's id
// its cursor) without a delta lost or repeated.
import { test } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { WebSocket } from "ws";
import { recorded, script, startServe } from "../support.mjs";

const wsUrl = (url) => url.replace(/^http/, "ws");

// A raw WebSocket client that counts the agent's messages (what `after` says).
class RawSocket {
  constructor(url, headers) {
    this.messages = [];
    this.received = 0;
    this.waiters = [];
    this.socket = new WebSocket(url, { headers });
    this.socket.on("message", (data) => {
      const message = JSON.parse(String(data));
      if (message.method === "_talaria/connection") this.connectionId = message.params.connectionId;
      else this.received += 1;
      this.messages.push(message);
      for (const waiter of this.waiters.splice(0)) waiter();
    });
    this.opened = new Promise((ok, fail) => {
      this.socket.once("open", ok);
      this.socket.once("error", fail);
    });
  }

  async next(predicate, what) {
    const deadline = Date.now() + 15000;
    for (;;) {
      const found = this.messages.find(predicate);
      if (found) return found;
      if (Date.now() > deadline) assert.fail(`never got ${what}`);
      await new Promise((ok) => {
        this.waiters.push(ok);
        setTimeout(ok, 100);
      });
    }
  }

  send(message) {
    this.socket.send(JSON.stringify({ jsonrpc: "2.0", ...message }));
  }

  async call(id, method, params) {
    this.send({ id, method, params });
    const answer = await this.next((m) => m.id === id && !m.method, `the answer to ${method}`);
    assert.ok(!answer.error, `${method}: ${JSON.stringify(answer.error)}`);
    return answer.result;
  }

  // Drops the socket as a network would: no close frame.
  drop() {
    this.socket.terminate();
  }
}

test("a permission question asked while no client is attached waits for the client that comes back", async () => {
  const workspace = mkdtempSync(join(tmpdir(), "talaria-serve-away-"));
  const server = await startServe();
  const headers = { Authorization: `Bearer ${server.token}` };
  await script([
    { type: "delayed", delay_ms: 1500, reply: { type: "tool_calls", calls: [{ id: "w1", name: "write_file", arguments: '{"path":"away.txt","content":"hi\\n"}' }] } },
    { type: "text", chunks: ["Written while you were away."] },
  ]);
  try {
    const first = new RawSocket(wsUrl(server.url), headers);
    await first.opened;
    await first.call(1, "initialize", { protocolVersion: 1, clientCapabilities: {} });
    const { sessionId } = await first.call(2, "session/new", { cwd: workspace, mcpServers: [] });
    first.send({ id: 3, method: "session/prompt", params: { sessionId, prompt: [{ type: "text", text: "write it" }] } });
    // Gone before the model answers: the question is asked to nobody.
    await new Promise((ok) => setTimeout(ok, 200));
    const { connectionId, received } = first;
    first.drop();
    await new Promise((ok) => setTimeout(ok, 2500));

    const back = new RawSocket(`${wsUrl(server.url)}?connection=${connectionId}&after=${received}`, headers);
    await back.opened;
    const asked = await back.next((m) => m.method === "session/request_permission", "the permission question");
    assert.equal(asked.params.toolCall.toolCallId, "w1");
    const allow = asked.params.options.find((o) => o.kind === "allow_once");
    back.send({ id: asked.id, result: { outcome: { outcome: "selected", optionId: allow.optionId } } });
    const end = await back.next((m) => m.id === 3 && !m.method, "the prompt's answer");
    assert.equal(end.result.stopReason, "end_turn");
    assert.equal(readFileSync(join(workspace, "away.txt"), "utf8"), "hi\n");
    const chunks = back.messages
      .filter((m) => m.params?.update?.sessionUpdate === "agent_message_chunk")
      .map((m) => m.params.update.content.text);
    assert.deepEqual(chunks, ["Written while you were away."]);
    // Nothing the first socket got came again.
    assert.ok(!back.messages.some((m) => m.id === 2), "the session/new answer was not sent twice");
    back.socket.close(1000);
  } finally {
    await server.stop();
    rmSync(workspace, { recursive: true, force: true });
  }
});

// Reads an SSE response's events (id and data) until `stop(events)` says so or it ends.
async function readEvents(response, events, stop) {
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buffer += decoder.decode(value, { stream: true });
    let end;
    while ((end = buffer.indexOf("\n\n")) >= 0) {
      const block = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      const id = block.match(/^id: ?(.*)$/m)?.[1];
      const data = block
        .split("\n")
        .filter((l) => l.startsWith("data:"))
        .map((l) => l.replace(/^data: ?/, ""))
        .join("\n");
      if (data) events.push({ id, message: JSON.parse(data) });
      if (stop(events)) {
        await reader.cancel();
        return;
      }
    }
  }
}

test("a session's SSE stream cut mid-answer is taken up with Last-Event-ID: every delta once, in order", async () => {
  const workspace = mkdtempSync(join(tmpdir(), "talaria-serve-sse-"));
  const server = await startServe();
  const words = Array.from({ length: 40 }, (_, i) => `w${i} `);
  await script([{ type: "text", chunks: words, delay_ms: 30 }]);
  const base = { Authorization: `Bearer ${server.token}`, Accept: "application/json, text/event-stream" };
  const post = (connection, message) =>
    fetch(server.url, {
      method: "POST",
      headers: { ...base, "Content-Type": "application/json", ...(connection && { "Acp-Connection-Id": connection }) },
      body: JSON.stringify({ jsonrpc: "2.0", ...message }),
    });
  try {
    const init = await post(null, { id: 1, method: "initialize", params: { protocolVersion: 1, clientCapabilities: {} } });
    assert.equal(init.status, 200);
    const connection = init.headers.get("acp-connection-id");
    const connectionEvents = [];
    const connectionStream = await fetch(server.url, { headers: { ...base, "Acp-Connection-Id": connection } });
    assert.equal(connectionStream.status, 200);
    const reading = readEvents(connectionStream, connectionEvents, (e) => e.some((x) => x.message.id === 2));
    assert.equal((await post(connection, { id: 2, method: "session/new", params: { cwd: workspace, mcpServers: [] } })).status, 202);
    await reading;
    const sessionId = connectionEvents.find((e) => e.message.id === 2).message.result.sessionId;

    const sessionHeaders = { ...base, "Acp-Connection-Id": connection, "Acp-Session-Id": sessionId };
    const firstPart = [];
    const firstStream = await fetch(server.url, { headers: sessionHeaders });
    assert.equal(firstStream.status, 200);
    const cut = readEvents(firstStream, firstPart, (e) => e.filter((x) => x.message.params?.update?.sessionUpdate === "agent_message_chunk").length >= 5);
    assert.equal((await post(connection, { id: 3, method: "session/prompt", params: { sessionId, prompt: [{ type: "text", text: "count" }] } })).status, 202);
    await cut;
    const lastId = firstPart.at(-1).id;
    assert.ok(lastId, "events carry ids");
    // Away while the answer streams on.
    await new Promise((ok) => setTimeout(ok, 300));

    const rest = [];
    const again = await fetch(server.url, { headers: { ...sessionHeaders, "Last-Event-ID": lastId } });
    assert.equal(again.status, 200);
    await readEvents(again, rest, (e) => e.some((x) => x.message.id === 3));
    const chunks = [...firstPart, ...rest]
      .filter((e) => e.message.params?.update?.sessionUpdate === "agent_message_chunk")
      .map((e) => e.message.params.update.content.text);
    assert.deepEqual(chunks, words, "every delta once, in order");
    assert.equal(rest.find((e) => e.message.id === 3).message.result.stopReason, "end_turn");
    // Each id is the message's cursor (`TAG.N`, N counting the stream's messages), also in
    // the message's `_meta`: the resumed stream goes on from the next one.
    const all = [...firstPart, ...rest];
    for (const e of all) assert.equal(e.message.params?._meta?.["acp/cursor"] ?? e.message.result?._meta?.["acp/cursor"], e.id);
    const ids = all.map((e) => Number(e.id.split(".").at(-1)));
    assert.deepEqual(ids, ids.map((_, i) => ids[0] + i), "cursors are contiguous");
    assert.match(JSON.stringify((await recorded()).at(-1).body.messages), /count/);
    assert.equal((await fetch(server.url, { method: "DELETE", headers: { ...base, "Acp-Connection-Id": connection } })).status < 300, true);
  } finally {
    await server.stop();
    rmSync(workspace, { recursive: true, force: true });
  }
});
