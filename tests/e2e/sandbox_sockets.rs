//! UNIX sockets judged by what they are, not by their names: a second name for a socket
//! outside (a hard link, a link, a relative path), a socket bound after the command started,
//! a listed socket reached through a link; and connections the gate makes on a command's
//! behalf (TCP, blocking and not, its own servers) still work.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use serde_json::json;
use talaria_harness::MockReply;

use crate::sandbox_doors::{greeter, namespaces_expected, run_turn, yolo_env};
use crate::support::*;

/// A Python one-liner that connects a UNIX stream socket to `target` (a Python expression)
/// and prints what the server says, or the error.
fn connect_unix(target: &str) -> String {
    format!(
        "/usr/bin/python3 -c \"import socket; s = socket.socket(socket.AF_UNIX); s.connect({target}); print(s.recv(64).decode().strip())\" 2>&1 | tail -n1"
    )
}

/// A socket at `path` that greets its clients, reachable by anyone (the sandbox, not the
/// file's mode, is what is tested).
fn open_greeter(path: &Path) {
    greeter(std::os::unix::net::UnixListener::bind(path).expect("bind"));
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o777)).expect("chmod");
}

/// Runs `commands` as one turn of terminal calls; returns each call's result.
pub(crate) async fn results_of(env: &mut TestEnv, commands: &[String]) -> Vec<String> {
    for (i, command) in commands.iter().enumerate() {
        env.mock.push(MockReply::tool_call(
            &format!("s{i}"),
            "terminal",
            json!({ "command": command }),
        ));
    }
    env.mock.push(MockReply::text(&["done"]));
    let (mut agent, session) = env.session().await;
    run_turn(&mut agent, &session).await;
    (1..=commands.len())
        .map(|i| {
            tool_results(&env.mock, i)
                .last()
                .cloned()
                .unwrap_or_default()
        })
        .collect()
}

#[tokio::test]
async fn a_second_name_for_a_socket_outside_is_out_of_reach() {
    if !sandbox_enforced() {
        return;
    }
    let outside = tempfile::tempdir().expect("outside");
    let socket = outside.path().join("service.sock");
    open_greeter(&socket);
    let mut env = yolo_env(Vec::new(), "").await;
    let workspace = env.workspace.path().to_path_buf();
    // Names made before the session, by the user: the kernel lists only the bound one.
    std::fs::hard_link(&socket, workspace.join("linked.sock")).expect("hard link");
    std::fs::hard_link(&socket, outside.path().join("again.sock")).expect("hard link");
    std::os::unix::fs::symlink(&socket, workspace.join("pointer.sock")).expect("symlink");
    let commands = vec![
        connect_unix(&format!("'{}'", workspace.join("linked.sock").display())),
        connect_unix("'linked.sock'"),
        connect_unix(&format!(
            "'{}'",
            outside.path().join("again.sock").display()
        )),
        connect_unix("'pointer.sock'"),
        // A name made by the command itself: refused by Landlock or judged by inode.
        format!(
            "ln {} made.sock 2>&1; {}",
            socket.display(),
            connect_unix("'made.sock'")
        ),
    ];
    env.unprivileged(&[outside.path()]);
    let results = results_of(&mut env, &commands).await;
    for (command, result) in commands.iter().zip(&results) {
        assert!(
            !result.contains("HELLO-FROM-OUTSIDE"),
            "reached through another name by {command}: {result}"
        );
    }
    if namespaces_expected() {
        // The gate's answer, not a missing file.
        assert!(results[0].contains("Permission denied"), "{}", results[0]);
    }
}

