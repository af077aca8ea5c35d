#!/usr/bin/env python3
"""Packages Talaria for one platform: the PyPI wheel for `uvx`, built by maturin (which
builds the server's binaries with it), then, from the built binaries, the release archive
(with the LICENSE, a short README and a SHA-256 file) and the npm packages for `npx` (the
launcher, `talaria-agent`, and the platform's package holding the binaries).

    python3 clients/registry/package.py --target x86_64-unknown-linux-gnu \
        --platform linux-x86_64 --glibc 2.28 --out dist

`talaria-chat` is built first (`cargo build -p talaria-chat` for the same target and
profile); maturin
(`bindings = "bin"`, `wheel/pyproject.toml`) builds `talaria` and `talaria-sandbox`, with zig
against the glibc floor on Linux. Otherwise only the standard library and, for the npm
packages, `npm pack`. The version is the workspace's (Cargo.toml); every artefact carries it.
"""

import argparse
import hashlib
import io
import json
import os
import shutil
import stat
import subprocess
import sys
import tarfile
import tempfile
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
BINARIES = ("talaria", "talaria-sandbox", "talaria-chat")

# Registry platform -> (npm os, npm cpu).
PLATFORMS = {
    "linux-x86_64": ("linux", "x64"),
    "linux-aarch64": ("linux", "arm64"),
    "darwin-x86_64": ("darwin", "x64"),
    "darwin-aarch64": ("darwin", "arm64"),
}

SHORT_README = """Talaria {version} for {platform}

Talaria is a headless AI agent server: editors and frontends start it and speak the Agent
Client Protocol (ACP) with it over stdio.

  ./talaria acp       serve ACP on stdin/stdout (what an editor runs)
  ./talaria setup     first-run set-up in a terminal: provider, model, key
  ./talaria doctor    check the configuration and the model
  ./talaria --help
  ./talaria-chat      chat with Talaria in the terminal (-p "…" for one answer)

Keep talaria-sandbox beside talaria: it is the OS sandbox every command runs in.
{floor}
Documentation: https://github.com/talaria-agent/talaria (README.md). License: Apache-2.0.
"""


# The wheel's `talaria-agent`: the name `uvx talaria-agent` runs, a script running the
# `talaria` binary installed beside it (installers copy a script whose first line is not
# `#!python` as it is).
AGENT_SCRIPT = """#!/bin/sh
# talaria-agent: runs talaria, installed beside this script by the talaria-agent wheel.
here=$(dirname "$(readlink -f "$0" 2>/dev/null || printf '%s' "$0")")
exec "$here/talaria" "$@"
"""

RELEASES = "https://github.com/talaria-agent/talaria/releases/download"


def workspace_version() -> str:
    with open(ROOT / "Cargo.toml", "rb") as f:
        return tomllib.load(f)["workspace"]["package"]["version"]


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def executable(info: tarfile.TarInfo) -> tarfile.TarInfo:
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    return info


def archive_folder(version: str, platform: str) -> str:
    return f"talaria-{version}-{platform}"


def archive(bins: dict, out: Path, version: str, platform: str, floor: str) -> Path:
    """talaria-<version>-<platform>.tar.gz and its .sha256."""
    name = f"talaria-{version}-{platform}.tar.gz"
    path = out / name
    readme = SHORT_README.format(version=version, platform=platform, floor=floor).encode()
    # Everything under one folder named after the archive, so that unpacking it in a busy
    # directory scatters nothing: talaria-<version>-<platform>/talaria, …
    top = archive_folder(version, platform)
    with tarfile.open(path, "w:gz", compresslevel=9) as tar:
        for binary, source in bins.items():
            info = tar.gettarinfo(source, arcname=f"{top}/{binary}")
            info.mode = 0o755
            with open(source, "rb") as f:
                tar.addfile(executable(info), f)
        for arcname, data in (("LICENSE", (ROOT / "LICENSE").read_bytes()), ("README.txt", readme)):
            info = tarfile.TarInfo(f"{top}/{arcname}")
            info.size = len(data)
            info.mode = 0o644
            tar.addfile(executable(info), io.BytesIO(data))
    (out / f"{name}.sha256").write_text(f"{sha256(path)}  {name}\n")
    return path


