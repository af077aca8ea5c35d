// Tool interception (the ACP draft, behind `_meta`) from a client built on the official SDK:
// it replaces one call's input (which still goes through the permission question) and stops
// another call, which never runs and ends the turn.
import { test } from "node:test";
import assert from "node:assert/strict";
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { methods } from "@agentclientprotocol/sdk";
import { recorded, script, withTalaria } from "../support.mjs";

const INTERCEPT = "_agentclientprotocol.com/tool/intercept";

test("an SDK client replaces one call's input and stops another", async () => {
  await script([
    { type: "tool_calls", calls: [{ id: "sdk_swap", name: "write_file", arguments: '{"path":"draft.txt","content":"model text\\n"}' }] },
    { type: "tool_calls", calls: [{ id: "sdk_stop", name: "terminal", arguments: '{"command":"touch stopped.txt"}' }] },
  ]);
  const asked = [];
  const intercept = ({ params }) => {
    asked.push(params);
    const { phase, toolCall } = params;
    if (phase === "before" && toolCall.toolCallId === "sdk_swap") {
      return { action: "replace", rawInput: { path: "final.txt", content: "client text\n" } };
    }
    if (phase === "before" && toolCall.toolCallId === "sdk_stop") {
      return { action: "stop", reason: "no commands in this evaluation" };
    }
    return { action: "allow" };
  };
  const options = {
    clientCapabilities: { _meta: { "agentclientprotocol.com": { toolInterception: { before: true, after: true } } } },
    extensionRequests: [[INTERCEPT, intercept]],
  };
  await withTalaria(
    async (ctx, updates, workspace) => {
      const { sessionId } = await ctx.request(methods.agent.session.new, { cwd: workspace, mcpServers: [] });
      const result = await ctx.request(methods.agent.session.prompt, {
        sessionId,
        prompt: [{ type: "text", text: "write, then run" }],
      });
      assert.equal(result.stopReason, "end_turn");
      assert.equal(readFileSync(join(workspace, "final.txt"), "utf8"), "client text\n");
      assert.ok(!existsSync(join(workspace, "draft.txt")), "the model's input was replaced");
      assert.ok(!existsSync(join(workspace, "stopped.txt")), "the stopped call ran");
      const stopped = updates.filter((u) => u.toolCallId === "sdk_stop" && u.status === "failed");
      assert.equal(stopped.length, 1);
      assert.match(JSON.stringify(stopped[0].content), /no commands in this evaluation/);
    },
    ["acp"],
    options,
  );
  const phases = asked.map((r) => `${r.toolCall.toolCallId}:${r.phase}`);
  assert.deepEqual(phases, ["sdk_swap:before", "sdk_swap:after", "sdk_stop:before"]);
  assert.equal(asked[0].toolCall.rawInput.path, "draft.txt");
  assert.equal(asked[1].toolCall.rawInput.path, "final.txt");
  // The turn ended at the stop: the model was not called a third time.
  const requests = await recorded();
  assert.equal(requests.length, 2);
});
