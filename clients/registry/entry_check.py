#!/usr/bin/env python3
"""Checks Talaria's ACP registry entry by the registry's documented rules, with code of
this project's own:

  entry_check.py entry DIR            the entry in DIR (agent.json, icon.svg) and its version
  entry_check.py auth -- CMD [ARGS]   starts the installed agent as the registry's clients do
                                      and checks what it offers for authentication
  entry_check.py launch DIR PLATFORM ARCHIVE
                                      installs the entry's binary build from ARCHIVE as a
                                      client does (digest checked, unpacked) and auth-checks it

The entry: the fields an entry must have and their forms (an id of lower-case letters,
digits and dashes starting with a letter, the folder named after it; a dotted version; a
name, a description, an http(s) repository), only the distribution kinds the registry knows,
each pinned to the entry's version (no `latest`), an icon that is a square 16-unit SVG drawn
in `currentColor` only. The auth check: the agent started on an empty HOME with only an
allow-listed environment answers `initialize` with at least one auth method of type `agent`
or `terminal`, writes nothing but JSON-RPC messages to stdout, and exits when its input ends.
Prints what it found; exits 1 on the first set of problems.
"""

import json
import os
import re
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
REQUIRED = ("id", "name", "version", "description", "distribution")
KNOWN_FIELDS = set(REQUIRED) | {"repository", "authors", "license", "icon", "website"}
KNOWN_DISTRIBUTIONS = {"binary", "npx", "uvx"}
ICON_SIZE = 16
# What the registry's clients pass an agent they start; the rest of the environment is not.
PASSED_ENV = ("PATH", "HOME", "LANG", "TERM", "TMPDIR")


def fail(problems):
    for problem in problems:
        print(f"entry-check: {problem}", file=sys.stderr)
    sys.exit(1)


def workspace_version():
    with open(ROOT / "Cargo.toml", "rb") as manifest:
        return tomllib.load(manifest)["workspace"]["package"]["version"]


def pinned_problems(kind, spec, version):
    """Problems of one package spec: it must name exactly the entry's version."""
    if "latest" in spec.lower():
        return [f"the {kind} package {spec!r} is not pinned (latest)"]
    if kind == "npx":
        name, _, pinned = spec.rpartition("@")
        if not name or name.startswith("@") and "/" not in name:
            return [f"the npx package {spec!r} names no version (name@{version})"]
    else:
        found = re.search(r"(==|@)([0-9][0-9A-Za-z.+-]*)$", spec)
        pinned = found.group(2) if found else ""
    if pinned != version:
        return [f"the {kind} package {spec!r} is not at the entry's version {version}"]
    return []


def binary_problems(binary, version):
    problems = []
    if not isinstance(binary, dict) or not binary:
        return ["the binary distribution names no platform"]
    for platform, build in binary.items():
        if not re.fullmatch(r"(darwin|linux|windows)-(aarch64|x86_64)", platform):
            problems.append(f"binary platform {platform!r} is not os-arch")
            continue
        url = build.get("archive", "") if isinstance(build, dict) else ""
        if not url.startswith("https://"):
            problems.append(f"binary {platform}: no https archive URL")
        if "/latest/" in url or version not in url:
            problems.append(f"binary {platform}: the URL does not carry version {version}")
        if not isinstance(build, dict) or not build.get("cmd"):
            problems.append(f"binary {platform}: no cmd")
            continue
        if not re.search(r"\.(zip|tar\.gz|tgz|tar\.bz2|tbz2)$", url):
            problems.append(f"binary {platform}: the archive is not .zip, .tar.gz, .tgz or .tar.bz2")
        if "sha256" in build and not re.fullmatch(r"[0-9a-f]{64}", str(build["sha256"])):
            problems.append(f"binary {platform}: sha256 is not 64 hex digits")
        if not build["cmd"].startswith("./") or ".." in build["cmd"].split("/"):
            problems.append(f"binary {platform}: cmd {build['cmd']!r} is not a path inside the archive")
    return problems


def distribution_problems(distribution, version):
    if not isinstance(distribution, dict) or not distribution:
        return ["distribution is empty"]
    problems = [
        f"unknown distribution kind {kind!r}"
        for kind in distribution
        if kind not in KNOWN_DISTRIBUTIONS
    ]
    for kind in ("npx", "uvx"):
        if kind in distribution:
            spec = distribution[kind].get("package", "") if isinstance(distribution[kind], dict) else ""
            problems += pinned_problems(kind, spec, version)
    if "binary" in distribution:
        problems += binary_problems(distribution["binary"], version)
    return problems


def icon_problems(icon: Path):
    if not icon.is_file():
        return [f"no icon at {icon}"]
    svg = icon.read_text()
    sizes = [re.search(rf'<svg[^>]*\s{side}="(\d+(?:\.\d+)?)', svg) for side in ("width", "height")]
    if all(sizes):
        width, height = (float(size.group(1)) for size in sizes)
    else:
        box = re.search(r'viewBox="\s*[-\d.]+\s+[-\d.]+\s+([\d.]+)\s+([\d.]+)', svg)
        if not box:
            return ["the icon has neither width and height nor a viewBox"]
        width, height = float(box.group(1)), float(box.group(2))
    problems = []
    if (width, height) != (ICON_SIZE, ICON_SIZE):
        problems.append(f"the icon is {width:g}x{height:g}, not {ICON_SIZE}x{ICON_SIZE}")
    for attribute in ("fill", "stroke"):
        for value in re.findall(rf'\s{attribute}="([^"]*)"', svg):
            if value.lower() not in ("currentcolor", "none"):
                problems.append(f"the icon's {attribute}={value!r} is a fixed colour")
    if "currentcolor" not in svg.lower():
        problems.append("the icon never uses currentColor")
    return problems


