//! The sandbox against the real kernel: a thread enters it (Landlock restricts only the
//! calling thread, so the test process stays free) and tries what a command would.
//!
//! These tests fail, rather than skip, where the kernel offers no sandbox, unless
//! `TALARIA_ALLOW_NO_SANDBOX=1` says that is expected on this machine.

// A test crate: a failed set-up step is a failed test (`expect_used` is for production code).
#![allow(clippy::expect_used)]

use std::io::ErrorKind;
use std::path::PathBuf;

use talaria_sandbox::{SandboxPolicy, availability, enter};

fn require_sandbox() -> bool {
    if availability().is_enforced() {
        return true;
    }
    assert!(
        std::env::var_os("TALARIA_ALLOW_NO_SANDBOX").is_some(),
        "this machine offers no OS sandbox ({}); set TALARIA_ALLOW_NO_SANDBOX=1 where that is expected",
        availability().describe()
    );
    false
}

struct Layout {
    _dir: tempfile::TempDir,
    home: PathBuf,
    workspace: PathBuf,
    outside: PathBuf,
}

fn layout() -> Layout {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().canonicalize().expect("canonical");
    let home = root.join("home");
    let workspace = home.join("project");
    let outside = root.join("outside");
    for folder in [
        home.join(".ssh"),
        home.join(".talaria/skills/demo"),
        workspace.clone(),
        outside.clone(),
    ] {
        std::fs::create_dir_all(folder).expect("mkdir");
    }
    std::fs::write(home.join(".ssh/id_rsa"), "PRIVATE KEY").expect("key");
    std::fs::write(home.join(".talaria/config.toml"), "api_key = 'sk'").expect("config");
    std::fs::write(home.join(".talaria/skills/demo/SKILL.md"), "skill").expect("skill");
    std::fs::write(home.join("notes.txt"), "notes").expect("notes");
    std::fs::write(outside.join("existing.txt"), "keep").expect("existing");
    std::os::unix::fs::symlink(home.join(".ssh/id_rsa"), workspace.join("link-to-key"))
        .expect("link");
    std::os::unix::fs::symlink(home.join(".ssh"), workspace.join("ssh-dir")).expect("link");
    Layout {
        _dir: dir,
        home,
        workspace,
        outside,
    }
}

fn policy(layout: &Layout, network: bool) -> SandboxPolicy {
    SandboxPolicy {
        writable: vec![layout.workspace.clone()],
        hidden: vec![layout.home.join(".ssh"), layout.home.join(".talaria")],
        readable: vec![layout.home.join(".talaria/skills")],
        network,
        ..SandboxPolicy::default()
    }
}

/// Runs `check` on a thread inside the sandbox.
fn inside<T: Send + 'static>(
    policy: SandboxPolicy,
    check: impl FnOnce() -> T + Send + 'static,
) -> T {
    std::thread::spawn(move || {
        enter(&policy).expect("enter the sandbox");
        check()
    })
    .join()
    .expect("the sandboxed thread")
}

fn denied<T: std::fmt::Debug>(result: std::io::Result<T>, what: &str) {
    match result {
        Err(e) if e.kind() == ErrorKind::PermissionDenied || e.raw_os_error() == Some(18) => {}
        other => panic!("{what}: expected a denial, got {other:?}"),
    }
}

