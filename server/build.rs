//! Two jobs at build time:
//!
//! - Links the `talaria` binary with packed relative relocations (DT_RELR) where every C
//!   library it must run on can load them (glibc 2.36 and later). A position-independent
//!   executable carries one 24-byte relocation per pointer in its read-only data; every page
//!   of that table is read at start-up and stays in the agent's RSS (about 0.6 MB here).
//!   Packed, the table is a few kilobytes. The oldest glibc is this machine's, or
//!   `TALARIA_GLIBC_FLOOR` (the release archives are built for 2.28 and older
//!   distributions load them). Elsewhere (other C libraries, cross builds, an older floor)
//!   the binary is linked as before.
//! - Links the release binary with its hot code first (`hot-code/functions.txt`, the
//!   functions a start, a session and a turn run, as `hot-code/record.sh` recorded them):
//!   the kernel maps an executable's code in 64 KB windows around each page it runs, so hot
//!   code scattered over the text keeps most of it resident; gathered at its front it keeps
//!   a fraction. Linux only (a linker script); the names are v0 symbols (`.cargo/config.toml`).
//! - Strips the symbol table of the server's release Linux binaries (a link argument, not
//!   the profile's `strip`, which would change every crate's hash: Cargo.toml), unless
//!   `TALARIA_KEEP_SYMBOLS` is set.
//! - Gives `talaria --version` its line: the version, the commit it was built from
//!   (`TALARIA_COMMIT`, else `git`, else "unknown") and the sandbox layers compiled in.

use std::process::Command;

#[path = "hot-code/script.rs"]
mod hot_code_script;
use hot_code_script::hot_code_script;

/// The first glibc whose loader applies DT_RELR.
const RELR_GLIBC: (u32, u32) = (2, 36);

fn main() {
    cargo_directive("rerun-if-changed=build.rs");
    cargo_directive("rerun-if-env-changed=TALARIA_GLIBC_FLOOR");
    cargo_directive("rerun-if-env-changed=TALARIA_COMMIT");
    version_line();
    strip_symbols();
    hot_code_first();
    let var = |key: &str| std::env::var(key).unwrap_or_default();
    let native = var("TARGET") == var("HOST");
    if var("CARGO_CFG_TARGET_OS") != "linux" || var("CARGO_CFG_TARGET_ENV") != "gnu" || !native {
        return;
    }
    let floor = match std::env::var("TALARIA_GLIBC_FLOOR") {
        Ok(floor) => parse_version(&floor),
        Err(_) => glibc_version(),
    };
    if floor.is_some_and(|version| version >= RELR_GLIBC) {
        cargo_directive("rustc-link-arg-bin=talaria=-Wl,-z,pack-relative-relocs");
        // For the test that checks the binary really carries them.
        cargo_directive("rustc-env=TALARIA_PACKED_RELOCS=1");
    }
}

/// Leaves the symbol table out of the server's release Linux binaries (never loaded; 4.8 MB
/// of the file), unless `TALARIA_KEEP_SYMBOLS` is set, as `hot-code/record.sh` sets it to read
/// the functions that run. A link argument, not the profile's `strip`: the profile is hashed
/// into every crate, and the build recorded must be the build shipped (Cargo.toml).
fn strip_symbols() {
    cargo_directive("rerun-if-env-changed=TALARIA_KEEP_SYMBOLS");
    let var = |key: &str| std::env::var(key).unwrap_or_default();
    let keep = std::env::var_os("TALARIA_KEEP_SYMBOLS").is_some();
    if var("PROFILE") == "release" && !keep && var("CARGO_CFG_TARGET_OS") == "linux" {
        cargo_directive("rustc-link-arg-bins=-Wl,--strip-all");
    }
}

