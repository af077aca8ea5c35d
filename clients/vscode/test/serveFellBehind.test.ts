// The extension falling behind a session of a real `talaria serve`: it observes a session
// another client runs and stops reading (a link between them stalls) while the session pours
// out; the server detaches it. Reading again, the window says it fell behind, attaches again
// (`_session/attach`) and shows the session once, from the start; its prompt sent while
// detached is refused, and a notice quotes it. A notice naming another client only tells who
// is attached.
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { methods, type AnyMessage, type SessionUpdate } from "@agentclientprotocol/sdk";

import { applyUpdate, detachedHere, emptyState } from "../src/chatState.js";
import { FELL_BEHIND, SessionController, type Launcher } from "../src/controller.js";
import { serveLauncher } from "../src/serveConnection.js";
import { RecordingHost } from "./fakeAgent.js";
import { MockLlm, OtherClient, Serve, StallingLink, until } from "./serveSupport.js";

const text = (t: string) => [{ type: "text" as const, text: t }];

let mock: MockLlm;
before(async () => {
  mock = await MockLlm.start();
});
after(() => mock?.stop());

/** `launch`, with every message the extension sends kept in `sent`. */
function recording(launch: Launcher, sent: AnyMessage[]): Launcher {
  return async () => {
    const started = await launch();
    const target = started.target;
    if (!("writable" in target)) return started;
    const writer = target.writable.getWriter();
    const writable = new WritableStream<AnyMessage>({
      write: (message) => {
        sent.push(message);
        return writer.write(message);
      },
      close: () => writer.close(),
    });
    return { ...started, target: { readable: target.readable, writable } };
  };
}

/** The texts of the chat's items of `kind`, in order. */
function texts(controller: SessionController, kind: "user" | "agent" | "notice"): string[] {
  return controller.state.items.flatMap((i) => (i.kind === kind ? [i.text] : []));
}

test("a window that fell behind says so, attaches again and shows the session once; its refused prompt is quoted", async () => {
  const workspace = mkdtempSync(join(tmpdir(), "talaria-vscode-behind-"));
  const serve = await Serve.start(mock, ["--max-unread-bytes", "1024"]);
  await mock.script([
    { type: "text", chunks: ["Before ", "the fall."] },
    // About 24 MB of thinking, more than the connection holds, then the answer.
    {
      type: "text",
      reasoning: Array.from({ length: 3000 }, (_, n) => `<${n}> ${"lorem ipsum ".repeat(680)}`),
      chunks: ["After ", "the fall."],
    },
  ]);
  const other = await OtherClient.connect(serve, "other-client");
  const link = await StallingLink.to(serve);
  const sent: AnyMessage[] = [];
  const attaches = () => sent.filter((m) => "method" in m && m.method === "_session/attach");
  try {
    const { sessionId } = await other.connection.agent.request(methods.agent.session.new, { cwd: workspace, mcpServers: [] });
    await other.connection.agent.request(methods.agent.session.prompt, { sessionId, prompt: text("one") });
    const launch = recording(serveLauncher({ url: link.url, token: serve.token, sessionId }, () => {}), sent);
    const extension = new SessionController(launch, new RecordingHost(), "/not-used", () => {}, sessionId);
    assert.equal(await extension.ensureStarted(), true);
    const windowId = extension.state.attachment?.clientId;
    assert.ok(windowId);
    await until(() => other.rosters().at(-1)?.clients.length === 2, "the other client told the window attached");

    // The window stops reading while the session pours out: the server detaches it.
    link.stall();
    await other.connection.agent.request(methods.agent.session.prompt, { sessionId, prompt: text("two") });
    await until(() => other.rosters().at(-1)?.clients.length === 1, "the window detached");
    // Its prompt meanwhile is refused (the answer waits behind what it was sent).
    const mine = extension.prompt(text("mine"), "mine");

    link.resume();
    assert.equal(await mine, undefined);
    await until(() => other.rosters().at(-1)?.clients.some((c) => c.clientId === windowId) === true, "attached again");
    await until(() => texts(extension, "agent").length === 2, "the session shown again");
    assert.equal(attaches().length, 2, "attached again once");
    const again = attaches()[1];
    assert.deepEqual("params" in again && again.params, { sessionId, role: "observer", historyPolicy: "full" });
    const [fellBehind, notSent, ...more] = texts(extension, "notice");
    assert.equal(fellBehind, FELL_BEHIND);
    assert.match(notSent, /^Not sent: “mine”\. This window had fallen behind/);
    assert.deepEqual(more, []);
    // The session once, from the start: the thinking whole, once.
    assert.deepEqual(texts(extension, "user"), ["one", "two"]);
    assert.deepEqual(texts(extension, "agent"), ["Before the fall.", "After the fall."]);
    const thoughts = extension.state.items.flatMap((i) => (i.kind === "thought" ? [i.text] : []));
    assert.equal(thoughts.length, 1);
    assert.equal(thoughts[0].split("<2999>").length, 2, "the last of the thinking once");
    assert.equal(extension.state.attachment?.clientId, windowId);
    assert.equal(extension.state.attachment?.role, "observer");
    await extension.dispose();
  } finally {
    other.close();
    link.close();
    await serve.stop();
    rmSync(workspace, { recursive: true, force: true });
  }
});

test("only a notice naming this window is taken for it falling behind", () => {
  const state = emptyState();
  state.attachment = { clientId: "client-2", role: "observer", clients: [] };
  const notice = (clientId: string): SessionUpdate => ({
    sessionUpdate: "session_info_update",
    _meta: {
      "talaria/attachment": {
        clients: [{ clientId: "client-1", name: "editor", role: "controller" }],
        controller: "client-1",
        detached: { clientId, reason: "this client fell behind", attachAgain: "_session/attach" },
      },
    },
  });
  assert.equal(detachedHere(state, notice("client-7")), false);
  applyUpdate(state, notice("client-7"));
  assert.deepEqual(state.attachment.clients.map((c) => c.clientId), ["client-1"], "who is attached, told");
  assert.deepEqual(state.items, [], "nothing said in the chat");
  assert.equal(detachedHere(state, notice("client-2")), true);
  const plain: SessionUpdate = { sessionUpdate: "session_info_update", _meta: { "talaria/attachment": { clients: [] } } };
  assert.equal(detachedHere(state, plain), false);
});

test("a session deleted where it ran, while this window followed it, is said once in the chat", () => {
  const state = emptyState();
  state.attachment = { clientId: "client-2", role: "observer", clients: [] };
  const ended: SessionUpdate = {
    sessionUpdate: "session_info_update",
    _meta: {
      "talaria/attachment": {
        elsewhere: true,
        controller: null,
        clients: [],
        ended: { reason: "deleted", message: "this session was deleted: it is followed no more" },
      },
    },
  };
  applyUpdate(state, ended);
  applyUpdate(state, ended);
  const notices = state.items.filter((i) => i.kind === "notice");
  assert.deepEqual(
    notices.map((n) => n.kind === "notice" && n.text),
    ["this session was deleted: it is followed no more"],
  );
  assert.equal(state.attachment.ended, true);
  const plain: SessionUpdate = { sessionUpdate: "session_info_update", _meta: { "talaria/attachment": { clients: [] } } };
  const other = emptyState();
  other.attachment = { clientId: "client-3", role: "observer", clients: [] };
  applyUpdate(other, plain);
  assert.deepEqual(other.items, [], "a roster without an end says nothing");
});
