// Three clients on one session of `talaria serve` (issue 66's test): the web client in headless
// Chromium opens it, the official SDK over a WebSocket and `talaria-chat --attach` (the web
// client's link) attach. They see the same updates in the same order; a permission question
// goes to all three, the first answer (the SDK's) wins and the page and the terminal are told
// who answered; control is handed over twice (page → terminal → SDK); an observer's prompt is
// refused with a clear error in each of them.
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { readFileSync, rmSync } from "node:fs";
import { join, resolve } from "node:path";
import { script, startServe } from "../../sdk-tests/support.mjs";
import { sdkClient } from "../../sdk-tests/attached-client.mjs";
import { ask, browser, newSession, origin, shot } from "./browser.mjs";

const root = resolve(import.meta.dirname, "../../..");
const chatBin =
  process.env.TALARIA_CHAT_BIN ?? join(process.env.CARGO_TARGET_DIR ?? join(root, "target"), "debug", "talaria-chat");

async function until(predicate, what) {
  for (let i = 0; i < 800; i++) {
    if (await predicate()) return;
    await new Promise((ok) => setTimeout(ok, 25));
  }
  assert.fail(`never saw ${what}`);
}

/** `talaria-chat --attach LINK`, its stdin piped, what it printed kept. */
function attachedChat(link, server) {
  const child = spawn(chatBin, ["--attach", link], {
    stdio: ["pipe", "pipe", "pipe"],
    env: { PATH: process.env.PATH, HOME: server.home, TALARIA_HOME: join(server.home, "talaria") },
  });
  const printed = { stdout: "", stderr: "" };
  child.stdout.on("data", (data) => (printed.stdout += data));
  child.stderr.on("data", (data) => (printed.stderr += data));
  const exited = new Promise((ok) => child.once("exit", (code) => ok(code)));
  return {
    printed,
    exited,
    type: (line) => child.stdin.write(`${line}\n`),
    /** Waits until stderr, from byte `from`, says `text`; its length then. */
    async told(text, from = 0) {
      await until(() => printed.stderr.slice(from).includes(text), `talaria-chat saying ${text}:\n${printed.stderr}`);
      return printed.stderr.length;
    },
    kill: () => child.kill("SIGKILL"),
  };
}

/** The page, connected to `server`, keeping every frame its socket receives. */
async function recordingPage(server) {
  const page = await browser.instance.newPage({ viewport: { width: 1280, height: 720 } });
  const frames = [];
  page.on("websocket", (socket) => socket.on("framereceived", ({ payload }) => frames.push(String(payload))));
  await page.goto(`${origin(server.url)}/#token=${server.token}`);
  await page.waitForSelector("#workspace:not([hidden])");
  return { page, frames };
}

/** The session's updates in a page's frames. */
function pageUpdates(frames, sessionId) {
  return frames
    .map((frame) => JSON.parse(frame))
    .filter((m) => m.method === "session/update" && m.params.sessionId === sessionId)
    .map((m) => m.params.update);
}

/** The session's work as a client saw it (not who is attached, not prompts, not commands). */
function work(updates) {
  return updates
    .filter((u) => !["session_info_update", "available_commands_update", "user_message_chunk"].includes(u.sessionUpdate))
    .map((u) =>
      JSON.stringify([
        u.sessionUpdate,
        u.toolCallId ?? null,
        u.status ?? null,
        u.content?.text ?? null,
        u._meta?.["talaria/permissionResolved"]?.by?.name ?? null,
      ]),
    );
}

const roster = (updates) => updates.filter((u) => u._meta?.["talaria/attachment"]).map((u) => u._meta["talaria/attachment"]).at(-1);
const idOf = (list, name) => list?.clients.find((c) => c.name === name)?.clientId;
const answerText = (updates) => updates.filter((u) => u.sessionUpdate === "agent_message_chunk").map((u) => u.content.text).join("");
const words = (text) => text.split(/\s+/).filter(Boolean);
/** The answers' words, each turn's apart (the terminal ends a turn's answer with a line). */
const answerWords = (updates) =>
  words(updates.map((u) => (u.sessionUpdate === "agent_message_chunk" ? u.content.text : " ")).join(""));

