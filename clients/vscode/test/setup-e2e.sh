#!/usr/bin/env bash
# Installs what the browser test needs, idempotently, from the package registries only:
# Debian's chromium (and the headers code-server's native modules build against), and
# code-server 4.100.x (VS Code 1.100 with its real Node extension host; the newest release
# that runs on Node 20), locked in test/code-server. playwright-core is a dev dependency.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
prefix="$here/test/code-server"
version=4.100.3

sudo_if() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

# code-server's native modules (argon2, node-pty, kerberos) build with node-gyp: a C++ compiler,
# make and python3, against the installed Node's headers (never downloaded: see nodedir below).
node_prefix="$(dirname "$(dirname "$(node -p process.execPath)")")"
packages=()
[ -x /usr/lib/chromium/chromium ] || packages+=(chromium)
dpkg -s libkrb5-dev >/dev/null 2>&1 || packages+=(libkrb5-dev)
command -v rg >/dev/null || packages+=(ripgrep)
command -v g++ >/dev/null && command -v make >/dev/null || packages+=(g++ make)
command -v python3 >/dev/null || packages+=(python3)
[ -f "$node_prefix/include/node/node.h" ] || packages+=(libnode-dev)
if [ "${#packages[@]}" -gt 0 ]; then
  echo "setup-e2e: installing ${packages[*]} with apt" >&2
  sudo_if apt-get update -qq
  sudo_if env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${packages[@]}" >/dev/null
  [ -f "$node_prefix/include/node/node.h" ] || node_prefix=/usr
fi
# node-gyp would download Node's headers from nodejs.org (not a package registry): point it at
# the installed ones, whatever the user's npm settings say.
export npm_config_nodedir="$node_prefix"

if [ ! -x "$prefix/node_modules/.bin/code-server" ] || \
   [ "$(node -p "require('$prefix/node_modules/code-server/package.json').version" 2>/dev/null)" != "$version" ]; then
  echo "setup-e2e: installing code-server@$version into $prefix" >&2
  mkdir -p "$prefix"
  # @vscode/ripgrep downloads its binary from GitHub (unreachable here) unless its cache
  # already holds the archive: give it Debian's rg.
  cache="${TMPDIR:-/tmp}/vscode-ripgrep-cache-1.15.11"
  archive="$cache/ripgrep-v13.0.0-10-x86_64-unknown-linux-musl.tar.gz"
  if [ ! -f "$archive" ]; then
    mkdir -p "$cache"
    staging="$(mktemp -d)"
    cp "$(command -v rg)" "$staging/rg"
    tar czf "$archive" -C "$staging" rg
    rm -rf "$staging"
  fi
  # Its postinstall refuses root without unsafe-perm; node-pty's asks before running node-gyp.
  (cd "$prefix" && npm_config_unsafe_perm=true npm_config_yes=true \
    npm ci --no-audit --no-fund >&2)
fi
echo "setup-e2e: ready ($prefix/node_modules/.bin/code-server, /usr/lib/chromium/chromium)" >&2
