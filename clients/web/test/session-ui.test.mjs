// The web client as a user meets it, in headless Chromium against `talaria serve` and the
// scripted mock LLM: long lines stay inside their cards (the page never grows wider than the
// window), the status line follows the running turn, a new session is listed by its title,
// the mode and model pickers, a plan's hand-over in the agent's words with its three choices,
// the plan panel, the slash-command list, and the page's icon. Screenshots: test/screenshots.
import { test } from "node:test";
import assert from "node:assert/strict";
import { existsSync, readFileSync, rmSync } from "node:fs";
import { join } from "node:path";
import { script, startServe } from "../../sdk-tests/support.mjs";
import { ask, connectedPage, newSession, origin, shot } from "./browser.mjs";

/** Where things are on the page: widths, and the right edges of the buttons. */
function layout(page) {
  return page.evaluate(() => {
    const right = (selector) => document.querySelector(selector).getBoundingClientRect().right;
    return {
      page: document.documentElement.scrollWidth,
      window: window.innerWidth,
      send: right("#send"),
      cancel: right("#cancel"),
      transcript: right("#transcript"),
    };
  });
}

/** How wide `selector`'s element is against its content. */
function widths(page, selector) {
  return page.$eval(selector, (node) => ({
    scroll: node.scrollWidth,
    client: node.clientWidth,
    right: node.getBoundingClientRect().right,
  }));
}

function assertFits(box, what) {
  assert.ok(box.page <= box.window, `${what}: the page is ${box.page}px wide in a ${box.window}px window`);
  assert.ok(box.send <= box.window && box.cancel <= box.window, `${what}: Send and Cancel on screen: ${JSON.stringify(box)}`);
}

test("a long line wraps or scrolls inside its card and the page never grows wider than the window", async () => {
  const word = "x".repeat(3000);
  await script([
    { type: "text", chunks: [`A long word: ${word}\n\n\`\`\`\n${"y".repeat(3000)}\n\`\`\`\n`] },
    { type: "tool_calls", calls: [{ id: "long", name: "write_file", arguments: JSON.stringify({ path: "long.txt", content: `${"z".repeat(3000)}\n` }) }] },
    { type: "text", chunks: ["Written."] },
  ]);
  const server = await startServe();
  const page = await connectedPage(server, { width: 1024, height: 700 });
  const { workspace } = await newSession(page);
  try {
    await ask(page, `show me ${"w".repeat(2000)}`);
    await page.waitForSelector(".message.agent pre");
    await page.waitForSelector("#transcript[data-running=false]");
    assertFits(await layout(page), "a long answer");
    const paragraph = await widths(page, ".message.agent p");
    assert.ok(paragraph.scroll <= paragraph.client + 1, `the long word wraps: ${JSON.stringify(paragraph)}`);
    const user = await widths(page, ".message.user");
    assert.ok(user.scroll <= user.client + 1, `the long prompt wraps: ${JSON.stringify(user)}`);
    const code = await widths(page, ".message.agent pre");
    const box = await layout(page);
    assert.ok(code.scroll > code.client, "the long code line scrolls inside its block");
    assert.ok(code.right <= box.transcript, `the code block stays in the chat: ${JSON.stringify(code)}`);
    await shot(page, "long-answer");
    // A card's diff with a long line.
    await ask(page, "write it");
    await page.click('[data-tool-call="long"] button[data-option="allow_once"]');
    await page.waitForSelector('[data-tool-call="long"][data-status="completed"] .diff');
    assertFits(await layout(page), "a long diff");
    const diff = await widths(page, '[data-tool-call="long"] pre.diff');
    assert.ok(diff.scroll > diff.client && diff.right <= (await layout(page)).transcript, JSON.stringify(diff));
    await shot(page, "long-card");
    // And in a narrow window.
    await page.setViewportSize({ width: 600, height: 700 });
    assertFits(await layout(page), "a narrow window");
    await shot(page, "long-narrow");
  } finally {
    await page.close();
    await server.stop();
    rmSync(workspace, { recursive: true, force: true });
  }
});

