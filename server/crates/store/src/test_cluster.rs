//! A throwaway PostgreSQL cluster for tests and the bench: `initdb` in a temporary
//! directory, `pg_ctl` on a free port (as `nobody` when run as root, since the server refuses
//! root), stopped when dropped. Needs Debian's `postgresql` (`tests/run-all.sh` installs it).
// Set-up helpers for tests: a step that fails is a failed test.
#![allow(clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};

/// A running throwaway cluster.
pub struct TestCluster {
    bin: PathBuf,
    data: PathBuf,
    port: u16,
    as_user: Option<&'static str>,
    /// Extra server settings (`-c name=value`), kept for restarts.
    settings: Vec<String>,
    dir: tempfile::TempDir,
}

/// The directory holding `initdb` and `pg_ctl`, newest version first.
fn postgres_bin() -> PathBuf {
    let mut candidates: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .map(|dirs| dirs.flatten().map(|d| d.path().join("bin")).collect())
        .unwrap_or_default();
    candidates.sort();
    candidates
        .into_iter()
        .rev()
        .find(|dir| dir.join("initdb").exists())
        .expect("PostgreSQL's initdb (Debian's postgresql package)")
}

fn running_as_root() -> bool {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0)
}

/// A port for a new cluster: below the kernel's ephemeral range (so no client socket of
/// another test takes it as its local port while the cluster is down between a stop and a
/// start), free when chosen, and never handed to two clusters of this process.
fn free_port() -> u16 {
    use std::hash::BuildHasher;
    static HANDED_OUT: std::sync::Mutex<Vec<u16>> = std::sync::Mutex::new(Vec::new());
    let ephemeral_low = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|range| range.split_whitespace().next()?.parse::<u16>().ok())
        .unwrap_or(32768);
    let low = 10_000u16.min(ephemeral_low / 2);
    let span = u64::from(ephemeral_low.saturating_sub(low).max(1));
    let mut handed_out = HANDED_OUT.lock().unwrap_or_else(|e| e.into_inner());
    for attempt in 0..1000u64 {
        let pick = std::collections::hash_map::RandomState::new().hash_one(attempt) % span;
        let port = low + u16::try_from(pick).unwrap_or(0);
        if !handed_out.contains(&port) && std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            handed_out.push(port);
            return port;
        }
    }
    panic!("no free port below the ephemeral range")
}

impl TestCluster {
    /// A cluster with user `talaria` (trusted, no password).
    pub fn start() -> Self {
        Self::start_with(&[])
    }

    /// A cluster with extra server settings (`name=value`).
    pub fn start_with(settings: &[&str]) -> Self {
        let dir = tempfile::tempdir().expect("dir");
        let as_user = running_as_root().then_some("nobody");
        let mut cluster = Self::init(dir, as_user, settings);
        cluster.start_on_a_free_port();
        cluster
    }

    /// A cluster made but not started (a database that is down): [`Self::start_again`]
    /// starts it; its `postgres` database is there from the start ([`Self::url`]).
    pub fn not_started() -> Self {
        let dir = tempfile::tempdir().expect("dir");
        let as_user = running_as_root().then_some("nobody");
        Self::init(dir, as_user, &[])
    }

    /// A cluster that takes TLS connections only, with a self-signed certificate for
    /// `localhost` ([`Self::certificate`]); the administrator's connection uses the socket.
    pub fn start_tls_only() -> Self {
        let dir = tempfile::tempdir().expect("dir");
        let as_user = running_as_root().then_some("nobody");
        let certificate = dir.path().join("server.crt").display().to_string();
        let key = dir.path().join("server.key").display().to_string();
        let cert_setting = format!("ssl_cert_file={certificate}");
        let key_setting = format!("ssl_key_file={key}");
        let cluster = Self::init(dir, as_user, &["ssl=on", &cert_setting, &key_setting]);
        cluster.run(
            Path::new("openssl"),
            &[
                "req",
                "-x509",
                "-newkey",
                "rsa:2048",
                "-nodes",
                "-days",
                "2",
                "-subj",
                "/CN=localhost",
                "-addext",
                "subjectAltName=DNS:localhost",
                "-addext",
                "basicConstraints=critical,CA:FALSE",
                "-keyout",
                &key,
                "-out",
                &certificate,
            ],
        );
        let hba = cluster.data.join("pg_hba.conf");
        let rules = std::fs::read_to_string(&hba).expect("pg_hba.conf");
        std::fs::write(&hba, format!("hostnossl all all all reject\n{rules}")).expect("hba");
        let mut cluster = cluster;
        cluster.start_on_a_free_port();
        cluster
    }

