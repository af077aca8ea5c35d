#!/usr/bin/env bash
# Builds Talaria for this machine's platform the way a release does, packages it (release
# archive, PyPI wheel by maturin, npm packages), installs each on an empty HOME from the built
# files and drives it with the official ACP TypeScript SDK through a prompt with a tool call
# against the mock model; measures the archive's memory with the bench; then checks the
# registry entry by the registry's documented rules and runs the auth check against each
# installed route (entry_check.py).
# Prints sizes and timings. Everything comes from the package registries (crates.io, PyPI,
# npm); no network beyond them.
#
#   bash clients/registry/check.sh            (the release profile, what ships)
#   TALARIA_PACKAGE_PROFILE=package-check bash clients/registry/check.sh
#                                             (tests/run-all.sh, in CI: see below)
#   TALARIA_CHECK_DIST=dist bash clients/registry/check.sh
#                                             (the release workflow: the files it publishes)
#
# What is checked does not depend on the profile: the same sources, features, target, glibc
# floor, packaging and routes; only how much the optimiser does. CI builds `package-check`
# (the release profile's settings without its optimisation, Cargo.toml), because the
# optimised build was most of this check's time (docs/benchmarks.md, "CI time"); the
# release workflow checks the very files it uploads, built once with the release profile,
# so what ships is still checked as shipped.
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
target_dir="${CARGO_TARGET_DIR:-$root/target}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
say() { printf 'registry-check: %s\n' "$*" >&2; }
now() { date +%s.%N; }
since() { python3 -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.1f}')" "$1" "$(now)"; }

case "$(uname -s)-$(uname -m)" in
  Linux-x86_64) platform=linux-x86_64; rust_target=x86_64-unknown-linux-gnu ;;
  Linux-aarch64) platform=linux-aarch64; rust_target=aarch64-unknown-linux-gnu ;;
  *) say "this check builds Linux archives; $(uname -sm) is built by the release workflow"; exit 0 ;;
esac
glibc_floor=2.28
version="$(python3 -c 'import tomllib; print(tomllib.load(open("Cargo.toml", "rb"))["workspace"]["package"]["version"])')"

# Tools, pinned, from PyPI: zig through cargo-zigbuild (its maintainer's prebuilt wheel, the
# same 0.24.1 as on crates.io, so CI no longer compiles it each run) and maturin (which builds
# the server and its wheel) for a glibc floor of 2.28; uv to run the wheel.
tools="$target_dir/registry-tools"
profile="${TALARIA_PACKAGE_PROFILE:-release}"
prebuilt="${TALARIA_CHECK_DIST:-}"
if [ ! -x "$tools/venv/bin/cargo-zigbuild" ]; then
  say "installing ziglang, cargo-zigbuild, maturin and uv from PyPI"
  python3 -m venv "$tools/venv"
  "$tools/venv/bin/pip" install --quiet ziglang==0.13.0 cargo-zigbuild==0.24.1 \
    maturin==1.16.0 uv==0.13.9
fi
export PATH="$tools/venv/bin:$PATH"

if [ -n "$prebuilt" ]; then
  dist="$(cd "$prebuilt" && pwd)"
  say "checking the packages in $dist (built by the release workflow)"
else
  say "building talaria $version for $platform (glibc $glibc_floor and newer, profile $profile)"
  started=$(now)
  # Each package on its own, as `cargo install` builds it (no feature unification): the
  # chat here, the server by maturin as package.py builds the wheel.
  TALARIA_GLIBC_FLOOR=$glibc_floor cargo zigbuild --quiet --profile "$profile" -p talaria-chat \
    --target "$rust_target.$glibc_floor"
  dist="$work/dist"
  python3 clients/registry/package.py --target "$rust_target" --profile "$profile" \
    --platform "$platform" --glibc "$glibc_floor" --out "$dist"
  say "built and packaged in $(since "$started") s"
fi
# The mock model the SDK checks talk to, and below the bench: the caller's builds when it
# names them (tests/run-all.sh built the whole workspace; either built alone here would
# build its crates again, with other features), else built here.
if [ -z "${TALARIA_MOCK_BIN:-}" ]; then
  cargo build --quiet -p talaria-harness --bin talaria-mock-llm
  TALARIA_MOCK_BIN="$target_dir/debug/talaria-mock-llm"
fi
export TALARIA_MOCK_BIN

archive="$dist/talaria-$version-$platform.tar.gz"
(cd "$dist" && sha256sum -c "talaria-$version-$platform.tar.gz.sha256" >/dev/null)
(cd clients/sdk-tests && npm ci --no-audit --no-fund --silent)
sdk() { node "$root/clients/sdk-tests/installed.mjs" "$@"; }
report="$work/report.txt"

# The mock answers one `talaria-chat -p` per route: each route's chat must start the
# route's own agent.
chat_script="$work/chat-script.json"
python3 -c 'import json, sys; json.dump([{"type": "text", "chunks": ["answered through ", "talaria-chat"]}] * 3, open(sys.argv[1], "w"))' "$chat_script"
coproc MOCK { "$TALARIA_MOCK_BIN" "$chat_script"; }
read -r ready <&"${MOCK[0]}"
mock_url=$(python3 -c 'import json, sys; print(json.loads(sys.argv[1])["base_url"])' "$ready")
# One answer through a route's talaria-chat, from an empty HOME and a PATH with only the
# route's own folder (if any) before the system's.
chat_through() {
  local route=$1 path_front=$2
  shift 2
  local home ws answer
  home=$(mktemp -d "$work/chat-home.XXXX") ws=$(mktemp -d "$work/chat-ws.XXXX")
  answer=$(cd "$ws" && env -i PATH="${path_front:+$path_front:}/usr/bin:/bin" HOME="$home" \
    OPENAI_BASE_URL="$mock_url" OPENAI_API_KEY=mock-key TALARIA_MODEL=mock-model \
    UV_PYTHON_DOWNLOADS=never UV_NO_INDEX=1 UV_FIND_LINKS="$dist" UV_CACHE_DIR="$work/uv-cache" \
    "$@" -p "say something" --approve reject </dev/null)
  if [ "$answer" != "answered through talaria-chat" ]; then
    say "$route: talaria-chat answered: $answer"
    exit 1
  fi
  echo "$route: talaria-chat answered through the route's talaria" >>"$report"
}