test("three clients on one session: the same updates, the first answer wins, control handed over twice, observers refused", async () => {
  await script([
    { type: "tool_calls", calls: [{ id: "w1", name: "write_file", arguments: '{"path":"out.txt","content":"one\\n"}' }] },
    { type: "text", chunks: ["Written ", "by the page's turn."], delay_ms: 5 },
    { type: "text", chunks: ["From ", "the terminal."], delay_ms: 5 },
    { type: "text", chunks: ["From ", "the SDK."], delay_ms: 5 },
  ]);
  const server = await startServe();
  const { page, frames } = await recordingPage(server);
  const { workspace, sessionId } = await newSession(page);
  const sdk = await sdkClient(server, "sdk");
  let chat;
  try {
    const attached = await sdk.request("_session/attach", { sessionId, role: "observer" });
    assert.equal(attached.role, "observer");
    chat = attachedChat(`${origin(server.url)}/#token=${server.token}&session=${sessionId}`, server);
    await chat.told("observing");
    await until(() => roster(sdk.updates)?.clients.length === 3, "three clients attached");
    const chatId = idOf(roster(sdk.updates), "talaria-chat");
    const sdkId = attached.clientId;
    // An observer's prompt is refused, and says what to do.
    await assert.rejects(
      sdk.request("session/prompt", { sessionId, prompt: [{ type: "text", text: "me?" }] }),
      /must take control first/,
    );
    // The page prompts; the question goes to all three; the SDK answers first.
    await ask(page, "write it");
    await page.waitForSelector('[data-tool-call="w1"][data-answered-by="sdk"]');
    assert.equal(await page.locator('[data-tool-call="w1"] .question').count(), 0, "the page's question is withdrawn");
    assert.match(await page.textContent('[data-tool-call="w1"] .resolved'), /Answered by sdk: allow_once/);
    await chat.told("answered by sdk: allow_once");
    assert.equal(sdk.asked.length, 1);
    await page.waitForFunction(() => document.getElementById("status").textContent === "turn ended: end_turn");
    assert.equal(readFileSync(join(workspace, "out.txt"), "utf8"), "one\n");
    await shot(page, "three-clients-answered-elsewhere");
    // Control, first hand-over: the terminal takes it; the page observes.
    let from = chat.printed.stderr.length;
    chat.type("/control");
    await chat.told("(you have control)", from);
    await page.waitForSelector("#take-control:not([hidden])");
    await until(() => roster(sdk.updates)?.controller === chatId, "the terminal in control");
    await ask(page, "mine?");
    await page.waitForFunction(() => /must take control first/.test(document.getElementById("status").textContent));
    chat.type("say hi");
    await until(() => chat.printed.stdout.includes("From the terminal."), `the terminal's answer:\n${chat.printed.stderr}`);
    await page.waitForFunction(() => document.body.textContent.includes("From the terminal."));
    // Second hand-over: the SDK takes it; the terminal is told, and its prompt refused.
    from = chat.printed.stderr.length;
    const took = await sdk.request("_session/attach", { sessionId, role: "controller" });
    assert.equal(took.role, "controller");
    await chat.told("you no longer have control", from);
    chat.type("again?");
    await chat.told("must take control first", from);
    await chat.told("/control", from);
    const answered = await sdk.request("session/prompt", { sessionId, prompt: [{ type: "text", text: "your turn" }] });
    assert.equal(answered.stopReason, "end_turn");
    await page.waitForFunction(() => document.body.textContent.includes("From the SDK."));
    await until(() => chat.printed.stdout.includes("From the SDK."), "the SDK's answer in the terminal");
    assert.equal(roster(sdk.updates).controller, sdkId);
    // The same updates in the same order: the page's and the SDK's, and the terminal's answer.
    await until(() => work(pageUpdates(frames, sessionId)).length === work(sdk.updates).length, "the page caught up");
    assert.deepEqual(work(pageUpdates(frames, sessionId)), work(sdk.updates));
    assert.deepEqual(words(chat.printed.stdout), answerWords(sdk.updates));
    assert.match(answerText(sdk.updates), /Written by the page's turn\.From the terminal\.From the SDK\./);
    // Each prompt shown to the others.
    assert.ok(sdk.updates.some((u) => u.sessionUpdate === "user_message_chunk" && u.content.text === "say hi"));
    assert.match(await page.textContent("#transcript"), /your turn/);
    assert.match(chat.printed.stderr, /> write it/);
    await shot(page, "three-clients");
    chat.type("/detach");
    assert.equal(await chat.exited, 0, chat.printed.stderr);
    chat = undefined;
  } finally {
    chat?.kill();
    await sdk.close();
    await page.close();
    await server.stop();
    rmSync(workspace, { recursive: true, force: true });
  }
});
