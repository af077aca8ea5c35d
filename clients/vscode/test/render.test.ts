// Message rendering: markdown answers with the model's raw HTML escaped, thoughts collapsed,
// tool cards with their permission buttons and diffs, usage and stop lines; an attached
// session's roster, another client's turn, and who answered a question.
import { test } from "node:test";
import assert from "node:assert/strict";

import { applyUpdate, askPermission, emptyState } from "../src/chatState.js";
import { diffLines, renderAttachment, renderCard, renderItem, renderPlan, renderUsage, stopText } from "../src/render.js";

test("answers are markdown and raw HTML from the model is shown, never run", () => {
  const state = emptyState();
  applyUpdate(state, { sessionUpdate: "agent_message_chunk", content: { type: "text", text: "Use `cargo`, **now**" } });
  applyUpdate(state, {
    sessionUpdate: "agent_message_chunk",
    content: { type: "text", text: "\n\n<img src=x onerror=alert(1)>\n\n[x](javascript:alert(1))" },
  });
  assert.equal(state.items.length, 1, "chunks join one message");
  const html = renderItem(state.items[0]);
  assert.match(html, /<code>cargo<\/code>/);
  assert.match(html, /<strong>now<\/strong>/);
  assert.doesNotMatch(html, /<img/);
  assert.match(html, /&lt;img src=x onerror=alert\(1\)&gt;/);
  assert.doesNotMatch(html, /javascript:/);
});

test("thoughts are collapsed and tool cards show title, kind, status, output and questions", () => {
  const state = emptyState();
  applyUpdate(state, { sessionUpdate: "agent_thought_chunk", content: { type: "text", text: "hmm" } });
  assert.match(renderItem(state.items[0]), /^<details class="thought"><summary>Thinking<\/summary>/);
  applyUpdate(state, { sessionUpdate: "tool_call", toolCallId: "c1", title: "Run <tests>", kind: "execute", status: "in_progress" });
  applyUpdate(state, {
    sessionUpdate: "tool_call_update",
    toolCallId: "c1",
    content: [{ type: "content", content: { type: "text", text: "ok 3 passed" } }],
  });
  askPermission(state, { toolCallId: "c1" }, [
    { optionId: "allow_once", name: "Allow once", kind: "allow_once" },
    { optionId: "reject_once", name: "Reject", kind: "reject_once" },
  ]);
  const card = renderItem(state.items[1]);
  assert.match(card, /class="tool-card status-in_progress"/);
  assert.match(card, /Run &lt;tests&gt;/);
  assert.match(card, /<span class="kind" title="execute">run<\/span>/);
  assert.match(card, /<pre class="output">ok 3 passed<\/pre>/);
  assert.match(card, /data-option="allow_once">Allow once<\/button>/);
  assert.match(card, /data-option="reject_once">Reject<\/button>/);
  applyUpdate(state, { sessionUpdate: "tool_call_update", toolCallId: "c1", status: "completed" });
  assert.doesNotMatch(renderItem(state.items[1]), /permission-option/, "a finished call asks nothing");
});

test("diffs show removed and added lines and an Open diff button", () => {
  const state = emptyState();
  applyUpdate(state, {
    sessionUpdate: "tool_call",
    toolCallId: "e1",
    title: "Edit a.rs",
    kind: "edit",
    content: [{ type: "diff", path: "/w/a.rs", oldText: "a\nb\n", newText: "a\nc\n" }],
  });
  const card = renderItem(state.items[0]);
  assert.match(card, /<span class="del">- b<\/span>/);
  assert.match(card, /<span class="add">\+ c<\/span>/);
  assert.match(card, /class="open-diff" data-tool="e1" data-index="0"/);
  assert.equal(diffLines("", "x"), '<span class="add">+ x</span>');
});

test("usage, plan and stop lines", () => {
  const state = emptyState();
  applyUpdate(state, { sessionUpdate: "usage_update", used: 12_345, size: 128_000, cost: { amount: 0.042, currency: "USD" } });
  assert.equal(renderUsage(state), "12k / 128k tokens (10%) · $0.04");
  applyUpdate(state, {
    sessionUpdate: "plan",
    entries: [
      { content: "read", status: "completed", priority: "medium" },
      { content: "fix", status: "in_progress", priority: "high" },
    ],
  });
  assert.match(renderPlan(state), /☑ read<\/li><li class="in_progress">◐ fix/);
  assert.equal(stopText("cancelled"), "Stopped.");
  assert.equal(renderItem({ kind: "stop", id: "s", reason: "end_turn" }), "");
});

test("a question is a form with its fields, and once answered only its answer", async () => {
  const { formFields, renderQuestion } = await import("../src/form.js");
  const fields = formFields({
    properties: {
      answer: { type: "string", title: "Answer", enum: ["a <b>", "c"] },
      sure: { type: "boolean", title: "Sure" },
      tags: { type: "array", title: "Tags", items: { anyOf: [{ const: "x", title: "X" }, { const: "y" }] } },
      count: { type: "integer" },
    },
    required: ["answer"],
  });
  const html = renderQuestion("q-1", { message: "Pick <one>", fields });
  assert.match(html, /<form class="question" data-question="q-1">/);
  assert.match(html, /Pick &lt;one&gt;/, "the message is escaped");
  assert.match(html, /<select id="q-1-answer" data-field="answer" data-type="choice" required>/);
  assert.match(html, /<option value="a &lt;b&gt;">a &lt;b&gt;<\/option>/);
  assert.match(html, /type="checkbox" id="q-1-sure" data-field="sure" data-type="boolean"/);
  assert.match(html, /data-field="tags" data-type="multi"/);
  assert.match(html, /value="x"> X<\/label>/);
  assert.match(html, /type="number" step="1" id="q-1-count"/);
  for (const button of ["question-submit", "question-decline", "question-cancel"]) assert.match(html, new RegExp(button));
  const answered = renderQuestion("q-1", { message: "Pick", fields, answer: "Answered: c" });
  assert.doesNotMatch(answered, /<form|<input|<button/);
  assert.match(answered, /Answered: c/);
});

