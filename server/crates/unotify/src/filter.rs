//! The watcher's filter program (classic BPF): the calls a [`Watch`] names go to the
//! listener, x32 calls are refused, everything else is left to the other filters.

use super::calls::{IPC_CALLS, TYPE_MASK, WRITE_FLAGS, Writes, writing_calls};
use crate::Watch;

/// The audit architecture of this build's system calls (what the filter checks first).
#[cfg(target_arch = "x86_64")]
const NATIVE_ARCH: u32 = 0xC000_003E;
#[cfg(target_arch = "aarch64")]
const NATIVE_ARCH: u32 = 0xC000_00B7;
#[cfg(target_arch = "riscv64")]
const NATIVE_ARCH: u32 = 0xC000_00F3;

/// On x86-64, the bit that marks an x32 system call (numbers other filters do not list):
/// the filter refuses them all.
#[cfg(target_arch = "x86_64")]
const X32_SYSCALL_BIT: u32 = 0x4000_0000;
#[cfg(not(target_arch = "x86_64"))]
const X32_SYSCALL_BIT: u32 = 0;

const LOAD: u32 = libc::BPF_LD | libc::BPF_W | libc::BPF_ABS;
const JEQ: u32 = libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K;
const JSET: u32 = libc::BPF_JMP | libc::BPF_JSET | libc::BPF_K;
const AND: u32 = libc::BPF_ALU | libc::BPF_AND | libc::BPF_K;
const RET: u32 = libc::BPF_RET | libc::BPF_K;

/// Where `seccomp_data` keeps the call's number, its architecture and (the low half, on
/// these little-endian targets) argument `i`.
const NR: u32 = 0;
const ARCH: u32 = 4;
fn argument(i: usize) -> u32 {
    16 + 8 * i as u32
}

fn op(code: u32, k: u32, jt: u8, jf: u8) -> libc::sock_filter {
    libc::sock_filter {
        code: code as u16,
        jt,
        jf,
        k,
    }
}

fn ret(action: u32) -> libc::sock_filter {
    op(RET, action, 0, 0)
}

const NOTIFY: u32 = libc::SECCOMP_RET_USER_NOTIF;
const ALLOW: u32 = libc::SECCOMP_RET_ALLOW;

/// Notified when argument `index` has one of the bits in `mask`.
fn when_bits(index: usize, mask: u32) -> Vec<libc::sock_filter> {
    vec![
        op(LOAD, argument(index), 0, 0),
        op(JSET, mask, 0, 1),
        ret(NOTIFY),
        ret(ALLOW),
    ]
}

/// Notified when the type in argument 1 makes a datagram socket (the family was checked).
fn when_datagram() -> Vec<libc::sock_filter> {
    vec![
        op(LOAD, argument(1), 0, 0),
        op(AND, TYPE_MASK, 0, 0),
        op(JEQ, libc::SOCK_DGRAM as u32, 2, 0),
        op(JEQ, libc::SOCK_RAW as u32, 1, 0),
        ret(ALLOW),
        ret(NOTIFY),
    ]
}

/// `socket`: refused families and types go to the listener.
fn socket_block(watch: &Watch) -> Vec<libc::sock_filter> {
    let unix_part = if watch.unix_sockets {
        vec![ret(NOTIFY)]
    } else if watch.unix_datagrams {
        when_datagram()
    } else {
        vec![ret(ALLOW)]
    };
    let mut block = vec![
        op(LOAD, argument(0), 0, 0),
        op(JEQ, libc::AF_UNIX as u32, 1, 0),
        ret(if watch.network_sockets { NOTIFY } else { ALLOW }),
    ];
    block.extend(unix_part);
    block
}

/// `socketpair`: UNIX datagram pairs go to the listener.
fn socketpair_block() -> Vec<libc::sock_filter> {
    let mut block = vec![
        op(LOAD, argument(0), 0, 0),
        op(JEQ, libc::AF_UNIX as u32, 1, 0),
        ret(ALLOW),
    ];
    block.extend(when_datagram());
    block
}

/// The calls `watch` names, each with the instructions run when it is the call.
fn blocks(watch: &Watch) -> Vec<(i64, Vec<libc::sock_filter>)> {
    let mut blocks = Vec::new();
    if watch.connect {
        blocks.push((libc::SYS_connect, vec![ret(NOTIFY)]));
    }
    if watch.network_sockets || watch.unix_sockets || watch.unix_datagrams {
        blocks.push((libc::SYS_socket, socket_block(watch)));
    }
    if watch.unix_datagrams {
        blocks.push((libc::SYS_socketpair, socketpair_block()));
    }
    if watch.sysv_ipc {
        blocks.extend(IPC_CALLS.iter().map(|&(nr, _)| (nr, vec![ret(NOTIFY)])));
    }
    if watch.writes {
        for &(nr, writes) in writing_calls() {
            let block = match writes {
                Writes::WithFlags(_, flags) => when_bits(flags, WRITE_FLAGS),
                Writes::Always(_) | Writes::OpenHow => vec![ret(NOTIFY)],
            };
            blocks.push((nr, block));
        }
    }
    blocks
}

