//! What a sandboxed command may touch: the hierarchies it may write, the places hidden from
//! it, the UNIX sockets it may reach, how many processes it may run, and whether it may use
//! the network. Serialised to JSON for the sandbox helper, which resolves the rules that
//! depend on the moment (files matched by name, other sessions' temporary directories) when
//! each command starts.
//!
//! [`SandboxPolicy::access`] is the one answer to "is this place hidden, read-only or
//! writable", wherever it is asked (the helper's gate and refusal log, the file tools'
//! `Places`), on the rules as they stand then ([`SandboxPolicy::resolved`] in the helper;
//! the file tools add each place's resolved name).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::env::EnvRules;

/// The default of `[sandbox] max_processes`: processes (threads count too) one command and
/// everything it starts may run at once.
pub const DEFAULT_MAX_PROCESSES: u32 = 512;

/// The file-system, process and network policy of one sandboxed command.
///
/// Everything is readable except `hidden` (apart from `readable`, which is readable again
/// but not writable); only `writable` (minus `hidden`) is writable.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SandboxPolicy {
    /// Hierarchies the command may change: the workspace roots, the private temporary
    /// directory and `[sandbox] writable`.
    pub writable: Vec<PathBuf>,
    /// Hidden from reads and writes: credential stores, private keys, `TALARIA_HOME`.
    pub hidden: Vec<PathBuf>,
    /// Inside `hidden`, readable again (never writable): e.g. `TALARIA_HOME/skills`.
    pub readable: Vec<PathBuf>,
    /// Whether the command may open network sockets.
    pub network: bool,
    /// The user's homes: their credential stores (`credentials.rs`) and the keys and token
    /// files at their top are hidden, matched when each command starts (so a key created
    /// after the session started is hidden too).
    #[serde(default)]
    pub homes: Vec<PathBuf>,
    /// The session's private temporary directory: other sessions' directories beside it are
    /// hidden (matched when each command starts).
    #[serde(default)]
    pub private_tmp: Option<PathBuf>,
    /// UNIX sockets outside the writable places that commands may connect to
    /// (`[sandbox] unix_sockets`); every other one is out of reach.
    #[serde(default)]
    pub unix_sockets: Vec<PathBuf>,
    /// The most processes (and threads) a command and everything it starts may run at once;
    /// 0 for no limit.
    #[serde(default = "default_max_processes")]
    pub max_processes: u32,
    /// Use user, mount and PID namespaces where the machine allows them (a read-only world
    /// outside the writable places, a fresh `/dev`, processes that die with the command).
    #[serde(default = "yes")]
    pub namespaces: bool,
    /// The agent's own listeners (a `talaria serve`'s): the connect gate refuses them, and
    /// the helper adds every server registered on this machine when each command starts
    /// (`endpoints.rs`).
    #[serde(default)]
    pub endpoints: Vec<SocketAddr>,
    /// A run the user let out of the walls ([`SandboxPolicy::lifted`]): no PID namespace and
    /// no read-only world; with `namespaces`, a mount namespace alone, for the masks.
    #[serde(default)]
    pub let_out: bool,
}

fn default_max_processes() -> u32 {
    DEFAULT_MAX_PROCESSES
}

fn yes() -> bool {
    true
}

impl Default for SandboxPolicy {
    fn default() -> Self {
        Self {
            writable: Vec::new(),
            hidden: Vec::new(),
            readable: Vec::new(),
            network: true,
            homes: Vec::new(),
            private_tmp: None,
            unix_sockets: Vec::new(),
            max_processes: DEFAULT_MAX_PROCESSES,
            namespaces: true,
            endpoints: Vec::new(),
            let_out: false,
        }
    }
}

