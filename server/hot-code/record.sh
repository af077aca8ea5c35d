#!/usr/bin/env bash
# Records functions.txt: the functions the release agent runs to start, open a session,
# answer a turn and forward a 10,000-delta stream (talaria-bench --turn-only), each written
# with what varies between builds as `*` (patterns.rs's without_hashes). server/build.rs
# gathers them into a .text.hot section before the rest of the code (a linker script), so
# the code a session runs sits in contiguous pages instead of all over the binary
# (docs/benchmarks.md, peak RSS).
#
# The functions are read off the release build as shipped, not one built with symbols: the
# profile is part of every crate's hash, and another hash is another order of functions in
# the optimiser, so another set of them inlined. The linker's map (TALARIA_LINK_MAP) names
# the function at each address; two sources give the addresses:
# - valgrind's callgrind: every instruction that runs under it, in a build linked without
#   the list (valgrind places code in `.text` only);
# - where perf is installed, the agent linked with the list, run natively under
#   `perf record -e page-faults`: code that faulted in outside `.text.hot` (valgrind has no
#   Landlock, so the sandbox takes another path there) is added, until a round adds none
#   (at most three).
#
# Run it again when `cargo test -p talaria-server --test hot_code` says too much of the list
# is gone from the binary, or when the bench's peak RSS after a turn rises. Needs valgrind
# and python3 (perf helps); not part of CI. Each round relinks the release (minutes).
set -euo pipefail
cd "$(dirname "$0")/../.."
command -v valgrind >/dev/null || { echo "record.sh needs valgrind" >&2; exit 1; }
here=server/hot-code
list=$here/functions.txt
work=$(mktemp -d)
mv "$list" "$work/functions.before" 2>/dev/null || true
trap 'mv "$work/functions.before" "$list" 2>/dev/null || true; rm -rf "$work"' EXIT

release_with_map() {
  TALARIA_LINK_MAP="$work/map" cargo build --release -p talaria-server --bin talaria
  cp target/release/talaria "$work/talaria"
}
# Runs the bench's turn figures with the agent started by `$@` (a tool and its options).
bench_under() {
  printf '#!/bin/sh\nexec %s "%s" "$@"\n' "$*" "$work/talaria" >"$work/agent.sh"
  chmod +x "$work/agent.sh"
  ./target/release/talaria-bench --iterations 1 --turn-only --agent "$work/agent.sh" >&2
}

cargo build --release -p talaria-bench
release_with_map
bench_under valgrind --tool=callgrind "--callgrind-out-file=$work/callgrind.%p" \
  --dump-instr=yes --compress-strings=no --compress-pos=no
python3 "$here/names.py" callgrind "$work"
python3 "$here/names.py" write "$work" "$list"
for round in 1 2 3; do
  command -v perf >/dev/null || { echo "no perf: the callgrind list alone" >&2; break; }
  release_with_map
  rm -f "$work"/perf.*.data
  # One file per agent process, named by its shell's pid (`$$` in agent.sh).
  bench_under perf record -q -e page-faults -c 1 -d -o "$work/perf.\$\$.data"
  python3 "$here/names.py" faults "$work" || break
  python3 "$here/names.py" write "$work" "$list"
  echo "round $round added functions" >&2
done
rm -f "$work/functions.before"
# The shipped build, linked with the new list.
cargo build --release -p talaria-server --bin talaria