test("the status line says the next turn runs, not how the last one ended", async () => {
  await script([
    { type: "text", chunks: ["First answer."] },
    { type: "hang", chunks: ["thinking about it"] },
  ]);
  const server = await startServe();
  const page = await connectedPage(server);
  const { workspace } = await newSession(page);
  try {
    await ask(page, "one");
    await page.waitForFunction(() => document.getElementById("status").textContent === "turn ended: end_turn");
    await ask(page, "two");
    await page.waitForFunction(() => document.body.textContent.includes("thinking about it"));
    const running = await page.textContent("#status");
    assert.doesNotMatch(running, /ended/, "the last turn's end is not the state now");
    assert.match(running, /running/);
    await shot(page, "second-turn-running");
    await page.click("#cancel");
    await page.waitForFunction(() => document.getElementById("status").textContent === "turn ended: cancelled");
  } finally {
    await page.close();
    await server.stop();
    rmSync(workspace, { recursive: true, force: true });
  }
});

test("a new session is listed by its title, not its id, and takes the agent's title when it comes", async () => {
  await script([{ type: "text", chunks: ["On it."] }]);
  const server = await startServe();
  const page = await connectedPage(server);
  // A folder that is not absolute is told, and does not stick to the status line.
  await page.fill("#cwd", "relative/folder");
  await page.click("#new-session");
  assert.equal(await page.textContent("#status"), "the folder must be an absolute path");
  const { workspace, sessionId } = await newSession(page);
  assert.equal(await page.textContent("#status"), "ready");
  const listed = `#sessions button[data-session="${sessionId}"]`;
  try {
    const before = await page.textContent(listed);
    assert.ok(!before.includes(sessionId), `listed by its id: ${before}`);
    assert.match(before, /New session/);
    await ask(page, "Fix the flaky login test\nIt fails on CI only.");
    await page.waitForFunction(
      (selector) => document.querySelector(selector)?.textContent.includes("Fix the flaky login test"),
      listed,
    );
    assert.equal(await page.textContent("#session-title"), "Fix the flaky login test");
    assert.equal(await page.title(), "Fix the flaky login test · Talaria");
    await shot(page, "titled");
    // Another page lists it by the same title.
    const again = await connectedPage(server);
    await again.waitForSelector(listed);
    assert.match(await again.textContent(listed), /Fix the flaky login test/);
    await again.close();
  } finally {
    await page.close();
    await server.stop();
    rmSync(workspace, { recursive: true, force: true });
  }
});