/// A writable root as the helper grants it: only while it still resolves to itself. Talaria
/// resolves the roots when the session starts; a root that now resolves elsewhere (a command
/// swapped it, or a folder above it, for a link) is not granted, rather than granting where
/// the link leads.
pub fn still_itself(root: &Path) -> Option<PathBuf> {
    let real = root.canonicalize().ok()?;
    if real != root {
        say_not_granted(root, &real);
        return None;
    }
    Some(real)
}

/// Says, on standard error (the helper has no logger; the command's errors are read there),
/// that a root was left out and where it leads now.
fn say_not_granted(root: &Path, real: &Path) {
    eprintln!(
        "talaria sandbox: {} now leads to {}; it is not writable for this command",
        root.display(),
        real.display()
    );
}

/// What a path means to a policy, for explaining a denial.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PathAccess {
    /// Hidden: neither read nor written.
    Hidden,
    /// Readable, not writable.
    ReadOnly,
    /// Readable and writable.
    Writable,
}

/// Whether `name` is another session's private temporary directory (`talaria-<pid>-…`).
fn is_session_tmp(name: &str) -> bool {
    name.strip_prefix("talaria-")
        .and_then(|rest| rest.split('-').next())
        .is_some_and(|pid| !pid.is_empty() && pid.bytes().all(|b| b.is_ascii_digit()))
}

impl SandboxPolicy {
    /// What this policy lets a command do with `path` (absolute; symlinks as given: callers
    /// pass both the path and its resolved form when they differ). Judged against the rules
    /// as they stand now (see [`SandboxPolicy::resolved`]).
    pub fn access(&self, path: &Path) -> PathAccess {
        let under = |roots: &[PathBuf]| roots.iter().any(|root| path.starts_with(root));
        let in_a_home = || {
            self.homes
                .iter()
                .any(|home| crate::credentials::in_home_store(home, path))
        };
        let other_session = || {
            self.private_tmp.as_ref().is_some_and(|own| {
                !path.starts_with(own)
                    && own.parent().is_some_and(|base| {
                        path.strip_prefix(base)
                            .ok()
                            .and_then(|rest| rest.iter().next())
                            .is_some_and(|first| is_session_tmp(&first.to_string_lossy()))
                    })
            })
        };
        if under(&self.hidden) || in_a_home() || other_session() {
            return if under(&self.readable) {
                PathAccess::ReadOnly
            } else {
                PathAccess::Hidden
            };
        }
        if under(&self.writable) {
            PathAccess::Writable
        } else {
            PathAccess::ReadOnly
        }
    }

    /// The policy with the rules that depend on the moment turned into paths: each home's
    /// credential stores and the keys at its top now, and the other sessions' temporary
    /// directories that exist now, each also at its other names through bind mounts.
    /// Blocking (lists a few folders, reads the mount table); the helper calls it as each
    /// command starts.
    pub fn resolved(&self) -> SandboxPolicy {
        let mut out = self.clone();
        for home in &self.homes {
            out.hidden.extend(crate::credentials::home_stores(home));
            out.hidden.extend(crate::credentials::keys_at_top(home));
        }
        if let Some(own) = &self.private_tmp
            && let Some(base) = own.parent()
            && let Ok(entries) = std::fs::read_dir(base)
        {
            for entry in entries.flatten() {
                let path = entry.path();
                if path != *own && is_session_tmp(&entry.file_name().to_string_lossy()) {
                    out.hidden.push(path);
                }
            }
        }
        // Every `talaria serve` of this user: its token hidden, its listeners refused.
        let servers = crate::endpoints::registered(&self.homes);
        out.hidden.extend(servers.secrets);
        for listener in servers.listeners {
            if !out.endpoints.contains(&listener) {
                out.endpoints.push(listener);
            }
        }
        // A hidden place that is a link (a store kept in `~/dotfiles`) is hidden where it
        // leads too, and each is hidden at every name the mount table gives it.
        let real: Vec<PathBuf> = out
            .hidden
            .iter()
            .filter(|path| path.symlink_metadata().is_ok())
            .filter_map(|path| path.canonicalize().ok().filter(|real| real != path))
            .collect();
        for path in real {
            if !out.hidden.contains(&path) {
                out.hidden.push(path);
            }
        }
        let aliases = crate::aliases::of(&out.hidden);
        out.hidden.extend(aliases);
        out.homes.clear();
        out
    }