    /// The self-signed certificate of [`Self::start_tls_only`].
    pub fn certificate(&self) -> PathBuf {
        self.dir.path().join("server.crt")
    }

    /// A cluster initialised in `dir`, not started.
    fn init(dir: tempfile::TempDir, as_user: Option<&'static str>, settings: &[&str]) -> Self {
        if as_user.is_some() {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777))
                .expect("chmod");
        }
        let cluster = Self {
            bin: postgres_bin(),
            data: dir.path().join("data"),
            port: free_port(),
            as_user,
            settings: settings.iter().map(|s| (*s).to_string()).collect(),
            dir,
        };
        let data = cluster.data.display().to_string();
        cluster.run(
            &cluster.bin.join("initdb"),
            &[
                "-D",
                &data,
                "-U",
                "talaria",
                "--auth=trust",
                "-E",
                "UTF8",
                "--no-locale",
            ],
        );
        cluster
    }

    /// A directory the cluster's user may write (for certificates and the like).
    pub fn scratch(&self) -> &Path {
        self.dir.path()
    }

    /// Runs `program` as the cluster's user.
    pub fn run(&self, program: &Path, args: &[&str]) {
        assert!(
            self.runs(program, args),
            "{} {args:?} failed",
            program.display()
        );
    }

    /// Whether `program`, run as the cluster's user, succeeded.
    fn runs(&self, program: &Path, args: &[&str]) -> bool {
        match self.as_user {
            Some(user) => Command::new("runuser")
                .args(["-u", user, "--"])
                .arg(program)
                .args(args)
                .current_dir("/")
                .stdout(std::process::Stdio::null())
                .status(),
            None => Command::new(program)
                .args(args)
                .stdout(std::process::Stdio::null())
                .status(),
        }
        .expect("runs")
        .success()
    }

    /// Starts the server; when its port was taken meanwhile (by anything on the machine),
    /// on another free port.
    fn start_on_a_free_port(&mut self) {
        for _ in 0..5 {
            if self.pg_ctl_succeeds("start") {
                return;
            }
            let log = self.log();
            if !log.contains("could not bind") && !log.contains("could not create any TCP/IP") {
                panic!("the test cluster did not start; its log:\n{log}");
            }
            self.port = free_port();
        }
        panic!("the test cluster found no port; its log:\n{}", self.log());
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.data.join("log")).unwrap_or_default()
    }

    fn pg_ctl(&self, action: &str) {
        assert!(
            self.pg_ctl_succeeds(action),
            "pg_ctl {action} failed; the cluster's log:\n{}",
            self.log()
        );
    }

    fn pg_ctl_succeeds(&self, action: &str) -> bool {
        let data = self.data.display().to_string();
        let mut options = format!(
            "-p {} -k {data} -c listen_addresses=127.0.0.1 -c fsync=off",
            self.port
        );
        for setting in &self.settings {
            options.push_str(" -c ");
            options.push_str(setting);
        }
        let log = self.data.join("log").display().to_string();
        let mut args = vec!["-D", &data, "-o", &options, "-l", &log, "-w"];
        if action != "start" {
            args.extend(["-m", "immediate"]);
        }
        args.push(action);
        self.runs(&self.bin.join("pg_ctl"), &args)
    }

    /// Stops the server at once (connections dropped, as in a crash).
    pub fn stop(&self) {
        self.pg_ctl("stop");
    }

    /// Starts a stopped server again on the same port.
    pub fn start_again(&self) {
        self.pg_ctl("start");
    }

    /// Stops every process of the server with SIGSTOP (`false`) or lets them go on with
    /// SIGCONT (`true`): a frozen server keeps its connections open and answers nothing.
    pub fn freeze(&self, frozen: bool) {
        let pid_file = std::fs::read_to_string(self.data.join("postmaster.pid")).expect("pid");
        let postmaster: i32 = pid_file
            .lines()
            .next()
            .and_then(|line| line.trim().parse().ok())
            .expect("the postmaster's pid");
        let mut pids = vec![postmaster];
        for entry in std::fs::read_dir("/proc").expect("/proc").flatten() {
            let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
                continue;
            };
            let stat = std::fs::read_to_string(entry.path().join("stat")).unwrap_or_default();
            let parent = stat
                .rsplit_once(')')
                .and_then(|(_, rest)| rest.split_whitespace().nth(1))
                .and_then(|ppid| ppid.parse::<i32>().ok());
            if parent == Some(postmaster) {
                pids.push(pid);
            }
        }
        let signal = if frozen { "-STOP" } else { "-CONT" };
        // Each process on its own: a backend may end between the listing and the signal
        // (its client left); the postmaster must take it.
        for pid in &pids {
            let status = Command::new("kill")
                .arg(signal)
                .arg(pid.to_string())
                .status()
                .expect("kill");
            assert!(
                status.success() || *pid != postmaster,
                "kill {signal} {postmaster}"
            );
        }
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn url(&self, database: &str) -> String {
        format!("postgres://talaria@127.0.0.1:{}/{database}", self.port)
    }

    /// A fresh, empty database's URL.
    pub fn database(&self) -> String {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let name = format!("t{}", NEXT.fetch_add(1, Ordering::Relaxed));
        let mut admin = self.admin();
        admin
            .batch_execute(&format!("CREATE DATABASE {name}"))
            .expect("create database");
        self.url(&name)
    }
}

