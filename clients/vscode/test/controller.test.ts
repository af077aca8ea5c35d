// The session controller against an in-process agent: streaming into the chat state, the
// permission flow on the cards, Stop, start failures with an Open settings action, and a
// crashed agent restarted (and its session resumed) on the next prompt; a session deleted
// where it ran takes no prompt.
import { createHash } from "node:crypto";
import { test } from "node:test";
import assert from "node:assert/strict";

import { OPEN_SETTINGS, SessionController, StartError } from "../src/controller.js";
import { findCard } from "../src/chatState.js";
import { renderAttachment } from "../src/render.js";
import { FakeAgent, RecordingHost } from "./fakeAgent.js";

function controllerFor(fake: FakeAgent, host = new RecordingHost()) {
  const controller = new SessionController(fake.launcher(), host, "/w");
  const changes: string[][] = [];
  controller.onChange((ids) => changes.push(ids));
  return { controller, host, changes };
}

const text = (t: string) => [{ type: "text" as const, text: t }];

async function until(check: () => boolean, what: string): Promise<void> {
  for (let i = 0; i < 200; i += 1) {
    if (check()) return;
    await new Promise((ok) => setTimeout(ok, 5));
  }
  assert.fail(`timed out waiting for ${what}`);
}

test("a prompt streams the answer, the thought and the usage into the chat", async () => {
  const fake = new FakeAgent();
  const { controller, changes } = controllerFor(fake);
  const stop = await controller.prompt(text("hello"), "hello");
  assert.equal(stop, "end_turn");
  const kinds = controller.state.items.map((i) => i.kind);
  assert.deepEqual(kinds, ["user", "thought", "agent", "stop"]);
  const answer = controller.state.items[2];
  assert.equal(answer.kind === "agent" && answer.text, "Hello **there**");
  assert.equal(controller.state.usage?.used, 1200);
  assert.equal(controller.state.configOptions[0]?.id, "mode");
  assert.ok(changes.some((ids) => ids.includes(answer.id)), "the view heard about the answer");
  const initialize = fake.received.find((r) => r.method === "initialize")?.params as {
    clientCapabilities: { fs: { readTextFile: boolean; writeTextFile: boolean }; terminal: boolean };
  };
  assert.deepEqual(initialize.clientCapabilities.fs, { readTextFile: true, writeTextFile: true });
  assert.equal(initialize.clientCapabilities.terminal, true);
  assert.equal((fake.received.find((r) => r.method === "session/new")?.params as { cwd: string }).cwd, "/w");
  assert.equal(controller.acceptsImages, true);
});

test("a permission question waits on its card and the chosen option reaches the agent", async () => {
  const fake = new FakeAgent();
  const { controller, host } = controllerFor(fake);
  const running = controller.prompt(text("write"), "write");
  await until(() => findCard(controller.state, "t1")?.permission !== undefined, "the question");
  const card = findCard(controller.state, "t1");
  assert.deepEqual(
    card?.permission?.options.map((o) => o.optionId),
    ["allow_once", "reject_once"],
  );
  controller.answerPermission("t1", "allow_once");
  assert.equal(await running, "end_turn");
  assert.deepEqual(fake.permissionAnswers, [{ outcome: "selected", optionId: "allow_once" }]);
  assert.equal(findCard(controller.state, "t1")?.permission, undefined);
  assert.equal(findCard(controller.state, "t1")?.status, "completed");
  assert.deepEqual(host.writes, [{ path: "/w/a.txt", content: "A" }]);
});

test("Stop while a question waits cancels it and tells the agent", async () => {
  const fake = new FakeAgent();
  const { controller } = controllerFor(fake);
  const running = controller.prompt(text("write"), "write");
  await until(() => findCard(controller.state, "t1")?.permission !== undefined, "the question");
  await controller.cancel();
  assert.equal(await running, "cancelled");
  assert.deepEqual(fake.permissionAnswers, [{ outcome: "cancelled" }]);
  assert.equal(fake.cancelled, 1);
  assert.equal(controller.state.busy, false);
});

