// Two pages on one session of `talaria serve`, in headless Chromium against the scripted mock
// LLM: the second attaches from a link (`#token=…&session=ID`) and is shown the session so
// far, both see who is attached and who has control, the second takes control with the
// button, the first sees the second's turn and is told to take control before it prompts.
import { test } from "node:test";
import assert from "node:assert/strict";
import { rmSync } from "node:fs";
import { script, startServe } from "../../sdk-tests/support.mjs";
import { ask, browser, connectedPage, newSession, origin, shot } from "./browser.mjs";

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
