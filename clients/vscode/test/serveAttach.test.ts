// The extension attached to a session of a real `talaria serve` (over WebSocket, the mock LLM
// as its model) that another client opened: it is shown the running turn's answer so far and
// the rest live, in order; who is attached and who controls; an observer's prompt is refused
// with a clear notice; it takes control, prompts, answers a permission question (the other
// client's is withdrawn) and is shown who answered when the other client did; it leaves with
// `_session/detach`. And the link is read into its parts.
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { methods, RequestError, type PromptResponse } from "@agentclientprotocol/sdk";

import { findCard } from "../src/chatState.js";
import { SessionController, StartError, TAKE_CONTROL } from "../src/controller.js";
import { parseAttachLink, serveLauncher, socketAddress } from "../src/serveConnection.js";
import { RecordingHost } from "./fakeAgent.js";
import { MockLlm, OtherClient, Serve, until } from "./serveSupport.js";

const text = (t: string) => [{ type: "text" as const, text: t }];

let mock: MockLlm;
before(async () => {
  mock = await MockLlm.start();
});
after(() => mock?.stop());

/** The extension's controller attached through `link`, its log kept. */
function attachedController(link: string) {
  const parsed = parseAttachLink(link);
  const log: string[] = [];
  const controller = new SessionController(
    serveLauncher(parsed, (line) => log.push(line)),
    new RecordingHost(),
    "/not-used",
    (line) => log.push(line),
    parsed.sessionId,
  );
  return { controller, log };
}

function agentTexts(controller: SessionController): string[] {
  return controller.state.items.flatMap((i) => (i.kind === "agent" ? [i.text] : []));
}

test("the link of a session is read into the server's address, token and session", () => {
  assert.deepEqual(parseAttachLink(" http://127.0.0.1:8765/#token=abc&session=s-1 "), {
    url: "http://127.0.0.1:8765",
    token: "abc",
    sessionId: "s-1",
  });
  assert.equal(parseAttachLink("https://host.example/acp#session=s&token=t").url, "https://host.example");
  assert.equal(socketAddress("http://127.0.0.1:8765"), "ws://127.0.0.1:8765/acp");
  assert.equal(socketAddress("https://host.example/"), "wss://host.example/acp");
  assert.throws(() => parseAttachLink("http://127.0.0.1:8765/#session=s"), (e: unknown) => e instanceof StartError && /no token/.test(e.message));
  assert.throws(() => parseAttachLink("http://127.0.0.1:8765/#token=t"), /no session/);
  assert.throws(() => parseAttachLink("not a link"), /Not a link/);
  assert.throws(() => parseAttachLink("file:///x#token=t&session=s"), /http\(s\) or ws\(s\)/);
});

test("a wrong token is refused before any protocol, saying where the token is; an unknown session is said", async () => {
  const serve = await Serve.start(mock);
  try {
    const { controller } = attachedController(`${new URL(serve.url).origin}/#token=not-the-token-at-all&session=s-1`);
    assert.equal(await controller.ensureStarted(), false);
    const notice = controller.state.items.find((i) => i.kind === "notice");
    assert.ok(notice?.kind === "notice");
    assert.match(notice.text, /refused the token \(401\).*serve\.token/);
    const unknown = attachedController(serve.link("no-such-session")).controller;
    assert.equal(await unknown.ensureStarted(), false);
    const said = unknown.state.items.find((i) => i.kind === "notice");
    assert.ok(said?.kind === "notice");
    assert.match(said.text, /Could not attach to session no-such-session: .+/);
    assert.equal(unknown.sessionId, undefined);
    await unknown.dispose();
  } finally {
    await serve.stop();
  }
});