/// The whole program for `watch`.
pub(crate) fn program(watch: &Watch) -> Vec<libc::sock_filter> {
    let refuse = libc::SECCOMP_RET_ERRNO | (libc::ENOSYS as u32);
    let mut program = vec![
        op(LOAD, ARCH, 0, 0),
        op(JEQ, NATIVE_ARCH, 1, 0),
        ret(ALLOW), // another architecture: the other filters judge it
        op(LOAD, NR, 0, 0),
        op(JSET, X32_SYSCALL_BIT, 0, 1),
        ret(refuse),
    ];
    for (nr, block) in blocks(watch) {
        // Each block ends in a return: a call that is not `nr` skips it, the number still
        // loaded.
        let skip = u8::try_from(block.len()).unwrap_or(u8::MAX);
        program.push(op(JEQ, nr as u32, 0, skip));
        program.extend(block);
    }
    program.push(ret(ALLOW));
    program
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs `program` on a call, as the kernel's interpreter would (the subset used here).
    fn run(program: &[libc::sock_filter], nr: i64, args: [u64; 6]) -> u32 {
        let mut data = Vec::new();
        data.extend_from_slice(&(nr as u32).to_ne_bytes());
        data.extend_from_slice(&NATIVE_ARCH.to_ne_bytes());
        data.extend_from_slice(&0u64.to_ne_bytes());
        for arg in args {
            data.extend_from_slice(&arg.to_ne_bytes());
        }
        let word = |at: u32| {
            let at = at as usize;
            u32::from_ne_bytes([data[at], data[at + 1], data[at + 2], data[at + 3]])
        };
        let (mut pc, mut acc) = (0usize, 0u32);
        loop {
            let insn = program[pc];
            let code = u32::from(insn.code);
            pc += 1;
            match code {
                LOAD => acc = word(insn.k),
                AND => acc &= insn.k,
                RET => return insn.k,
                JEQ | JSET => {
                    let taken = if code == JEQ {
                        acc == insn.k
                    } else {
                        acc & insn.k != 0
                    };
                    pc += usize::from(if taken { insn.jt } else { insn.jf });
                }
                other => panic!("unexpected instruction {other:#x}"),
            }
        }
    }

    #[test]
    fn the_program_sends_exactly_what_the_watch_names() {
        let watch = Watch {
            connect: true,
            writes: true,
            network_sockets: true,
            unix_sockets: false,
            unix_datagrams: true,
            sysv_ipc: true,
        };
        let program = program(&watch);
        let unix = libc::AF_UNIX as u64;
        let call = |nr: i64, args: [u64; 6]| run(&program, nr, args);
        assert_eq!(call(libc::SYS_connect, [0; 6]), NOTIFY);
        assert_eq!(call(libc::SYS_read, [0; 6]), ALLOW);
        let read_only = libc::O_RDONLY as u64 | libc::O_CLOEXEC as u64;
        assert_eq!(call(libc::SYS_openat, [0, 0, read_only, 0, 0, 0]), ALLOW);
        let create = (libc::O_WRONLY | libc::O_CREAT) as u64;
        assert_eq!(call(libc::SYS_openat, [0, 0, create, 0, 0, 0]), NOTIFY);
        assert_eq!(call(libc::SYS_unlinkat, [0; 6]), NOTIFY);
        let inet = libc::AF_INET as u64;
        assert_eq!(call(libc::SYS_socket, [inet, 1, 0, 0, 0, 0]), NOTIFY);
        let stream = (libc::SOCK_STREAM | libc::SOCK_CLOEXEC) as u64;
        assert_eq!(call(libc::SYS_socket, [unix, stream, 0, 0, 0, 0]), ALLOW);
        for kind in [libc::SOCK_DGRAM, libc::SOCK_RAW] {
            let kind = (kind | libc::SOCK_NONBLOCK) as u64;
            assert_eq!(call(libc::SYS_socket, [unix, kind, 0, 0, 0, 0]), NOTIFY);
            assert_eq!(call(libc::SYS_socketpair, [unix, kind, 0, 0, 0, 0]), NOTIFY);
        }
        assert_eq!(
            call(libc::SYS_socketpair, [unix, stream, 0, 0, 0, 0]),
            ALLOW
        );
        for nr in [
            libc::SYS_shmget,
            libc::SYS_shmat,
            libc::SYS_semop,
            libc::SYS_msgrcv,
        ] {
            assert_eq!(call(nr, [0; 6]), NOTIFY);
        }
        assert_eq!(call(libc::SYS_shmdt, [0; 6]), ALLOW);
        let quiet = program_for(Watch::default());
        assert_eq!(run(&quiet, libc::SYS_connect, [0; 6]), ALLOW);
        assert_eq!(run(&quiet, libc::SYS_shmget, [0; 6]), ALLOW);
        assert_eq!(run(&quiet, libc::SYS_socket, [inet, 1, 0, 0, 0, 0]), ALLOW);
    }

    fn program_for(watch: Watch) -> Vec<libc::sock_filter> {
        program(&watch)
    }

    #[test]
    fn without_namespaces_every_unix_socket_is_sent() {
        let program = program(&Watch {
            unix_sockets: true,
            ..Watch::default()
        });
        let unix = libc::AF_UNIX as u64;
        let stream = libc::SOCK_STREAM as u64;
        assert_eq!(
            run(&program, libc::SYS_socket, [unix, stream, 0, 0, 0, 0]),
            NOTIFY
        );
        let inet = libc::AF_INET as u64;
        assert_eq!(
            run(&program, libc::SYS_socket, [inet, stream, 0, 0, 0, 0]),
            ALLOW
        );
    }
}
