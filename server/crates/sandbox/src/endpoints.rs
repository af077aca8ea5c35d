//! The agent's own endpoints, kept out of its commands' reach: the TCP listeners of a
//! `talaria serve` and the file its token lies in. A sandboxed command that could read the
//! token and reach the listener would drive a session of its own outside the sandbox.
//!
//! A server registers them ([`register`]) for the sessions of its own process and, through a
//! registry every Talaria process of the same user reads, for everyone else's commands: one
//! record per live server in a private folder (`/tmp/talaria-endpoints-<uid>/`, which each
//! command's policy hides, so no command can read, change or remove a record). Each command
//! then hides every registered token file and its connect gate refuses every registered
//! listener, read when the command starts.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde::{Deserialize, Serialize};

/// Endpoints commands may not reach.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Endpoints {
    /// Listening sockets (as bound: `0.0.0.0:8765` stands for every address of the machine).
    #[serde(default)]
    pub listeners: Vec<SocketAddr>,
    /// Files holding what lets a client in (a server's token).
    #[serde(default)]
    pub secrets: Vec<PathBuf>,
}

impl Endpoints {
    fn extend(&mut self, other: Endpoints) {
        for listener in other.listeners {
            if !self.listeners.contains(&listener) {
                self.listeners.push(listener);
            }
        }
        for secret in other.secrets {
            if !self.secrets.contains(&secret) {
                self.secrets.push(secret);
            }
        }
    }
}

/// This process's own endpoints (none unless it is a server).
static OWN: Mutex<Endpoints> = Mutex::new(Endpoints {
    listeners: Vec::new(),
    secrets: Vec::new(),
});

/// This process's own endpoints, for the policy of its sessions' commands.
pub fn own() -> Endpoints {
    OWN.lock().map(|own| own.clone()).unwrap_or_default()
}

/// A server's record in the registry, removed when dropped (the server stops).
#[derive(Debug)]
pub struct Registration {
    record: Option<PathBuf>,
    unshared: Option<String>,
}

impl Registration {
    /// Why other Talaria processes will not know these endpoints, when the registry could not
    /// be written (this process's own commands are still kept away).
    pub fn unshared(&self) -> Option<&str> {
        self.unshared.as_deref()
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        if let Some(record) = self.record.take() {
            let _ = std::fs::remove_file(record);
        }
    }
}

/// Registers `listeners` and the token file `token` of this process's server: its own
/// sessions' commands get them in their policy, and every other Talaria process of the user
/// reads them from the registry. Blocking (writes one small file). A registry that cannot
/// be written (a folder another user made, a full disk) leaves this process's own commands
/// kept away and says why ([`Registration::unshared`]).
pub fn register(listeners: &[SocketAddr], token: &Path) -> Registration {
    let endpoints = Endpoints {
        listeners: listeners.to_vec(),
        secrets: vec![token.to_path_buf()],
    };
    if let Ok(mut own) = OWN.lock() {
        own.extend(endpoints.clone());
    }
    let record = registry()
        .map_err(|e| e.to_string())
        .and_then(|folder| write_record(&folder, &endpoints).map_err(|e| e.to_string()));
    match record {
        Ok(path) => Registration {
            record: Some(path),
            unshared: None,
        },
        Err(why) => Registration {
            record: None,
            unshared: Some(why),
        },
    }
}

/// Every registered server's endpoints (of live processes), with the registry's own folder
/// among the secrets when there is one (a folder that does not exist holds nothing to hide,
/// and hiding it would keep commands from making files beside it). Blocking (lists one
/// folder); the helper reads it as each command starts.
pub fn registered() -> Endpoints {
    let mut out = Endpoints::default();
    let Some(folder) = registry_folder().filter(|folder| folder.symlink_metadata().is_ok()) else {
        return out;
    };
    out.secrets.push(folder.clone());
    if !is_private_folder(&folder) {
        return out;
    }
    let Ok(entries) = std::fs::read_dir(&folder) else {
        return out;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = record_pid(&name.to_string_lossy()) else {
            continue;
        };
        if !is_alive(pid) {
            continue;
        }
        if let Some(endpoints) = std::fs::read_to_string(entry.path())
            .ok()
            .and_then(|text| serde_json::from_str::<Endpoints>(&text).ok())
        {
            out.extend(endpoints);
        }
    }
    out
}

/// Where the registry lies: a fixed place every process of the user finds, whatever its
/// `HOME`, `TALARIA_HOME` or `TMPDIR` (`/tmp/talaria-endpoints-<uid>`).
pub fn registry_folder() -> Option<PathBuf> {
    #[cfg(unix)]
    {
        let uid = nix::unistd::getuid().as_raw();
        Some(PathBuf::from(format!("/tmp/talaria-endpoints-{uid}")))
    }
    #[cfg(not(unix))]
    {
        None
    }
}

