// Talaria's MCP client against the server every MCP client is tested with,
// @modelcontextprotocol/server-everything from npm, over stdio, streamable HTTP and the older
// HTTP+SSE transport; driven by the official ACP SDK as the client.
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { createServer } from "node:net";
import { join } from "node:path";
import { methods } from "@agentclientprotocol/sdk";
import { recorded, script, texts, withTalaria } from "../support.mjs";

const everything = join(
  import.meta.dirname, "..", "node_modules", "@modelcontextprotocol", "server-everything", "dist", "index.js",
);
const stdioServer = { name: "everything", command: process.execPath, args: [everything, "stdio"], env: [] };

const freePort = () =>
  new Promise((ok) => {
    const probe = createServer().listen(0, "127.0.0.1", () => {
      const { port } = probe.address();
      probe.close(() => ok(port));
    });
  });

// Starts the server in `mode` (`streamableHttp` or `sse`) on a free port; resolves once it
// listens.
async function httpServer(mode) {
  const port = await freePort();
  const child = spawn(process.execPath, [everything, mode], {
    env: { PATH: process.env.PATH, PORT: String(port) },
    stdio: ["ignore", "ignore", "pipe"],
  });
  await new Promise((ok, fail) => {
    let said = "";
    child.stderr.on("data", (chunk) => {
      said += chunk;
      if (/listening|running/i.test(said)) ok();
    });
    child.once("exit", (code) => fail(new Error(`server-everything ${mode} exited ${code}: ${said}`)));
  });
  return { port, stop: () => child.kill() };
}

async function waitFor(predicate, what) {
  for (let i = 0; i < 100; i++) {
    const found = predicate();
    if (found) return found;
    await new Promise((ok) => setTimeout(ok, 50));
  }
  assert.fail(`never saw ${what}`);
}

const commandsOf = (updates) =>
  updates.filter((u) => u.sessionUpdate === "available_commands_update").at(-1)?.availableCommands ?? [];

async function prompt(ctx, sessionId, blocks) {
  const prompt = typeof blocks === "string" ? [{ type: "text", text: blocks }] : blocks;
  return ctx.request(methods.agent.session.prompt, { sessionId, prompt });
}

