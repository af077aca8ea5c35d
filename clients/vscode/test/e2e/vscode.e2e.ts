// End to end in a real VS Code: code-server (VS Code 1.100's workbench with its Node extension
// host) in headless Chromium driven by playwright-core. Installs the freshly packaged .vsix,
// opens a workspace, starts Talaria against the project's scripted mock LLM, and checks in the
// page: a streamed markdown answer, a tool card with a permission question answered from the
// card, the file written through fs/write_text_file (on disk and in the editor), the agent's
// question (`clarify`) answered in a form, a pasted image reaching the model, a command whose
// output streams into its card from an editor terminal, and Stop ending a slow turn. Then it
// attaches to a session another client runs in a `talaria serve` (Talaria: Attach to a
// Session…): the session so far, who is attached and who has control, an observer's prompt
// refused, Take control, a prompt and its permission question answered, Leave. A
// screenshot of the chat view is saved after each step.
import { spawn, execFileSync, type ChildProcess } from "node:child_process";
import { createServer } from "node:net";
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync, existsSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { createInterface } from "node:readline";
import assert from "node:assert/strict";
import { chromium, type Frame, type Page } from "playwright-core";
import { methods } from "@agentclientprotocol/sdk";

import { OtherClient, Serve, until } from "../serveSupport.js";

const here = process.cwd(); // clients/vscode (npm run)
const repo = resolve(here, "../..");
const target = process.env.CARGO_TARGET_DIR ?? join(repo, "target");
const talariaBin = process.env.TALARIA_BIN ?? join(target, "debug", "talaria");
const mockBin = process.env.TALARIA_MOCK_BIN ?? join(target, "debug", "talaria-mock-llm");
const codeServer = join(here, "test", "code-server", "node_modules", ".bin", "code-server");
const browserPath = process.env.CHROMIUM ?? "/usr/lib/chromium/chromium";
const vsix = join(here, "dist", "talaria.vsix");
const shots = join(here, "dist", "e2e-screenshots");
const TIMEOUT = 60_000;

const children: ChildProcess[] = [];
// Left behind, temporary directories pile up in /tmp, where every sandboxed command's policy
// grants each entry on its own.
const temporary: string[] = [];
function temporaryDir(prefix: string): string {
  const dir = mkdtempSync(join(tmpdir(), prefix));
  temporary.push(dir);
  return dir;
}
function cleanUp(): void {
  for (const child of children) {
    try {
      if (child.pid) process.kill(-child.pid, "SIGKILL");
    } catch {
      child.kill("SIGKILL");
    }
  }
  for (const dir of temporary.splice(0)) {
    rmSync(dir, { recursive: true, force: true });
  }
}
process.on("exit", cleanUp);

function freePort(): Promise<number> {
  return new Promise((ok, fail) => {
    const server = createServer();
    server.listen(0, "127.0.0.1", () => {
      const address = server.address();
      server.close(() => (address && typeof address === "object" ? ok(address.port) : fail(new Error("no port"))));
    });
  });
}