test("the slash-command list, a plan's hand-over in the agent's words, the plan panel and the mode picker", async () => {
  const todo = (status) => ({
    type: "tool_calls",
    calls: [{ id: `todo-${status}`, name: "todo", arguments: JSON.stringify({ todos: [{ id: "1", content: "write notes.txt", status }] }) }],
  });
  await script([
    todo("pending"),
    { type: "text", chunks: ["Plan: 1. write notes.txt with 'done'."] },
    { type: "tool_calls", calls: [{ id: "notes", name: "write_file", arguments: JSON.stringify({ path: "notes.txt", content: "done\n" }) }] },
    todo("completed"),
    { type: "text", chunks: ["Implemented."] },
    { type: "tool_calls", calls: [{ id: "more", name: "write_file", arguments: JSON.stringify({ path: "more.txt", content: "more\n" }) }] },
    { type: "text", chunks: ["Done without asking."] },
  ]);
  const server = await startServe();
  const page = await connectedPage(server);
  const { workspace } = await newSession(page);
  try {
    // The pickers: the session's mode and model.
    await page.waitForSelector('select[data-config="mode"]');
    assert.equal(await page.inputValue('select[data-config="mode"]'), "ask");
    const modes = await page.$$eval('select[data-config="mode"] option', (options) => options.map((o) => o.value));
    assert.deepEqual(modes, ["read-only", "plan", "ask", "accept-edits", "yolo"]);
    assert.equal(await page.inputValue('select[data-config="model"]'), "mock-model");
    // The agent's commands, as `/` is typed; Tab completes the one chosen.
    await page.click("#prompt");
    await page.keyboard.type("/");
    await page.waitForSelector("#commands:not([hidden])");
    const offered = await page.$$eval("#commands li", (items) => items.map((i) => i.dataset.command));
    for (const name of ["compact", "plan", "rewind"]) assert.ok(offered.includes(name), `${name} in ${offered}`);
    await shot(page, "commands");
    await page.keyboard.type("pl");
    assert.deepEqual(await page.$$eval("#commands li", (items) => items.map((i) => i.dataset.command)), ["plan"]);
    assert.match(await page.textContent("#commands li"), /the task to plan/);
    await page.keyboard.press("Tab");
    assert.equal(await page.inputValue("#prompt"), "/plan ");
    assert.equal(await page.isHidden("#commands"), true);
    // Enter sends: the agent switches to plan mode (the picker follows) and plans.
    await page.keyboard.type("write the notes");
    await page.keyboard.press("Enter");
    await page.waitForFunction(() => document.querySelector('select[data-config="mode"]').value === "plan");
    await page.waitForSelector('#plan:not([hidden]) li[data-status="pending"]');
    assert.match(await page.textContent("#plan"), /write notes\.txt/);
    // The hand-over: the agent's own question and its three choices.
    await page.waitForSelector(".question .asked");
    assert.equal(await page.textContent(".question .asked"), "Implement this plan?");
    assert.ok(!(await page.textContent("#transcript")).includes("Allow this call?"));
    const choices = await page.$$eval(".question button", (buttons) => buttons.map((b) => b.textContent));
    assert.deepEqual(choices, ["Implement (ask before edits and commands)", "Implement (accept edits)", "Keep planning"]);
    await shot(page, "plan-handover");
    await page.click('.question button[data-option-id="implement_accept_edits"]');
    await page.waitForFunction(() => document.querySelector('select[data-config="mode"]').value === "accept-edits");
    await page.waitForFunction(() => document.body.textContent.includes("Implemented."));
    await page.waitForSelector('#plan li[data-status="completed"]');
    assert.equal(readFileSync(join(workspace, "notes.txt"), "utf8"), "done\n");
    await shot(page, "plan-implemented");
    // The picker sets the mode: in yolo the next write asks nothing.
    await page.waitForSelector("#transcript[data-running=false]");
    await page.selectOption('select[data-config="mode"]', "yolo");
    await ask(page, "one more file");
    await page.waitForFunction(() => document.body.textContent.includes("Done without asking."));
    assert.ok(existsSync(join(workspace, "more.txt")));
    assert.equal(await page.$$eval('[data-tool-call="more"] .question', (q) => q.length), 0);
  } finally {
    await page.close();
    await server.stop();
    rmSync(workspace, { recursive: true, force: true });
  }
});

test("the page's icon is served, and loading the page asks for nothing that is missing", async () => {
  const server = await startServe();
  const missing = [];
  try {
    const icon = await fetch(`${origin(server.url)}/favicon.ico`);
    assert.equal(icon.status, 200);
    assert.equal(icon.headers.get("content-type"), "image/svg+xml");
    assert.match(await icon.text(), /^<svg /);
    const page = await connectedPage(server);
    page.on("response", (response) => response.status() >= 400 && missing.push(response.url()));
    await page.reload();
    await page.waitForLoadState("networkidle");
    assert.deepEqual(missing, []);
    assert.equal(await page.getAttribute('link[rel="icon"]', "href"), "/favicon.svg");
    await page.close();
  } finally {
    await server.stop();
  }
});
