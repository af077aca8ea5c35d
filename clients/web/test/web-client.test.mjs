// The reference web client in headless Chromium (Debian's, as the VS Code browser test
// installs it) against `talaria serve` and the scripted mock LLM: connect with the token from
// the address, open a session, a Markdown answer, a tool card with its permission question
// and diff, a cancelled turn, a steer, a dropped socket taken back, a past session loaded.
// Screenshots go to test/screenshots.
import { test } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync, rmSync, writeFileSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { recorded, script, startServe } from "../../sdk-tests/support.mjs";
import { browser as launched, origin, shot } from "./browser.mjs";

const browser = { newPage: (...args) => launched.instance.newPage(...args) };

test("the web client drives a whole session in a browser", async () => {
  const workspace = mkdtempSync(join(tmpdir(), "talaria-web-ws-"));
  writeFileSync(join(workspace, "notes.txt"), "one\ntwo\nthree\n");
  await script([
    { type: "text", chunks: ["Here is **bold** text.\n\n", "```\nlet x = 1;\n```\n"], delay_ms: 5 },
    { type: "tool_calls", calls: [{ id: "edit1", name: "write_file", arguments: JSON.stringify({ path: "notes.txt", content: "one\n2\nthree\n" }) }] },
    { type: "text", chunks: ["Changed it."] },
    { type: "hang", chunks: ["thinking about it"] },
    { type: "hang", chunks: ["Using spaces"] },
    { type: "text", chunks: ["Tabs it is."] },
  ]);
  const server = await startServe();
  const page = await browser.newPage();
  try {
    await page.goto(`${origin(server.url)}/#token=${server.token}`);
    await page.waitForSelector("#workspace:not([hidden])");
    assert.equal(new URL(page.url()).hash, "", "the token leaves the address bar");
    await page.fill("#cwd", workspace);
    await page.click("#new-session");
    await page.waitForSelector("#transcript[data-session]");
    // A Markdown answer.
    await page.fill("#prompt", "show me");
    await page.click("#send");
    await page.waitForSelector(".message.agent strong");
    assert.equal(await page.textContent(".message.agent strong"), "bold");
    assert.equal((await page.textContent(".message.agent pre code")).trim(), "let x = 1;");
    await page.waitForSelector("#transcript[data-running=false]");
    // A tool card asks; its diff shows; allowing it writes the file.
    await page.fill("#prompt", "edit notes");
    await page.click("#send");
    await page.waitForSelector('[data-tool-call="edit1"] .question button[data-option="allow_once"]');
    await shot(page, "permission");
    await page.click('[data-tool-call="edit1"] button[data-option="allow_once"]');
    await page.waitForSelector('[data-tool-call="edit1"][data-status="completed"]');
    await page.waitForSelector('[data-tool-call="edit1"] .diff .added');
    assert.equal((await page.textContent('[data-tool-call="edit1"] .diff .added')).trim(), "+2");
    assert.equal((await page.textContent('[data-tool-call="edit1"] .diff .removed')).trim(), "-two");
    assert.equal(readFileSync(join(workspace, "notes.txt"), "utf8"), "one\n2\nthree\n");
    await page.waitForSelector("#transcript[data-running=false]");
    // Cancel a running turn.
    await page.fill("#prompt", "take your time");
    await page.click("#send");
    await page.waitForFunction(() => document.body.textContent.includes("thinking about it"));
    await page.click("#cancel");
    await page
      .waitForFunction(() => document.getElementById("status").textContent.includes("cancelled"), null, { timeout: 10000 })
      .catch(async (e) => {
        await shot(page, "cancel-failed");
        throw new Error(`${e.message}; status: ${await page.textContent("#status")}; ${await page.textContent("#transcript")}`);
      });
    // Steer a running turn; the socket drops meanwhile and is taken back.
    await page.fill("#prompt", "indent it");
    await page.click("#send");
    await page.waitForFunction(() => document.body.textContent.includes("Using spaces"));
    await page.fill("#prompt", "use tabs");
    await page.click("#send");
    await page.waitForFunction(() => document.body.textContent.includes("Tabs it is."));
    await page.waitForSelector("#transcript[data-running=false]");
    await shot(page, "session");
    const steered = (await recorded()).at(-1).body.messages.map((m) => m.content).join("\n");
    assert.match(steered, /use tabs/);
    // A past session, loaded from the list in a new page.
    const again = await browser.newPage();
    await again.goto(`${origin(server.url)}/#token=${server.token}`);
    await again.waitForSelector("#sessions button[data-session]");
    const sessionId = await page.getAttribute("#transcript", "data-session");
    await page.close();
    await again.click(`#sessions button[data-session="${sessionId}"]`);
    await again.waitForFunction(() => document.body.textContent.includes("Changed it."));
    assert.ok((await again.textContent("#transcript")).includes("show me"));
    await shot(again, "loaded");
  } finally {
    assert.equal(await server.stop(), 0);
    rmSync(workspace, { recursive: true, force: true });
  }
});

test("a dropped socket is taken back and misses nothing of a streaming answer", async () => {
  const workspace = mkdtempSync(join(tmpdir(), "talaria-web-ws-"));
  const chunks = Array.from({ length: 40 }, (_, i) => `part${i} `);
  await script([{ type: "text", chunks, delay_ms: 25 }]);
  const server = await startServe();
  const page = await browser.newPage();
  try {
    await page.goto(`${origin(server.url)}/#token=${server.token}`);
    await page.waitForSelector("#workspace:not([hidden])");
    await page.fill("#cwd", workspace);
    await page.click("#new-session");
    await page.waitForSelector("#transcript[data-session]");
    await page.fill("#prompt", "stream a lot");
    await page.click("#send");
    await page.waitForFunction(() => document.body.textContent.includes("part5 "));
    // The network drops the socket mid-answer (a `session/update` may be on its way).
    await page.evaluate(() => window.dispatchEvent(new Event("talaria-test-interrupt")));
    await page.waitForSelector("#transcript[data-running=false]");
    const answer = (await page.textContent(".message.agent")).trim();
    assert.equal(answer, chunks.join("").trim(), "every part, in order, once");
  } finally {
    await server.stop();
    rmSync(workspace, { recursive: true, force: true });
  }
});

test("the web client without the token is refused, and says so", async () => {
  const server = await startServe();
  const page = await browser.newPage();
  try {
    await page.goto(origin(server.url));
    await page.fill("#token", "not-the-token-at-all");
    await page.click("#connect-button");
    await page.waitForFunction(() => document.getElementById("status").textContent.startsWith("cannot connect"));
    assert.equal(await page.isHidden("#workspace"), true);
  } finally {
    await server.stop();
  }
});