impl TestCluster {
    /// The administrator's connection, over the server's Unix socket.
    pub fn admin(&self) -> postgres::Client {
        postgres::Config::new()
            .host_path(&self.data)
            .port(self.port)
            .user("talaria")
            .dbname("postgres")
            .connect(postgres::NoTls)
            .expect("admin connection")
    }
}

impl Drop for TestCluster {
    fn drop(&mut self) {
        let data = self.data.display().to_string();
        let stop = self.bin.join("pg_ctl");
        // Already stopped by a test is fine.
        let _ = match self.as_user {
            Some(user) => Command::new("runuser")
                .args(["-u", user, "--"])
                .arg(&stop)
                .args(["-D", &data, "-m", "immediate", "stop"])
                .current_dir("/")
                .stdout(std::process::Stdio::null())
                .status(),
            None => Command::new(&stop)
                .args(["-D", &data, "-m", "immediate", "stop"])
                .stdout(std::process::Stdio::null())
                .status(),
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cluster_whose_port_was_taken_before_it_started_starts_on_another() {
        let dir = tempfile::tempdir().expect("dir");
        let mut cluster = TestCluster::init(dir, running_as_root().then_some("nobody"), &[]);
        let taken = std::net::TcpListener::bind(("127.0.0.1", cluster.port)).expect("the port");
        cluster.start_on_a_free_port();
        assert_ne!(cluster.port, taken.local_addr().expect("address").port());
        cluster
            .admin()
            .batch_execute("SELECT 1")
            .expect("the cluster answers");
    }

    #[test]
    fn ports_are_below_the_ephemeral_range_and_never_handed_out_twice() {
        let ports: Vec<u16> = (0..50).map(|_| free_port()).collect();
        let mut distinct = ports.clone();
        distinct.sort_unstable();
        distinct.dedup();
        assert_eq!(distinct.len(), ports.len());
        assert!(ports.iter().all(|port| *port < 32768 && *port >= 10_000));
    }
}
