// Shared by the web client's browser tests: headless Chromium (Debian's, as the VS Code
// browser test installs it), a page connected to a `talaria serve`, and screenshots kept
// under test/screenshots/ (CI keeps them as artifacts; git ignores them).
import { before, after } from "node:test";
import { mkdirSync, mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { chromium } from "playwright-core";

const browserPath = process.env.CHROMIUM ?? "/usr/lib/chromium/chromium";
export const shots = join(import.meta.dirname, "screenshots");

/** The browser, launched once per test file. */
export const browser = {};

before(async () => {
  mkdirSync(shots, { recursive: true });
  // Pages served from disk (`filesFromDisk`) have no address: Chromium would take them for
  // public pages and keep them off loopback.
  const args = ["--no-sandbox", "--disable-features=LocalNetworkAccessChecks"];
  browser.instance = await chromium.launch({ executablePath: browserPath, args });
});
after(async () => browser.instance?.close());

/** The server's page address, from its `/acp` address. */
export const origin = (url) => url.replace(/\/acp$/, "");

export async function shot(page, name) {
  await page.screenshot({ path: join(shots, `${name}.png`), fullPage: true });
}

/** The page's files, by the path the server serves each at. */
const FILES = {
  "/": "index.html",
  "/index.html": "index.html",
  "/app.js": "app.js",
  "/acp.js": "acp.js",
  "/markdown.js": "markdown.js",
  "/style.css": "style.css",
  "/favicon.svg": "favicon.svg",
};

/**
 * Serves `page` the web client's files from this folder instead of the copies built into the
 * server (a `talaria` built before the files last changed serves older ones).
 */
export async function filesFromDisk(page) {
  const folder = join(import.meta.dirname, "..");
  await page.route(
    (url) => url.pathname in FILES,
    (route) => route.fulfill({ path: join(folder, FILES[new URL(route.request().url()).pathname]) }),
  );
}

/** A new page (of `size`, 1280×720 unless told) connected to `server` with its token. */
export async function connectedPage(server, size = { width: 1280, height: 720 }) {
  const page = await browser.instance.newPage({ viewport: size });
  await page.goto(`${origin(server.url)}/#token=${server.token}`);
  await page.waitForSelector("#workspace:not([hidden])");
  return page;
}

/**
 * Starts a session in a new folder from the page and waits until the page shows it; resolves
 * with the folder and the session id.
 */
export async function newSession(page) {
  const workspace = mkdtempSync(join(tmpdir(), "talaria-web-ws-"));
  // A page that already shows a session (attached from a link) shows the new one once it opens.
  const before = (await page.getAttribute("#transcript", "data-session")) ?? "";
  await page.fill("#cwd", workspace);
  await page.click("#new-session");
  const shown = await page.waitForFunction(
    (before) => {
      const session = document.getElementById("transcript").dataset.session;
      return session && session !== before ? session : false;
    },
    before,
  );
  return { workspace, sessionId: await shown.jsonValue() };
}

/** Sends a prompt from the prompt box. */
export async function ask(page, text) {
  await page.fill("#prompt", text);
  await page.click("#send");
}
