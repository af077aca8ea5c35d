//! Seccomp user notification for the sandbox's watcher: a filter that hands chosen system
//! calls (`connect`, refused socket creations, calls that create, change or remove a file by
//! path) to a listener, the listener's requests, and connecting a socket from raw address
//! bytes. The sandbox (`talaria-sandbox`'s `watcher.rs`) decides; this crate only carries
//! out.
//!
//! Why a crate of its own: the workspace forbids unsafe code, and nothing maintained wraps
//! these calls without a C library (`libseccomp` would have to be built for every release
//! target). Each unsafe block here is one system call or one plain-integer structure, with
//! the reason it is sound beside it. Where the watcher is not built (other systems and
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

pub use linux::{
    Listener, claim_inherited, connect_bytes, connect_unix_path, opens_to_write, sysv_get,
};

/// Which calls the filter hands to the listener (the rest it leaves to the other filters).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Watch {
    /// Every `connect`.
    pub connect: bool,
    /// Every call that creates, changes or removes a file by its path: `open` and `openat`
    /// with a write flag, `openat2`, `creat`, `mkdir`, `mknod`, `unlink`, `rmdir`, `rename`,
    /// `link`, `symlink`, `truncate` and their `…at` forms.
    pub writes: bool,
    /// `socket` of any family but `AF_UNIX` (the network is off).
    pub network_sockets: bool,
    /// `socket(AF_UNIX, …)` of any type.
    pub unix_sockets: bool,
    /// UNIX datagram sockets: `socket` and `socketpair` of `AF_UNIX` with `SOCK_DGRAM` or
    /// `SOCK_RAW` (which the kernel makes a datagram socket). A datagram socket can send to
    /// any socket's name with every `sendto` or `sendmsg`, which no filter can read.
    pub unix_datagrams: bool,
    /// System V IPC: every call that finds, uses or controls a shared memory segment, a
    /// message queue or a semaphore set (without an IPC namespace of its own, a command
    /// would reach other programs' objects).
    pub sysv_ipc: bool,
}

/// The three kinds of System V IPC object.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum IpcKind {
    SharedMemory,
    MessageQueue,
    Semaphores,
}

/// A System V IPC call, as far as the watcher judges it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IpcCall {
    /// `shmget(key, size, flags)`, `msgget(key, flags)`, `semget(key, nsems, flags)`: `size`
    /// is the size or the number of semaphores (0 for a queue).
    Get {
        kind: IpcKind,
        key: i32,
        size: u64,
        flags: i32,
    },
    /// A call on the object `id` (`shmat`, `msgsnd`, `semop`, the `…ctl` calls), with the
    /// `…ctl` command when it is one (without the `IPC_64` bit).
    On {
        kind: IpcKind,
        id: i32,
        command: Option<i32>,
    },
}

/// Where a call names a path: the argument holding the path, and the one holding the
/// folder descriptor it is relative to (`None`: the working folder).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PathArgument {
    pub dirfd: Option<usize>,
    pub path: usize,
}

/// What a stopped call is, as far as the watcher tells them apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Call {
    /// `connect(fd, address, length)`.
    Connect,
    /// A System V IPC call.
    Ipc(IpcCall),
    /// `socket` or `socketpair` of this family and type (flags masked off).
    Socket { family: i32, kind: i32 },
    /// A call that writes by path: the paths it writes (one or two) and, for `openat2`, the
    /// argument holding its `open_how` (whose first field is the flags).
    Write {
        paths: [Option<PathArgument>; 2],
        open_how: Option<usize>,
    },
    /// Anything else (not sent by the filter).
    Other,
}

/// One stopped call: who called it and with what.
#[derive(Debug, Clone, Copy)]
pub struct Notice {
    /// The notification's id (valid until it is answered or the caller is gone).
    pub id: u64,
    /// The caller's process id, in the listener's PID namespace.
    pub pid: u32,
    /// The call's number.
    pub nr: i32,
    /// The call's arguments.
    pub args: [u64; 6],
}

impl Notice {
    /// What the call is.
    pub fn call(&self) -> Call {
        linux::classify(self.nr, &self.args)
    }
}