def wheel(target: str, bin_dir: Path, out: Path, platform: str, glibc: str, profile: str) -> Path:
    """The platform wheel, by maturin: `talaria` and `talaria-sandbox` (built now) as its
    scripts, with `talaria-agent` and the `talaria-chat` binary from its staged data."""
    project = HERE / "wheel"
    scripts = project / "data" / "scripts"
    shutil.rmtree(project / "data", ignore_errors=True)
    scripts.mkdir(parents=True)
    (scripts / "talaria-agent").write_text(AGENT_SCRIPT)
    (scripts / "talaria-agent").chmod(0o755)
    shutil.copy2(bin_dir / "talaria-chat", scripts / "talaria-chat")
    built_as = ["--release"] if profile == "release" else ["--profile", profile]
    command = ["maturin", "build", *built_as, "--target", target, "--out", str(out)]
    if platform.startswith("linux"):
        command += ["--zig", "--compatibility", f"manylinux_{glibc.replace('.', '_')}"]
    env = dict(os.environ, TALARIA_GLIBC_FLOOR=glibc)
    subprocess.run(command, cwd=project, check=True, env=env)
    version = workspace_version()
    made = sorted(out.glob(f"talaria_agent-{version}-*.whl"), key=lambda p: p.stat().st_mtime)
    if not made:
        raise SystemExit(f"package.py: maturin wrote no talaria_agent-{version} wheel to {out}")
    return made[-1]


def npm_pack(directory: Path, out: Path) -> Path:
    packed = subprocess.run(
        ["npm", "pack", "--json", "--pack-destination", str(out)],
        cwd=directory,
        check=True,
        capture_output=True,
        text=True,
    )
    return out / json.loads(packed.stdout)[0]["filename"]


def npm_packages(bins: dict, out: Path, version: str, platform: str) -> list:
    """The platform's package (the binaries) and the launcher."""
    npm_os, cpu = PLATFORMS[platform]
    with tempfile.TemporaryDirectory() as tmp:
        staged = Path(tmp) / "platform"
        (staged / "bin").mkdir(parents=True)
        for binary, source in bins.items():
            target = staged / "bin" / binary
            shutil.copy2(source, target)
            target.chmod(0o755)
        shutil.copy2(ROOT / "LICENSE", staged / "LICENSE")
        (staged / "package.json").write_text(
            json.dumps(
                {
                    "name": f"talaria-agent-{npm_os}-{cpu}",
                    "version": version,
                    "description": f"The Talaria binaries for {platform} (installed by talaria-agent).",
                    "license": "Apache-2.0",
                    "os": [npm_os],
                    "cpu": [cpu],
                    "files": ["bin/", "LICENSE"],
                },
                indent=2,
            )
            + "\n"
        )
        launcher = Path(tmp) / "launcher"
        shutil.copytree(HERE / "npm", launcher)
        shutil.copy2(ROOT / "LICENSE", launcher / "LICENSE")
        (launcher / "README.md").write_text(
            "# talaria-agent\n\nTalaria, a headless AI agent server speaking the Agent Client "
            "Protocol on stdio. `npx talaria-agent acp` serves ACP; `npx talaria-agent setup` "
            "sets it up in a terminal. See https://github.com/talaria-agent/talaria.\n"
        )
        return [npm_pack(staged, out), npm_pack(launcher, out)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", required=True, help="the Rust target triple")
    parser.add_argument("--target-dir", type=Path, default=Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target")))
    parser.add_argument("--platform", required=True, choices=sorted(PLATFORMS))
    parser.add_argument("--glibc", default="2.28", help="the oldest glibc the Linux build runs on")
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument(
        "--profile",
        default="release",
        help="the Cargo profile (what ships is `release`; CI's packaging check uses a cheaper one)",
    )
    parser.add_argument("--skip-npm", action="store_true")
    args = parser.parse_args()
    version = workspace_version()
    launcher = json.loads((HERE / "npm" / "package.json").read_text())
    if launcher["version"] != version:
        print(f"package.py: npm/package.json says {launcher['version']}, the workspace {version}", file=sys.stderr)
        return 2
    bin_dir = args.target_dir / args.target / args.profile
    args.out.mkdir(parents=True, exist_ok=True)
    if not (bin_dir / "talaria-chat").is_file():
        print(f"package.py: build talaria-chat for {args.target} first", file=sys.stderr)
        return 2
    built_wheel = wheel(args.target, bin_dir, args.out, args.platform, args.glibc, args.profile)
    bins = {b: bin_dir / b for b in BINARIES}
    missing = [str(p) for p in bins.values() if not p.is_file()]
    if missing:
        print(f"package.py: not built: {', '.join(missing)}", file=sys.stderr)
        return 2
    floor = (
        f"Runs on Linux with glibc {args.glibc} or newer.\n" if args.platform.startswith("linux") else ""
    )
    made = [
        built_wheel,
        archive(bins, args.out, version, args.platform, floor),
    ]
    if not args.skip_npm:
        made += npm_packages(bins, args.out, version, args.platform)
    for path in made:
        print(f"{path}  {path.stat().st_size / 1_000_000:.1f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
