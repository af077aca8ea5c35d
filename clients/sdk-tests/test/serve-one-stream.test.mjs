// `talaria serve` driven by `acp-http-client` from npm, a client nobody on this project
// wrote: it never sends `Acp-Connection-Id` and opens one event stream, so it names its
// connection by its address (`/acp/NAME`) and gets every session's messages on that one
// stream. A whole session: a streamed answer, a permission question answered, a file
// written, and a second prompt.
import { test } from "node:test";
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { AcpHttpClient } from "acp-http-client";
import { recorded, script, startServe } from "../support.mjs";

test("acp-http-client (npm) runs a session with a permission question on talaria serve", async () => {
  const workspace = mkdtempSync(join(tmpdir(), "talaria-one-stream-"));
  const server = await startServe();
  await script([
    { type: "text", chunks: ["Hello ", "from ", "one stream."], delay_ms: 5 },
    { type: "tool_calls", calls: [{ id: "w1", name: "write_file", arguments: '{"path":"made.txt","content":"hi\\n"}' }] },
    { type: "text", chunks: ["Written."] },
  ]);
  const updates = [];
  const asked = [];
  const origin = new URL(server.url).origin;
  const client = new AcpHttpClient({
    baseUrl: origin,
    token: server.token,
    transport: { path: `/acp/${randomUUID()}` },
    client: {
      requestPermission: async (request) => {
        asked.push(request);
        const allow = request.options.find((o) => o.kind === "allow_once");
        return { outcome: { outcome: "selected", optionId: allow.optionId } };
      },
      sessionUpdate: async (notification) => {
        updates.push(notification.update);
      },
    },
  });
  const said = (kind) => updates.filter((u) => u.sessionUpdate === kind).map((u) => u.content.text);
  try {
    const init = await client.initialize({ clientCapabilities: {} });
    assert.equal(init.agentInfo.name, "talaria");
    assert.ok(init._meta.capabilities.transport.resumable.retentionMessages > 0);
    const { sessionId } = await client.newSession({ cwd: workspace, mcpServers: [] });
    const first = await client.prompt({ sessionId, prompt: [{ type: "text", text: "greet" }] });
    assert.equal(first.stopReason, "end_turn");
    assert.deepEqual(said("agent_message_chunk"), ["Hello ", "from ", "one stream."]);
    const second = await client.prompt({ sessionId, prompt: [{ type: "text", text: "write" }] });
    assert.equal(second.stopReason, "end_turn");
    assert.equal(asked.length, 1, "the write was asked about");
    assert.equal(asked[0].toolCall.toolCallId, "w1");
    assert.equal(readFileSync(join(workspace, "made.txt"), "utf8"), "hi\n");
    assert.ok(said("agent_message_chunk").includes("Written."));
    assert.match(JSON.stringify((await recorded()).at(-1).body.messages), /write/);
  } finally {
    await client.disconnect();
    assert.equal(await server.stop(), 0, "talaria serve stops cleanly");
    rmSync(workspace, { recursive: true, force: true });
  }
});