async function startMock(): Promise<string> {
  const script = join(temporaryDir("talaria-vscode-mock-"), "script.json");
  writeFileSync(
    script,
    JSON.stringify([
      { type: "text", chunks: ["Hello ", "from **Talaria**", " in VS Code."], delay_ms: 40 },
      {
        type: "tool_calls",
        calls: [{ id: "w1", name: "write_file", arguments: JSON.stringify({ path: "notes.txt", content: "written by Talaria\n" }) }],
      },
      { type: "text", chunks: ["Done: notes.txt is written."] },
      {
        type: "tool_calls",
        calls: [
          {
            id: "q1",
            name: "clarify",
            arguments: JSON.stringify({ question: "Which database should I use?", choices: ["postgres", "sqlite"] }),
          },
        ],
      },
      { type: "text", chunks: ["Using sqlite, as you chose."] },
      { type: "text", chunks: ["A small red dot."] },
      {
        type: "tool_calls",
        calls: [
          {
            id: "r1",
            name: "terminal",
            arguments: JSON.stringify({ command: "for i in 1 2 3; do echo step-$i; sleep 1; done" }),
          },
        ],
      },
      { type: "text", chunks: ["The three steps ran."] },
      { type: "hang", chunks: ["Drafting with spaces"] },
      { type: "text", chunks: ["Switched to tabs."] },
      { type: "hang", chunks: ["Working on it"] },
      // The session in `talaria serve` another client opened, then VS Code attached to.
      { type: "text", chunks: ["From the other client."] },
      {
        type: "tool_calls",
        calls: [{ id: "a1", name: "write_file", arguments: JSON.stringify({ path: "attached.txt", content: "from VS Code\n" }) }],
      },
      { type: "text", chunks: ["Written from VS Code."] },
    ]),
  );
  const mock = spawn(mockBin, [script], { stdio: ["pipe", "pipe", "inherit"], detached: true });
  children.push(mock);
  const line = await new Promise<string>((ok, fail) => {
    createInterface({ input: mock.stdout! }).once("line", ok);
    mock.once("error", fail);
  });
  return JSON.parse(line).base_url as string;
}

async function startCodeServer(workspace: string, baseUrl: string): Promise<string> {
  const base = temporaryDir("talaria-vscode-e2e-");
  const userData = join(base, "user-data");
  const extensions = join(base, "extensions");
  mkdirSync(join(userData, "User"), { recursive: true });
  writeFileSync(
    join(userData, "User", "settings.json"),
    JSON.stringify({
      "workbench.startupEditor": "none",
      "telemetry.telemetryLevel": "off",
      "workbench.tips.enabled": false,
      "chat.commandCenter.enabled": false,
      // The DOM renderer: the terminal panel's text can be read from the page.
      "terminal.integrated.gpuAcceleration": "off",
      "talaria.path": talariaBin,
      "talaria.home": join(base, "talaria-home"),
      "talaria.env": {
        OPENAI_BASE_URL: baseUrl,
        OPENAI_API_KEY: "e2e-key",
        TALARIA_MODEL: "mock-model",
        TALARIA_TITLES: "off",
      },
    }),
  );
  const env = { ...process.env, XDG_CONFIG_HOME: join(base, "xdg-config"), XDG_DATA_HOME: join(base, "xdg-data") };
  const common = ["--user-data-dir", userData, "--extensions-dir", extensions];
  execFileSync(codeServer, ["--install-extension", vsix, ...common], { env, stdio: ["ignore", "ignore", "inherit"] });
  const port = await freePort();
  const server = spawn(
    codeServer,
    [
      "--bind-addr",
      `127.0.0.1:${port}`,
      "--auth",
      "none",
      "--disable-telemetry",
      "--disable-update-check",
      "--disable-workspace-trust",
      ...common,
      workspace,
    ],
    { env, stdio: ["ignore", "ignore", "inherit"], detached: true },
  );
  children.push(server);
  const url = `http://127.0.0.1:${port}`;
  const deadline = Date.now() + TIMEOUT;
  while (Date.now() < deadline) {
    try {
      if ((await fetch(`${url}/healthz`)).ok) return url;
    } catch {
      // not up yet
    }
    await new Promise((ok) => setTimeout(ok, 250));
  }
  throw new Error("code-server did not start");
}

/** The frame of the chat view (webviews nest the page in an inner frame). */
async function chatFrame(page: Page): Promise<Frame> {
  const deadline = Date.now() + TIMEOUT;
  while (Date.now() < deadline) {
    for (const frame of page.frames()) {
      if (await frame.locator("textarea.prompt").count().catch(() => 0)) return frame;
    }
    await page.waitForTimeout(250);
  }
  throw new Error("the chat view did not appear");
}

/** A 1×1 red PNG. */
const RED_DOT =
  "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg==";

/** What the mock model received so far. */
async function mockRequests(baseUrl: string): Promise<{ body: { messages: unknown } }[]> {
  const root = baseUrl.replace(/\/v1$/, "");
  const response = await fetch(`${root}/_mock/requests`);
  return (await response.json()) as { body: { messages: unknown } }[];
}

