#!/usr/bin/env bash
# Records functions.txt: the functions the release agent runs to start, open a session,
# answer a turn and forward a 10,000-delta stream (talaria-bench --turn-only), found with
# valgrind's callgrind. server/build.rs gathers them into a .text.hot section before the
# rest of the code (a linker script), so the code a session runs sits in 1.8 MB of
# contiguous pages instead of all over the binary.
#
# Run it again when `talaria-bench` reports that much of the list is no longer in the binary
# (code and dependencies changed), or that the peak RSS after a turn rose. Needs valgrind and
# python3; not part of CI.
set -euo pipefail
cd "$(dirname "$0")/../.."
command -v valgrind >/dev/null || { echo "record.sh needs valgrind" >&2; exit 1; }
# Each package built alone: built together, Cargo unifies their dependencies' features, and
# the functions' names (their hashes) differ from those of the binary users build.
cargo build --release -p talaria-server
cargo build --release -p talaria-bench
agent="$PWD/target/release/talaria"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cat >"$work/agent.sh" <<WRAPPER
#!/bin/sh
exec valgrind --tool=callgrind --callgrind-out-file=$work/callgrind.%p \
  --compress-strings=no --compress-pos=no --demangle=no "$agent" "\$@"
WRAPPER
chmod +x "$work/agent.sh"
./target/release/talaria-bench --iterations 1 --turn-only --agent "$work/agent.sh" >&2
nm "$agent" >"$work/symbols.txt"
python3 - "$work" "$agent" server/hot-code/functions.txt <<'PY'
import glob, re, sys
work, agent, out = sys.argv[1:]
defined = {p[2] for p in (l.split() for l in open(f"{work}/symbols.txt")) if len(p) == 3 and p[1] in "tTwW"}
ran = set()
for path in glob.glob(f"{work}/callgrind.*"):
    obj = None
    for line in open(path, errors="replace"):
        if line.startswith("ob="):
            obj = line[3:].strip()
        # Valgrind names no object for code in sections it does not read symbols
        # for (.text.hot, once the binary has one): "???".
        elif line.startswith("fn=") and obj in (agent, "???"):
            ran.add(re.sub(r"'\d+$", "", line[3:].strip()))
hot = sorted(ran & defined)
open(out, "w").write("\n".join(hot) + "\n")
print(f"{len(hot)} functions ran, written to {out}", file=sys.stderr)
PY
# Relink with the new order (the order changes no function's name).
cargo build --release -p talaria-server