#[test]
fn writes_stay_in_the_workspace_and_hidden_places_stay_hidden() {
    if !require_sandbox() {
        return;
    }
    let layout = layout();
    let (home, workspace, outside) = (
        layout.home.clone(),
        layout.workspace.clone(),
        layout.outside.clone(),
    );
    inside(policy(&layout, true), move || {
        // Allowed: reading anything ordinary, writing in the workspace.
        assert_eq!(
            std::fs::read_to_string(home.join("notes.txt")).expect("notes"),
            "notes"
        );
        std::fs::write(workspace.join("out.txt"), "x").expect("write in the workspace");
        std::fs::create_dir(workspace.join("sub")).expect("mkdir in the workspace");
        std::fs::rename(workspace.join("out.txt"), workspace.join("sub/out.txt"))
            .expect("rename within the workspace");
        assert_eq!(
            std::fs::read_to_string(home.join(".talaria/skills/demo/SKILL.md")).expect("skill"),
            "skill"
        );
        assert!(std::fs::read_dir(&home).is_ok(), "the home can be listed");
        // Refused: writing outside, in any form.
        denied(
            std::fs::write(outside.join("new.txt"), "x"),
            "create outside",
        );
        denied(
            std::fs::OpenOptions::new()
                .append(true)
                .open(outside.join("existing.txt")),
            "append outside",
        );
        denied(
            std::fs::remove_file(outside.join("existing.txt")),
            "delete outside",
        );
        denied(
            std::fs::rename(workspace.join("sub/out.txt"), outside.join("moved.txt")),
            "move out of the workspace",
        );
        denied(
            std::fs::write(home.join("new-in-home.txt"), "x"),
            "write in the home",
        );
        denied(
            std::fs::write(home.join(".talaria/config.toml"), "mode = 'yolo'"),
            "rewrite Talaria's config",
        );
        denied(
            std::fs::write(home.join(".talaria/skills/demo/SKILL.md"), "x"),
            "write a skill directly",
        );
        // Refused: reading hidden places, through links too.
        denied(std::fs::read(home.join(".ssh/id_rsa")), "read the key");
        denied(
            std::fs::read(workspace.join("link-to-key")),
            "read the key through a link",
        );
        denied(
            std::fs::read(workspace.join("ssh-dir/id_rsa")),
            "read through a folder link",
        );
        denied(
            std::fs::read(home.join(".talaria/config.toml")),
            "read Talaria's config",
        );
        denied(
            std::fs::hard_link(home.join(".ssh/id_rsa"), workspace.join("hard")),
            "hard-link the key into the workspace",
        );
    });
    assert_eq!(
        std::fs::read_to_string(layout.outside.join("existing.txt")).expect("kept"),
        "keep"
    );
    assert!(!layout.outside.join("new.txt").exists());
}

#[test]
fn the_network_can_be_turned_off() {
    if !require_sandbox() {
        return;
    }
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("listen");
    let address = listener.local_addr().expect("address");
    let layout = layout();
    let online = inside(policy(&layout, true), move || {
        std::net::TcpStream::connect(address).map(|_| ())
    });
    assert!(online.is_ok(), "{online:?}");
    let offline = inside(policy(&layout, false), move || {
        let tcp = std::net::TcpStream::connect(address).map(|_| ());
        let udp = std::net::UdpSocket::bind("127.0.0.1:0").map(|_| ());
        let pair = std::os::unix::net::UnixStream::pair().map(|_| ());
        (tcp, udp, pair)
    });
    assert!(offline.0.is_err(), "TCP: {:?}", offline.0);
    assert!(offline.1.is_err(), "UDP: {:?}", offline.1);
    assert!(offline.2.is_ok(), "socketpair still works: {:?}", offline.2);
}

