// Bundles the extension (Node, CommonJS, `vscode` external), the chat page script, and, with
// --tests / --e2e, the unit tests and the browser test, with esbuild into dist/.
import { build } from "esbuild";
import { copyFileSync, mkdirSync, readdirSync } from "node:fs";

const common = { bundle: true, sourcemap: true, logLevel: "warning", target: "es2022" };
mkdirSync("dist", { recursive: true });
await build({
  ...common,
  entryPoints: ["src/extension.ts"],
  outfile: "dist/extension.js",
  platform: "node",
  format: "cjs",
  external: ["vscode"],
});
await build({ ...common, entryPoints: ["webview/main.ts"], outfile: "dist/webview.js", platform: "browser", format: "iife" });
copyFileSync("webview/style.css", "dist/webview.css");
if (process.argv.includes("--tests")) {
  const tests = readdirSync("test").filter((f) => f.endsWith(".test.ts")).map((f) => `test/${f}`);
  await build({ ...common, entryPoints: tests, outdir: "dist/test", platform: "node", format: "esm", outExtension: { ".js": ".mjs" }, packages: "external" });
}
if (process.argv.includes("--e2e")) {
  await build({ ...common, entryPoints: ["test/e2e/vscode.e2e.ts"], outfile: "dist/e2e/vscode.e2e.mjs", platform: "node", format: "esm", packages: "external" });
}
