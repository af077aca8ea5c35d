// A page that falls behind a shared session of `talaria serve`: it observes a session another
// client (the official SDK) runs, and stops reading (a proxy stalls its connection) while its
// own session pours out; the server detaches it from the shared session. Reading again, the
// page says it fell behind, attaches again (`_session/attach`) and shows the session once,
// from the start; the prompt it sent while detached is refused, and its text comes back.
import { test } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { script, startServe } from "../../sdk-tests/support.mjs";
import { sdkClient } from "../../sdk-tests/attached-client.mjs";
import { ask, browser, filesFromDisk, newSession, shot } from "./browser.mjs";
import { slowLink } from "./slow-link.mjs";

const FILLER = "@filler@";

async function until(predicate, what) {
  for (let i = 0; i < 800; i++) {
    if (await predicate()) return;
    await new Promise((ok) => setTimeout(ok, 25));
  }
  assert.fail(`never saw ${what}`);
}

const roster = (updates) => updates.filter((u) => u._meta?.["talaria/attachment"]).map((u) => u._meta["talaria/attachment"]).at(-1);
const texts = (page, kind) => page.$$eval(`#transcript .message.${kind}`, (nodes) => nodes.map((n) => n.textContent));
const status = (page) => page.textContent("#status");

test("a page that fell behind says so, attaches again and shows the session once; its refused prompt comes back", async () => {
  await script([
    { type: "text", chunks: ["Before ", "the fall."] },
    // The page's own session: about 24 MB of thinking, more than the connection holds.
    { type: "text", reasoning: Array.from({ length: 3000 }, (_, n) => `${FILLER}${n} ${"lorem ipsum ".repeat(680)}`), chunks: ["Filled."] },
    // The shared session's next turn, slow enough to go on while the page is stalled.
    { type: "text", chunks: ["After ", ...Array(30).fill("and "), "the fall."], delay_ms: 200 },
  ]);
  const server = await startServe(["--max-unread-bytes", "1024"]);
  const sdk = await sdkClient(server, "sdk");
  const workspace = mkdtempSync(join(tmpdir(), "talaria-web-behind-"));
  const link = await slowLink(server.url, FILLER);
  const page = await browser.instance.newPage({ viewport: { width: 1280, height: 720 } });
  await filesFromDisk(page);
  const sent = [];
  page.on("websocket", (socket) => socket.on("framesent", ({ payload }) => sent.push(JSON.parse(String(payload)))));
  const attaches = () => sent.filter((m) => m.method === "_session/attach");
  let ownSession;
  try {
    const { sessionId } = await sdk.request("session/new", { cwd: workspace, mcpServers: [] });
    await sdk.request("session/prompt", { sessionId, prompt: [{ type: "text", text: "one" }] });
    await page.goto(`${link.origin}/#token=${server.token}&session=${sessionId}`);
    await page.waitForFunction(() => document.getElementById("status").textContent === "attached");
    await until(() => roster(sdk.updates)?.clients.length === 2, "the SDK told the page attached");
    const pageId = roster(sdk.updates).clients.find((c) => c.name === "talaria-web").clientId;
    ownSession = await newSession(page);

    // The page stops reading; its own session pours out while the shared one goes on.
    link.stall();
    await ask(page, "fill");
    await until(() => sent.some((m) => m.method === "session/prompt" && m.params.prompt[0].text === "fill"), "the page prompt");
    assert.equal(sent.find((m) => m.params?.prompt?.[0].text === "fill").params.sessionId, ownSession.sessionId);
    await sdk.request("session/prompt", { sessionId, prompt: [{ type: "text", text: "two" }] });
    await until(() => roster(sdk.updates).clients.length === 1, "the page detached");
    // Back on the shared session, the page prompts: the server refuses a detached client.
    await page.click(`#sessions button[data-session="${sessionId}"]`);
    await ask(page, "mine");
    await until(() => sent.some((m) => m.method === "session/prompt" && m.params.prompt[0].text === "mine"), "the prompt sent");

    link.resume();
    await page.waitForFunction(() => /^caught up/.test(document.getElementById("status").textContent));
    assert.equal(attaches().length, 2, "attached again once");
    assert.deepEqual(attaches()[1].params, { sessionId, role: "observer" });
    await until(() => roster(sdk.updates).clients.some((c) => c.clientId === pageId), "the page attached again");
    const notices = await texts(page, "notice");
    assert.match(notices[0], /^This page fell behind the session/);
    assert.match(notices[1], /^Not sent: “mine”.*back in the prompt box/);
    assert.equal(await page.inputValue("#prompt"), "mine", "the refused text is back in the prompt box");
    // The session shown once, from the start.
    assert.deepEqual(await texts(page, "user"), ["one", "two"]);
    assert.deepEqual(await texts(page, "agent"), ["Before the fall.", `After ${"and ".repeat(30)}the fall.`]);
    assert.match(await page.textContent("#attached-clients"), /^2 attached: .*\(this page\)/);
    await shot(page, "fell-behind-caught-up");
  } finally {
    await page.close();
    link.close();
    await sdk.close();
    await server.stop();
    rmSync(workspace, { recursive: true, force: true });
    if (ownSession) rmSync(ownSession.workspace, { recursive: true, force: true });
  }
});

test("a roster naming another client as detached only updates who is attached", async () => {
  await script([{ type: "text", chunks: ["Hello."] }]);
  const server = await startServe();
  const sdk = await sdkClient(server, "sdk");
  const workspace = mkdtempSync(join(tmpdir(), "talaria-web-behind-"));
  const page = await browser.instance.newPage({ viewport: { width: 1280, height: 720 } });
  await filesFromDisk(page);
  // The page's socket goes to the server through the test, which keeps what the page sends
  // and can add a message of its own.
  const sent = [];
  let socket;
  await page.routeWebSocket(/\/acp$/, (route) => {
    const server = route.connectToServer();
    route.onMessage((message) => {
      sent.push(JSON.parse(String(message)));
      server.send(message);
    });
    socket = route;
  });
  try {
    const { sessionId } = await sdk.request("session/new", { cwd: workspace, mcpServers: [] });
    await sdk.request("session/prompt", { sessionId, prompt: [{ type: "text", text: "hi" }] });
    await page.goto(`${server.url.replace(/\/acp$/, "")}/#token=${server.token}&session=${sessionId}`);
    await page.waitForFunction(() => document.getElementById("status").textContent === "attached");
    // The notice a detached client gets, naming another client than this page.
    const roster = {
      clients: [{ clientId: "client-9", name: "other", role: "controller" }],
      controller: "client-9",
      detached: { clientId: "client-77", reason: "this client fell behind", attachAgain: "_session/attach" },
    };
    const update = { sessionUpdate: "session_info_update", _meta: { "talaria/attachment": roster } };
    socket.send(JSON.stringify({ jsonrpc: "2.0", method: "session/update", params: { sessionId, update } }));
    await page.waitForFunction(() => /^1 attached: other$/.test(document.getElementById("attached-clients").textContent));
    assert.equal(sent.filter((m) => m.method === "_session/attach").length, 1, "no attach again");
    assert.equal(await status(page), "attached");
    assert.deepEqual(await texts(page, "agent"), ["Hello."]);
    assert.deepEqual(await texts(page, "notice"), []);
  } finally {
    await page.close();
    await sdk.close();
    await server.stop();
    rmSync(workspace, { recursive: true, force: true });
  }
});
