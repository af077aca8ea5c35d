#!/usr/bin/env bash
# Runs cargo-mutants on the durable crates, each against the tests that cover it (see
# .cargo/mutants.toml). Usage: tests/mutants.sh [record|store|journal]... [--in-diff FILE]
# [other cargo-mutants options]. Results land in mutants.out.CRATE/. The store's PostgreSQL
# code needs its own run: cargo mutants -p talaria-store --features postgres-test
# -f 'server/crates/store/src/postgres/*.rs' -- --test postgres
set -euo pipefail
cd "$(dirname "$0")/.."
crates=()
while [ $# -gt 0 ] && [[ "$1" != -* ]]; do crates+=("$1"); shift; done
[ ${#crates[@]} -gt 0 ] || crates=(record store journal)
for crate in "${crates[@]}"; do
  case "$crate" in
    record) args=(-p talaria-record) ;;
    store) args=(-p talaria-store -- --lib) ;;
    journal)
      # The whole journal module, unless files of it are named (`-f FILE`).
      files=(-f 'server/crates/engine/src/journal/*.rs')
      [[ " $* " == *" -f "* ]] && files=()
      args=(-p talaria-engine "${files[@]}" -- --lib journal::)
      ;;
    *) echo "unknown crate $crate (record, store, journal)" >&2; exit 2 ;;
  esac
  # Options before `--` are cargo-mutants'; after it, cargo test's.
  if [[ " ${args[*]} " == *" -- "* ]]; then
    split=0
    for i in "${!args[@]}"; do [ "${args[$i]}" = "--" ] && split=$i; done
    cargo mutants "${args[@]:0:$split}" "$@" "${args[@]:$split}" || true
  else
    cargo mutants "${args[@]}" "$@" || true
  fi
  rm -rf "mutants.out.$crate"
  [ -d mutants.out ] && mv mutants.out "mutants.out.$crate"
done