test("Stop ends a slow turn", async () => {
  const fake = new FakeAgent();
  const { controller } = controllerFor(fake);
  const running = controller.prompt(text("slow"), "slow");
  await until(() => controller.state.items.some((i) => i.kind === "agent"), "the first chunk");
  assert.equal(controller.state.busy, true);
  await controller.cancel();
  assert.equal(await running, "cancelled");
  const last = controller.state.items[controller.state.items.length - 1];
  assert.deepEqual(last.kind === "stop" && last.reason, "cancelled");
});

test("a binary that cannot start is said in the chat with a button to the settings", async () => {
  const controller = new SessionController(
    () => {
      throw new StartError("The Talaria binary “nope” was not found.");
    },
    new RecordingHost(),
    "/w",
  );
  assert.equal(await controller.prompt(text("hi"), "hi"), undefined);
  const notice = controller.state.items.find((i) => i.kind === "notice");
  assert.ok(notice && notice.kind === "notice");
  assert.match(notice.text, /was not found/);
  assert.deepEqual(notice.action, { label: "Open settings", command: OPEN_SETTINGS });
  assert.equal(controller.state.busy, false);
});

test("missing credentials (-32000) are shown with the agent's message and Open settings", async () => {
  const fake = new FakeAgent({ authError: "no API key: set OPENAI_API_KEY" });
  const { controller } = controllerFor(fake);
  await controller.prompt(text("hi"), "hi");
  const notice = controller.state.items.find((i) => i.kind === "notice");
  assert.ok(notice && notice.kind === "notice");
  assert.match(notice.text, /OPENAI_API_KEY/);
  assert.equal(notice.action?.command, OPEN_SETTINGS);
});

test("a crashed agent is restarted on the next prompt and its session resumed", async () => {
  const fake = new FakeAgent();
  const { controller } = controllerFor(fake);
  await controller.prompt(text("hello"), "hello");
  fake.crash();
  await until(() => !controller.running, "the exit");
  assert.ok(
    controller.state.items.some((i) => i.kind === "notice" && /starts again with your next prompt/.test(i.text)),
  );
  assert.equal(await controller.prompt(text("hello"), "hello again"), "end_turn");
  assert.equal(fake.starts, 2);
  const resumed = fake.received.find((r) => r.method === "session/resume")?.params as { sessionId: string };
  assert.equal(resumed.sessionId, "s-1");
});

test("past sessions are listed and one reopens with its replay rendered like a live chat", async () => {
  const fake = new FakeAgent();
  const { controller } = controllerFor(fake);
  await controller.prompt(text("hello"), "hello");
  const sessions = await controller.listSessions();
  assert.deepEqual(
    sessions.map((s) => [s.sessionId, s.title]),
    [["old-1", "Earlier work"]],
  );
  assert.equal(await controller.loadSession("old-1"), true);
  assert.equal(controller.sessionId, "old-1");
  assert.deepEqual(
    controller.state.items.map((i) => i.kind),
    ["user", "agent", "tool"],
    "the old chat replaced the current one",
  );
  const closed = fake.received.filter((r) => r.method === "session/close").map((r) => r.params);
  assert.deepEqual(closed, [{ sessionId: "s-1" }], "the current session was closed first");
});

test("closing the session clears the chat and the next prompt opens a new one", async () => {
  const fake = new FakeAgent();
  const { controller } = controllerFor(fake);
  await controller.prompt(text("hello"), "hello");
  await controller.closeSession();
  assert.equal(controller.sessionId, undefined);
  assert.equal(controller.state.items.length, 0);
  await controller.prompt(text("hello"), "hello");
  assert.equal(fake.received.filter((r) => r.method === "session/new").length, 2);
  assert.equal(fake.starts, 1, "the same agent serves the new session");
});

