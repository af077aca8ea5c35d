//! The gate every `connect` of a sandboxed command passes, with namespaces: UNIX sockets are
//! judged by what they are (device and inode), not by the name used to reach them.
//!
//! Masking (`sockets.rs`) hides the sockets bound when a command starts, by the path the
//! kernel lists; it cannot see a second name for one (a hard link, the same folder
//! bind-mounted elsewhere) nor a socket bound after the command started. So the watcher
//! (`watcher.rs`) hands each `connect` to a thread of its own. That thread reads the address
//! once from the caller's memory, opens the
//! target itself, judges the socket it found by its device and inode, and connects the
//! caller's socket (a copy of its descriptor) through the descriptor it judged, so nothing
//! the caller changes afterwards (its memory, its descriptors, the path) can redirect the
//! connection. Every other connection (TCP, abstract sockets) is made the same way, from the
//! copied address, in the same Landlock domain as the command (so abstract sockets stay
//! scoped as before). What cannot be read is refused (`EACCES`). A refused socket is logged
//! as a refusal.
//!
//! Reachable: a socket listed in `[sandbox] unix_sockets` (by device and inode, resolved
//! when the command starts), or one that lies in a writable place under a single name.
//! Never reachable: the agent's own listeners (`talaria serve`'s, this process's and every
//! other registered one, `endpoints.rs`), at any address of this machine.
//!
//! Without namespaces the gate judges network connections the same way (commands have no
//! UNIX sockets there); a caller that made itself undumpable cannot be read without the
//! namespaces' `CAP_SYS_PTRACE`, so its connections are refused.

use std::collections::HashSet;
use std::ffi::OsStr;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

use rustix::process::{Pid, PidfdFlags, PidfdGetfdFlags, pidfd_getfd, pidfd_open};
use talaria_unotify::{Listener, Notice, connect_bytes, connect_unix_path};

use crate::policy::{PathAccess, SandboxPolicy};
use crate::recorder::Recorder;
use crate::refusals::Refusal;

/// The longest socket address (`sockaddr_storage`).
const MAX_ADDRESS: usize = 128;

/// What the gate lets through: sockets listed by device and inode, and sockets in a
/// writable place under a single name.
pub(crate) struct Judge {
    policy: SandboxPolicy,
    listed: HashSet<(u64, u64)>,
}

impl Judge {
    /// The agent's own listener `address` would reach, if any: one of the policy's
    /// endpoints' ports at an address of this machine.
    fn own_endpoint(&self, address: SocketAddr) -> bool {
        self.policy
            .endpoints
            .iter()
            .any(|endpoint| endpoint.port() == address.port())
            && is_this_machine(address)
    }
}

/// Whether connecting to `address` reaches this machine: a loopback or unspecified address
/// (also IPv4 in IPv6), or one of its interfaces' (binding to it succeeds).
fn is_this_machine(address: SocketAddr) -> bool {
    let ip = match address.ip() {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4),
        v4 => v4,
    };
    if ip.is_loopback() || ip.is_unspecified() {
        return true;
    }
    let scope = match address {
        SocketAddr::V6(v6) => v6.scope_id(),
        SocketAddr::V4(_) => 0,
    };
    let local = match ip {
        IpAddr::V4(v4) => SocketAddr::from((v4, 0)),
        IpAddr::V6(v6) => SocketAddr::V6(std::net::SocketAddrV6::new(v6, 0, 0, scope)),
    };
    std::net::UdpSocket::bind(local).is_ok()
}

/// The IP address and port of an `AF_INET` or `AF_INET6` address, if it is one (and long
/// enough to be read).
fn inet_address(bytes: &[u8]) -> Option<SocketAddr> {
    let family = i32::from(u16::from_ne_bytes([*bytes.first()?, *bytes.get(1)?]));
    let port = u16::from_be_bytes([*bytes.get(2)?, *bytes.get(3)?]);
    if family == libc::AF_INET {
        let ip: [u8; 4] = bytes.get(4..8)?.try_into().ok()?;
        return Some(SocketAddr::from((Ipv4Addr::from(ip), port)));
    }
    if family == libc::AF_INET6 {
        let ip: [u8; 16] = bytes.get(8..24)?.try_into().ok()?;
        let scope = bytes
            .get(24..28)
            .and_then(|b| b.try_into().ok())
            .map_or(0, u32::from_ne_bytes);
        return Some(SocketAddr::V6(std::net::SocketAddrV6::new(
            Ipv6Addr::from(ip),
            port,
            0,
            scope,
        )));
    }
    None
}