let step = 0;
async function screenshot(page: Page, name: string): Promise<void> {
  step += 1;
  const file = join(shots, `${String(step).padStart(2, "0")}-${name}.png`);
  const frames = page.locator("iframe.webview.ready");
  for (let i = 0; i < (await frames.count()); i += 1) {
    const frame = frames.nth(i);
    if (await frame.isVisible()) {
      await frame.screenshot({ path: file });
      return;
    }
  }
  await page.screenshot({ path: file });
}

/**
 * Another client opens a session in a `talaria serve` and gets an answer; VS Code attaches to
 * it from its link, is refused as an observer, takes control from the notice, prompts,
 * answers the permission question on the card (the other client's is withdrawn), and leaves.
 */
async function attachedSession(page: Page, chat: Frame, baseUrl: string): Promise<void> {
  const serve = await Serve.start(baseUrl.replace(/\/v1$/, ""));
  const served = temporaryDir("talaria-vscode-served-");
  const other = await OtherClient.connect(serve, "other-client");
  try {
    const { sessionId } = await other.connection.agent.request(methods.agent.session.new, { cwd: served, mcpServers: [] });
    await other.connection.agent.request(methods.agent.session.prompt, { sessionId, prompt: [{ type: "text", text: "Start here" }] });

    await page.locator(".monaco-workbench").click();
    await page.keyboard.press("F1");
    await page.keyboard.type("Talaria: Attach to a Session");
    await page.keyboard.press("Enter");
    const box = page.locator(".quick-input-widget input");
    await page.locator(".quick-input-widget", { hasText: "The session's link" }).waitFor({ timeout: TIMEOUT });
    await box.fill(serve.link(sessionId));
    await box.press("Enter");
    // The session so far, who is attached and who has control.
    await chat.locator(".message.user", { hasText: "Start here" }).waitFor({ timeout: TIMEOUT });
    await chat.locator(".message.agent", { hasText: "From the other client." }).waitFor({ timeout: TIMEOUT });
    await chat.locator(".attached:not(.hidden) .attached-clients", { hasText: "2 attached" }).waitFor({ timeout: TIMEOUT });
    assert.match(await chat.locator(".attached-clients").innerText(), /this window/);
    assert.match(await chat.locator(".attached-control").innerText(), /Control: other-client/);
    assert.ok(await chat.locator("button.take-control").isVisible(), "an observer is offered control");
    await screenshot(page, "attached-observer");

    // An observer's prompt is refused; the notice's button takes control.
    const prompt = chat.locator("textarea.prompt");
    await prompt.fill("Write attached.txt");
    await prompt.press("Enter");
    const refused = chat.locator(".notice.warning", { hasText: "take control first" });
    await refused.waitFor({ timeout: TIMEOUT });
    assert.equal(await chat.locator(".message.user", { hasText: "Write attached.txt" }).count(), 0, "not sent");
    await screenshot(page, "attached-refused");
    await refused.locator("button.notice-action", { hasText: "Take control" }).click();
    await chat.locator(".attached-control", { hasText: "Control: this window" }).waitFor({ timeout: TIMEOUT });
    await chat.locator("button.take-control.hidden").waitFor({ state: "attached", timeout: TIMEOUT });
    await until(() => other.rosters().some((r) => r.controller !== other.clientId), "the other client told");

    // The controller prompts and answers the question on the card.
    await prompt.fill("Write attached.txt");
    await prompt.press("Enter");
    const allow = chat.locator(".tool-card .permission button.allow_once");
    await allow.waitFor({ timeout: TIMEOUT });
    await until(() => other.asked.length === 1, "the other client asked too");
    await allow.click();
    await chat.locator(".permission-resolved", { hasText: "Answered by this window" }).waitFor({ timeout: TIMEOUT });
    await chat.locator(".message.agent", { hasText: "Written from VS Code." }).waitFor({ timeout: TIMEOUT });
    assert.equal(readFileSync(join(served, "attached.txt"), "utf8"), "from VS Code\n");
    await until(() => other.withdrawn === 1, "the other client's question withdrawn");
    await until(() => other.answerText().endsWith("Written from VS Code."), "the other client following");
    await screenshot(page, "attached-controller");

    // Leave: detached, the chat is a local one again.
    await chat.locator("button.leave-session").click();
    await chat.locator(".attached.hidden").waitFor({ state: "attached", timeout: TIMEOUT });
    await until(() => other.rosters().at(-1)?.clients.length === 1, "the other client told VS Code left");
  } finally {
    other.close();
    await serve.stop();
  }
}