#[tokio::test]
async fn a_socket_bound_after_the_command_started_is_out_of_reach() {
    if !sandbox_enforced() {
        return;
    }
    let outside = tempfile::tempdir().expect("outside");
    let late = outside.path().join("late.sock");
    let mut env = yolo_env(Vec::new(), "").await;
    let started = env.workspace.path().join("started");
    // The command says it runs, then tries for five seconds; the socket appears meanwhile.
    let command = format!(
        "/usr/bin/python3 -c \"
import socket, time, errno
open('started', 'w').close()
last = 'never tried'
for _ in range(50):
    s = socket.socket(socket.AF_UNIX)
    try:
        s.connect('{late}')
        print(s.recv(64).decode().strip()); break
    except OSError as e:
        last = errno.errorcode.get(e.errno, str(e.errno))
    time.sleep(0.1)
else:
    print('last error', last)
\" 2>&1 | tail -n1",
        late = late.display()
    );
    let binder = {
        let late = late.clone();
        once_started(started.clone(), move || open_greeter(&late))
    };
    env.unprivileged(&[outside.path()]);
    let results = results_of(&mut env, &[command]).await;
    binder.join().expect("binder");
    assert!(started.exists(), "the command ran");
    assert!(
        !results[0].contains("HELLO-FROM-OUTSIDE"),
        "a socket bound after the start was reached: {}",
        results[0]
    );
    if namespaces_expected() {
        assert!(results[0].contains("last error EACCES"), "{}", results[0]);
    }
}

#[tokio::test]
async fn a_listed_socket_is_reached_by_what_it_is_and_the_gate_makes_other_connections() {
    if !sandbox_enforced() || !namespaces_expected() {
        // Without namespaces commands create no UNIX socket at all (sandbox_doors).
        return;
    }
    let outside = tempfile::tempdir().expect("outside");
    let listed = outside.path().join("listed.sock");
    open_greeter(&listed);
    let tcp = std::net::TcpListener::bind("127.0.0.1:0").expect("tcp");
    let port = tcp.local_addr().expect("addr").port();
    std::thread::spawn(move || {
        for stream in tcp.incoming().flatten() {
            use std::io::Write;
            let mut stream = stream;
            let _ = stream.write_all(b"HELLO-OVER-TCP\n");
        }
    });
    let mut env = yolo_env(
        Vec::new(),
        &format!("[sandbox]\nunix_sockets = [\"{}\"]\n", listed.display()),
    )
    .await;
    std::os::unix::fs::symlink(&listed, env.workspace.path().join("to-listed.sock"))
        .expect("symlink");
    let tcp_connect = |timeout: &str| {
        format!(
            "/usr/bin/python3 -c \"import socket; s = socket.socket(); {timeout}s.connect(('127.0.0.1', {port})); print(s.recv(64).decode().strip())\" 2>&1 | tail -n1"
        )
    };
    let commands = vec![
        connect_unix(&format!("'{}'", listed.display())),
        connect_unix("'to-listed.sock'"),
        // Blocking, then non-blocking (a timeout: connect returns at once and is polled).
        tcp_connect(""),
        tcp_connect("s.settimeout(5); "),
        // An abstract server of the command's own, and a client of it.
        "/usr/bin/python3 -c \"import socket\ns = socket.socket(socket.AF_UNIX); s.bind('\\0talaria-own'); s.listen(1)\nc = socket.socket(socket.AF_UNIX); c.connect('\\0talaria-own'); a, _ = s.accept(); a.send(b'OWN-ABSTRACT'); print(c.recv(16).decode())\" 2>&1 | tail -n1".to_string(),
        // A bad address is the kernel's error, as without the gate.
        "/usr/bin/python3 -c \"import socket; s = socket.socket(socket.AF_UNIX); s.connect('/nonexistent/x.sock')\" 2>&1 | tail -n1".to_string(),
    ];
    env.unprivileged(&[outside.path()]);
    let results = results_of(&mut env, &commands).await;
    assert!(results[0].contains("HELLO-FROM-OUTSIDE"), "{}", results[0]);
    assert!(results[1].contains("HELLO-FROM-OUTSIDE"), "{}", results[1]);
    assert!(results[2].contains("HELLO-OVER-TCP"), "{}", results[2]);
    assert!(results[3].contains("HELLO-OVER-TCP"), "{}", results[3]);
    assert!(results[4].contains("OWN-ABSTRACT"), "{}", results[4]);
    assert!(
        results[5].contains("FileNotFoundError"),
        "a missing socket: {}",
        results[5]
    );
}
