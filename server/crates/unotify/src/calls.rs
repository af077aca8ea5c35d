//! The system calls the watcher can be handed, by number: which write by path (and where
//! their paths and flags are), and how a stopped call is told apart.

use crate::{Call, IpcCall, IpcKind, PathArgument};

/// Open flags that mean the file may be created, changed or emptied.
pub(crate) const WRITE_FLAGS: u32 =
    (libc::O_WRONLY | libc::O_RDWR | libc::O_CREAT | libc::O_TRUNC) as u32;

/// The socket type bits of `socket`'s second argument (the rest are flags).
pub(crate) const TYPE_MASK: u32 = 0xf;

/// How a call that writes by path names what it writes.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Writes {
    /// Always a write: its paths.
    Always([Option<PathArgument>; 2]),
    /// A write when the flags in this argument have a write flag (`open`, `openat`).
    WithFlags(PathArgument, usize),
    /// `openat2`: the flags are in the structure the third argument points at.
    OpenHow,
}

const fn at(dirfd: usize, path: usize) -> Option<PathArgument> {
    Some(PathArgument {
        dirfd: Some(dirfd),
        path,
    })
}

const fn here(path: usize) -> Option<PathArgument> {
    Some(PathArgument { dirfd: None, path })
}

/// Every call that writes by path on this architecture, with where its paths are: built
/// once per process (every watched write looks itself up here).
pub(crate) fn writing_calls() -> &'static [(i64, Writes)] {
    static CALLS: std::sync::OnceLock<Vec<(i64, Writes)>> = std::sync::OnceLock::new();
    CALLS.get_or_init(list_writing_calls)
}

fn list_writing_calls() -> Vec<(i64, Writes)> {
    use Writes::{Always, WithFlags};
    let mut calls = vec![
        (
            libc::SYS_openat,
            WithFlags(
                PathArgument {
                    dirfd: Some(0),
                    path: 1,
                },
                2,
            ),
        ),
        (libc::SYS_openat2, Writes::OpenHow),
        (libc::SYS_mkdirat, Always([at(0, 1), None])),
        (libc::SYS_mknodat, Always([at(0, 1), None])),
        (libc::SYS_unlinkat, Always([at(0, 1), None])),
        (libc::SYS_renameat2, Always([at(0, 1), at(2, 3)])),
        (libc::SYS_linkat, Always([at(2, 3), None])),
        (libc::SYS_symlinkat, Always([at(1, 2), None])),
        (libc::SYS_truncate, Always([here(0), None])),
    ];
    #[cfg(not(target_arch = "riscv64"))]
    calls.push((libc::SYS_renameat, Always([at(0, 1), at(2, 3)])));
    #[cfg(target_arch = "x86_64")]
    calls.extend([
        (
            libc::SYS_open,
            WithFlags(
                PathArgument {
                    dirfd: None,
                    path: 0,
                },
                1,
            ),
        ),
        (libc::SYS_creat, Always([here(0), None])),
        (libc::SYS_mkdir, Always([here(0), None])),
        (libc::SYS_mknod, Always([here(0), None])),
        (libc::SYS_unlink, Always([here(0), None])),
        (libc::SYS_rmdir, Always([here(0), None])),
        (libc::SYS_rename, Always([here(0), here(1)])),
        (libc::SYS_link, Always([here(1), None])),
        (libc::SYS_symlink, Always([here(1), None])),
    ]);
    calls
}

/// The System V IPC calls, by number: which kind of object each reaches.
pub(crate) const IPC_CALLS: [(i64, IpcKind); 11] = [
    (libc::SYS_shmget, IpcKind::SharedMemory),
    (libc::SYS_shmat, IpcKind::SharedMemory),
    (libc::SYS_shmctl, IpcKind::SharedMemory),
    (libc::SYS_msgget, IpcKind::MessageQueue),
    (libc::SYS_msgsnd, IpcKind::MessageQueue),
    (libc::SYS_msgrcv, IpcKind::MessageQueue),
    (libc::SYS_msgctl, IpcKind::MessageQueue),
    (libc::SYS_semget, IpcKind::Semaphores),
    (libc::SYS_semop, IpcKind::Semaphores),
    (libc::SYS_semtimedop, IpcKind::Semaphores),
    (libc::SYS_semctl, IpcKind::Semaphores),
];

/// `IPC_64`, which C libraries add to a `…ctl` command on some architectures.
const IPC_64: i32 = 0x100;

