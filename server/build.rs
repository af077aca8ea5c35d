//! Links the `talaria` binary with packed relative relocations (DT_RELR) where the C library
//! it is built against can load them (glibc 2.36 and later). A position-independent
//! executable carries one 24-byte relocation per pointer in its read-only data; every page of
//! that table is read at start-up and stays in the agent's RSS (about 0.6 MB here). Packed,
//! the table is a few kilobytes. Elsewhere (other C libraries, cross builds, older glibc) the
//! binary is linked as before.

use std::process::Command;

/// The first glibc whose loader applies DT_RELR.
const RELR_GLIBC: (u32, u32) = (2, 36);

fn main() {
    cargo_directive("rerun-if-changed=build.rs");
    let var = |key: &str| std::env::var(key).unwrap_or_default();
    let native = var("TARGET") == var("HOST");
    if var("CARGO_CFG_TARGET_OS") != "linux" || var("CARGO_CFG_TARGET_ENV") != "gnu" || !native {
        return;
    }
    if glibc_version().is_some_and(|version| version >= RELR_GLIBC) {
        cargo_directive("rustc-link-arg-bin=talaria=-Wl,-z,pack-relative-relocs");
        // For the test that checks the binary really carries them.
        cargo_directive("rustc-env=TALARIA_PACKED_RELOCS=1");
    }
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
    let version = text.trim().strip_prefix("glibc ")?;
    let mut parts = version.split('.');
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next()?.parse().ok()?;
    Some((major, minor))
}