impl Judge {
    pub(crate) fn new(policy: &SandboxPolicy) -> Self {
        let listed = policy
            .unix_sockets
            .iter()
            .filter_map(|path| std::fs::metadata(path).ok())
            .map(|m| (m.dev(), m.ino()))
            .collect();
        Self {
            policy: policy.clone(),
            listed,
        }
    }

    /// Whether the socket described by `metadata`, whose name the kernel gives as `real`,
    /// may be reached.
    fn allows(&self, metadata: &std::fs::Metadata, real: &Path) -> bool {
        if !metadata.file_type().is_socket() {
            return false;
        }
        if self.listed.contains(&(metadata.dev(), metadata.ino())) {
            return true;
        }
        metadata.nlink() == 1 && self.policy.access(real) == PathAccess::Writable
    }
}

fn errno(e: &std::io::Error) -> i32 {
    e.raw_os_error().unwrap_or(libc::EACCES)
}

/// Makes the caller's `connect(fd, address, length)` on its behalf, or says why not.
pub(crate) fn handle(
    listener: &Listener,
    judge: &Judge,
    recorder: &Recorder,
    notice: &Notice,
) -> Result<(), i32> {
    let [fd, address, length, ..] = notice.args;
    let length = usize::try_from(length).map_err(|_| libc::EINVAL)?;
    if length == 0 || length > MAX_ADDRESS {
        return Err(libc::EINVAL);
    }
    // The process is opened before the check that the call still waits, so the pid names
    // the caller; the memory read by pid is kept only if the call still waits afterwards
    // (so the pid was not reused for another process in between).
    let pidfd = open_pid(notice.pid)?;
    if !listener.still_waiting(notice.id) {
        return Err(libc::EINTR);
    }
    // Unreadable (a caller that made itself undumpable, without the namespaces' capability):
    // refused, as whatever it names cannot be judged.
    let bytes = crate::memory::read(notice.pid, address, length).map_err(|e| match e {
        libc::EPERM => libc::EACCES,
        other => other,
    })?;
    if !listener.still_waiting(notice.id) {
        return Err(libc::EINTR);
    }
    let socket = caller_socket(&pidfd, fd)?;
    match pathname(&bytes) {
        Some(path) => {
            let target = open_target(notice.pid, path)?;
            let name = PathBuf::from(format!("/proc/self/fd/{}", target.as_raw_fd()));
            let real = std::fs::read_link(&name).map_err(|e| errno(&e))?;
            let metadata = std::fs::metadata(&name).map_err(|e| errno(&e))?;
            if !judge.allows(&metadata, &real) {
                if metadata.file_type().is_socket() {
                    recorder.record(Refusal::Connect { path: real });
                }
                // As the kernel answers a connection to a file that is not a socket.
                return Err(if metadata.file_type().is_socket() {
                    libc::EACCES
                } else {
                    libc::ECONNREFUSED
                });
            }
            // Through the descriptor judged: whatever the path names by now.
            connect_unix_path(socket.as_fd(), &name).map_err(|e| errno(&e))
        }
        None => {
            if let Some(address) = inet_address(&bytes)
                && judge.own_endpoint(address)
            {
                recorder.record(Refusal::Endpoint { address });
                return Err(libc::EACCES);
            }
            connect_bytes(socket.as_fd(), &bytes).map_err(|e| errno(&e))
        }
    }
}

/// The path of a UNIX pathname address (not abstract, not unnamed), if it is one.
fn pathname(bytes: &[u8]) -> Option<&OsStr> {
    let family = u16::from_ne_bytes([*bytes.first()?, *bytes.get(1)?]);
    if i32::from(family) != libc::AF_UNIX {
        return None;
    }
    let path = bytes.get(2..)?;
    if path.first().is_none_or(|&b| b == 0) {
        return None;
    }
    let end = path.iter().position(|&b| b == 0).unwrap_or(path.len());
    Some(OsStr::from_bytes(&path[..end]))
}

/// A descriptor of the caller, from the id the kernel gives a stopped call: the id of the
/// *thread* that made it, which is the process's own only for its main thread. A thread's
/// own descriptor (Linux 6.9) where the kernel has them, else the descriptor of its thread
/// group (found in `/proc`): either reaches the descriptors every thread of it shares.
fn open_pid(tid: u32) -> Result<OwnedFd, i32> {
    let thread = i32::try_from(tid)
        .ok()
        .and_then(Pid::from_raw)
        .ok_or(libc::ESRCH)?;
    let of_thread = PidfdFlags::from_bits_retain(libc::PIDFD_THREAD);
    match pidfd_open(thread, of_thread) {
        Ok(fd) => return Ok(fd),
        // A kernel without thread descriptors refuses the flag.
        Err(rustix::io::Errno::INVAL) => {}
        Err(_) => return Err(libc::EACCES),
    }
    open_group(tid)
}

