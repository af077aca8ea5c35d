//! Seccomp user notification for `connect`, and connecting a socket from raw address bytes:
//! the raw system calls behind the sandbox's connect gate (`talaria-sandbox`'s
//! `connect_gate.rs`, which decides; this crate only carries out).
//!
//! Why a crate of its own: the workspace forbids unsafe code, and nothing maintained wraps
//! these calls without a C library (`libseccomp` would have to be built for every release
//! target). Each unsafe block here is one system call or one plain-integer structure, with
//! the reason it is sound beside it. Where the gate is not built (other systems and
//! architectures), the same API answers `Unsupported`.

#[cfg_attr(
    not(all(
        target_os = "linux",
        any(
            target_arch = "x86_64",
            target_arch = "aarch64",
            target_arch = "riscv64"
        )
    )),
    path = "unsupported.rs"
)]
mod linux;

pub use linux::{Listener, connect_bytes, connect_unix_path};

/// One stopped `connect`: who called it and with what.
#[derive(Debug, Clone, Copy)]
pub struct Notice {
    /// The notification's id (valid until it is answered or the caller is gone).
    pub id: u64,
    /// The caller's process id, in the listener's PID namespace.
    pub pid: u32,
    /// The call's arguments: descriptor, address pointer, address length.
    pub args: [u64; 6],
}
