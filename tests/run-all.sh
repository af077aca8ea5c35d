#!/usr/bin/env bash
# Runs every test: Rust unit and end-to-end suites, the official ACP TypeScript SDK suite, and
# the VS Code extension's unit tests and browser test (which installs Chromium and code-server
# from the registries on first use: see clients/vscode/test/setup-e2e.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --workspace --bins
cargo test --workspace
(cd clients/sdk-tests && npm ci --no-audit --no-fund && npm test)
(cd clients/vscode && npm ci --no-audit --no-fund && npm run typecheck && npm test && npm run test:e2e)
