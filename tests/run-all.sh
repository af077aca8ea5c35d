#!/usr/bin/env bash
# Runs every test: Rust unit and end-to-end suites, the official ACP TypeScript SDK suite, and
# the VS Code extension's unit tests and browser test, the web client's browser test (which installs Chromium and code-server
# from the registries on first use: see clients/vscode/test/setup-e2e.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
# Property tests draw from one fixed seed (proptest reads PROPTEST_RNG_SEED into every
# ProptestConfig::default()), so a second run on a fresh clone draws the same inputs and gives
# the same result; the cases that failed once are replayed first from the committed
# proptest-regressions/ files. Set another seed by hand to explore.
export PROPTEST_RNG_SEED="${PROPTEST_RNG_SEED:-7401}"
# The PostgreSQL store's tests (its conformance suite, and two agent processes sharing one
# database end to end) start a throwaway cluster of Debian's postgresql, installed from the
# registry when missing.
sudo_if() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }
if ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
  echo "run-all: installing postgresql with apt" >&2
  sudo_if apt-get update -qq
  sudo_if env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null
fi
# The sandbox suites start a real ssh-agent (openssh-client) and a real sshd on loopback with
# a ControlMaster connection to it (openssh-server) to prove both are out of reach.
if ! command -v ssh-agent >/dev/null 2>&1 || [ ! -x /usr/sbin/sshd ]; then
  echo "run-all: installing openssh-client and openssh-server with apt" >&2
  sudo_if apt-get update -qq
  sudo_if env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openssh-client \
    openssh-server >/dev/null
fi
# The TLS test of `talaria serve` makes a self-signed certificate with openssl.
if ! command -v openssl >/dev/null 2>&1; then
  echo "run-all: installing openssl with apt" >&2
  sudo_if apt-get update -qq
  sudo_if env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openssl >/dev/null
fi
# The agent is built with the PostgreSQL store (a feature, off in the default build) and the
# named failpoints of the crash suite (no-ops unless a test's environment sets them; never in
# a release build), and the end-to-end suites run that build (TALARIA_BIN: the harness would
# otherwise build the default). The tests are built with the same features, so building them
# does not replace that binary with another.
features=talaria-server/postgres,talaria-server/failpoints
cargo build --workspace --bins --features "$features"
target_dir="${CARGO_TARGET_DIR:-$(pwd)/target}"
# Unit and integration tests, then the end-to-end suite (test target `e2e`, which the two
# patterns leave out: every other target's name starts with another letter, or with "e" and
# then not "2"); no doctests (no crate has a doc example, and rustdoc's pass over the 19
# library crates found none in half a minute). The same packages and features each time, so
# nothing is built twice.
TALARIA_BIN="$target_dir/debug/talaria" cargo test --workspace --features "$features" \
  --lib --bins --test '[!e]*' --test 'e[!2]*'
# Four end-to-end tests at a time on CI's two cores: they mostly wait (on the agent's
# processes, the mock's delays, held locks and timeouts), and at four the suite used a third
# of the two cores and took 279 s instead of about 600 s at two (docs/benchmarks.md).
TALARIA_BIN="$target_dir/debug/talaria" cargo test --workspace --features "$features" \
  --test e2e -- --test-threads 4
# The sandbox suites again without the namespaces layer (as on distributions that restrict
# unprivileged user namespaces): each test asserts what the remaining layers promise. The
# same packages and features as above, so the suite built there runs again as it is (by
# `-p talaria-e2e` alone the features would differ, and most of the tree be built again).
TALARIA_SANDBOX_NAMESPACES=off TALARIA_BIN="$target_dir/debug/talaria" \
  cargo test --workspace --features "$features" --test e2e -- --test-threads 4 sandbox doctor::
# The Node suites run as on a fresh machine: an empty HOME and no npm settings of the user's
# (no ~/.npmrc, no npm_config_* variables), so they need nothing but the package registries.
fresh_home="$(mktemp -d)"
trap 'rm -rf "$fresh_home"' EXIT
fresh() {
  env $(env | sed -n 's/^\(npm_config_[^=]*\)=.*/-u \1/ip') HOME="$fresh_home" "$@"
}
(cd clients/sdk-tests && fresh npm ci --no-audit --no-fund && fresh npm test \
  && fresh node lint-workflows.mjs)
# The release: built for this platform as the release workflow builds it (but for the
# optimiser: the `package-check` profile, as check.sh explains; the release workflow checks
# its own optimised files), packaged (archive, wheel, npm), installed from the built files on
# an empty HOME and driven with the official SDK; the registry entry checked by its
# documented rules and each route's auth methods.
fresh env CARGO_HOME="${CARGO_HOME:-$HOME/.cargo}" RUSTUP_HOME="${RUSTUP_HOME:-$HOME/.rustup}" \
  TALARIA_PACKAGE_PROFILE="${TALARIA_PACKAGE_PROFILE:-package-check}" \
  TALARIA_MOCK_BIN="$target_dir/debug/talaria-mock-llm" \
  TALARIA_BENCH_BIN="$target_dir/debug/talaria-bench" \
  bash clients/registry/check.sh
(cd clients/vscode && fresh npm ci --no-audit --no-fund && fresh npm run typecheck \
  && fresh npm test && fresh npm run test:e2e)
# The reference web client of `talaria serve`, in the Chromium the browser test above
# installed (it uses the SDK suite's mock LLM and helpers; its three-client test also runs
# talaria-chat, built above with the workspace's binaries, and the SDK suite's `ws`).
(cd clients/web && fresh npm ci --no-audit --no-fund && fresh npm test)
