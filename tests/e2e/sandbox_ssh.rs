//! A real OpenSSH ControlMaster out of a command's reach: an `sshd` on loopback started by
//! the test, a master connection to it made outside the sandbox (before the command starts,
//! and while it runs, binding its socket after the start), and a sandboxed
//! `ssh -S <ControlPath> host cmd` that would run a command on the server through it. The
//! same `ssh -S` run outside the sandbox does run it (the master is live).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::sandbox_doors::yolo_env;
use crate::sandbox_sockets::results_of;
use crate::support::*;

const SSHD: &str = "/usr/sbin/sshd";

/// An `sshd` on a loopback port that takes one key, as this user; killed when dropped.
struct Server {
    dir: tempfile::TempDir,
    port: u16,
    sshd: Child,
}

impl Server {
    fn start() -> Server {
        assert!(
            Path::new(SSHD).exists(),
            "{SSHD} is missing: install openssh-server (tests/run-all.sh does)"
        );
        let dir = tempfile::tempdir().expect("dir");
        let keygen = |name: &str| {
            let made = Command::new("ssh-keygen")
                .args(["-q", "-t", "ed25519", "-N", "", "-f"])
                .arg(dir.path().join(name))
                .status()
                .expect("ssh-keygen");
            assert!(made.success(), "ssh-keygen {name}");
        };
        keygen("host_key");
        keygen("id");
        std::fs::copy(
            dir.path().join("id.pub"),
            dir.path().join("authorized_keys"),
        )
        .expect("authorized_keys");
        // The privilege separation directory sshd wants when started as root.
        let _ = std::fs::create_dir_all("/run/sshd");
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|listener| listener.local_addr())
            .expect("a free port")
            .port();
        let config = dir.path().join("sshd_config");
        std::fs::write(
            &config,
            format!(
                "Port {port}\nListenAddress 127.0.0.1\nHostKey {d}/host_key\n\
                 AuthorizedKeysFile {d}/authorized_keys\nPidFile {d}/sshd.pid\nUsePAM no\n\
                 StrictModes no\nPasswordAuthentication no\nKbdInteractiveAuthentication no\n\
                 PermitRootLogin prohibit-password\n",
                d = dir.path().display()
            ),
        )
        .expect("config");
        let sshd = Command::new(SSHD)
            .args(["-D", "-e", "-f"])
            .arg(&config)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("sshd starts");
        let server = Server { dir, port, sshd };
        let until = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < until, "sshd never listened");
            std::thread::sleep(Duration::from_millis(50));
        }
        server
    }

    fn ssh(&self) -> Command {
        ssh_to(self.dir.path(), self.port)
    }

    fn master(&self, control: &Path) {
        master(self.dir.path(), self.port, control);
    }

    /// Ends a master connection.
    fn stop_master(&self, control: &Path) {
        let _ = self
            .ssh()
            .args(["-O", "exit", "-S"])
            .arg(control)
            .arg("127.0.0.1")
            .stderr(Stdio::null())
            .status();
    }
}

/// `ssh` to the server on `port` with the test's key (in `keys`) and no host checks.
fn ssh_to(keys: &Path, port: u16) -> Command {
    let mut ssh = Command::new("ssh");
    ssh.args([
        "-F",
        "/dev/null",
        "-o",
        "BatchMode=yes",
        "-o",
        "StrictHostKeyChecking=no",
        "-o",
        "UserKnownHostsFile=/dev/null",
        "-o",
        "LogLevel=ERROR",
        "-i",
    ])
    .arg(keys.join("id"))
    .args(["-p", &port.to_string()]);
    ssh
}

/// A master connection whose control socket is `control` (it stays in the background).
fn master(keys: &Path, port: u16, control: &Path) {
    let made = ssh_to(keys, port)
        .args(["-M", "-N", "-f", "-o", "ControlPersist=60", "-S"])
        .arg(control)
        .arg("127.0.0.1")
        .status()
        .expect("ssh -M");
    assert!(made.success(), "the master connection");
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.sshd.kill();
        let _ = self.sshd.wait();
    }
}

/// The command a model would send: run `touch MARKER` on the server through the master.
fn through_the_master(control: &Path, port: u16, marker: &Path) -> String {
    format!(
        "ssh -F /dev/null -o BatchMode=yes -o StrictHostKeyChecking=no \
         -o UserKnownHostsFile=/dev/null -p {port} -S {control} 127.0.0.1 \
         'touch {marker}; echo RAN-ON-THE-SERVER' 2>&1 | tail -n2",
        control = control.display(),
        marker = marker.display()
    )
}

#[tokio::test]
async fn a_controlmaster_socket_is_out_of_a_commands_reach_however_early_or_late_it_is_bound() {
    if !sandbox_enforced() {
        return;
    }
    let server = Server::start();
    let outside = tempfile::tempdir().expect("outside");
    let (early, late) = (
        outside.path().join("cm-early"),
        outside.path().join("cm-late"),
    );
    let markers: Vec<PathBuf> = ["outside", "early", "late"]
        .iter()
        .map(|name| outside.path().join(format!("ran-{name}")))
        .collect();
    // The master is live: through it, a command runs on the server from outside.
    server.master(&early);
    let outside_run = Command::new("sh")
        .arg("-c")
        .arg(through_the_master(&early, server.port, &markers[0]))
        .output()
        .expect("ssh outside");
    assert!(
        markers[0].exists(),
        "the master did not run a command from outside: {}",
        String::from_utf8_lossy(&outside_run.stdout)
    );

    let mut env = yolo_env(Vec::new(), "").await;
    let started = env.workspace.path().join("started");
    // The late master is made once the command has started; the command waits for it.
    let late_master = {
        let (late, server_port, dir) = (late.clone(), server.port, server.dir.path().to_path_buf());
        once_started(started.clone(), move || master(&dir, server_port, &late))
    };
    let late_command = format!(
        "touch started; for i in $(seq 50); do [ -S {late} ] && break; sleep 0.1; done; \
         [ -S {late} ] && echo SOCKET-SEEN; sleep 0.3; {}",
        through_the_master(&late, server.port, &markers[2]),
        late = late.display()
    );
    let commands = vec![
        through_the_master(&early, server.port, &markers[1]),
        late_command,
    ];
    let results = results_of(&mut env, &commands).await;
    late_master.join().expect("late master");
    server.stop_master(&early);
    server.stop_master(&late);
    for (command, result) in commands.iter().zip(&results) {
        assert!(
            !result.contains("RAN-ON-THE-SERVER"),
            "{command} ran on the server: {result}"
        );
    }
    assert!(!markers[1].exists(), "the early master ran the command");
    assert!(!markers[2].exists(), "the late master ran the command");
}