test("after a lost connection the next prompt attaches again, with control when it had it", async () => {
  const workspace = mkdtempSync(join(tmpdir(), "talaria-vscode-attach-ws-"));
  const serve = await Serve.start(mock);
  await mock.script([
    { type: "text", chunks: ["Before the drop."] },
    { type: "text", chunks: ["After the drop."] },
  ]);
  const other = await OtherClient.connect(serve, "other-client");
  try {
    const { sessionId } = await other.connection.agent.request(methods.agent.session.new, { cwd: workspace, mcpServers: [] });
    const { controller: extension, log } = attachedController(serve.link(sessionId));
    assert.equal(await extension.ensureStarted(), true);
    assert.equal(await extension.takeControl(), true);
    assert.equal(await extension.prompt(text("one"), "one"), "end_turn");
    // The socket goes (as when the network drops).
    (extension as unknown as { agent: { kill(): void } }).agent.kill();
    await until(() => extension.state.items.some((i) => i.kind === "notice" && /Disconnected/.test(i.text)), "the drop said");
    assert.equal(extension.running, false);
    await until(() => other.rosters().at(-1)?.clients.length === 1, "the other client told it left");
    // The next prompt attaches again (the chat shown anew), in control, and is answered.
    assert.equal(await extension.prompt(text("two"), "two"), "end_turn", log.join(""));
    assert.equal(extension.state.attachment?.role, "controller");
    assert.deepEqual(
      extension.state.items.filter((i) => i.kind === "user" || i.kind === "agent").map((i) => (i.kind === "user" || i.kind === "agent") && i.text),
      ["one", "Before the drop.", "two", "After the drop."],
    );
    await extension.dispose();
  } finally {
    other.close();
    await serve.stop();
    rmSync(workspace, { recursive: true, force: true });
  }
});