test("a server's prompts are slash commands with their arguments, sent as the user's prompt", async () => {
  await script([{ type: "text", chunks: ["Sunny."] }]);
  await withTalaria(async (ctx, updates, workspace) => {
    const { sessionId } = await ctx.request(methods.agent.session.new, { cwd: workspace, mcpServers: [stdioServer] });
    const command = await waitFor(
      () => commandsOf(updates).find((c) => c.name === "mcp:everything:args-prompt"),
      "the args-prompt command",
    );
    assert.equal(command.input.hint, "city [state]");
    const result = await prompt(ctx, sessionId, "/mcp:everything:args-prompt state=CA \"San Francisco\"");
    assert.equal(result.stopReason, "end_turn");
    assert.deepEqual(texts(updates, "agent_message_chunk"), ["Sunny."]);
  });
  const asked = JSON.stringify((await recorded()).at(-1).body.messages.at(-1));
  assert.match(asked, /What's weather in San Francisco, CA\?/);
});

test("resources are listed and read by the model, and a linked one is read into the prompt", async () => {
  const uri = "demo://resource/static/document/architecture.md";
  await script([
    { type: "tool_calls", calls: [{ id: "list", name: "mcp_resources", arguments: '{"query":"architecture"}' }] },
    { type: "tool_calls", calls: [{ id: "read", name: "mcp_read_resource", arguments: JSON.stringify({ uri }) }] },
    { type: "text", chunks: ["Read it."] },
    { type: "text", chunks: ["Seen."] },
  ]);
  await withTalaria(async (ctx, updates, workspace) => {
    const { sessionId } = await ctx.request(methods.agent.session.new, { cwd: workspace, mcpServers: [stdioServer] });
    assert.equal((await prompt(ctx, sessionId, "what is the architecture?")).stopReason, "end_turn");
    const done = updates.filter((u) => u.sessionUpdate === "tool_call_update" && u.status === "completed");
    assert.equal(done.length, 2, JSON.stringify(updates));
    assert.match(JSON.stringify(done[0].content), /demo:\/\/resource\/static\/document\/architecture\.md/);
    const linked = "demo://resource/static/document/features.md";
    const result = await prompt(ctx, sessionId, [
      { type: "text", text: "summarise this" },
      { type: "resource_link", uri: linked, name: "features.md" },
    ]);
    assert.equal(result.stopReason, "end_turn");
  });
  const requests = await recorded();
  const toolResults = requests.at(-2).body.messages.filter((m) => m.role === "tool").map((m) => JSON.stringify(m));
  assert.ok(toolResults.some((m) => m.includes("[resource demo://resource/static/document/architecture.md]")), toolResults);
  const attached = JSON.stringify(requests.at(-1).body.messages.at(-1));
  assert.match(attached, /<context ref=\\"demo:\/\/resource\/static\/document\/features\.md\\">/);
});

test("an image a tool returns reaches the client as an image and the model as one", async () => {
  await script([
    { type: "tool_calls", calls: [{ id: "img", name: "mcp__everything__get-tiny-image", arguments: "{}" }] },
    { type: "text", chunks: ["A tiny image."] },
  ]);
  await withTalaria(async (ctx, updates, workspace) => {
    const { sessionId } = await ctx.request(methods.agent.session.new, { cwd: workspace, mcpServers: [stdioServer] });
    assert.equal((await prompt(ctx, sessionId, "show me the tiny image")).stopReason, "end_turn");
    const done = updates.find((u) => u.sessionUpdate === "tool_call_update" && u.status === "completed");
    assert.ok(done, JSON.stringify(updates));
    const image = done.content.find((c) => c.type === "content" && c.content.type === "image");
    assert.ok(image, JSON.stringify(done.content));
    assert.equal(image.content.mimeType, "image/png");
  });
  const sent = JSON.stringify((await recorded()).at(-1).body.messages);
  assert.match(sent, /data:image\/png;base64,iVBORw0KGgo/);
});

test("streamable HTTP, HTTP+SSE, and an SSE-only server reached as HTTP all connect; /mcp reconnects", async () => {
  const streamable = await httpServer("streamableHttp");
  const sse = await httpServer("sse");
  try {
    const servers = [
      { type: "http", name: "streamable", url: `http://127.0.0.1:${streamable.port}/mcp`, headers: [] },
      { type: "sse", name: "sse", url: `http://127.0.0.1:${sse.port}/sse`, headers: [] },
      { type: "http", name: "detected", url: `http://127.0.0.1:${sse.port}/sse`, headers: [] },
    ];
    await withTalaria(
      async (ctx, updates, workspace) => {
        const { sessionId } = await ctx.request(methods.agent.session.new, { cwd: workspace, mcpServers: servers });
        await prompt(ctx, sessionId, "/mcp");
        const report = texts(updates, "agent_message_chunk").join("");
        for (const name of ["streamable", "sse", "detected"]) {
          assert.match(report, new RegExp(`- ${name}: ready, \\d+ tools, \\d+ resources, \\d+ resource templates, \\d+ prompts`), report);
        }
        await prompt(ctx, sessionId, "/mcp reconnect sse");
        assert.match(texts(updates, "agent_message_chunk").join(""), /- sse: reconnected/);
      },
      ["acp"],
      { clientCapabilities: {} },
    );
  } finally {
    streamable.stop();
    sse.stop();
  }
});

test("a stdio server's environment has no provider keys, and what it was given reaches it", async () => {
  await script([
    { type: "tool_calls", calls: [{ id: "env", name: "mcp__everything__get-env", arguments: "{}" }] },
    { type: "text", chunks: ["Seen."] },
  ]);
  const given = { ...stdioServer, env: [{ name: "EVERYTHING_SETTING", value: "given-by-client" }] };
  await withTalaria(
    async (ctx, updates, workspace) => {
      const { sessionId } = await ctx.request(methods.agent.session.new, { cwd: workspace, mcpServers: [given] });
      assert.equal((await prompt(ctx, sessionId, "what is your environment?")).stopReason, "end_turn");
    },
    ["acp"],
    { env: { GITHUB_TOKEN: "ghp-secret-of-the-user", SOME_PLAIN_SETTING: "plain" } },
  );
  const seen = JSON.stringify((await recorded()).at(-1).body.messages.find((m) => m.role === "tool"));
  assert.match(seen, /EVERYTHING_SETTING/);
  assert.match(seen, /SOME_PLAIN_SETTING/);
  for (const secret of ["sdk-key", "OPENAI_API_KEY", "ghp-secret-of-the-user", "TALARIA_HOME"]) {
    assert.ok(!seen.includes(secret), `${secret} reached the server: ${seen}`);
  }
});