async function run(): Promise<void> {
  for (const needed of [talariaBin, mockBin, codeServer, browserPath, vsix]) {
    assert.ok(existsSync(needed), `missing ${needed} (build with cargo, run setup-e2e.sh and npm run package)`);
  }
  mkdirSync(shots, { recursive: true });
  const workspace = temporaryDir("talaria-vscode-ws-");
  writeFileSync(join(workspace, "README.md"), "# A workspace for the test\n");
  const baseUrl = await startMock();
  const url = await startCodeServer(workspace, baseUrl);
  const browser = await chromium.launch({
    executablePath: browserPath,
    headless: true,
    args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"],
  });
  const page = await browser.newPage({ viewport: { width: 1400, height: 900 } });
  try {
    await page.goto(`${url}/?folder=${encodeURIComponent(workspace)}`);
    await page.locator(".explorer-folders-view").getByText("README.md").waitFor({ timeout: TIMEOUT });

    // Open the chat from the command palette.
    await page.locator(".monaco-workbench").click();
    await page.keyboard.press("F1");
    await page.keyboard.type("Talaria: Open Chat");
    await page.keyboard.press("Enter");
    const chat = await chatFrame(page);
    // The chat sits in the secondary side bar, beside the editor.
    await page.locator(".part.auxiliarybar", { hasText: /talaria/i }).waitFor({ timeout: TIMEOUT });
    await screenshot(page, "opened");

    // Slash commands complete from the agent's list; @ completes workspace files.
    const prompt = chat.locator("textarea.prompt");
    await prompt.pressSequentially("/comp");
    await chat.locator(".completions li", { hasText: "/compact" }).waitFor({ timeout: TIMEOUT });
    await prompt.press("Escape");
    await prompt.fill("");
    await prompt.pressSequentially("look at @READ");
    await chat.locator(".completions li", { hasText: "README.md" }).waitFor({ timeout: TIMEOUT });
    await prompt.press("Tab");
    await chat.locator(".chips .chip", { hasText: "@README.md" }).waitFor({ timeout: TIMEOUT });
    assert.equal(await prompt.inputValue(), "look at @README.md ");
    await screenshot(page, "completion");
    await prompt.fill("");

    // 1. A streamed answer, rendered as markdown.
    await chat.locator("textarea.prompt").fill("Say hello");
    await chat.locator("textarea.prompt").press("Enter");
    // Streamed: the whole answer arrives, its markdown rendered.
    await chat.locator(".message.agent", { hasText: "Hello from Talaria in VS Code." }).waitFor({ timeout: TIMEOUT });
    assert.equal(await chat.locator(".message.agent strong").last().innerText(), "Talaria");
    await chat.locator("button.send:not(.hidden)").waitFor({ timeout: TIMEOUT });
    await screenshot(page, "answer");

    // 2. A tool card with a permission question, answered from the card.
    await chat.locator("textarea.prompt").fill("Write notes.txt");
    await chat.locator("textarea.prompt").press("Enter");
    const allow = chat.locator(".tool-card .permission button.allow_once");
    await allow.waitFor({ timeout: TIMEOUT });
    assert.match(await chat.locator(".tool-card .title").last().innerText(), /notes\.txt/);
    await screenshot(page, "permission");
    await allow.click();
    await chat.locator(".tool-card.status-completed").waitFor({ timeout: TIMEOUT });
    await chat.locator(".message.agent", { hasText: "notes.txt is written" }).waitFor({ timeout: TIMEOUT });
    await chat.locator("button.send:not(.hidden)").waitFor({ timeout: TIMEOUT });
    assert.equal(await chat.locator(".permission-resolved").count(), 0, "a session of this window alone says not who answered");

    // 3. The edit went through the editor: on disk, and open in the editor.
    assert.equal(readFileSync(join(workspace, "notes.txt"), "utf8"), "written by Talaria\n");
    await page.locator(".monaco-editor .view-lines", { hasText: "written by Talaria" }).waitFor({ timeout: TIMEOUT });
    await page.locator(".tab", { hasText: "notes.txt" }).waitFor({ timeout: TIMEOUT });
    await screenshot(page, "edited");
    // The card's diff opens in VS Code's diff editor.
    await chat.locator("button.open-diff").click();
    await page.locator(".tab", { hasText: "Talaria's edit" }).waitFor({ timeout: TIMEOUT });
    await page.locator(".monaco-diff-editor").first().waitFor({ timeout: TIMEOUT });

    // 4. The agent's question (clarify) is a form in the chat; the answer reaches the model.
    await chat.locator("textarea.prompt").fill("Set up the database");
    await chat.locator("textarea.prompt").press("Enter");
    const form = chat.locator("form.question");
    await form.waitFor({ timeout: TIMEOUT });
    assert.match(await form.locator(".question-message").innerText(), /Which database/);
    await form.locator("select").selectOption("sqlite");
    await screenshot(page, "question");
    await form.locator("button.question-submit").click();
    await chat.locator(".question.answered", { hasText: "Answered: sqlite" }).waitFor({ timeout: TIMEOUT });
    await chat.locator(".message.agent", { hasText: "Using sqlite" }).waitFor({ timeout: TIMEOUT });
    await chat.locator("button.send:not(.hidden)").waitFor({ timeout: TIMEOUT });
    const answeredRequest = (await mockRequests(baseUrl)).at(-1);
    assert.match(JSON.stringify(answeredRequest?.body.messages), /sqlite/, "the model read the answer");

    // 5. A pasted image reaches the agent.
    await prompt.evaluate((node, data) => {
      const bytes = Uint8Array.from(atob(data), (c) => c.charCodeAt(0));
      const transfer = new DataTransfer();
      transfer.items.add(new File([bytes], "dot.png", { type: "image/png" }));
      node.dispatchEvent(new ClipboardEvent("paste", { clipboardData: transfer, bubbles: true, cancelable: true }));
    }, RED_DOT);
    await chat.locator(".chips .chip", { hasText: "image 1" }).waitFor({ timeout: TIMEOUT });
    await screenshot(page, "pasted-image");
    await prompt.fill("What is in this picture?");
    await prompt.press("Enter");
    await chat.locator(".message.agent", { hasText: "A small red dot." }).waitFor({ timeout: TIMEOUT });
    await chat.locator("button.send:not(.hidden)").waitFor({ timeout: TIMEOUT });
    const imageRequest = (await mockRequests(baseUrl)).at(-1);
    assert.ok(
      JSON.stringify(imageRequest?.body.messages).includes(`data:image/png;base64,${RED_DOT}`),
      "the model got the image",
    );

    // 6. A command runs in an editor terminal and its output streams into the card.
    await prompt.fill("Run the steps");
    await prompt.press("Enter");
    const allowRun = chat.locator(".tool-card .permission button.allow_once");
    await allowRun.waitFor({ timeout: TIMEOUT });
    await allowRun.click();
    const output = chat.locator(".tool-card pre.terminal-output").last();
    await output.filter({ hasText: "step-1" }).waitFor({ timeout: TIMEOUT });
    assert.doesNotMatch(await output.innerText(), /step-3/, "the output streams: the command is still running");
    await screenshot(page, "terminal-streaming");
    await output.filter({ hasText: "step-3" }).waitFor({ timeout: TIMEOUT });
    await chat.locator(".message.agent", { hasText: "The three steps ran." }).waitFor({ timeout: TIMEOUT });
    await chat.locator("button.send:not(.hidden)").waitFor({ timeout: TIMEOUT });
    await screenshot(page, "terminal-done");
    // The editor's terminal panel shows the command as the user would have typed it, not the
    // sandbox helper and its policy.
    const typed = "for i in 1 2 3; do echo step-$i; sleep 1; done";
    const panel = page.locator(".xterm-rows").first();
    await panel.filter({ hasText: "step-3" }).waitFor({ timeout: TIMEOUT });
    const panelText = await panel.innerText();
    const firstLine = panelText.split("\n").find((line) => line.trim() !== "") ?? "";
    assert.equal(firstLine.trim(), `$ ${typed}`, `the terminal's first line: ${panelText}`);
    assert.doesNotMatch(panelText, /__sandbox|writable|hidden/, "no sandbox plumbing in the terminal");
    assert.match(panelText, /step-1[\s\S]*step-2[\s\S]*step-3/, `every line, from the first: ${panelText}`);
    // Every card's kind is a word the page can draw (emoji are a missing glyph without an
    // emoji font).
    for (const badge of await chat.locator(".tool-card .kind").allInnerTexts()) {
      assert.match(badge.trim(), /^[A-Za-z]+$/, `a card's kind badge: ${badge}`);
    }
    await page.screenshot({ path: join(shots, "terminal-panel.png") });

    // 7. A message typed while the turn runs steers it, and shows where it entered.
    await prompt.fill("Draft the config");
    await prompt.press("Enter");
    await chat.locator(".message.agent", { hasText: "Drafting with spaces" }).waitFor({ timeout: TIMEOUT });
    await chat.locator("button.steer-button:not(.hidden)").waitFor({ timeout: TIMEOUT });
    await prompt.fill("use tabs");
    await chat.locator("button.steer-button").click();
    await chat.locator(".message.user.steered", { hasText: "use tabs" }).waitFor({ timeout: TIMEOUT });
    await chat.locator(".message.agent", { hasText: "Switched to tabs." }).waitFor({ timeout: TIMEOUT });
    await chat.locator("button.send:not(.hidden)").waitFor({ timeout: TIMEOUT });
    const steeredRequest = (await mockRequests(baseUrl)).at(-1);
    const sentMessages = JSON.stringify(steeredRequest?.body.messages);
    assert.ok(
      sentMessages.indexOf("Drafting with spaces") < sentMessages.indexOf("use tabs"),
      "the model got the steer after what streamed",
    );
    await screenshot(page, "steered");

    // 8. Stop ends a slow turn.
    await chat.locator("textarea.prompt").fill("Take your time");
    await chat.locator("textarea.prompt").press("Enter");
    await chat.locator(".message.agent", { hasText: "Working on it" }).waitFor({ timeout: TIMEOUT });
    await chat.locator("button.stop-button:not(.hidden)").click();
    await chat.locator(".stop", { hasText: "Stopped." }).waitFor({ timeout: TIMEOUT });
    await chat.locator("button.send:not(.hidden)").waitFor({ timeout: TIMEOUT });
    await screenshot(page, "stopped");
    await page.screenshot({ path: join(shots, "workbench.png") });

    // 9. Attached to a session another client runs in a `talaria serve`.
    await attachedSession(page, chat, baseUrl);
    console.log(`vscode e2e: passed; screenshots in ${shots}`);
  } catch (error) {
    await page.screenshot({ path: join(shots, "failure.png") }).catch(() => {});
    throw error;
  } finally {
    await browser.close();
    cleanUp();
  }
}

run().then(
  () => process.exit(0),
  (error) => {
    console.error(`vscode e2e: FAILED: ${error instanceof Error ? error.stack : String(error)}`);
    console.error(`screenshots so far in ${shots}`);
    cleanUp();
    process.exit(1);
  },
);
