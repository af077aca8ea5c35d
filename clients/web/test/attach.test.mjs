// Two pages on one session of `talaria serve`, in headless Chromium against the scripted mock
// LLM: the second attaches from a link (`#token=…&session=ID`) and is shown the session so
// far, both see who is attached and who has control, the second takes control with the
// button, the first sees the second's turn and is told to take control before it prompts. A
// page following a session another server runs is told when it is deleted there.
import { test } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { script, startServe } from "../../sdk-tests/support.mjs";
import { ask, browser, connectedPage, filesFromDisk, newSession, origin, shot } from "./browser.mjs";

const status = (page) => page.textContent("#status");

test("a page attaches from a link, sees who has control, takes it with a button and the other page follows", async () => {
  await script([
    { type: "text", chunks: ["From the first page."] },
    { type: "text", chunks: ["From the second page."] },
  ]);
  const server = await startServe();
  const first = await connectedPage(server);
  const { workspace, sessionId } = await newSession(first);
  const second = await browser.instance.newPage({ viewport: { width: 1280, height: 720 } });
  try {
    await ask(first, "one");
    await first.waitForFunction(() => document.getElementById("status").textContent === "turn ended: end_turn");
    await second.goto(`${origin(server.url)}/#token=${server.token}&session=${sessionId}`);
    await second.waitForFunction(() => document.body.textContent.includes("From the first page."));
    await second.waitForSelector("#attached:not([hidden])");
    assert.match(await second.textContent("#attached-clients"), /^2 attached/);
    assert.doesNotMatch(await second.textContent("#attached-controller"), /this page/);
    assert.ok(await second.isVisible("#take-control"), "an observer is offered control");
    await first.waitForSelector("#attached:not([hidden])");
    assert.match(await first.textContent("#attached-controller"), /this page/);
    assert.ok(!(await first.isVisible("#take-control")), "the controller is not");
    await second.click("#take-control");
    await second.waitForSelector("#take-control", { state: "hidden" });
    await first.waitForSelector("#take-control:not([hidden])");
    await ask(second, "two");
    await second.waitForFunction(() => document.getElementById("status").textContent === "turn ended: end_turn");
    await first.waitForFunction(() => document.body.textContent.includes("From the second page."));
    assert.match(await first.textContent("#transcript"), /two/, "the other page's prompt is shown");
    assert.match(await status(first), /turn ended: end_turn/);
    await ask(first, "three");
    await first.waitForFunction(() => /must take control first/.test(document.getElementById("status").textContent));
    await shot(second, "attached-took-control");
    await shot(first, "attached-observer");
  } finally {
    await second.close();
    await first.close();
    await server.stop();
    rmSync(workspace, { recursive: true, force: true });
  }
});

test("a page following a session another server runs is told once when it is deleted there", async () => {
  await script([{ type: "text", chunks: ["Before the delete."] }]);
  const running = await startServe();
  // A second server on the same home: the session runs in the first, the page follows it
  // from the second.
  const following = await startServe([], { home: running.home });
  const workspace = mkdtempSync(join(tmpdir(), "talaria-web-ws-"));
  // The session's own client, a plain connection (the page has no delete of its own).
  const owner = await connectedPage(running);
  const second = await browser.instance.newPage({ viewport: { width: 1280, height: 720 } });
  try {
    const sessionId = await owner.evaluate(
      async ({ url, token, workspace }) => {
        const { AcpConnection } = await import("/acp.js");
        const connection = new AcpConnection(url, token);
        await connection.open();
        await connection.request("initialize", { protocolVersion: 1, clientCapabilities: {} });
        const { sessionId } = await connection.request("session/new", { cwd: workspace, mcpServers: [] });
        await connection.request("session/prompt", { sessionId, prompt: [{ type: "text", text: "one" }] });
        window.owner = connection;
        return sessionId;
      },
      { url: running.url, token: running.token, workspace },
    );
    await filesFromDisk(second);
    await second.goto(`${origin(following.url)}/#token=${following.token}&session=${sessionId}`);
    await second.waitForFunction(() => document.body.textContent.includes("Before the delete."));
    assert.doesNotMatch(await second.textContent("#transcript"), /deleted/);
    await owner.evaluate((sessionId) => window.owner.request("session/delete", { sessionId }), sessionId);
    await second.waitForFunction(() => /followed no more/.test(document.getElementById("status").textContent));
    const transcript = await second.textContent("#transcript");
    assert.equal(transcript.match(/this session was deleted/g)?.length, 1, transcript);
    assert.match(transcript, /Before the delete\./, "what it was shown stays");
    assert.equal(await second.textContent("#attached-clients"), "session deleted");
    assert.ok(!(await second.isVisible("#take-control")), "no control is offered of a deleted session");
    await ask(second, "still there?");
    await second.waitForFunction(() => /not sent: this session was deleted/.test(document.getElementById("status").textContent));
    assert.equal(await second.inputValue("#prompt"), "still there?", "the text stays in the box");
    assert.doesNotMatch(await second.textContent("#transcript"), /still there\?/, "nothing is shown as sent");
    await shot(second, "attached-followed-deleted");
  } finally {
    await second.close();
    await owner.close();
    await following.stop();
    await running.stop();
    rmSync(workspace, { recursive: true, force: true });
  }
});