test("an agent's question is a form in the chat and the checked answer reaches the agent", async () => {
  const fake = new FakeAgent();
  const { controller } = controllerFor(fake);
  const running = controller.prompt(text("ask"), "ask");
  await until(() => controller.state.items.some((i) => i.kind === "question"), "the question");
  const item = controller.state.items.find((i) => i.kind === "question");
  assert.ok(item && item.kind === "question");
  assert.equal(item.question.message, "Which database?");
  assert.deepEqual(
    item.question.fields.map((f) => [f.name, f.type, f.required]),
    [
      ["answer", "choice", true],
      ["tables", "integer", false],
    ],
  );
  // Answers that do not fit the form are refused and the form stays open.
  assert.match(controller.answerQuestion(item.id, "accept", {}) ?? "", /Answer is required/);
  assert.match(controller.answerQuestion(item.id, "accept", { answer: "mysql" }) ?? "", /choose one/);
  assert.match(controller.answerQuestion(item.id, "accept", { answer: "sqlite", tables: 2.5 }) ?? "", /whole number/);
  assert.equal(controller.answerQuestion(item.id, "accept", { answer: "sqlite", tables: 3 }), undefined);
  assert.equal(await running, "end_turn");
  assert.deepEqual(fake.questionAnswers, [{ action: "accept", content: { answer: "sqlite", tables: 3 } }]);
  assert.equal(item.question.answer, "Answered: sqlite · 3");
  const initialize = fake.received.find((r) => r.method === "initialize")?.params as {
    clientCapabilities: { elicitation?: { form?: object } };
  };
  assert.deepEqual(initialize.clientCapabilities.elicitation, { form: {}, url: {} }, "forms and addresses are advertised");
});

test("a sign-in address is offered to open, and the agent told whether the user went", async () => {
  const fake = new FakeAgent();
  const host = new RecordingHost();
  const { controller } = controllerFor(fake, host);
  assert.equal(await controller.prompt(text("sign in"), "sign in"), "end_turn");
  assert.deepEqual(host.opened, [
    { message: "Sign in to the MCP server web to use its tools.", url: "https://auth.example/authorize?state=s" },
  ]);
  host.goes = false;
  assert.equal(await controller.prompt(text("sign in"), "sign in"), "end_turn");
  assert.deepEqual(fake.questionAnswers, [{ action: "accept" }, { action: "decline" }]);
});

test("Stop cancels a question the agent is waiting on", async () => {
  const fake = new FakeAgent();
  const { controller } = controllerFor(fake);
  const running = controller.prompt(text("ask"), "ask");
  await until(() => controller.state.items.some((i) => i.kind === "question"), "the question");
  await controller.cancel();
  await running;
  assert.deepEqual(fake.questionAnswers, [{ action: "cancel" }]);
});

test("a command's output streams into its card", async () => {
  const fake = new FakeAgent();
  const host = new RecordingHost();
  host.terminalWrites = ["compiling a.c\n", "linking\n"];
  const { controller, changes } = controllerFor(fake, host);
  assert.equal(await controller.prompt(text("run"), "run"), "end_turn");
  assert.equal(controller.state.terminals["term-1"], "compiling a.c\nlinking\n");
  const card = controller.state.items.find((i) => i.kind === "tool" && i.card.toolCallId === "t2");
  assert.ok(card);
  assert.ok(
    changes.filter((ids) => ids.includes(card.id)).length >= 3,
    "the card was redrawn as the output came",
  );
});

test("a message typed while a turn runs steers it and shows where it entered; a queued one waits", async () => {
  const fake = new FakeAgent();
  const { controller } = controllerFor(fake);
  const running = controller.prompt(text("slow"), "slow");
  await until(() => controller.state.items.some((i) => i.kind === "agent"), "the first chunk");
  assert.equal(controller.canSteer, true, "the agent advertised steering");
  controller.queue(text("hello"), "hello");
  assert.equal(await controller.steer(text("use tabs"), "use tabs"), "injected");
  assert.equal(await running, "end_turn");
  const steer = fake.received.find((r) => r.method === "_session/steering")?.params as {
    prompt: { text: string }[];
    _meta: { steering: { idleBehavior: string } };
  };
  assert.equal(steer.prompt[0].text, "use tabs");
  assert.equal(steer._meta.steering.idleBehavior, "promptRequired");
  const steered = controller.state.items.find((i) => i.kind === "user" && i.steered);
  assert.ok(steered && steered.kind === "user" && steered.text === "use tabs", "the steer is in the chat");
  const order = controller.state.items.map((i) => (i.kind === "user" || i.kind === "agent" ? `${i.kind}:${i.text}` : i.kind));
  assert.deepEqual(order.slice(0, 4), ["user:slow", "agent:working", "notice", "user:use tabs"]);
  // The queued prompt runs once the turn ends.
  await until(
    () => fake.received.filter((r) => r.method === "session/prompt").length === 2,
    "the queued prompt",
  );
  await until(() => !controller.state.busy, "the queued turn's end");
  const prompts = fake.received.filter((r) => r.method === "session/prompt");
  assert.equal((prompts[1].params as { prompt: { text: string }[] }).prompt[0].text, "hello");
  // With no turn running, a steer is a prompt.
  assert.equal(await controller.steer(text("hello"), "hello"), "prompted");
});

