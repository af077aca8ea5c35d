#!/usr/bin/env bash
# Records functions.txt: the functions the release agent runs to start, open a session,
# answer a turn and forward a 10,000-delta stream (talaria-bench --turn-only) over each of
# the three model APIs (chat completions, Anthropic Messages, Responses), each written
# with what varies between builds as `*` (patterns.rs's without_hashes). server/build.rs
# gathers them into a .text.hot section before the rest of the code (a linker script), so
# the code a session runs sits in contiguous pages instead of all over the binary
# (docs/benchmarks.md, peak RSS).
#
# Recorded from the release build as shipped, its symbols kept (TALARIA_KEEP_SYMBOLS, a link
# argument: the same code), never from a build of another profile: the profile is hashed
# into every crate, and another hash is another order of functions in the optimiser, so
# another set of them inlined. Two sources:
# - valgrind's callgrind: every function that runs under it, in a build linked without the
#   list (valgrind names code in `.text` only);
# - where perf is installed, the agent linked with the list, run natively under
#   `perf record -e page-faults`: functions whose code faulted in and are not listed
#   (valgrind has no Landlock, so the sandbox takes another path there) are added, until a
#   round adds none (at most TALARIA_RECORD_ROUNDS, 3).
#
# Another configuration (the release archives: zig and a glibc floor) has other hashes, so
# other functions inlined: the list is the union of what each runs. `record.sh` records this
# machine's build; `record.sh --target TRIPLE.GLIBC` records that build (cargo-zigbuild, as
# the release workflow builds it) and adds its functions to the list. The list as committed:
# `record.sh`, then `record.sh --target x86_64-unknown-linux-gnu.2.28`.
#
# Run it again when `cargo test -p talaria-server --test hot_code` says too much of the list
# is gone from the binary, or when the bench's peak RSS after a turn rises. Needs valgrind,
# nm and python3 (perf helps; cargo-zigbuild for --target); not part of CI. Each round
# relinks the release (minutes).
set -euo pipefail
cd "$(dirname "$0")/../.."
command -v valgrind >/dev/null || { echo "record.sh needs valgrind" >&2; exit 1; }
here=server/hot-code
list=$here/functions.txt
target=""
if [ "${1:-}" = "--target" ]; then target="${2:?--target TRIPLE.GLIBC}"; fi
work=$(mktemp -d)
mv "$list" "$work/functions.before" 2>/dev/null || true
trap 'mv "$work/functions.before" "$list" 2>/dev/null || true; rm -rf "$work"' EXIT

# The release build (symbols kept when $1 is "symbols"), copied to $work/talaria.
release() {
  local keep=()
  [ "${1:-}" = symbols ] && keep=(env TALARIA_KEEP_SYMBOLS=1)
  if [ -n "$target" ]; then
    "${keep[@]}" env TALARIA_GLIBC_FLOOR="${target#*.}" \
      cargo zigbuild --release -p talaria-server --bin talaria --target "$target"
    cp "target/${target%%.*}/release/talaria" "$work/talaria"
  else
    "${keep[@]}" cargo build --release -p talaria-server --bin talaria
    cp target/release/talaria "$work/talaria"
  fi
}
# Runs the bench's turn figures with the agent started by `$@` (a tool and its options),
# once for each of the model APIs the providers speak (the mock answers all three), so the
# list holds each one's turn: OpenAI chat completions, Anthropic Messages, OpenAI Responses.
bench_under() {
  printf '#!/bin/sh\nexec %s "%s" "$@"\n' "$*" "$work/talaria" >"$work/agent.sh"
  chmod +x "$work/agent.sh"
  for api in chat messages responses; do
    ./target/release/talaria-bench --iterations 1 --turn-only --api "$api" \
      --agent "$work/agent.sh" >&2
  done
}

cargo build --release -p talaria-bench
release symbols
bench_under valgrind --tool=callgrind "--callgrind-out-file=$work/callgrind.%p" \
  --compress-strings=no --compress-pos=no --demangle=no
python3 "$here/names.py" callgrind "$work"
# Another configuration adds to the list (the union of what each build runs).
if [ -n "$target" ] && [ -f "$work/functions.before" ]; then
  cat "$work/functions.before" >>"$work/ran.txt"
fi
python3 "$here/names.py" write "$work" "$list"
for round in $(seq "${TALARIA_RECORD_ROUNDS:-3}"); do
  command -v perf >/dev/null || { echo "no perf: the callgrind list alone" >&2; break; }
  release symbols
  rm -f "$work"/perf.*.data
  # One file per agent process, named by its shell's pid (`$$` in agent.sh).
  bench_under perf record -q -e page-faults -c 1 -d -o "$work/perf.\$\$.data"
  python3 "$here/names.py" faults "$work" || break
  python3 "$here/names.py" write "$work" "$list"
  echo "round $round added functions" >&2
done
rm -f "$work/functions.before"
# The build as shipped, linked with the new list.
release
