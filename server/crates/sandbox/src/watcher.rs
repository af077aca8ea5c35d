//! The watcher: a thread beside every sandboxed command (in the init with namespaces, in the
//! supervisor without) to which a seccomp user-notification filter hands chosen calls of the
//! command and of everything it starts:
//!
//! - `connect`: made on the caller's behalf at the gate (`connect_gate.rs`).
//! - `socket` calls the sandbox refuses (network sockets with the network off, UNIX sockets
//!   without namespaces, UNIX datagram sockets and pairs always): refused with `EACCES` and
//!   logged.
//! - calls that write by path: let through unchanged, and logged when they write outside
//!   the writable places (`recorder.rs`).
//! - System V IPC, without namespaces: only the objects the command made (`ipc.rs`).
//!
//! The log is the sandbox's own record of what it refused: the only thing that can offer a
//! run outside the sandbox.

use std::sync::Arc;

use talaria_unotify::{Call, Listener, Notice, Watch};

use crate::SandboxError;
use crate::connect_gate::{self, Judge};
use crate::ipc::OwnObjects;
use crate::policy::SandboxPolicy;
use crate::recorder::Recorder;
use crate::refusals::Refusal;

/// What the watcher judges by.
struct Watcher {
    judge: Judge,
    recorder: Recorder,
    objects: OwnObjects,
    network: bool,
    /// Whether commands may create UNIX (stream) sockets: only with namespaces.
    unix_sockets: bool,
}

impl Watcher {
    /// The refusal a `socket` or `socketpair` of `family` and `kind` meets, if any.
    fn socket_refusal(&self, family: i32, kind: i32) -> Option<Refusal> {
        if family != libc::AF_UNIX {
            return (!self.network).then_some(Refusal::Network);
        }
        if kind == libc::SOCK_DGRAM || kind == libc::SOCK_RAW {
            return Some(Refusal::UnixDatagram);
        }
        (!self.unix_sockets).then_some(Refusal::UnixSocket)
    }
}

/// Starts the watcher's thread, then installs the filter that hands it the calls of the
/// calling thread and of what it starts; `writable` is what Landlock lets the command write. Called last before the command starts (after
/// Landlock and the other filters, so the thread shares the command's Landlock domain and
/// is not itself watched). Returns `false` where the filter cannot be built (another
/// architecture): then nothing is logged and the caller refuses sockets by filter alone.
pub(crate) fn start(
    policy: &SandboxPolicy,
    writable: Vec<std::path::PathBuf>,
    in_namespaces: bool,
    log: Option<std::fs::File>,
) -> Result<bool, SandboxError> {
    let watcher = Arc::new(Watcher {
        judge: Judge::new(policy),
        recorder: Recorder::new(writable, log),
        objects: OwnObjects::default(),
        network: policy.network,
        unix_sockets: in_namespaces,
    });
    let watch = Watch {
        connect: true,
        writes: watcher.recorder.logs(),
        network_sockets: !policy.network,
        unix_sockets: !in_namespaces,
        unix_datagrams: true,
        sysv_ipc: !in_namespaces,
    };
    // One message: the listener, handed to the watcher's thread once installed.
    let (send, receive) = std::sync::mpsc::channel::<Listener>();
    std::thread::Builder::new()
        .name("sandbox-watcher".into())
        .spawn(move || {
            if let Ok(listener) = receive.recv() {
                serve(Arc::new(listener), watcher);
            }
        })
        .map_err(|e| SandboxError::Seccomp(format!("the watcher's thread: {e}")))?;
    let listener = match Listener::install(&watch) {
        Ok(listener) => listener,
        Err(e) if e.kind() == std::io::ErrorKind::Unsupported => return Ok(false),
        Err(e) => return Err(SandboxError::Seccomp(format!("the watcher's filter: {e}"))),
    };
    send.send(listener)
        .map_err(|_| SandboxError::Seccomp("the watcher's thread is gone".into()))?;
    Ok(true)
}

/// Receives the stopped calls until the listener fails. A `connect` is answered on a thread
/// of its own (a TCP connection may take long; the others need not wait for it); the rest at
/// once.
fn serve(listener: Arc<Listener>, watcher: Arc<Watcher>) {
    loop {
        let notice = match listener.receive() {
            Ok(notice) => notice,
            Err(e) if matches!(e.raw_os_error(), Some(libc::EINTR | libc::ENOENT)) => continue,
            Err(_) => return,
        };
        match notice.call() {
            Call::Connect => connect_apart(&listener, &watcher, notice),
            Call::Socket { family, kind } => match watcher.socket_refusal(family, kind) {
                Some(refusal) => {
                    watcher.recorder.record(refusal);
                    listener.respond(notice.id, Err(libc::EACCES));
                }
                // Its arguments are values, not memory: letting it go on decides nothing.
                None => listener.let_continue(notice.id),
            },
            Call::Write { paths, open_how } => {
                watcher.recorder.look_at_write(&notice, paths, open_how);
                listener.let_continue(notice.id);
            }
            Call::Ipc(call) => crate::ipc::answer(
                &listener,
                &watcher.objects,
                &watcher.recorder,
                notice.id,
                call,
            ),
            Call::Other => listener.let_continue(notice.id),
        }
    }
}

