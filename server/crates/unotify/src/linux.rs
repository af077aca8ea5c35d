//! The Linux system calls: the filter, the listener's three requests, and `connect`.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use crate::Notice;

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

/// The listening end of the filter: every `connect` of the threads that installed it (and of
/// what they start) waits here until answered.
#[derive(Debug)]
pub struct Listener(OwnedFd);

/// One BPF instruction.
fn op(code: u32, k: u32, jt: u8, jf: u8) -> libc::sock_filter {
    libc::sock_filter {
        code: code as u16,
        jt,
        jf,
        k,
    }
}

/// `connect` goes to the listener, x32 calls are refused, the rest is left to the other
/// filters (a call of another architecture included).
fn program() -> Vec<libc::sock_filter> {
    const LOAD: u32 = libc::BPF_LD | libc::BPF_W | libc::BPF_ABS;
    const JEQ: u32 = libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K;
    const JSET: u32 = libc::BPF_JMP | libc::BPF_JSET | libc::BPF_K;
    const RET: u32 = libc::BPF_RET | libc::BPF_K;
    let refuse = libc::SECCOMP_RET_ERRNO | (libc::ENOSYS as u32);
    vec![
        op(LOAD, 4, 0, 0),                           // the architecture
        op(JEQ, NATIVE_ARCH, 0, 4),                  // another one: allow
        op(LOAD, 0, 0, 0),                           // the call's number
        op(JSET, X32_SYSCALL_BIT, 3, 0),             // x32: refuse
        op(JEQ, libc::SYS_connect as u32, 0, 1),     // connect: notify
        op(RET, libc::SECCOMP_RET_USER_NOTIF, 0, 0), //
        op(RET, libc::SECCOMP_RET_ALLOW, 0, 0),      //
        op(RET, refuse, 0, 0),                       //
    ]
}

fn last_error<T>() -> io::Result<T> {
    Err(io::Error::last_os_error())
}

impl Listener {
    /// Installs the filter on the calling thread (which must already have no new
    /// privileges, as every filter the sandbox installs sets) and returns its listener.
    pub fn install_for_connect() -> io::Result<Listener> {
        let mut instructions = program();
        let prog = libc::sock_fprog {
            len: instructions.len() as u16,
            filter: instructions.as_mut_ptr(),
        };
        // SAFETY: `prog` points at `instructions`, alive for the call; the kernel copies it.
        let fd = unsafe {
            libc::syscall(
                libc::SYS_seccomp,
                libc::SECCOMP_SET_MODE_FILTER,
                libc::SECCOMP_FILTER_FLAG_NEW_LISTENER,
                &prog as *const libc::sock_fprog,
            )
        };
        if fd < 0 {
            return last_error();
        }
        // SAFETY: the kernel just returned this descriptor; nothing else owns it.
        Ok(Listener(unsafe { OwnedFd::from_raw_fd(fd as RawFd) }))
    }

    /// Waits for the next stopped call. `Interrupted` and `NotFound` (the caller went away
    /// first) are worth another try.
    pub fn receive(&self) -> io::Result<Notice> {
        // SAFETY: all-zero is a valid `seccomp_notif` (plain integers), as RECV requires.
        let mut notice: libc::seccomp_notif = unsafe { std::mem::zeroed() };
        // SAFETY: `notice` is the structure this request fills, alive for the call.
        let got = unsafe {
            libc::ioctl(
                self.0.as_raw_fd(),
                libc::SECCOMP_IOCTL_NOTIF_RECV,
                &mut notice as *mut libc::seccomp_notif,
            )
        };
        if got < 0 {
            return last_error();
        }
        Ok(Notice {
            id: notice.id,
            pid: notice.pid,
            args: notice.data.args,
        })
    }

    /// Whether the call `id` still waits (so its pid still names the caller).
    pub fn still_waiting(&self, id: u64) -> bool {
        // SAFETY: the request reads the id it is given, alive for the call.
        let valid = unsafe {
            libc::ioctl(
                self.0.as_raw_fd(),
                libc::SECCOMP_IOCTL_NOTIF_ID_VALID,
                &id as *const u64,
            )
        };
        valid == 0
    }

    /// Ends the call `id`: it returns 0, or fails with the error number given. A caller
    /// that is gone (killed while it waited) is not an error.
    pub fn respond(&self, id: u64, result: Result<(), i32>) {
        let response = libc::seccomp_notif_resp {
            id,
            val: 0,
            error: result.err().map_or(0, |errno| -errno),
            flags: 0,
        };
        // SAFETY: `response` is the structure this request reads, alive for the call.
        unsafe {
            libc::ioctl(
                self.0.as_raw_fd(),
                libc::SECCOMP_IOCTL_NOTIF_SEND,
                &response as *const libc::seccomp_notif_resp,
            );
        }
    }
}

/// Connects `socket` to the address in `bytes` (any family), as `connect(2)` would.
pub fn connect_bytes(socket: BorrowedFd<'_>, bytes: &[u8]) -> io::Result<()> {
    let length = libc::socklen_t::try_from(bytes.len())
        .map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    // SAFETY: `bytes` holds `length` readable bytes, which the kernel copies and checks.
    let done = unsafe { libc::connect(socket.as_raw_fd(), bytes.as_ptr().cast(), length) };
    if done == 0 { Ok(()) } else { last_error() }
}

/// Connects `socket` to the UNIX socket at `path` (shorter than `sun_path`).
pub fn connect_unix_path(socket: BorrowedFd<'_>, path: &Path) -> io::Result<()> {
    let name = path.as_os_str().as_bytes();
    let family = (libc::AF_UNIX as libc::sa_family_t).to_ne_bytes();
    // sun_path is 108 bytes: the name and its terminating zero must fit.
    if name.len() >= 108 || name.contains(&0) {
        return Err(io::Error::from_raw_os_error(libc::ENAMETOOLONG));
    }
    let mut bytes = family.to_vec();
    bytes.extend_from_slice(name);
    bytes.push(0);
    connect_bytes(socket, &bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_unix_path_connects_as_the_bytes_say() {
        let dir = std::env::temp_dir().join(format!("unotify-{}", std::process::id()));
        let _ = std::fs::create_dir(&dir);
        let path = dir.join("s.sock");
        let _ = std::fs::remove_file(&path);
        let listener = std::os::unix::net::UnixListener::bind(&path).expect("bind");
        let client = std::os::unix::net::UnixDatagram::unbound().expect("socket");
        // A datagram socket cannot reach a stream listener: the kernel's own answer.
        let wrong = connect_unix_path(std::os::fd::AsFd::as_fd(&client), &path);
        assert_eq!(
            wrong.err().and_then(|e| e.raw_os_error()),
            Some(libc::EPROTOTYPE)
        );
        let stream = socket_stream();
        connect_unix_path(std::os::fd::AsFd::as_fd(&stream), &path).expect("connect");
        assert!(listener.accept().is_ok());
        let too_long = dir.join("x".repeat(120));
        assert!(connect_unix_path(std::os::fd::AsFd::as_fd(&stream), &too_long).is_err());
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// An unconnected UNIX stream socket.
    fn socket_stream() -> OwnedFd {
        // SAFETY: a plain system call; the descriptor it returns is owned below.
        let fd = unsafe { libc::socket(libc::AF_UNIX, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0) };
        assert!(fd >= 0, "socket");
        // SAFETY: just returned by the kernel, owned by nobody else.
        unsafe { OwnedFd::from_raw_fd(fd) }
    }
}