    /// The policy of one run the user let out of the sandbox's walls after a refusal: writes
    /// wherever the user may write (new files in the home, `~/.cache`, `~/.config`
    /// included), the network on, the machine's processes and devices in view; the hidden
    /// places (keys, credential stores, `TALARIA_HOME`, the agent's own endpoints) stay hidden
    /// and UNIX sockets out of reach, so a command let out, whatever made the sandbox offer
    /// it, still cannot read a secret or reach an agent (see `let_out.rs`).
    pub fn lifted(&self) -> SandboxPolicy {
        SandboxPolicy {
            writable: vec![PathBuf::from("/")],
            network: true,
            let_out: true,
            ..self.clone()
        }
    }

    /// Whether commands may reach the UNIX socket at `path` (absolute): one in a writable
    /// place, or one listed.
    pub fn socket_allowed(&self, path: &Path) -> bool {
        self.unix_sockets.iter().any(|allowed| allowed == path)
            || (self.access(path) == PathAccess::Writable)
    }
}

/// What the helper is told to do before it runs the command.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HelperSpec {
    /// The sandbox to enter; `None` runs the command unconfined (still in a session of its
    /// own, with everything it starts ended with it, and with a clean environment when
    /// `env` is set).
    pub sandbox: Option<SandboxPolicy>,
    /// Environment rules the helper applies itself (for commands started by another
    /// process, such as an editor terminal, whose environment Talaria does not choose).
    pub env: Option<EnvRules>,
    /// Fail (exit 125) instead of running without namespaces when they cannot be set up
    /// (the availability probe).
    #[serde(default)]
    pub require_namespaces: bool,
    /// The command's refusal log (made by Talaria, see `refusals.rs`), which the helper
    /// opens before it enters the sandbox.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refusals: Option<PathBuf>,
    /// The log as the descriptor the supervisor hands the init (never the command).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refusals_fd: Option<i32>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn access_of_paths() {
        let policy = SandboxPolicy {
            writable: vec!["/work/p".into(), "/tmp/t".into()],
            hidden: vec!["/home/u/.ssh".into(), "/home/u/.talaria".into()],
            readable: vec!["/home/u/.talaria/skills".into()],
            homes: vec!["/home/u".into()],
            private_tmp: Some("/tmp/talaria-12-0-ab".into()),
            ..SandboxPolicy::default()
        };
        assert_eq!(
            policy.access(Path::new("/work/p/src")),
            PathAccess::Writable
        );
        assert_eq!(policy.access(Path::new("/work/px")), PathAccess::ReadOnly);
        assert_eq!(policy.access(Path::new("/srv/x")), PathAccess::ReadOnly);
        assert_eq!(
            policy.access(Path::new("/home/u/.ssh/id_rsa")),
            PathAccess::Hidden
        );
        assert_eq!(
            policy.access(Path::new("/home/u/.talaria/config.toml")),
            PathAccess::Hidden
        );
        assert_eq!(
            policy.access(Path::new("/home/u/.talaria/skills/x/SKILL.md")),
            PathAccess::ReadOnly
        );
        assert_eq!(
            policy.access(Path::new("/home/u/ID_RSA")),
            PathAccess::Hidden
        );
        assert_eq!(
            policy.access(Path::new("/home/u/deploy.pem")),
            PathAccess::Hidden
        );
        assert_eq!(
            policy.access(Path::new("/home/u/sub/deploy.pem")),
            PathAccess::ReadOnly
        );
        assert_eq!(
            policy.access(Path::new("/tmp/talaria-99-1-cd/notes")),
            PathAccess::Hidden
        );
        assert_eq!(
            policy.access(Path::new("/tmp/talaria-12-0-ab/notes")),
            PathAccess::ReadOnly,
            "the own directory is judged by the writable list (this policy does not list it)"
        );
        assert_eq!(
            policy.access(Path::new("/tmp/talaria-notes")),
            PathAccess::ReadOnly
        );
    }

    #[test]
    fn resolved_rules_see_files_made_after_the_policy() {
        let dir = tempfile::tempdir().expect("tempdir");
        let home = dir.path().to_path_buf();
        let own = home.join("talaria-1-0-a");
        let other = home.join("talaria-2-0-b");
        for folder in [&own, &other] {
            std::fs::create_dir(folder).expect("mkdir");
        }
        let policy = SandboxPolicy {
            homes: vec![home.clone()],
            private_tmp: Some(own.clone()),
            ..SandboxPolicy::default()
        };
        std::fs::write(home.join("id_ed25519"), "k").expect("key");
        std::fs::write(home.join("late.KEY"), "k").expect("key");
        std::fs::write(home.join("notes.txt"), "n").expect("notes");
        let resolved = policy.resolved();
        assert!(resolved.hidden.contains(&home.join("id_ed25519")));
        assert!(resolved.hidden.contains(&home.join("late.KEY")));
        assert!(resolved.hidden.contains(&other));
        assert!(
            resolved.hidden.contains(&home.join(".ssh")),
            "the stores, existing or not"
        );
        assert!(!resolved.hidden.contains(&own));
        assert!(!resolved.hidden.contains(&home.join("notes.txt")));
    }

    #[test]
    fn resolved_rules_follow_links_and_take_in_every_registered_server() {
        let dir = tempfile::tempdir().expect("tempdir");
        let home = dir.path().canonicalize().expect("canonical");
        std::fs::create_dir_all(home.join("dotfiles/aws")).expect("mkdir");
        std::os::unix::fs::symlink(home.join("dotfiles/aws"), home.join(".aws")).expect("link");
        let server: SocketAddr = "127.0.0.1:2".parse().expect("address");
        let token = home.join("serve-token");
        let record = crate::endpoints::registry_folder(&home).join("serve-1.json");
        std::fs::create_dir_all(record.parent().expect("folder")).expect("registry");
        std::fs::set_permissions(
            record.parent().expect("folder"),
            std::os::unix::fs::PermissionsExt::from_mode(0o700),
        )
        .expect("private");
        std::fs::write(
            &record,
            serde_json::json!({"listeners": [server], "secrets": [&token]}).to_string(),
        )
        .expect("record");
        let policy = SandboxPolicy {
            homes: vec![home.clone()],
            endpoints: vec!["127.0.0.1:3".parse().expect("address")],
            ..SandboxPolicy::default()
        };
        let resolved = policy.resolved();
        assert!(
            resolved.hidden.contains(&home.join("dotfiles/aws")),
            "a store that is a link is hidden where it leads"
        );
        assert!(resolved.hidden.contains(&token), "a server's token");
        assert!(
            resolved.endpoints.contains(&server),
            "{:?}",
            resolved.endpoints
        );
        assert_eq!(resolved.endpoints[0], policy.endpoints[0], "its own first");
        assert_eq!(
            resolved.endpoints.iter().filter(|e| **e == server).count(),
            1
        );
        assert!(resolved.homes.is_empty());
    }

    #[test]
    fn a_let_out_policy_writes_everywhere_and_keeps_what_is_hidden() {
        let policy = SandboxPolicy {
            writable: vec!["/work".into()],
            hidden: vec!["/home/u/.ssh".into()],
            network: false,
            namespaces: true,
            ..SandboxPolicy::default()
        };
        let lifted = policy.lifted();
        assert!(lifted.let_out && lifted.network && lifted.namespaces);
        assert_eq!(lifted.writable, [PathBuf::from("/")]);
        assert_eq!(lifted.hidden, policy.hidden);
    }
}
