//! The sandbox's decision of what is hidden, as the one way to the user's files asks it
//! ([`talaria_files::Places`]): the session's policy (its private temporary folder included,
//! so every other session's is hidden), and each hidden, readable or writable place also at
//! the name it resolves to (a `[sandbox] hidden` folder or a credential store that is a link
//! into `~/dotfiles` is hidden where it really is, which is where a file tool arrives), and at
//! every name the mount table gives it (a bind mount or an overlay of the home); and a file
//! by what it is: another name (a hard link) of a file in a hidden place is hidden wherever
//! it is reached ([`hidden_files`]).

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use talaria_files::{Access, Places, Stat, Unguarded};

use super::hidden_files::HiddenFiles;
use talaria_sandbox::{MountChanges, PathAccess, SandboxPolicy};

/// The places of a session whose commands run in the sandbox.
#[derive(Debug)]
pub struct SandboxPlaces {
    policy: Arc<SandboxPolicy>,
    /// The policy with every place also at its resolved names, and the mount table it was
    /// resolved against; made on first use and again when the mount table changes (it
    /// looks at the disk, so never on the runtime's thread: the operations that ask run on
    /// the blocking pool).
    resolved: Mutex<Option<(Arc<SandboxPolicy>, MountChanges)>>,
    /// The files of the hidden places, by device and inode, as last walked.
    hidden_files: Mutex<Option<HiddenFiles>>,
}

impl SandboxPlaces {
    /// The places of `policy` (whose `private_tmp` is the session's own).
    pub fn new(policy: Arc<SandboxPolicy>) -> Self {
        Self {
            policy,
            resolved: Mutex::new(None),
            hidden_files: Mutex::new(None),
        }
    }

    /// The places of a session: its sandbox's, or none hidden without a sandbox.
    pub fn of(policy: Option<&Arc<SandboxPolicy>>) -> Arc<dyn Places> {
        match policy {
            Some(policy) => Arc::new(Self::new(policy.clone())),
            None => Arc::new(Unguarded),
        }
    }

    /// The resolved policy, resolved again when a mount was made or taken off since (a new
    /// mount can give a hidden place a new name). The watch starts before the resolution,
    /// so a mount made during it is seen at the next ask.
    fn resolved(&self) -> Arc<SandboxPolicy> {
        let mut slot = self.resolved.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some((policy, changes)) = slot.as_mut()
            && !changes.changed()
        {
            return policy.clone();
        }
        let changes = MountChanges::new();
        let policy = Arc::new(with_resolved_names(&self.policy));
        *slot = Some((policy.clone(), changes));
        policy
    }
}

/// `paths` and, for each that resolves elsewhere now, its resolved name.
fn and_resolved(paths: &[PathBuf]) -> Vec<PathBuf> {
    let mut all = paths.to_vec();
    for path in paths {
        if let Ok(real) = std::fs::canonicalize(path)
            && real != *path
            && !all.contains(&real)
        {
            all.push(real);
        }
    }
    all
}

/// The sandbox's own resolution (each store, key and other session's folder now, where
/// links lead, every name the mount table gives them: bind mounts, overlays), with the
/// homes kept so that a store made later is hidden by its rule.
fn with_resolved_names(policy: &SandboxPolicy) -> SandboxPolicy {
    let mut out = policy.resolved();
    out.homes = policy.homes.clone();
    out.hidden = and_resolved(&out.hidden);
    // A home's credential store that is a link is hidden where it leads too.
    for home in &policy.homes {
        let stores: Vec<PathBuf> = talaria_sandbox::credentials::home_stores(home).collect();
        for real in and_resolved(&stores).into_iter().skip(stores.len()) {
            out.hidden.push(real);
        }
    }
    out.readable = and_resolved(&policy.readable);
    out.writable = and_resolved(&policy.writable);
    out
}

impl Places for SandboxPlaces {
    fn access(&self, path: &Path) -> Access {
        match self.resolved().access(path) {
            PathAccess::Hidden => Access::Hidden,
            PathAccess::ReadOnly => Access::ReadOnly,
            PathAccess::Writable => Access::Writable,
        }
    }