test("the extension attaches to a running session, follows it, takes control, prompts, answers and leaves", async () => {
  const workspace = mkdtempSync(join(tmpdir(), "talaria-vscode-attach-ws-"));
  const serve = await Serve.start(mock);
  await mock.script([
    // The other client's turn: running while the extension attaches.
    { type: "text", chunks: ["So far. ", "Then ", "live ", "to ", "the end."], delay_ms: 400 },
    // The extension's turn, as controller: a write it answers (the other's question withdrawn).
    { type: "tool_calls", calls: [{ id: "w1", name: "write_file", arguments: '{"path":"mine.txt","content":"from vscode\\n"}' }] },
    { type: "text", chunks: ["Written by the editor."] },
    // Its next turn: a write the other client answers first.
    { type: "tool_calls", calls: [{ id: "w2", name: "write_file", arguments: '{"path":"theirs.txt","content":"from the other\\n"}' }] },
    { type: "text", chunks: ["Written again."] },
    // Its last turn: a write asked when it leaves; the other client answers it.
    { type: "tool_calls", calls: [{ id: "w3", name: "write_file", arguments: '{"path":"left.txt","content":"after leaving\\n"}' }] },
    { type: "text", chunks: ["Written after leaving."] },
  ]);
  const other = await OtherClient.connect(serve, "other-client");
  try {
    const { sessionId } = await other.connection.agent.request(methods.agent.session.new, { cwd: workspace, mcpServers: [] });
    const otherTurn: Promise<PromptResponse> = other.connection.agent.request(methods.agent.session.prompt, {
      sessionId,
      prompt: text("first"),
    });
    await until(() => other.answerText().startsWith("So far."), "the other client's first chunk");

    // Attached mid-turn: the prompt and the answer so far, then the rest live, in order.
    const link = serve.link(sessionId);
    const attached = attachedController(link);
    const extension = attached.controller;
    assert.equal(await extension.ensureStarted(), true, `attached (${attached.log.join(" ")})`);
    const atAttach = agentTexts(extension).join("");
    assert.ok(atAttach.startsWith("So far."), `the answer so far is shown on attaching: ${JSON.stringify(atAttach)}`);
    assert.notEqual(atAttach, "So far. Then live to the end.", "attached while the turn ran");
    const attachment = extension.state.attachment;
    assert.ok(attachment?.clientId, "the server named this window");
    assert.equal(attachment.role, "observer");
    assert.equal(attachment.controller, other.clientId, "the client that opened the session has control");
    assert.deepEqual(
      attachment.clients.map((c) => c.name).sort(),
      ["other-client", "talaria-vscode"],
      "who is attached",
    );
    assert.equal((await otherTurn).stopReason, "end_turn");
    await until(() => extension.state.items.some((i) => i.kind === "stop"), "the other client's turn ending");
    assert.deepEqual(agentTexts(extension), ["So far. Then live to the end."], "every chunk once, in order");
    assert.equal(other.answerText(), "So far. Then live to the end.");
    assert.deepEqual(
      extension.state.items.map((i) => i.kind),
      ["user", "agent", "stop"],
      "the other client's prompt, its answer, its end",
    );
    const prompt = extension.state.items[0];
    assert.equal(prompt.kind === "user" && prompt.text, "first");
    await until(() => other.rosters().some((r) => r.clients.length === 2), "the other client told of the extension");

    // An observer's prompt is refused: not sent, a clear notice with Take control.
    const before = (await mock.requests()).length;
    assert.equal(await extension.prompt(text("observer says"), "observer says"), undefined);
    const refusal = extension.state.items.at(-1);
    assert.ok(refusal?.kind === "notice", "a notice says it");
    assert.match(refusal.text, /Not sent: “observer says”.*take control first/);
    assert.deepEqual(refusal.action, { label: "Take control", command: TAKE_CONTROL });
    assert.ok(!extension.state.items.some((i) => i.kind === "user" && i.text === "observer says"), "the refused prompt left the chat");
    assert.equal(extension.state.busy, false);
    assert.equal((await mock.requests()).length, before, "nothing went to the model");

    // Take control: the other client is told and becomes an observer.
    assert.equal(await extension.takeControl(), true);
    assert.equal(extension.state.attachment?.role, "controller");
    assert.equal(extension.state.attachment?.controller, extension.state.attachment?.clientId);
    await until(
      () => other.rosters().some((r) => r.controller === extension.state.attachment?.clientId),
      "the other client told who has control",
    );
    await assert.rejects(
      other.connection.agent.request(methods.agent.session.prompt, { sessionId, prompt: text("other says") }),
      (error: unknown) => error instanceof RequestError && error.code === -32003,
      "the other client is an observer now",
    );

    // The controller prompts; its answer wins the permission question, the other's is withdrawn.
    const mine = extension.prompt(text("write mine"), "write mine");
    await until(() => findCard(extension.state, "w1")?.permission !== undefined, "the question on the card");
    await until(() => other.asked.some((q) => q.toolCall.toolCallId === "w1"), "the other client asked too");
    extension.answerPermission("w1", "allow_once");
    assert.equal(await mine, "end_turn");
    await until(() => other.withdrawn === 1, "the other client's question withdrawn");
    assert.equal(readFileSync(join(workspace, "mine.txt"), "utf8"), "from vscode\n");
    assert.deepEqual(findCard(extension.state, "w1")?.resolved, { by: "this window", answer: "Allow once" });
    await until(
      () => other.updates.some((u) => {
        const said = (u as { _meta?: Record<string, unknown> | null })._meta?.["talaria/permissionResolved"] as
          | { by?: { clientId?: string } }
          | undefined;
        return said?.by?.clientId === extension.state.attachment?.clientId;
      }),
      "the other client told the extension answered",
    );
    assert.deepEqual(agentTexts(extension).at(-1), "Written by the editor.");
    await until(() => other.answerText().endsWith("Written by the editor."), "the other client following the controller's turn");

    // The other client answers first: the card says who, and takes no answer of ours.
    other.answers = true;
    assert.equal(await extension.prompt(text("write theirs"), "write theirs"), "end_turn");
    assert.equal(readFileSync(join(workspace, "theirs.txt"), "utf8"), "from the other\n");
    const card = findCard(extension.state, "w2");
    assert.equal(card?.permission, undefined, "the question left the card");
    assert.deepEqual(card?.resolved, { by: `other-client (${other.clientId})`, answer: "Allow once" });

    // Leaving (`_session/detach`) while a question is open answers nothing: the session goes
    // on for the other client, to which control comes back, and its answer is the one.
    other.answers = false;
    const rosters = other.rosters().length;
    const left = extension.prompt(text("write on"), "write on");
    await until(() => findCard(extension.state, "w3")?.permission !== undefined, "the last question on the card");
    await until(() => other.asked.some((q) => q.toolCall.toolCallId === "w3"), "the other client asked it too");
    await extension.dispose();
    await left;
    await until(() => other.rosters().length > rosters, "the other client told the extension left");
    assert.deepEqual(other.rosters().at(-1)?.clients.map((c) => c.clientId), [other.clientId]);
    assert.equal(other.rosters().at(-1)?.controller, other.clientId, "control came back");
    assert.equal(other.withdrawn, 1, "the question still waits for the other client");
    other.allow("w3");
    await until(() => other.answerText().endsWith("Written after leaving."), "the turn going on");
    assert.equal(readFileSync(join(workspace, "left.txt"), "utf8"), "after leaving\n");
    await other.connection.agent.request(methods.agent.session.close, { sessionId });
  } finally {
    other.close();
    await serve.stop();
    rmSync(workspace, { recursive: true, force: true });
  }
});