/// The descriptor of the thread group thread `tid` belongs to.
fn open_group(tid: u32) -> Result<OwnedFd, i32> {
    let group = thread_group(tid)
        .and_then(Pid::from_raw)
        .ok_or(libc::ESRCH)?;
    pidfd_open(group, PidfdFlags::empty()).map_err(|_| libc::EACCES)
}

/// The thread group (process) thread `tid` belongs to, from its `/proc` status.
fn thread_group(tid: u32) -> Option<i32> {
    let status = std::fs::read_to_string(format!("/proc/{tid}/status")).ok()?;
    tgid_in_status(&status)
}

/// The `Tgid:` of a `/proc/<id>/status` text.
fn tgid_in_status(status: &str) -> Option<i32> {
    status
        .lines()
        .find_map(|line| line.strip_prefix("Tgid:"))
        .and_then(|value| value.trim().parse().ok())
}

/// A copy of the caller's descriptor `fd` (the same socket).
fn caller_socket(pidfd: &OwnedFd, fd: u64) -> Result<OwnedFd, i32> {
    let fd = i32::try_from(fd).map_err(|_| libc::EBADF)?;
    pidfd_getfd(pidfd, fd, PidfdGetfdFlags::empty()).map_err(|e| match e.raw_os_error() {
        libc::EPERM => libc::EACCES,
        other => other,
    })
}