/// Places the functions `hot-code/functions.txt` lists first in the release binary's text,
/// through a linker script that gathers their sections (every function has one:
/// `.text.<symbol>`, or `.text.unlikely.<symbol>` for one the compiler thought cold) into
/// `.text.hot`, inserted before `.text`. A script, not lld's `--symbol-ordering-file`, so
/// that every Linux linker the binary is built with takes it: the toolchain's lld, GNU ld,
/// and zig's, which links the release archives. A listed function the build does not have
/// matches nothing; `server/tests/hot_code.rs` fails when too much of the list is gone.
fn hot_code_first() {
    cargo_directive("rerun-if-changed=hot-code/functions.txt");
    let var = |key: &str| std::env::var(key).unwrap_or_default();
    // Optimised builds only: an unoptimised one (CI's `package-check` profile) is not
    // measured, and links faster without thousands of rules.
    let optimised = !matches!(var("OPT_LEVEL").as_str(), "0" | "1");
    if var("PROFILE") != "release" || !optimised || var("CARGO_CFG_TARGET_OS") != "linux" {
        return;
    }
    let list = std::path::Path::new(&var("CARGO_MANIFEST_DIR")).join("hot-code/functions.txt");
    let Ok(names) = std::fs::read_to_string(list) else {
        return;
    };
    let script = std::path::Path::new(&var("OUT_DIR")).join("hot-code.ld");
    if std::fs::write(&script, hot_code_script(&names)).is_err() {
        return;
    }
    cargo_directive(&format!(
        "rustc-link-arg-bin=talaria=-Wl,-T,{}",
        script.display()
    ));
}

/// `TALARIA_VERSION_LINE`: "0.2.0 (commit 1a2b3c4d5e6f; sandbox: namespaces, Landlock,
/// seccomp)".
fn version_line() {
    let version = std::env::var("CARGO_PKG_VERSION").unwrap_or_default();
    let commit = std::env::var("TALARIA_COMMIT")
        .ok()
        .filter(|c| !c.trim().is_empty())
        .or_else(git_commit)
        .unwrap_or_else(|| "unknown".into());
    let layers = match std::env::var("CARGO_CFG_TARGET_OS")
        .unwrap_or_default()
        .as_str()
    {
        "linux" => "namespaces, Landlock, seccomp, limits (each used where the kernel allows)",
        _ => "none on this platform (commands ask in yolo)",
    };
    cargo_directive(&format!(
        "rustc-env=TALARIA_VERSION_LINE={version} (commit {commit}; sandbox: {layers})"
    ));
}

/// The commit this checkout is at, when it is a git checkout with git installed.
fn git_commit() -> Option<String> {
    let output = Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .output()
        .ok()?;
    if !output.status.success() {
        return None;
    }
    let commit = String::from_utf8(output.stdout).ok()?.trim().to_string();
    // Rebuilt when the checkout moves.
    if let Ok(git_dir) = Command::new("git")
        .args(["rev-parse", "--git-dir"])
        .output()
        && let Ok(dir) = String::from_utf8(git_dir.stdout)
    {
        let dir = std::path::Path::new(dir.trim());
        cargo_directive(&format!("rerun-if-changed={}", dir.join("HEAD").display()));
        cargo_directive(&format!("rerun-if-changed={}", dir.join("refs").display()));
    }
    (!commit.is_empty()).then_some(commit)
}

/// Tells Cargo something. A build script's standard output is Cargo's directive channel, read
/// while compiling; it is not the agent's stdout, which carries only the protocol.
fn cargo_directive(directive: &str) {
    use std::io::Write as _;
    let _ = writeln!(std::io::stdout().lock(), "cargo:{directive}");
}

/// The C library's version on this (the building) machine, from `getconf`.
fn glibc_version() -> Option<(u32, u32)> {
    let output = Command::new("getconf")
        .arg("GNU_LIBC_VERSION")
        .output()
        .ok()?;
    let text = String::from_utf8(output.stdout).ok()?;
    parse_version(text.trim().strip_prefix("glibc ")?)
}

/// "2.36" → (2, 36).
fn parse_version(version: &str) -> Option<(u32, u32)> {
    let mut parts = version.trim().split('.');
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next()?.parse().ok()?;
    Some((major, minor))
}
