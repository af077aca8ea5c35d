// Sign-in to a remote MCP server, driven by the official ACP SDK as the client: the fixture
// (`talaria-mcp-fixture --http --oauth`) wants a token and is its own authorization server;
// the client answers Talaria's URL elicitation by following the address, as a browser would.
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { createInterface } from "node:readline";
import { join, resolve } from "node:path";
import { methods } from "@agentclientprotocol/sdk";
import { recorded, script, withTalaria } from "../support.mjs";

const targetDir = process.env.CARGO_TARGET_DIR ?? join(resolve(import.meta.dirname, "../../.."), "target");
const fixtureBin = join(targetDir, "debug", "talaria-mcp-fixture");

async function oauthFixture() {
  const child = spawn(fixtureBin, ["--http", "--oauth"], { stdio: ["ignore", "pipe", "inherit"] });
  const url = await new Promise((ok, fail) => {
    createInterface({ input: child.stdout }).once("line", ok);
    child.once("error", fail);
  });
  return { url: url.trim(), stop: () => child.kill() };
}

async function waitFor(predicate, what) {
  for (let i = 0; i < 200; i++) {
    const found = predicate();
    if (found) return found;
    await new Promise((ok) => setTimeout(ok, 50));
  }
  assert.fail(`never saw ${what}`);
}

test("an MCP server that asks for sign-in is signed in through a URL elicitation, then its tools work", async () => {
  const fixture = await oauthFixture();
  const asked = [];
  await script([
    { type: "tool_calls", calls: [{ id: "e", name: "mcp__web__echo", arguments: '{"text":"signed"}' }] },
    { type: "text", chunks: ["Echoed."] },
  ]);
  try {
    await withTalaria(
      async (ctx, updates, workspace) => {
        const { sessionId } = await ctx.request(methods.agent.session.new, {
          cwd: workspace,
          mcpServers: [{ type: "http", name: "web", url: fixture.url, headers: [] }],
        });
        const done = await waitFor(
          () => updates.find((u) => u.sessionUpdate === "_elicitation_complete"),
          "the sign-in's end",
        );
        assert.equal(asked.length, 1);
        assert.equal(asked[0].mode, "url");
        assert.equal(asked[0].sessionId, sessionId);
        assert.equal(done.elicitationId, asked[0].elicitationId);
        const answer = await ctx.request(methods.agent.session.prompt, {
          sessionId,
          prompt: [{ type: "text", text: "echo" }],
        });
        assert.equal(answer.stopReason, "end_turn");
        const requests = await recorded();
        assert.match(JSON.stringify(requests.at(-2).body.tools), /mcp__web__echo/);
        assert.match(JSON.stringify(requests.at(-1).body.messages), /echo: signed/);
      },
      ["acp"],
      {
        clientCapabilities: { elicitation: { url: {} } },
        onElicitation: async (params) => {
          asked.push(params);
          const page = await fetch(params.url);
          assert.equal(page.status, 200);
          assert.match(await page.text(), /Signed in/);
          return { action: "accept" };
        },
      },
    );
  } finally {
    fixture.stop();
  }
});