/// The registry's folder, made private if missing; refused if it is not this user's own
/// private folder (another user could have made it first).
fn registry() -> std::io::Result<PathBuf> {
    let folder =
        registry_folder().ok_or_else(|| std::io::Error::other("no registry on this platform"))?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::DirBuilderExt;
        match std::fs::DirBuilder::new().mode(0o700).create(&folder) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(e),
        }
    }
    if !is_private_folder(&folder) {
        return Err(std::io::Error::other(format!(
            "{} is not a private folder of this user",
            folder.display()
        )));
    }
    sweep(&folder);
    Ok(folder)
}

/// Whether `folder` is a real folder (not a link) of this user's that nobody else may
/// enter.
fn is_private_folder(folder: &Path) -> bool {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        std::fs::symlink_metadata(folder).is_ok_and(|m| {
            m.is_dir() && m.uid() == nix::unistd::getuid().as_raw() && m.mode() & 0o077 == 0
        })
    }
    #[cfg(not(unix))]
    {
        let _ = folder;
        false
    }
}

/// Writes this process's record (a new file, 0600, put in place whole).
fn write_record(folder: &Path, endpoints: &Endpoints) -> std::io::Result<PathBuf> {
    let pid = std::process::id();
    let path = folder.join(format!("serve-{pid}.json"));
    let staged = folder.join(format!(".serve-{pid}.json.new"));
    let text = serde_json::to_string(endpoints).map_err(std::io::Error::other)?;
    let _ = std::fs::remove_file(&staged);
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    std::io::Write::write_all(&mut options.open(&staged)?, text.as_bytes())?;
    std::fs::rename(&staged, &path)?;
    Ok(path)
}

/// Removes the records of servers that are gone.
fn sweep(folder: &Path) {
    let Ok(entries) = std::fs::read_dir(folder) else {
        return;
    };
    for entry in entries.flatten() {
        if let Some(pid) = record_pid(&entry.file_name().to_string_lossy())
            && !is_alive(pid)
        {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}

/// The process a record (`serve-<pid>.json`) belongs to.
fn record_pid(name: &str) -> Option<u32> {
    name.strip_prefix("serve-")?
        .strip_suffix(".json")?
        .parse()
        .ok()
}

/// Whether process `pid` exists (a reused number keeps a record alive: it then refuses a
/// port and hides a file for nothing, never the other way round).
fn is_alive(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_is_named_by_its_process_and_read_back_while_it_lives() {
        assert_eq!(record_pid("serve-42.json"), Some(42));
        assert_eq!(record_pid(".serve-42.json.new"), None);
        assert_eq!(record_pid("serve-x.json"), None);
        let dir = tempfile::tempdir().expect("tempdir");
        let endpoints = Endpoints {
            listeners: vec!["127.0.0.1:8765".parse().expect("address")],
            secrets: vec![PathBuf::from("/srv/token")],
        };
        let path = write_record(dir.path(), &endpoints).expect("record");
        assert_eq!(
            path.file_name().and_then(|n| n.to_str()),
            Some(format!("serve-{}.json", std::process::id()).as_str())
        );
        let read: Endpoints =
            serde_json::from_str(&std::fs::read_to_string(&path).expect("read")).expect("json");
        assert_eq!(read, endpoints);
        // A record of a process that is gone is swept.
        std::fs::write(dir.path().join("serve-4294967.json"), "{}").expect("stale");
        sweep(dir.path());
        assert!(!dir.path().join("serve-4294967.json").exists());
        assert!(path.exists());
    }

    #[test]
    fn a_registered_server_is_known_to_every_process_until_it_stops() {
        let listener: SocketAddr = "127.0.0.1:1".parse().expect("address");
        let token = PathBuf::from(format!("/srv/token-of-{}", std::process::id()));
        let registration = register(&[listener], &token);
        assert_eq!(registration.unshared(), None);
        let own = own();
        assert!(own.listeners.contains(&listener) && own.secrets.contains(&token));
        let known = registered();
        assert!(known.listeners.contains(&listener), "{known:?}");
        assert!(known.secrets.contains(&token), "{known:?}");
        let folder = registry_folder().expect("a registry here");
        assert!(known.secrets.contains(&folder), "the registry hides itself");
        drop(registration);
        let after = registered();
        assert!(!after.secrets.contains(&token), "{after:?}");
    }

    #[test]
    fn only_a_private_folder_of_this_user_is_a_registry() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().expect("tempdir");
        let folder = dir.path().join("r");
        std::fs::create_dir(&folder).expect("mkdir");
        std::fs::set_permissions(&folder, std::fs::Permissions::from_mode(0o700)).expect("chmod");
        assert!(is_private_folder(&folder));
        std::fs::set_permissions(&folder, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        assert!(!is_private_folder(&folder));
        let link = dir.path().join("l");
        std::os::unix::fs::symlink(&folder, &link).expect("link");
        assert!(!is_private_folder(&link));
    }
}
