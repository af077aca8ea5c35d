#!/usr/bin/env python3
"""Packages built Talaria binaries for one platform: the release archive (with the LICENSE,
a short README and a SHA-256 file), the PyPI wheel for `uvx` and the npm packages for `npx`
(the launcher, `talaria-agent`, and the platform's package holding the binaries).

    python3 clients/registry/package.py --bin-dir target/x86_64-unknown-linux-gnu/release \
        --platform linux-x86_64 --glibc 2.28 --out dist

Only the standard library and, for the npm packages, `npm pack`. The version is the
workspace's (Cargo.toml); every artefact carries it.
"""

import argparse
import base64
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
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
BINARIES = ("talaria", "talaria-sandbox", "talaria-chat")

# Registry platform -> (npm os, npm cpu, wheel platform tag without the glibc part).
PLATFORMS = {
    "linux-x86_64": ("linux", "x64", "x86_64"),
    "linux-aarch64": ("linux", "arm64", "aarch64"),
    "darwin-x86_64": ("darwin", "x64", "macosx_11_0_x86_64"),
    "darwin-aarch64": ("darwin", "arm64", "macosx_11_0_arm64"),
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


# The wheel's `talaria`: the agent is installed once, as `talaria-agent` (the name `uvx`
# runs); this runs it under the name users type. Installers copy a script whose first line
# is not `#!python` as it is.
TALARIA_SCRIPT = """#!/bin/sh
# talaria: runs talaria-agent, installed beside this script by the talaria-agent wheel.
here=$(dirname "$(readlink -f "$0" 2>/dev/null || printf '%s' "$0")")
exec "$here/talaria-agent" "$@"
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


def record_line(arcname: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{arcname},sha256={digest},{len(data)}"


def wheel(bins: dict, out: Path, version: str, platform: str, glibc: str) -> Path:
    """A platform wheel whose scripts are the binaries: `uvx talaria-agent acp`."""
    _, _, arch = PLATFORMS[platform]
    if platform.startswith("linux"):
        major, minor = glibc.split(".")
        tag = f"manylinux_{major}_{minor}_{arch}"
    else:
        tag = arch
    dist = "talaria_agent"
    name = f"{dist}-{version}-py3-none-{tag}.whl"
    info = f"{dist}-{version}.dist-info"
    data = f"{dist}-{version}.data/scripts"
    readme = (ROOT / "README.md").read_text()
    metadata = (
        "Metadata-Version: 2.4\n"
        "Name: talaria-agent\n"
        f"Version: {version}\n"
        "Summary: Talaria, a headless AI agent server speaking the Agent Client Protocol on stdio\n"
        "Home-page: https://github.com/talaria-agent/talaria\n"
        "License-Expression: Apache-2.0\n"
        "License-File: LICENSE\n"
        "Requires-Python: >=3.8\n"
        "Description-Content-Type: text/markdown\n\n" + readme
    ).encode()
    files = [
        # The agent's binary under the package's name, so that `uvx talaria-agent` runs it.
        (f"{data}/talaria-agent", Path(bins["talaria"]).read_bytes(), 0o755),
        (f"{data}/talaria-sandbox", Path(bins["talaria-sandbox"]).read_bytes(), 0o755),
        (f"{data}/talaria-chat", Path(bins["talaria-chat"]).read_bytes(), 0o755),
        # `talaria` on the PATH too, as every other route has it (one binary, not two).
        (f"{data}/talaria", TALARIA_SCRIPT.encode(), 0o755),
        (f"{info}/METADATA", metadata, 0o644),
        (
            f"{info}/WHEEL",
            f"Wheel-Version: 1.0\nGenerator: talaria package.py\nRoot-Is-Purelib: false\nTag: py3-none-{tag}\n".encode(),
            0o644,
        ),
        (f"{info}/licenses/LICENSE", (ROOT / "LICENSE").read_bytes(), 0o644),
    ]
    record = [record_line(arcname, content) for arcname, content, _ in files]
    record.append(f"{info}/RECORD,,")
    files.append((f"{info}/RECORD", ("\n".join(record) + "\n").encode(), 0o644))
    path = out / name
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=9) as zf:
        for arcname, content, mode in files:
            entry = zipfile.ZipInfo(arcname, date_time=(2026, 1, 1, 0, 0, 0))
            entry.external_attr = (stat.S_IFREG | mode) << 16
            entry.compress_type = zipfile.ZIP_DEFLATED
            zf.writestr(entry, content)
    return path


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
    npm_os, cpu, _ = PLATFORMS[platform]
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
    parser.add_argument("--bin-dir", required=True, type=Path)
    parser.add_argument("--platform", required=True, choices=sorted(PLATFORMS))
    parser.add_argument("--glibc", default="2.28", help="the oldest glibc the Linux build runs on")
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--skip-npm", action="store_true")
    args = parser.parse_args()
    version = workspace_version()
    launcher = json.loads((HERE / "npm" / "package.json").read_text())
    if launcher["version"] != version:
        print(f"package.py: npm/package.json says {launcher['version']}, the workspace {version}", file=sys.stderr)
        return 2
    bins = {b: args.bin_dir / b for b in BINARIES}
    missing = [str(p) for p in bins.values() if not p.is_file()]
    if missing:
        print(f"package.py: not built: {', '.join(missing)}", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    floor = (
        f"Runs on Linux with glibc {args.glibc} or newer.\n" if args.platform.startswith("linux") else ""
    )
    made = [
        archive(bins, args.out, version, args.platform, floor),
        wheel(bins, args.out, version, args.platform, args.glibc),
    ]
    if not args.skip_npm:
        made += npm_packages(bins, args.out, version, args.platform)
    for path in made:
        print(f"{path}  {path.stat().st_size / 1_000_000:.1f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
