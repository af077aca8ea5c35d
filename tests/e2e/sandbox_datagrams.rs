//! UNIX datagrams and the watcher's reach: a datagram socket can send to any socket's name
//! with every `sendto` or `sendmsg` (no filter can read where), so commands get none, in
//! both modes, however they ask for one; stream pairs still work. And a program that made
//! itself undumpable still reaches the sockets it may (its calls are read with the
//! capability the watcher holds inside the sandbox's user namespace alone).

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::Duration;

use crate::sandbox_doors::{greeter, namespaces_expected, yolo_env};
use crate::sandbox_sockets::results_of;
use crate::support::*;

/// A Python program (run with `/usr/bin/python3 -c`), its last line of output kept.
fn python(program: &str) -> String {
    format!("/usr/bin/python3 -c \"{program}\" 2>&1 | tail -n1")
}

/// A datagram socket at `path` that anyone may write to; what it receives is collected.
fn datagram_sink(path: &Path) -> std::sync::Arc<std::sync::Mutex<Vec<Vec<u8>>>> {
    let socket = std::os::unix::net::UnixDatagram::bind(path).expect("bind");
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o777)).expect("chmod");
    socket
        .set_read_timeout(Some(Duration::from_millis(200)))
        .expect("timeout");
    let got = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let keep = got.clone();
    std::thread::spawn(move || {
        let mut buffer = [0u8; 256];
        loop {
            match socket.recv(&mut buffer) {
                Ok(n) => keep.lock().expect("got").push(buffer[..n].to_vec()),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(e) if e.kind() == std::io::ErrorKind::TimedOut => {}
                Err(_) => return,
            }
            if std::sync::Arc::strong_count(&keep) == 1 {
                return;
            }
        }
    });
    got
}

#[tokio::test]
async fn commands_get_no_unix_datagram_socket_however_they_ask_and_stream_pairs_still_work() {
    if !sandbox_enforced() {
        return;
    }
    let outside = tempfile::tempdir().expect("outside");
    let sink = outside.path().join("sink.sock");
    let got = datagram_sink(&sink);
    let mut env = yolo_env(Vec::new(), "").await;
    let ws = env.workspace.path().to_path_buf();
    // A second name for the sink, in the workspace.
    std::fs::hard_link(&sink, ws.join("sink-again.sock")).expect("hard link");
    let to = format!("'{}'", sink.display());
    let commands = vec![
        python(&format!(
            "import socket as k; s = k.socket(k.AF_UNIX, k.SOCK_DGRAM); s.sendto(b'D1', {to}); print('SENT')"
        )),
        python(&format!(
            "import socket as k; a, b = k.socketpair(k.AF_UNIX, k.SOCK_DGRAM); a.sendto(b'D2', {to}); print('SENT')"
        )),
        python(&format!(
            "import socket as k; s = k.socket(k.AF_UNIX, k.SOCK_RAW); s.sendto(b'D3', {to}); print('SENT')"
        )),
        python(&format!(
            "import socket as k; s = k.socket(k.AF_UNIX, k.SOCK_DGRAM | k.SOCK_NONBLOCK | k.SOCK_CLOEXEC); s.sendmsg([b'D4'], [], 0, {to}); print('SENT')"
        )),
        python(
            "import socket as k; s = k.socket(k.AF_UNIX, k.SOCK_DGRAM); s.sendto(b'D5', 'sink-again.sock'); print('SENT')",
        ),
        // Even a datagram to a socket of the command's own, in the workspace.
        python(
            "import socket as k; r = k.socket(k.AF_UNIX, k.SOCK_DGRAM); r.bind('own.sock'); print('BOUND')",
        ),
        python(
            "import socket as k; a, b = k.socketpair(); a.send(b'PAIR-OK'); print(b.recv(16).decode())",
        ),
    ];
    env.unprivileged(&[outside.path()]);
    let results = results_of(&mut env, &commands).await;
    for (i, result) in results[..6].iter().enumerate() {
        assert!(
            result.contains("PermissionError") && !result.contains("SENT"),
            "command {i}: {result}"
        );
    }
    assert!(results[6].contains("PAIR-OK"), "{}", results[6]);
    std::thread::sleep(Duration::from_millis(300));
    assert!(got.lock().expect("got").is_empty(), "a datagram arrived");
}

#[tokio::test]
async fn a_program_that_made_itself_undumpable_still_reaches_the_sockets_it_may() {
    if !sandbox_enforced() || !namespaces_expected() {
        // Without namespaces commands create no UNIX socket at all.
        return;
    }
    let outside = tempfile::tempdir().expect("outside");
    let listed = outside.path().join("listed.sock");
    let unlisted = outside.path().join("unlisted.sock");
    for path in [&listed, &unlisted] {
        greeter(std::os::unix::net::UnixListener::bind(path).expect("bind"));
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o777)).expect("chmod");
    }
    let mut env = yolo_env(
        Vec::new(),
        &format!("[sandbox]\nunix_sockets = [\"{}\"]\n", listed.display()),
    )
    .await;
    let own = env.workspace.path().join("own.sock");
    greeter(std::os::unix::net::UnixListener::bind(&own).expect("bind"));
    // PR_SET_DUMPABLE (4) to 0, as ssh-agent and other key holders do; PR_GET_DUMPABLE (3)
    // shows it took.
    let undumpable_connect = |target: &Path| {
        python(&format!(
            "import ctypes, socket; c = ctypes.CDLL(None); c.prctl(4, 0, 0, 0, 0); d = c.prctl(3, 0, 0, 0, 0); s = socket.socket(socket.AF_UNIX); s.connect('{}'); print('dumpable', d, s.recv(64).decode().strip())",
            target.display()
        ))
    };
    let commands = vec![
        undumpable_connect(&listed),
        undumpable_connect(&own),
        undumpable_connect(&unlisted),
    ];
    env.unprivileged(&[outside.path()]);
    let results = results_of(&mut env, &commands).await;
    for result in &results[..2] {
        assert!(
            result.contains("dumpable 0 HELLO-FROM-OUTSIDE"),
            "an allowed socket: {result}"
        );
    }
    // Masked when the command started (a refused connection), or refused at the gate.
    assert!(
        !results[2].contains("HELLO")
            && (results[2].contains("PermissionError") || results[2].contains("ConnectionRefused")),
        "an unlisted socket stays out of reach: {}",
        results[2]
    );
}
