#!/usr/bin/env bash
# Runs every test: Rust unit and end-to-end suites, then the official ACP TypeScript SDK suite.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --workspace --bins
cargo test --workspace
(cd clients/sdk-tests && npm ci --no-audit --no-fund && npm test)