def check_entry(folder: Path):
    entry = json.loads((folder / "agent.json").read_text())
    problems = [f"no {field}" for field in REQUIRED if not entry.get(field)]
    problems += [f"unknown field {field!r}" for field in entry if field not in KNOWN_FIELDS]
    if problems:
        fail(problems)
    version = entry["version"]
    if not re.fullmatch(r"[a-z][a-z0-9-]*", entry["id"]):
        problems.append(f"id {entry['id']!r} is not lower-case letters, digits and dashes")
    if folder.name != entry["id"]:
        problems.append(f"the entry's folder {folder.name!r} is not named after its id")
    if not re.match(r"[0-9]+\.[0-9]+\.[0-9]+", version):
        problems.append(f"version {version!r} is not major.minor.patch")
    if version != workspace_version():
        problems.append(f"version {version} is not the workspace's {workspace_version()}")
    if "repository" in entry and not re.match(r"https?://\S+$", entry["repository"]):
        problems.append("repository is not an http(s) URL")
    if not isinstance(entry.get("authors", []), list):
        problems.append("authors is not a list")
    problems += distribution_problems(entry["distribution"], version)
    problems += icon_problems(folder / "icon.svg")
    if problems:
        fail(problems)
    kinds = ", ".join(sorted(entry["distribution"]))
    print(f"entry-check: {entry['id']} {version} is a valid entry ({kinds})")


def check_auth(command):
    home = tempfile.mkdtemp(prefix="entry-check-home-")
    env = {name: os.environ[name] for name in PASSED_ENV if name in os.environ}
    env["HOME"] = home
    # Offline, the wheel is found among the built files: uv's own settings pass through.
    env.update({k: v for k, v in os.environ.items() if k.startswith("UV_")})
    initialize = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": 1,
            "clientInfo": {"name": "talaria entry check", "version": "1"},
            "clientCapabilities": {"auth": {"terminal": True}, "_meta": {"terminal-auth": True}},
        },
    }
    try:
        run = subprocess.run(
            command,
            input=json.dumps(initialize) + "\n",
            capture_output=True,
            text=True,
            env=env,
            timeout=180,
        )
    except subprocess.TimeoutExpired:
        fail([f"{command[0]} did not answer and exit within 180 s"])
    lines = [line for line in run.stdout.splitlines() if line.strip()]
    problems = []
    messages = []
    for line in lines:
        try:
            message = json.loads(line)
        except json.JSONDecodeError:
            problems.append(f"stdout holds a line that is not JSON: {line[:80]!r}")
            continue
        if not isinstance(message, dict) or message.get("jsonrpc") != "2.0":
            problems.append(f"stdout holds a non-JSON-RPC message: {line[:80]!r}")
        messages.append(message)
    answer = next((m for m in messages if m.get("id") == 1), None)
    if answer is None or "result" not in answer:
        problems.append(f"no answer to initialize (exit {run.returncode}): {run.stderr[-400:]}")
    else:
        methods = answer["result"].get("authMethods") or []
        kinds = {method.get("type", "agent") for method in methods}
        if not kinds & {"agent", "terminal"}:
            problems.append(f"no auth method of type agent or terminal: {methods}")
    if run.returncode != 0:
        problems.append(f"exit code {run.returncode} when its input ended")
    if problems:
        fail(problems)
    offered = ", ".join(m.get("id", "?") for m in answer["result"]["authMethods"])
    print(f"entry-check: {' '.join(command[:3])}: auth methods {offered}; stdout clean")


def launch_binary(folder: Path, platform: str, archive: Path):
    """Installs the entry's `binary` build for PLATFORM from ARCHIVE as a client does (the
    digest checked, unpacked into an empty folder) and runs the auth check on its cmd."""
    import hashlib
    import shutil

    entry = json.loads((folder / "agent.json").read_text())
    build = entry["distribution"].get("binary", {}).get(platform)
    if build is None:
        fail([f"the entry has no binary build for {platform}"])
    problems = []
    if archive.name != build["archive"].rsplit("/", 1)[-1]:
        problems.append(f"{archive.name} is not the archive the entry names ({build['archive']})")
    digest = hashlib.sha256(archive.read_bytes()).hexdigest()
    if build.get("sha256") != digest:
        problems.append(f"the entry's sha256 {build.get('sha256')} is not the archive's {digest}")
    if problems:
        fail(problems)
    unpacked = Path(tempfile.mkdtemp(prefix="entry-check-install-"))
    shutil.unpack_archive(archive, unpacked)
    command = [str(unpacked / build["cmd"])] + list(build.get("args", []))
    check_auth(command)


def main(argv):
    if len(argv) >= 2 and argv[0] == "entry":
        check_entry(Path(argv[1]).resolve())
    elif len(argv) == 4 and argv[0] == "launch":
        launch_binary(Path(argv[1]).resolve(), argv[2], Path(argv[3]).resolve())
    elif len(argv) >= 3 and argv[0] == "auth" and argv[1] == "--":
        check_auth(argv[2:])
    else:
        print(__doc__, file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main(sys.argv[1:])
