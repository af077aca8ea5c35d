// Drives the real talaria binary with the official ACP TypeScript SDK as the client:
// a client nobody on this project wrote proves that Talaria interoperates.
import { test } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { methods, RequestError } from "@agentclientprotocol/sdk";
import { mockUrl, recorded, script, texts, withTalaria } from "../support.mjs";

test("a streamed answer arrives in chunks and the turn ends with end_turn", async () => {
  await script([{ type: "text", chunks: ["Hello ", "from ", "the SDK"], delay_ms: 10 }]);
  await withTalaria(async (ctx, updates, workspace) => {
    const { sessionId } = await ctx.request(methods.agent.session.new, { cwd: workspace, mcpServers: [] });
    const result = await ctx.request(methods.agent.session.prompt, {
      sessionId,
      prompt: [{ type: "text", text: "greet me" }],
    });
    assert.equal(result.stopReason, "end_turn");
    assert.deepEqual(texts(updates, "agent_message_chunk"), ["Hello ", "from ", "the SDK"]);
  });
  const requests = await recorded();
  const last = requests.at(-1);
  // The first user message carries the session's environment in front of the prompt (the
  // system prompt stays the same across sessions, so servers can cache it).
  const asked = last.body.messages.at(-1).content;
  assert.match(asked, /^# Environment\n- Working directory: /);
  assert.ok(asked.endsWith("\n\ngreet me"), asked);
  assert.ok(!last.body.messages[0].content.includes("Working directory"), "not in the system prompt");
  assert.ok(last.headers.some(([k, v]) => k === "authorization" && v === "Bearer sdk-key"));
});

test("a tool call shows as a card and its result feeds the next model call", async () => {
  await script([
    { type: "tool_calls", calls: [{ id: "sdk_call", name: "read_file", arguments: '{"path":"hello.txt"}' }], fragment_chars: 4 },
    { type: "text", chunks: ["It says hi."] },
  ]);
  await withTalaria(async (ctx, updates, workspace) => {
    writeFileSync(join(workspace, "hello.txt"), "hi there\n");
    const { sessionId } = await ctx.request(methods.agent.session.new, { cwd: workspace, mcpServers: [] });
    const result = await ctx.request(methods.agent.session.prompt, {
      sessionId,
      prompt: [{ type: "text", text: "read hello.txt" }],
    });
    assert.equal(result.stopReason, "end_turn");
    const card = updates.find((u) => u.sessionUpdate === "tool_call");
    assert.equal(card.toolCallId, "sdk_call");
    assert.equal(card.kind, "read");
    const statuses = updates.filter((u) => u.sessionUpdate === "tool_call_update" && u.status).map((u) => u.status);
    assert.deepEqual(statuses, ["in_progress", "completed"]);
    const done = updates.find((u) => u.sessionUpdate === "tool_call_update" && u.status === "completed");
    assert.match(done.content[0].content.text, /hi there/);
  });
  const requests = await recorded();
  const toolMessage = requests.at(-1).body.messages.find((m) => m.role === "tool");
  assert.equal(toolMessage.tool_call_id, "sdk_call");
});

test("session/cancel ends a turn with cancelled and the next prompt works", async () => {
  await script([{ type: "hang", chunks: ["partial"] }, { type: "text", chunks: ["again"] }]);
  await withTalaria(async (ctx, updates, workspace) => {
    const { sessionId } = await ctx.request(methods.agent.session.new, { cwd: workspace, mcpServers: [] });
    const pending = ctx.request(methods.agent.session.prompt, { sessionId, prompt: [{ type: "text", text: "slow" }] });
    while (!updates.some((u) => u.sessionUpdate === "agent_message_chunk")) {
      await new Promise((ok) => setTimeout(ok, 10));
    }
    await ctx.notify(methods.agent.session.cancel, { sessionId });
    assert.equal((await pending).stopReason, "cancelled");
    const next = await ctx.request(methods.agent.session.prompt, { sessionId, prompt: [{ type: "text", text: "again" }] });
    assert.equal(next.stopReason, "end_turn");
    assert.deepEqual(texts(updates, "agent_message_chunk"), ["partial", "again"]);
  });
});

test("a steer through the SDK's raw request enters the running turn where it streams", async () => {
  await script([{ type: "hang", chunks: ["Using spaces"] }, { type: "text", chunks: ["Tabs it is."] }]);
  await withTalaria(async (ctx, updates, workspace) => {
    const { sessionId } = await ctx.request(methods.agent.session.new, { cwd: workspace, mcpServers: [] });
    const pending = ctx.request(methods.agent.session.prompt, { sessionId, prompt: [{ type: "text", text: "indent it" }] });
    while (!updates.some((u) => u.sessionUpdate === "agent_message_chunk")) {
      await new Promise((ok) => setTimeout(ok, 10));
    }
    // The SDK has no type for the extension: its raw request sends it as is.
    const steered = await ctx.request("_session/steering", { sessionId, prompt: [{ type: "text", text: "use tabs" }] });
    assert.deepEqual(steered, { outcome: "injected" });
    assert.equal((await pending).stopReason, "end_turn");
    const entered = updates.find((u) => u.sessionUpdate === "user_message_chunk");
    assert.equal(entered.content.text, "use tabs");
    assert.equal(entered._meta.talaria.steered, true);
    assert.deepEqual(texts(updates, "agent_message_chunk"), ["Using spaces", "Tabs it is."]);
    const idle = await ctx.request("_session/steering", {
      sessionId,
      prompt: [{ type: "text", text: "later" }],
      _meta: { steering: { idleBehavior: "promptRequired" } },
    });
    assert.deepEqual(idle, { outcome: "promptRequired", reason: "noRunningTurn" });
  });
  const last = (await recorded()).at(-1);
  assert.deepEqual(
    last.body.messages.slice(-2).map((m) => [m.role, m.content]),
    [
      ["assistant", "Using spaces"],
      ["user", "use tabs"],
    ],
  );
});

test("invalid params come back as a JSON-RPC error the SDK understands", async () => {
  await withTalaria(async (ctx) => {
    await assert.rejects(
      ctx.request(methods.agent.session.new, { cwd: "not/absolute", mcpServers: [] }),
      (error) => error instanceof RequestError && error.code === -32602 && /absolute/.test(error.message),
    );
  });
});

test("an edit asks permission through the SDK's handler and lands with a diff", async () => {
  await script([
    { type: "tool_calls", calls: [{ id: "sdk_write", name: "write_file", arguments: '{"path":"made.txt","content":"from the sdk test\\n"}' }] },
    { type: "text", chunks: ["Written."] },
  ]);
  await withTalaria(async (ctx, updates, workspace) => {
    const { sessionId, modes } = await ctx.request(methods.agent.session.new, { cwd: workspace, mcpServers: [] });
    assert.equal(modes.currentModeId, "ask");
    const result = await ctx.request(methods.agent.session.prompt, {
      sessionId,
      prompt: [{ type: "text", text: "write a file" }],
    });
    assert.equal(result.stopReason, "end_turn");
    const { readFileSync } = await import("node:fs");
    assert.equal(readFileSync(join(workspace, "made.txt"), "utf8"), "from the sdk test\n");
    const done = updates.find((u) => u.sessionUpdate === "tool_call_update" && u.status === "completed");
    assert.equal(done.toolCallId, "sdk_write");
    assert.equal(done.content[0].type, "diff");
    assert.equal(done.content[0].newText, "from the sdk test\n");
  });
});

test("a session recorded with --record replays with --replay and no model", async () => {
  const cassettes = mkdtempSync(join(tmpdir(), "talaria-sdk-cassettes-"));
  const session = async (ctx, updates, workspace) => {
    const { sessionId } = await ctx.request(methods.agent.session.new, { cwd: workspace, mcpServers: [] });
    const result = await ctx.request(methods.agent.session.prompt, {
      sessionId,
      prompt: [{ type: "text", text: "greet me" }],
    });
    assert.equal(result.stopReason, "end_turn");
    return texts(updates, "agent_message_chunk");
  };
  await script([{ type: "text", chunks: ["Hello ", "from ", "a cassette"], delay_ms: 10 }]);
  let first;
  await withTalaria(async (...a) => (first = await session(...a)), ["acp", "--record", cassettes]);
  const asked = (await recorded()).length;
  let again;
  await withTalaria(async (...a) => (again = await session(...a)), ["acp", "--replay", cassettes]);
  assert.deepEqual(first, ["Hello ", "from ", "a cassette"]);
  assert.deepEqual(again, first);
  assert.equal((await recorded()).length, asked, "the replay called no model");
  rmSync(cassettes, { recursive: true, force: true });
});

test("the thought level is a config option the SDK sets, and it reaches the request", async () => {
  await script([{ type: "text", chunks: ["Thought it through."] }]);
  const capabilities = { session: { configOptions: { boolean: {} } } };
  await withTalaria(
    async (ctx, updates, workspace) => {
      const created = await ctx.request(methods.agent.session.new, { cwd: workspace, mcpServers: [] });
      const level = created.configOptions.find((o) => o.id === "thought_level");
      assert.equal(level.category, "thought_level");
      assert.deepEqual(
        level.options.map((o) => o.value),
        ["default", "minimal", "low", "medium", "high"],
      );
      assert.equal(created.configOptions.find((o) => o.id === "fast_mode").type, "boolean");
      const set = await ctx.request(methods.agent.session.setConfigOption, {
        sessionId: created.sessionId,
        configId: "thought_level",
        value: "medium",
      });
      assert.equal(set.configOptions.find((o) => o.id === "thought_level").currentValue, "medium");
      const result = await ctx.request(methods.agent.session.prompt, {
        sessionId: created.sessionId,
        prompt: [{ type: "text", text: "think" }],
      });
      assert.equal(result.stopReason, "end_turn");
    },
    ["acp"],
    { env: { TALARIA_MODEL: "gpt-5" }, clientCapabilities: capabilities },
  );
  assert.equal((await recorded()).at(-1).body.reasoning_effort, "medium");
});

test("a provider the SDK sets serves the next session, and bad input is a typed error", async () => {
  await script([{ type: "text", chunks: ["Via the client's provider."] }]);
  await withTalaria(
    async (ctx, updates, workspace) => {
      // The root export types only stable methods: the unstable ones go by name.
      const listed = await ctx.request("providers/list", {});
      const openai = listed.providers.find((p) => p.providerId === "openai");
      assert.equal(openai.required, true);
      await assert.rejects(
        ctx.request("providers/set", { providerId: "openai", apiType: "openai", baseUrl: "nowhere" }),
        (error) => error instanceof RequestError && error.code === -32602,
      );
      await ctx.request("providers/set", {
        providerId: "openai",
        apiType: "openai",
        baseUrl: `${mockUrl}/v1`,
        headers: { Authorization: "Bearer sdk-client-key", "X-Team": "blue" },
      });
      const { sessionId } = await ctx.request(methods.agent.session.new, { cwd: workspace, mcpServers: [] });
      const result = await ctx.request(methods.agent.session.prompt, {
        sessionId,
        prompt: [{ type: "text", text: "hi" }],
      });
      assert.equal(result.stopReason, "end_turn");
    },
    ["acp"],
    // Configured: nothing answers there.
    { env: { OPENAI_BASE_URL: "http://127.0.0.1:9/v1" } },
  );
  const last = (await recorded()).at(-1);
  assert.ok(last.headers.some(([k, v]) => k === "authorization" && v === "Bearer sdk-client-key"));
  assert.ok(last.headers.some(([k, v]) => k === "x-team" && v === "blue"));
});