#[test]
fn without_namespaces_unix_sockets_new_sessions_and_other_processes_are_out_of_reach() {
    if !require_sandbox() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let socket = dir.path().join("outside.sock");
    let _listener = std::os::unix::net::UnixListener::bind(&socket).expect("listen");
    let layout = layout();
    let parent = std::process::id();
    let tried = inside(policy(&layout, true), move || {
        let connect = std::os::unix::net::UnixStream::connect(&socket).map(|_| ());
        let pair = std::os::unix::net::UnixStream::pair().map(|_| ());
        // Children of this thread inherit its sandbox: try what a command would.
        let run = |script: &str| {
            std::process::Command::new("python3")
                .args(["-c", script])
                .output()
                .map(|out| String::from_utf8_lossy(&out.stdout).trim().to_string())
                .unwrap_or_default()
        };
        let setsid =
            run("import os\ntry:\n os.setsid(); print('ran')\nexcept OSError as e: print(e.errno)");
        let limit = run(&format!(
            "import resource\ntry:\n resource.prlimit({parent}, resource.RLIMIT_NOFILE, (4, 4)); print('ran')\nexcept OSError as e: print(e.errno)"
        ));
        let renice = run(&format!(
            "import os\ntry:\n os.setpriority(os.PRIO_PROCESS, {parent}, 19); print('ran')\nexcept OSError as e: print(e.errno)"
        ));
        let user = run(
            "import os\ntry:\n os.setpriority(os.PRIO_USER, 0, 19); print('ran')\nexcept OSError as e: print(e.errno)",
        );
        let affinity = run(&format!(
            "import os\ntry:\n os.sched_setaffinity({parent}, {{0}}); print('ran')\nexcept OSError as e: print(e.errno)"
        ));
        let tiocsti = run(
            "import fcntl, termios, os, pty\nm, s = pty.openpty()\ntry:\n fcntl.ioctl(s, termios.TIOCSTI, b'x'); print('ran')\nexcept OSError as e: print(e.errno)",
        );
        let own = run(
            "import os, resource\nresource.setrlimit(resource.RLIMIT_NOFILE, (64, 64)); os.setpriority(os.PRIO_PROCESS, 0, 5); print('ran')",
        );
        (
            connect,
            pair,
            [setsid, limit, renice, user, affinity, tiocsti],
            own,
        )
    });
    assert!(tried.0.is_err(), "a UNIX socket outside: {:?}", tried.0);
    assert!(tried.1.is_ok(), "socketpair: {:?}", tried.1);
    let eperm = libc_eperm();
    for (what, said) in [
        "setsid",
        "prlimit",
        "renice",
        "renice -u",
        "taskset",
        "TIOCSTI",
    ]
    .iter()
    .zip(&tried.2)
    {
        // TIOCSTI: refused by the filter (EPERM), or the pty could not even be opened
        // without namespaces (no other terminals are granted): either way nothing typed.
        assert!(
            said == &eperm || (*what == "TIOCSTI" && said != "ran"),
            "{what}: {said}"
        );
    }
    assert_eq!(
        tried.3, "ran",
        "a command may change its own limits and priority"
    );
}

fn libc_eperm() -> String {
    "1".to_string()
}

#[test]
fn availability_is_reported() {
    if !require_sandbox() {
        return;
    }
    let described = availability().describe();
    assert!(described.contains("Landlock"), "{described}");
    // A kernel with ABI 5 or newer enforces every right Talaria asks for.
    if let talaria_sandbox::Availability::Enforced { abi, full } = availability() {
        assert!(*abi < 5 || *full, "{described}");
    }
}

#[test]
fn tcp_fast_open_cannot_connect_around_the_gate() {
    if !require_sandbox() {
        return;
    }
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("listen");
    let port = listener.local_addr().expect("address").port();
    let layout = layout();
    // A connection made by `sendto` with MSG_FASTOPEN (Linux's TCP Fast Open client) never
    // passes `connect`: refused; a plain connection still works.
    let script = format!(
        "import socket\n\
         s = socket.socket()\n\
         try:\n    s.sendto(b'x', socket.MSG_FASTOPEN, ('127.0.0.1', {port})); print('fast-open-sent')\n\
         except OSError as e:\n    print('fast-open', e.errno)\n\
         socket.create_connection(('127.0.0.1', {port}), 2); print('plain-connected')\n"
    );
    let said = inside(policy(&layout, true), move || {
        std::process::Command::new("/usr/bin/python3")
            .args(["-c", &script])
            .output()
            .map(|out| String::from_utf8_lossy(&out.stdout).into_owned())
    })
    .expect("python3");
    assert!(
        said.contains(&format!("fast-open {}", libc::EPERM)),
        "{said}"
    );
    assert!(said.contains("plain-connected"), "{said}");
    drop(listener);
}