# 1. The archive: unpacked into an empty directory, into one folder named after itself.
started=$(now)
mkdir "$work/archive"
tar -xzf "$archive" -C "$work/archive"
install_s=$(since "$started")
unpacked="$work/archive/talaria-$version-$platform"
if [ "$(ls "$work/archive")" != "talaria-$version-$platform" ]; then
  say "the archive unpacks to $(ls "$work/archive" | tr '\n' ' '), not one folder named after it"
  exit 1
fi
# The crash suite's failpoints are never in what ships: the code that acts on them (and reads
# TALARIA_CRASH_AT) is not in the binary. Without the feature every point compiles to
# nothing; an unoptimised build still holds the points' names as unused text.
if grep -q -a "TALARIA_CRASH_AT" "$unpacked/talaria"; then
  say "the released talaria was built with failpoints (talaria-server/failpoints)"
  exit 1
fi
sdk archive "$unpacked/talaria" acp | tee -a "$report"
echo "archive: $(du -k "$archive" | cut -f1) KB, unpacked in $install_s s" >>"$report"
chat_through archive "" "$unpacked/talaria-chat"
# The archive's own memory as the bench measures it (private memory, PSS, peak RSS): the
# packaged build, not only a source build, is held to the private-memory target (in the
# release workflow's run, the very archive that ships).
bench="${TALARIA_BENCH_BIN:-}"
if [ -z "$bench" ]; then
  cargo build --quiet -p talaria-bench
  bench="$target_dir/debug/talaria-bench"
fi
"$bench" --agent "$unpacked/talaria" --turn-only --iterations 3 \
  | grep -E "peak RSS|private memory" | sed "s/^ */archive ($profile), bench: /" >>"$report"

# 2. The wheel, run by uv from the built file (no index, no Python download).
export UV_PYTHON_DOWNLOADS=never UV_NO_INDEX=1 UV_FIND_LINKS="$dist" UV_CACHE_DIR="$work/uv-cache"
wheel=$(ls "$dist"/talaria_agent-*.whl)
started=$(now)
uv tool run --from "$wheel" talaria-agent --version >/dev/null
install_s=$(since "$started")
sdk uvx uv tool run --from "$wheel" talaria-agent acp | tee -a "$report"
echo "wheel: $(du -k "$wheel" | cut -f1) KB, uv tool run installs it in $install_s s" >>"$report"
# Installed as a tool, the wheel puts talaria, talaria-agent and talaria-chat on the PATH.
UV_TOOL_DIR="$work/uv-tools" UV_TOOL_BIN_DIR="$work/uv-bin" uv tool install --quiet "$wheel"
for command in talaria talaria-agent talaria-chat; do
  [ -x "$work/uv-bin/$command" ] || { say "the wheel installs no $command"; exit 1; }
done
"$work/uv-bin/talaria" --version | grep -q "$version" || { say "the wheel's talaria is not $version"; exit 1; }
chat_through wheel "$work/uv-bin" talaria-chat

# 3. The npm packages, installed from the packed files into an empty prefix with no
#    registry at all (an unroutable one, offline: the other platforms' optional packages
#    are skipped, never waited for), run by npx.
started=$(now)
mkdir "$work/npm"
(cd "$work/npm" && timeout 60 npm install --silent --no-audit --no-fund --offline \
  --registry http://127.0.0.1:9/ --cache "$work/npm-cache" --prefix . \
  "$dist"/talaria-agent-linux-*.tgz "$dist"/talaria-agent-"$version".tgz)
install_s=$(since "$started")
(cd "$work/npm" && sdk npx npx --prefix "$work/npm" talaria-agent acp) | tee -a "$report"
echo "npm: $(du -kc "$dist"/talaria-agent-*.tgz | tail -1 | cut -f1) KB, installed offline in $install_s s" >>"$report"
for command in talaria talaria-agent talaria-chat; do
  [ -x "$work/npm/node_modules/.bin/$command" ] || { say "npm installs no $command"; exit 1; }
done
chat_through npm "$work/npm/node_modules/.bin:$(dirname "$(command -v node)")" talaria-chat
exec {MOCK[1]}>&-
wait "$MOCK_PID" || true

# 4. The registry entry, checked by the registry's documented rules (entry_check.py, our own
#    code) in a folder named after its id, and the auth check against each installed route,
#    started as the registry's clients start it: an empty HOME, an allow-listed environment.
#    The entry as a release writes it (release_entry.py: each archive's sha256), here with
#    this platform's build only; its binary build installed as a client installs it.
entry="$work/registry/talaria"
python3 clients/registry/release_entry.py --dist "$dist" --out "$entry/agent.json" --only-built
cp clients/registry/icon.svg "$entry/"
python3 clients/registry/entry_check.py entry "$entry" | tee -a "$report"
python3 clients/registry/entry_check.py launch "$entry" "$platform" "$archive" | tee -a "$report"
python3 clients/registry/entry_check.py auth -- npx --prefix "$work/npm" talaria-agent acp \
  | tee -a "$report"
python3 clients/registry/entry_check.py auth -- uv tool run --from "$wheel" talaria-agent acp \
  | tee -a "$report"
cat "$report"
