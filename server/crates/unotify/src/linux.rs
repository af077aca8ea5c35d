//! The Linux system calls: installing the filter, the listener's requests, and `connect`.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use crate::{Call, IpcKind, Notice, Watch};

// Built only where this file is (Linux on the architectures the filter knows).
#[path = "calls.rs"]
mod calls;
#[path = "filter.rs"]
mod filter;

/// Whether open flags may create, change or empty the file (`openat2`'s, read by the
/// watcher; the filter checks `open`'s and `openat`'s itself).
pub fn opens_to_write(flags: u64) -> bool {
    flags & u64::from(calls::WRITE_FLAGS) != 0
}

/// What the stopped call `nr` with `args` is.
pub(crate) fn classify(nr: i32, args: &[u64; 6]) -> Call {
    calls::classify(nr, args)
}

/// The listening end of the filter: every call the watch names, of the threads that
/// installed it (and of what they start), waits here until answered.
#[derive(Debug)]
pub struct Listener(OwnedFd);

fn last_error<T>() -> io::Result<T> {
    Err(io::Error::last_os_error())
}

impl Listener {
    /// Installs the filter for `watch` on the calling thread (which must already have no
    /// new privileges, as every filter the sandbox installs sets) and returns its listener.
    pub fn install(watch: &Watch) -> io::Result<Listener> {
        let mut instructions = filter::program(watch);
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
        let listener = Listener(unsafe { OwnedFd::from_raw_fd(fd as RawFd) });
        listener.wake_in_step();
        Ok(listener)
    }

    /// Asks the kernel (Linux 6.6 and newer) to hand each call to the listener and the
    /// answer back to the caller on the same core, as one synchronous switch: the caller
    /// waits a few microseconds instead of two scheduler wake-ups. Older kernels refuse the
    /// request, and the calls then wait as before.
    fn wake_in_step(&self) {
        /// `SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP`.
        const SYNC_WAKE_UP: u64 = 1;
        // SAFETY: the request reads a plain integer, passed by value.
        unsafe {
            libc::ioctl(
                self.0.as_raw_fd(),
                libc::SECCOMP_IOCTL_NOTIF_SET_FLAGS,
                SYNC_WAKE_UP,
            );
        }
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
            nr: notice.data.nr,
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

impl Listener {
    /// Ends the call `id` as if it had returned `value` (a call the watcher made itself on
    /// the caller's behalf).
    pub fn respond_value(&self, id: u64, value: i64) {
        let response = libc::seccomp_notif_resp {
            id,
            val: value,
            error: 0,
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

    /// Lets the call `id` go on as the caller made it: for calls the watcher only records
    /// (the kernel's own layers still judge it; never a decision, since the caller's memory
    /// may change before the kernel reads it).
    pub fn let_continue(&self, id: u64) {
        let response = libc::seccomp_notif_resp {
            id,
            val: 0,
            error: 0,
            flags: libc::SECCOMP_USER_NOTIF_FLAG_CONTINUE as u32,
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

/// Takes ownership of descriptor `fd`, which this process inherited from the one that
/// started it for itself alone (the sandbox's init, its refusal log): checks that it is
/// open and marks it close-on-exec, so nothing the process starts inherits it.
pub fn claim_inherited(fd: RawFd) -> io::Result<OwnedFd> {
    // SAFETY: F_GETFD reads the flags of a descriptor number; an unused number fails.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFD) };
    if flags < 0 {
        return last_error();
    }
    // SAFETY: as above, on the same number, setting only the close-on-exec flag.
    if unsafe { libc::fcntl(fd, libc::F_SETFD, flags | libc::FD_CLOEXEC) } < 0 {
        return last_error();
    }
    // SAFETY: the descriptor is open (checked above), and by the protocol between the
    // supervisor and the init nothing else in this process owns it: it was inherited for
    // this one owner.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Finds or creates a System V IPC object as `shmget(key, size, flags)`, `msgget(key,
/// flags)` or `semget(key, size, flags)` would (for the watcher, on a caller's behalf);
/// returns its id.
pub fn sysv_get(kind: IpcKind, key: i32, size: u64, flags: i32) -> io::Result<i32> {
    let id = match kind {
        IpcKind::SharedMemory => {
            let size =
                usize::try_from(size).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
            // SAFETY: plain integers; the kernel reads nothing from this process's memory.
            unsafe { libc::shmget(key, size, flags) }
        }
        // SAFETY: plain integers, as above.
        IpcKind::MessageQueue => unsafe { libc::msgget(key, flags) },
        IpcKind::Semaphores => {
            let count =
                i32::try_from(size).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
            // SAFETY: plain integers, as above.
            unsafe { libc::semget(key, count, flags) }
        }
    };
    if id < 0 { last_error() } else { Ok(id) }
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
