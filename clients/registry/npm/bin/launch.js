// What npm's `talaria` and `talaria-chat` commands share: finds a native binary in the
// package built for this platform (installed as an optional dependency, like
// `talaria-agent-linux-x64`) and runs it with this process's arguments and standard streams.
// Signals are passed on; the exit code is the binary's.
"use strict";

const { spawn } = require("node:child_process");
const fs = require("node:fs");
const path = require("node:path");

const PLATFORMS = {
  "linux-x64": "talaria-agent-linux-x64",
  "linux-arm64": "talaria-agent-linux-arm64",
  "darwin-x64": "talaria-agent-darwin-x64",
  "darwin-arm64": "talaria-agent-darwin-arm64",
};

function binaryPath(name) {
  const key = `${process.platform}-${process.arch}`;
  const pkg = PLATFORMS[key];
  if (!pkg) {
    throw new Error(
      `Talaria has no build for ${key} yet (builds: ${Object.keys(PLATFORMS).join(", ")}).`
    );
  }
  let manifest;
  try {
    manifest = require.resolve(`${pkg}/package.json`);
  } catch {
    throw new Error(
      `${pkg} is not installed: reinstall talaria-agent without --no-optional ` +
        `(npm installs the package for this platform as an optional dependency).`
    );
  }
  const binary = path.join(path.dirname(manifest), "bin", name);
  const beside = ["talaria", "talaria-sandbox"].map((file) => path.join(path.dirname(binary), file));
  for (const file of new Set([binary, ...beside])) {
    try {
      fs.accessSync(file, fs.constants.X_OK);
    } catch {
      // Some installers drop the executable bit; put it back when we may.
      try {
        fs.chmodSync(file, 0o755);
      } catch {
        /* reported below when the binary cannot start */
      }
    }
  }
  return binary;
}

/** Runs the platform package's binary `name` in place of this process. */
function run(name) {
  let binary;
  try {
    binary = binaryPath(name);
  } catch (error) {
    process.stderr.write(`${name}: ${error.message}\n`);
    process.exit(2);
  }
  const child = spawn(binary, process.argv.slice(2), { stdio: "inherit" });
  for (const signal of ["SIGINT", "SIGTERM", "SIGHUP"]) {
    process.on(signal, () => child.kill(signal));
  }
  child.on("error", (error) => {
    process.stderr.write(`${name}: cannot start ${binary}: ${error.message}\n`);
    process.exit(2);
  });
  child.on("exit", (code, signal) => {
    if (signal) {
      // Die the way the binary did (the handlers above would catch it otherwise).
      process.removeAllListeners(signal);
      process.kill(process.pid, signal);
    } else {
      process.exit(code ?? 1);
    }
  });
}

module.exports = { run };