test("a card shows the end of its command's output", () => {
  const state = emptyState();
  applyUpdate(state, {
    sessionUpdate: "tool_call",
    toolCallId: "t",
    title: "Run make",
    kind: "execute",
    status: "in_progress",
    content: [{ type: "terminal", terminalId: "term-1" }],
  });
  const html = renderItem(state.items[0], { "term-1": "x".repeat(5000) + "<done>" });
  assert.match(html, /<pre class="output terminal-output" data-terminal="term-1">…x+&lt;done&gt;<\/pre>/);
  assert.ok(html.length < 4500, "only the end");
});

test("a card's kind is a plain word, never an emoji a system without emoji fonts cannot draw", () => {
  for (const kind of ["read", "edit", "delete", "move", "search", "execute", "think", "fetch", "switch_mode", "other", "new"]) {
    const html = renderCard({ toolCallId: "k", title: "t", kind, status: "pending", content: [], locations: [] });
    const badge = /<span class="kind"[^>]*>([^<]*)<\/span>/.exec(html)?.[1] ?? "";
    assert.match(badge, /^[a-z]+$/, `${kind}: ${badge}`);
    assert.doesNotMatch(html, /\p{Extended_Pictographic}/u, kind);
  }
});

test("a steered message is marked where it entered", () => {
  const html = renderItem({ kind: "user", id: "u", text: "use tabs", attachments: [], steered: true });
  assert.match(html, /class="message user steered"/);
  assert.match(html, /steered<\/span> <span class="user-text">use tabs<\/span>/);
});

test("a message the agent named offers Edit and Restore files to here; an unnamed one does not", () => {
  const named = renderItem({ kind: "user", id: "user-9", text: "fix it", attachments: [], messageId: "user-4" });
  assert.match(named, /class="message-edit" data-item="user-9"/);
  assert.match(named, /class="message-restore" data-item="user-9"[^>]*>Restore files to here</);
  const unnamed = renderItem({ kind: "user", id: "user-10", text: "fix it", attachments: [] });
  assert.doesNotMatch(unnamed, /message-actions/);
});

test("an attached session shows who is attached, who controls, another's turn, and who answered", () => {
  const state = emptyState();
  assert.equal(renderAttachment(state), undefined, "a local session has no roster");
  // A session of this window alone: who answered is not said (it was this window).
  applyUpdate(state, { sessionUpdate: "tool_call", toolCallId: "l1", title: "Write", kind: "edit", status: "completed" });
  applyUpdate(state, {
    sessionUpdate: "tool_call_update",
    toolCallId: "l1",
    _meta: { "talaria/permissionResolved": { by: { clientId: "client-1", name: "talaria-vscode" }, outcome: { outcome: "selected", optionId: "allow_once" } } },
  });
  assert.doesNotMatch(renderItem(state.items[0]), /Answered by/);
  state.items.length = 0;
  state.attachment = { clientId: "client-2", role: "observer", clients: [] };
  const roster = (controller: string) => ({
    sessionUpdate: "session_info_update" as const,
    _meta: {
      "talaria/attachment": {
        clients: [
          { clientId: "client-1", name: "talaria-web", role: "controller" },
          { clientId: "client-2", name: "talaria-vscode", role: "observer" },
        ],
        controller,
      },
    },
  });
  applyUpdate(state, roster("client-1"));
  assert.deepEqual(renderAttachment(state), {
    clients: "2 attached: talaria-web (client-1), this window",
    control: "Control: talaria-web (client-1)",
    turn: "",
  });
  assert.equal(state.attachment.role, "observer");
  applyUpdate(state, { sessionUpdate: "session_info_update", _meta: { "talaria/turn": { state: "running", promptedBy: "client-1" } } });
  assert.equal(renderAttachment(state)?.turn, "talaria-web (client-1) runs a turn…");
  applyUpdate(state, {
    sessionUpdate: "session_info_update",
    _meta: { "talaria/turn": { state: "idle", stopReason: "cancelled", promptedBy: "client-1" } },
  });
  assert.equal(renderAttachment(state)?.turn, "");
  assert.equal(renderItem(state.items.at(-1)!), '<div class="stop">Stopped.</div>', "the other's turn ended");
  applyUpdate(state, roster("client-2"));
  assert.equal(state.attachment.role, "controller");
  assert.equal(renderAttachment(state)?.control, "Control: this window");

  applyUpdate(state, { sessionUpdate: "tool_call", toolCallId: "w1", title: "Write <a>", kind: "edit", status: "pending" });
  askPermission(state, { toolCallId: "w1" }, [{ optionId: "allow_once", name: "Allow <once>", kind: "allow_once" }]);
  applyUpdate(state, {
    sessionUpdate: "tool_call_update",
    toolCallId: "w1",
    _meta: {
      "talaria/permissionResolved": {
        by: { clientId: "client-1", name: "talaria-web" },
        outcome: { outcome: "selected", optionId: "allow_once" },
        at: "2026-01-01T00:00:00Z",
      },
    },
  });
  const card = renderItem(state.items.at(-1)!);
  assert.doesNotMatch(card, /permission-option/, "the buttons went");
  assert.match(card, /<div class="permission-resolved">Answered by talaria-web \(client-1\): Allow &lt;once&gt;<\/div>/);
});
