#!/usr/bin/env python3
"""Writes the registry entry a release submits: agent.json with each `binary` platform's
sha256 taken from the release's `.sha256` files.

    python3 clients/registry/release_entry.py --dist dist --out registry/talaria/agent.json

Every platform of the entry's `binary` distribution must have its archive's `.sha256` in
DIST, and each archive URL must end with that archive's name; `--only-built` keeps just the
platforms built here (the CI check on one machine). Only the standard library.
"""

import argparse
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def digest_of(dist: Path, archive_name: str):
    sums = dist / f"{archive_name}.sha256"
    if not sums.is_file():
        return None
    digest, _, named = sums.read_text().strip().partition("  ")
    if named != archive_name or len(digest) != 64:
        raise SystemExit(f"release-entry: {sums} does not hold the digest of {archive_name}")
    return digest


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dist", required=True, type=Path)
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--only-built", action="store_true")
    args = parser.parse_args()
    entry = json.loads((HERE / "agent.json").read_text())
    binary = entry["distribution"].get("binary", {})
    missing = []
    for platform in list(binary):
        build = binary[platform]
        archive_name = build["archive"].rsplit("/", 1)[-1]
        digest = digest_of(args.dist, archive_name)
        if digest is None:
            if args.only_built:
                del binary[platform]
            else:
                missing.append(platform)
            continue
        build["sha256"] = digest
    if missing:
        print(f"release-entry: no archive for {', '.join(missing)} in {args.dist}", file=sys.stderr)
        return 1
    if not binary:
        print(f"release-entry: none of the entry's archives is in {args.dist}", file=sys.stderr)
        return 1
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(entry, indent=2) + "\n")
    print(f"release-entry: {args.out} ({', '.join(sorted(binary))})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