/// Opens what `path` names as the caller sees it (a relative path from its working
/// folder), as a descriptor that only names the file.
fn open_target(pid: u32, path: &OsStr) -> Result<OwnedFd, i32> {
    use std::os::unix::fs::OpenOptionsExt;
    let path = Path::new(path);
    let full: PathBuf = if path.is_absolute() {
        path.to_path_buf()
    } else {
        Path::new(&format!("/proc/{pid}/cwd")).join(path)
    };
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_PATH | libc::O_CLOEXEC)
        .open(&full)
        .map(OwnedFd::from)
        .map_err(|e| errno(&e))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unix_address(path: &[u8]) -> Vec<u8> {
        let mut bytes = (libc::AF_UNIX as u16).to_ne_bytes().to_vec();
        bytes.extend_from_slice(path);
        bytes
    }

    #[test]
    fn pathnames_are_told_from_abstract_unnamed_and_other_addresses() {
        assert_eq!(
            pathname(&unix_address(b"/run/x.sock\0junk")),
            Some(OsStr::new("/run/x.sock"))
        );
        assert_eq!(
            pathname(&unix_address(b"rel.sock")),
            Some(OsStr::new("rel.sock"))
        );
        assert_eq!(pathname(&unix_address(b"\0abstract")), None);
        assert_eq!(pathname(&unix_address(b"")), None);
        let mut inet = (libc::AF_INET as u16).to_ne_bytes().to_vec();
        inet.extend_from_slice(b"/not/a/path");
        assert_eq!(pathname(&inet), None);
        assert_eq!(pathname(&[1]), None);
    }

    fn inet(address: &str) -> Vec<u8> {
        let address: SocketAddr = address.parse().expect("address");
        match address {
            SocketAddr::V4(v4) => {
                let mut bytes = (libc::AF_INET as u16).to_ne_bytes().to_vec();
                bytes.extend_from_slice(&v4.port().to_be_bytes());
                bytes.extend_from_slice(&v4.ip().octets());
                bytes.extend_from_slice(&[0; 8]);
                bytes
            }
            SocketAddr::V6(v6) => {
                let mut bytes = (libc::AF_INET6 as u16).to_ne_bytes().to_vec();
                bytes.extend_from_slice(&v6.port().to_be_bytes());
                bytes.extend_from_slice(&0u32.to_ne_bytes());
                bytes.extend_from_slice(&v6.ip().octets());
                bytes.extend_from_slice(&v6.scope_id().to_ne_bytes());
                bytes
            }
        }
    }

    #[test]
    fn the_agents_own_listener_is_refused_at_every_address_of_this_machine() {
        let judge = Judge::new(&SandboxPolicy {
            endpoints: vec!["0.0.0.0:8765".parse().expect("address")],
            ..SandboxPolicy::default()
        });
        let refused = |address: &str| {
            let parsed = inet_address(&inet(address)).expect("an inet address");
            assert_eq!(parsed, address.parse::<SocketAddr>().expect("address"));
            judge.own_endpoint(parsed)
        };
        for address in [
            "127.0.0.1:8765",
            "127.0.0.2:8765",
            "0.0.0.0:8765",
            "[::1]:8765",
            "[::]:8765",
            "[::ffff:127.0.0.1]:8765",
        ] {
            assert!(refused(address), "{address}");
        }
        // Another port here; the same port on another machine (TEST-NET-3, never local).
        for address in ["127.0.0.1:8766", "203.0.113.9:8765", "[2001:db8::9]:8765"] {
            assert!(!refused(address), "{address}");
        }
        assert!(inet_address(&unix_address(b"/x")).is_none());
        assert!(
            inet_address(&inet("127.0.0.1:1")[..6]).is_none(),
            "too short"
        );
        assert!(inet_address(&inet("[::1]:1")[..20]).is_none(), "too short");
        // An address of one of this machine's interfaces, when it has one besides loopback.
        let outward = std::net::UdpSocket::bind("0.0.0.0:0")
            .and_then(|s| s.connect("203.0.113.9:9").map(|()| s))
            .and_then(|s| s.local_addr());
        if let Ok(own) = outward {
            assert!(is_this_machine(SocketAddr::new(own.ip(), 8765)), "{own}");
        }
        let quiet = Judge::new(&SandboxPolicy::default());
        assert!(!quiet.own_endpoint("127.0.0.1:8765".parse().expect("address")));
    }

    /// A descriptor of this process's, copied through the descriptor `open` gives for the
    /// id of a second thread: its number, or the error.
    fn copy_from_a_second_thread(open: fn(u32) -> Result<OwnedFd, i32>) -> Result<(), i32> {
        let file = std::fs::File::open("/proc/self/status").expect("a file");
        let fd = u64::try_from(file.as_raw_fd()).expect("fd");
        let (send, receive) = std::sync::mpsc::channel();
        let (done, finish) = std::sync::mpsc::channel::<()>();
        let thread = std::thread::spawn(move || {
            let _ = send.send(nix::unistd::gettid().as_raw());
            let _ = finish.recv();
        });
        let tid = u32::try_from(receive.recv().expect("tid")).expect("tid");
        assert_ne!(tid, std::process::id(), "a second thread");
        let copied = open(tid).and_then(|pidfd| caller_socket(&pidfd, fd).map(drop));
        let _ = done.send(());
        let _ = thread.join();
        copied
    }

    #[test]
    fn a_call_from_a_second_thread_reaches_the_processs_descriptors() {
        // The id a stopped call carries is its thread's: both ways of opening the caller
        // (a thread's own descriptor, the thread group's) reach what every thread shares.
        assert_eq!(copy_from_a_second_thread(open_pid), Ok(()));
        assert_eq!(copy_from_a_second_thread(open_group), Ok(()));
        assert_eq!(
            tgid_in_status("Name:\tx\nTgid:\t4321\nPid:\t4333\n"),
            Some(4321)
        );
        assert_eq!(tgid_in_status("Name:\tx\n"), None);
        assert_eq!(open_group(u32::MAX).err(), Some(libc::ESRCH));
    }

    #[test]
    fn a_socket_is_judged_by_inode_and_by_its_single_name_in_a_writable_place() {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path().canonicalize().expect("canonical");
        let (work, outside) = (root.join("work"), root.join("outside"));
        for folder in [&work, &outside] {
            std::fs::create_dir(folder).expect("mkdir");
        }
        let _listeners: Vec<_> = ["work/a.sock", "outside/b.sock", "outside/c.sock"]
            .iter()
            .map(|name| std::os::unix::net::UnixListener::bind(root.join(name)).expect("bind"))
            .collect();
        // A second name for a socket outside, inside the writable place.
        std::fs::hard_link(outside.join("b.sock"), work.join("b-again.sock")).expect("link");
        let judge = Judge::new(&SandboxPolicy {
            writable: vec![work.clone()],
            unix_sockets: vec![outside.join("c.sock")],
            ..SandboxPolicy::default()
        });
        let verdict = |path: &Path| {
            let metadata = std::fs::metadata(path).expect("stat");
            judge.allows(&metadata, path)
        };
        assert!(verdict(&work.join("a.sock")));
        assert!(verdict(&outside.join("c.sock")));
        assert!(!verdict(&outside.join("b.sock")));
        assert!(
            !verdict(&work.join("b-again.sock")),
            "a hard link is a second name"
        );
        std::fs::write(work.join("plain"), "x").expect("write");
        assert!(!verdict(&work.join("plain")), "not a socket");
    }
}