/// A System V IPC call, if `nr` is one (every argument judged is an `int`: the kernel
/// reads the low 32 bits).
fn ipc_call(nr: i64, args: &[u64; 6]) -> Option<IpcCall> {
    let (_, kind) = IPC_CALLS.iter().find(|(number, _)| *number == nr)?;
    let int = |i: usize| args[i] as u32 as i32;
    let call = if nr == libc::SYS_shmget || nr == libc::SYS_semget {
        IpcCall::Get {
            kind: *kind,
            key: int(0),
            size: args[1],
            flags: int(2),
        }
    } else if nr == libc::SYS_msgget {
        IpcCall::Get {
            kind: *kind,
            key: int(0),
            size: 0,
            flags: int(1),
        }
    } else {
        let command = if nr == libc::SYS_semctl {
            Some(int(2))
        } else if nr == libc::SYS_shmctl || nr == libc::SYS_msgctl {
            Some(int(1))
        } else {
            None
        };
        IpcCall::On {
            kind: *kind,
            id: int(0),
            command: command.map(|c| c & !IPC_64),
        }
    };
    Some(call)
}

/// What the stopped call `nr` with `args` is.
pub(crate) fn classify(nr: i32, args: &[u64; 6]) -> Call {
    let nr = i64::from(nr);
    if nr == libc::SYS_connect {
        return Call::Connect;
    }
    if let Some(call) = ipc_call(nr, args) {
        return Call::Ipc(call);
    }
    if nr == libc::SYS_socket || nr == libc::SYS_socketpair {
        // Both are `int` arguments: the kernel reads the low 32 bits.
        return Call::Socket {
            family: args[0] as u32 as i32,
            kind: (args[1] as u32 & TYPE_MASK) as i32,
        };
    }
    match writing_calls().iter().find(|(number, _)| *number == nr) {
        Some((_, Writes::Always(paths))) => Call::Write {
            paths: *paths,
            open_how: None,
        },
        Some((_, Writes::WithFlags(path, _))) => Call::Write {
            paths: [Some(*path), None],
            open_how: None,
        },
        Some((_, Writes::OpenHow)) => Call::Write {
            paths: [at(0, 1), None],
            open_how: Some(2),
        },
        None => Call::Other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calls_are_told_apart_with_their_paths() {
        let mut args = [0u64; 6];
        assert_eq!(classify(libc::SYS_connect as i32, &args), Call::Connect);
        args[0] = libc::AF_UNIX as u64;
        args[1] = (libc::SOCK_DGRAM | libc::SOCK_CLOEXEC) as u64;
        assert_eq!(
            classify(libc::SYS_socketpair as i32, &args),
            Call::Socket {
                family: libc::AF_UNIX,
                kind: libc::SOCK_DGRAM
            }
        );
        let Call::Write { paths, open_how } = classify(libc::SYS_renameat2 as i32, &args) else {
            panic!("renameat2 writes");
        };
        assert_eq!(paths, [at(0, 1), at(2, 3)]);
        assert_eq!(open_how, None);
        assert!(matches!(
            classify(libc::SYS_openat2 as i32, &args),
            Call::Write {
                open_how: Some(2),
                ..
            }
        ));
        assert_eq!(classify(libc::SYS_read as i32, &args), Call::Other);
    }

    #[test]
    fn system_v_calls_are_told_apart_by_kind_with_their_key_or_object() {
        let args = [7, 4096, 0o1600, 0, 0, 0];
        assert_eq!(
            classify(libc::SYS_shmget as i32, &args),
            Call::Ipc(IpcCall::Get {
                kind: IpcKind::SharedMemory,
                key: 7,
                size: 4096,
                flags: 0o1600
            })
        );
        assert_eq!(
            classify(libc::SYS_msgget as i32, &[9, 0o1600, 0, 0, 0, 0]),
            Call::Ipc(IpcCall::Get {
                kind: IpcKind::MessageQueue,
                key: 9,
                size: 0,
                flags: 0o1600
            })
        );
        // semctl(id, semnum, IPC_STAT | IPC_64): the command without its IPC_64 bit.
        assert_eq!(
            classify(libc::SYS_semctl as i32, &[3, 0, 2 | 0x100, 0, 0, 0]),
            Call::Ipc(IpcCall::On {
                kind: IpcKind::Semaphores,
                id: 3,
                command: Some(2)
            })
        );
        assert_eq!(
            classify(
                libc::SYS_shmat as i32,
                &[u64::from(u32::MAX), 0, 0, 0, 0, 0]
            ),
            Call::Ipc(IpcCall::On {
                kind: IpcKind::SharedMemory,
                id: -1,
                command: None
            })
        );
        assert_eq!(
            classify(libc::SYS_msgctl as i32, &[5, 0, 0, 0, 0, 0]),
            Call::Ipc(IpcCall::On {
                kind: IpcKind::MessageQueue,
                id: 5,
                command: Some(0)
            })
        );
    }
}
