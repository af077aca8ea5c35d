//! The agent's own endpoints, kept out of its commands' reach: the TCP listeners of a
//! `talaria serve` and the file its token lies in. A sandboxed command that could read the
//! token and reach the listener would drive a session of its own outside the sandbox.
//!
//! A server registers them ([`register`]) for the sessions of its own process and, through a
//! registry every Talaria process of the same user reads, for everyone else's commands: one
//! record per live server in a private folder of each of the user's homes
//! (`~/.talaria/endpoints/`, under `HOME` and the passwd entry's home, whatever
//! `TALARIA_HOME` is), which each command's policy hides, so no command can read, change or
//! remove a record. Each command then hides every registered token file and its connect gate
//! refuses every registered listener, read when the command starts. (The home is carved
//! around its credential stores anyway, so hiding one more folder in it costs nothing;
//! a registry in `/tmp` would carve `/tmp`, entry by entry, for every command.)

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

/// A server's records in the registries, removed when dropped (the server stops).
#[derive(Debug)]
pub struct Registration {
    records: Vec<PathBuf>,
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
        for record in self.records.drain(..) {
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
    register_in(&crate::home::user_homes(), listeners, token)
}

/// [`register`], in the registries of `homes`.
fn register_in(homes: &[PathBuf], listeners: &[SocketAddr], token: &Path) -> Registration {
    let endpoints = Endpoints {
        listeners: listeners.to_vec(),
        secrets: vec![token.to_path_buf()],
    };
    if let Ok(mut own) = OWN.lock() {
        own.extend(endpoints.clone());
    }
    let mut records = Vec::new();
    let mut problems = Vec::new();
    for home in homes.iter().filter(|home| home.is_dir()) {
        let folder = registry_folder(home);
        match registry(&folder).and_then(|()| write_record(&folder, &endpoints)) {
            Ok(record) => records.push(record),
            Err(why) => problems.push(format!("{}: {why}", folder.display())),
        }
    }
    let unshared = match (records.is_empty(), problems.is_empty()) {
        (true, true) => Some("the user has no home".to_string()),
        (true, false) => Some(problems.join("; ")),
        (false, _) => None,
    };
    Registration { records, unshared }
}

/// Every server registered in `homes`' registries (of live processes), with the registries'
/// own folders among the secrets. Blocking (lists a folder per home); the helper reads it as
/// each command starts.
pub fn registered(homes: &[PathBuf]) -> Endpoints {
    let mut out = Endpoints::default();
    for home in homes {
        let folder = registry_folder(home);
        if folder.symlink_metadata().is_err() {
            continue;
        }
        out.secrets.push(folder.clone());
        if is_private_folder(&folder) {
            read_records(&folder, &mut out);
        }
    }
    out
}

/// Adds the records of live servers in `folder` to `out`.
fn read_records(folder: &Path, out: &mut Endpoints) {
    let Ok(entries) = std::fs::read_dir(folder) else {
        return;
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
}

/// The registry of a home: beside Talaria's default settings, whatever `TALARIA_HOME` is.
pub fn registry_folder(home: &Path) -> PathBuf {
    home.join(".talaria/endpoints")
}

/// Makes the registry's folder (and `~/.talaria`) private if missing; refuses one that is not
/// this user's own private folder.
fn registry(folder: &Path) -> std::io::Result<()> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(folder)?;
    }
    if !is_private_folder(folder) {
        return Err(std::io::Error::other(
            "it is not a private folder of this user",
        ));
    }
    sweep(folder);
    Ok(())
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
        let dir = tempfile::tempdir().expect("tempdir");
        let (home, gone) = (dir.path().join("home"), dir.path().join("gone"));
        std::fs::create_dir(&home).expect("mkdir");
        let homes = [home.clone(), gone.clone()];
        let listener: SocketAddr = "127.0.0.1:1".parse().expect("address");
        let token = PathBuf::from("/srv/token");
        assert_eq!(registered(&homes), Endpoints::default(), "no registry yet");
        let registration = register_in(&homes, &[listener], &token);
        assert_eq!(registration.unshared(), None);
        let own = own();
        assert!(own.listeners.contains(&listener) && own.secrets.contains(&token));
        let known = registered(&homes);
        assert_eq!(known.listeners, [listener]);
        assert_eq!(known.secrets, [registry_folder(&home), token.clone()]);
        drop(registration);
        let after = registered(&homes);
        assert_eq!(
            after.secrets,
            [registry_folder(&home)],
            "the registry hides itself"
        );
        assert!(after.listeners.is_empty());
        // A registry another user could read is not read, and a home that is gone has none.
        let unshared = register_in(&[gone], &[listener], &token);
        assert!(unshared.unshared().is_some());
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