fn connect_apart(listener: &Arc<Listener>, watcher: &Arc<Watcher>, notice: Notice) {
    let (answering, watcher) = (listener.clone(), watcher.clone());
    let spawned = std::thread::Builder::new().spawn(move || {
        let result = connect_gate::handle(&answering, &watcher.judge, &watcher.recorder, &notice);
        answering.respond(notice.id, result);
    });
    if spawned.is_err() {
        listener.respond(notice.id, Err(libc::EAGAIN));
    }
}

#[cfg(test)]
mod tests {
    use std::net::{TcpListener, TcpStream};

    use talaria_unotify::{IpcKind, sysv_get};

    use crate::policy::SandboxPolicy;

    const CREATE: i32 = 0o1000 | 0o600;

    fn remove_segment(id: i32) {
        let _ = std::process::Command::new("ipcrm")
            .args(["-m", &id.to_string()])
            .status();
    }

    #[test]
    fn a_thread_under_the_watcher_reaches_what_it_may_and_nothing_else() {
        if !crate::availability().is_enforced() {
            return;
        }
        let agent = TcpListener::bind("127.0.0.1:0").expect("bind");
        let other = TcpListener::bind("127.0.0.1:0").expect("bind");
        let (agent_port, other_port) = (
            agent.local_addr().expect("address").port(),
            other.local_addr().expect("address").port(),
        );
        // Another program's segment, by a key of its own (two keys no segment has yet: other
        // runs of this test may hold some).
        let free = |key: i32| sysv_get(IpcKind::SharedMemory, key, 0, 0).is_err();
        let key = (0x5a00..0x7a00)
            .step_by(2)
            .map(|k| k + (std::process::id() % 0x100) as i32)
            .find(|&k| free(k) && free(k + 1))
            .expect("a free key");
        let theirs = sysv_get(IpcKind::SharedMemory, key, 4096, CREATE).expect("shmget");
        let dir = tempfile::tempdir().expect("tempdir");
        let log_path = dir.path().join("refusals.log");
        let log = std::fs::File::create(&log_path).expect("log");
        let policy = SandboxPolicy {
            writable: vec![dir.path().canonicalize().expect("canonical")],
            endpoints: vec![format!("0.0.0.0:{agent_port}").parse().expect("address")],
            namespaces: false,
            ..SandboxPolicy::default()
        };
        let seen = std::thread::spawn(move || {
            crate::enter_as_watcher(&policy, false, Some(log)).expect("the watcher");
            let worker = std::thread::spawn(move || {
                (
                    TcpStream::connect(("127.0.0.1", agent_port))
                        .map(drop)
                        .map_err(|e| e.kind()),
                    TcpStream::connect(("localhost", agent_port)).is_ok(),
                    TcpStream::connect(("127.0.0.1", other_port)).is_ok(),
                )
            });
            let connects = worker.join().expect("worker");
            let found = sysv_get(IpcKind::SharedMemory, key, 0, 0).map_err(|e| e.raw_os_error());
            let mine = sysv_get(IpcKind::SharedMemory, 0, 4096, CREATE).expect("its own");
            let mine_again =
                sysv_get(IpcKind::SharedMemory, key + 1, 4096, CREATE).and_then(|id| {
                    sysv_get(IpcKind::SharedMemory, key + 1, 0, 0).map(|again| (id, again))
                });
            (connects, found, mine, mine_again)
        })
        .join()
        .expect("the watched thread");
        remove_segment(theirs);
        let ((to_agent, to_agent_by_name, to_other), found, mine, mine_again) = seen;
        remove_segment(mine);
        if let Ok((id, _)) = mine_again {
            remove_segment(id);
        }
        assert_eq!(
            to_agent,
            Err(std::io::ErrorKind::PermissionDenied),
            "the agent's listener"
        );
        assert!(!to_agent_by_name, "by another name");
        assert!(to_other, "any other listener, from a worker thread");
        assert_eq!(found, Err(Some(libc::EACCES)), "another program's segment");
        assert!(mine >= 0 && mine != theirs);
        let (made, again) = mine_again.expect("a keyed segment of its own");
        assert_eq!(made, again, "found again by its key");
        // The sandbox's own record of what it refused, once each.
        let logged = std::fs::read_to_string(&log_path).expect("log");
        let kinds: Vec<&str> = logged
            .lines()
            .filter_map(|line| line.split("\"kind\":\"").nth(1))
            .filter_map(|rest| rest.split('"').next())
            .collect();
        // (Resolving `localhost` may also try the name service's UNIX socket, refused here.)
        for kind in ["endpoint", "shared_object"] {
            assert_eq!(kinds.iter().filter(|k| **k == kind).count(), 1, "{logged}");
        }
    }
}