    fn is_hidden_file(&self, file: &Stat) -> bool {
        let mut known = talaria_util::lock(&self.hidden_files);
        let stale = known.as_ref().is_none_or(|k| !k.still_tells(file));
        if stale {
            let policy = self.resolved();
            *known = Some(HiddenFiles::walk(&policy));
        }
        known.as_ref().is_none_or(|k| k.holds(file))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn other_sessions_folders_and_hidden_places_through_links_are_hidden() {
        let dir = tempfile::tempdir().expect("tempdir");
        let base = dir.path().canonicalize().expect("canonical");
        let (home, ws, tmp) = (base.join("home"), base.join("ws"), base.join("tmp"));
        let dotfiles = home.join("dotfiles/notes");
        for d in [
            &ws,
            &dotfiles,
            &tmp.join("talaria-1-0-a"),
            &tmp.join("talaria-2-0-b"),
        ] {
            std::fs::create_dir_all(d).expect("mkdir");
        }
        std::fs::create_dir_all(home.join("dotfiles/aws")).expect("aws");
        std::os::unix::fs::symlink(&dotfiles, home.join("notes")).expect("link");
        std::os::unix::fs::symlink(home.join("dotfiles/aws"), home.join(".aws")).expect("link");
        let policy = SandboxPolicy {
            writable: vec![ws.clone(), tmp.join("talaria-1-0-a")],
            hidden: vec![home.join("notes")],
            homes: vec![home.clone()],
            private_tmp: Some(tmp.join("talaria-1-0-a")),
            ..SandboxPolicy::default()
        };
        let places = SandboxPlaces::new(Arc::new(policy));
        assert_eq!(places.access(&ws.join("a.txt")), Access::Writable);
        assert_eq!(
            places.access(&tmp.join("talaria-1-0-a/x")),
            Access::Writable
        );
        assert_eq!(places.access(&tmp.join("talaria-2-0-b/x")), Access::Hidden);
        assert_eq!(places.access(&home.join("notes/x")), Access::Hidden);
        assert_eq!(places.access(&dotfiles.join("x")), Access::Hidden);
        assert_eq!(
            places.access(&home.join("dotfiles/aws/credentials")),
            Access::Hidden
        );
        assert_eq!(places.access(&home.join("other")), Access::ReadOnly);
    }

    fn stat_of(path: &Path) -> Stat {
        let root = talaria_files::Root::open(path.parent().expect("parent"), Arc::new(Unguarded))
            .expect("root");
        root.as_dir()
            .stat(path.file_name().expect("name"))
            .expect("stat")
            .expect("exists")
    }

    #[test]
    fn second_names_of_hidden_files_are_hidden_even_when_made_after_a_walk() {
        let dir = tempfile::tempdir().expect("tempdir");
        let base = dir.path().canonicalize().expect("canonical");
        let (home, ws, talaria) = (
            base.join("home"),
            base.join("ws"),
            base.join("home/.talaria"),
        );
        for d in [
            &home.join(".aws"),
            &ws.join("sub/deeper"),
            &talaria.join("skills"),
        ] {
            std::fs::create_dir_all(d).expect("mkdir");
        }
        std::fs::write(home.join(".aws/credentials"), "KEY").expect("write");
        std::fs::write(talaria.join("config.toml"), "mode").expect("write");
        std::fs::write(talaria.join("skills/s.md"), "skill").expect("write");
        std::fs::write(ws.join("own"), "own").expect("write");
        std::fs::hard_link(ws.join("own"), ws.join("own2")).expect("link");
        std::fs::hard_link(home.join(".aws/credentials"), ws.join("sub/deeper/c")).expect("link");
        std::fs::hard_link(talaria.join("skills/s.md"), ws.join("s.md")).expect("link");
        let policy = SandboxPolicy {
            writable: vec![ws.clone()],
            hidden: vec![talaria.clone()],
            readable: vec![talaria.join("skills")],
            homes: vec![home.clone()],
            ..SandboxPolicy::default()
        };
        let places = SandboxPlaces::new(Arc::new(policy));
        assert!(places.is_hidden_file(&stat_of(&ws.join("sub/deeper/c"))));
        assert!(!places.is_hidden_file(&stat_of(&ws.join("own2"))));
        assert!(
            !places.is_hidden_file(&stat_of(&ws.join("s.md"))),
            "readable again"
        );
        // A credential written (and linked) after the walk is known by the next one.
        std::fs::write(talaria.join("token"), "T").expect("write");
        std::fs::hard_link(talaria.join("token"), ws.join("t")).expect("link");
        assert!(places.is_hidden_file(&stat_of(&ws.join("t"))));
        // A key at the top of the home.
        std::fs::write(home.join("id_ed25519"), "K").expect("write");
        std::fs::hard_link(home.join("id_ed25519"), ws.join("k")).expect("link");
        assert!(places.is_hidden_file(&stat_of(&ws.join("k"))));
    }

    #[test]
    fn a_walk_cut_short_hides_every_file_with_several_links() {
        let dir = tempfile::tempdir().expect("tempdir");
        let base = dir.path().canonicalize().expect("canonical");
        let (hidden, ws) = (base.join("hidden"), base.join("ws"));
        std::fs::create_dir_all(&ws).expect("mkdir");
        std::fs::create_dir_all(&hidden).expect("mkdir");
        for i in 0..super::super::hidden_files::MAX_ENTRIES + 1 {
            std::fs::write(hidden.join(i.to_string()), "").expect("write");
        }
        std::fs::write(ws.join("own"), "own").expect("write");
        std::fs::hard_link(ws.join("own"), ws.join("own2")).expect("link");
        let policy = SandboxPolicy {
            writable: vec![ws.clone()],
            hidden: vec![hidden],
            ..SandboxPolicy::default()
        };
        let places = SandboxPlaces::new(Arc::new(policy));
        assert!(places.is_hidden_file(&stat_of(&ws.join("own2"))));
    }

    #[test]
    fn a_mount_made_after_the_first_ask_is_judged_at_the_next() {
        // Mounting needs root (CI runs as root).
        let root = std::fs::metadata("/proc/self").is_ok_and(|m| {
            use std::os::unix::fs::MetadataExt;
            m.uid() == 0
        });
        let dir = tempfile::tempdir().expect("tempdir");
        let base = dir.path().canonicalize().expect("canonical");
        let (home, second) = (base.join("home"), base.join("second"));
        std::fs::create_dir_all(home.join(".aws")).expect("aws");
        std::fs::write(home.join(".aws/credentials"), "x").expect("credentials");
        std::fs::create_dir(&second).expect("second");
        let policy = SandboxPolicy {
            homes: vec![home.clone()],
            ..SandboxPolicy::default()
        };
        let places = SandboxPlaces::new(Arc::new(policy));
        let through = second.join("credentials");
        assert_eq!(places.access(&through), Access::ReadOnly);
        let mounted = root
            && std::process::Command::new("mount")
                .arg("--bind")
                .arg(home.join(".aws"))
                .arg(&second)
                .status()
                .is_ok_and(|status| status.success());
        if mounted {
            let seen = places.access(&through);
            let _ = std::process::Command::new("umount")
                .arg("-l")
                .arg(&second)
                .status();
            assert_eq!(seen, Access::Hidden);
        }
    }
}