test("a sent message can be rewound to, files too, and edited and sent again in its place", async () => {
  const fake = new FakeAgent();
  const { controller } = controllerFor(fake);
  await controller.prompt(text("hello"), "hello");
  await controller.prompt(text("second"), "second");
  assert.equal(controller.canRewind, true, "the agent advertised rewind");
  const second = controller.state.items.find((i) => i.kind === "user" && i.text === "second");
  assert.ok(second && second.kind === "user" && second.messageId === "user-2", "the answer named the prompt");
  assert.equal(await controller.rewind(second.id, { restoreFiles: true }), true);
  const asked = fake.received.find((r) => r.method === "_session/rewind")?.params as {
    beforeMessage: { messageId: string; messageFingerprint: string };
    resumeAtMessage: { messageId: string; messageFingerprint: string };
    restoreFiles: boolean;
    interruptIfRunning: boolean;
  };
  const sha = (t: string) => `sha256:${createHash("sha256").update(t).digest("hex")}`;
  assert.deepEqual(asked.beforeMessage, { messageId: "user-2", messageFingerprint: sha("second"), messageOccurrence: 1 });
  assert.equal(asked.resumeAtMessage.messageId, "agent-1", "the answer before it guards the rewind");
  assert.equal(asked.resumeAtMessage.messageFingerprint, sha("Hello **there**"));
  assert.equal(asked.restoreFiles, true);
  assert.equal(asked.interruptIfRunning, true);
  assert.ok(!controller.state.items.some((i) => i.kind === "user" && i.text === "second"), "the chat went back");
  const notice = controller.state.items.find((i) => i.kind === "notice");
  assert.ok(notice && notice.kind === "notice" && /Files put back: 1\..*b\.txt/.test(notice.text), "the files are told");

  // Edit and resubmit: back to before the first message, then the new text in its place.
  const first = controller.state.items.find((i) => i.kind === "user" && i.text === "hello");
  assert.ok(first);
  assert.equal(await controller.rewind(first.id, { restoreFiles: false, resubmit: text("hello again"), shown: "hello again" }), true);
  const edit = fake.received.filter((r) => r.method === "_session/rewind")[1]?.params as { resumeAtMessage?: unknown };
  assert.equal(edit.resumeAtMessage, undefined, "the first message needs no guard");
  await until(() => fake.received.filter((r) => r.method === "session/prompt").length === 3, "the edited prompt");
  const users = controller.state.items.filter((i) => i.kind === "user").map((i) => i.kind === "user" && i.text);
  assert.deepEqual(users, ["hello again"]);
});

test("a session deleted where it ran takes no prompt, offers no control and says why", async () => {
  const fake = new FakeAgent();
  const { controller } = controllerFor(fake);
  controller.state.attachment = { clientId: "client-2", role: "observer", clients: [], ended: true };
  assert.equal(await controller.prompt(text("hello"), "hello"), undefined);
  const said = controller.state.items.filter((i) => i.kind === "notice").map((n) => (n.kind === "notice" ? n.text : ""));
  assert.equal(said.length, 1);
  assert.match(said[0], /this session was deleted/);
  assert.ok(!controller.state.items.some((i) => i.kind === "user"), "the prompt is not shown as sent");
  assert.deepEqual(fake.received, [], "nothing reached the agent");
  assert.equal(fake.starts, 0, "no agent was started for it");
  assert.deepEqual(renderAttachment(controller.state), { clients: "Session deleted", control: "It is followed no more", turn: "" });
});
