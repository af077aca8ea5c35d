//! Turns a [`SandboxPolicy`] into Landlock rules.
//!
//! Landlock grants access to whole hierarchies and cannot take a subtree back out of one. So a
//! hierarchy that contains a hidden path is not granted as a whole: its directory may be
//! listed (names only, never contents), and each entry in it is granted on its own, except the
//! hidden ones; an entry that is an ancestor of a hidden path is split the same way. Symbolic
//! links are resolved first, so a link into a hidden place grants nothing.

use std::path::{Path, PathBuf};

use crate::policy::SandboxPolicy;

/// What a rule grants.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Grant {
    /// Read files, list directories, execute programs.
    Read,
    /// List this directory only (and, Landlock being hierarchical, the ones below it: names,
    /// never file contents).
    List,
    /// Read and change everything below.
    Write,
}

/// One Landlock rule: a hierarchy and what it grants.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    pub path: PathBuf,
    pub grant: Grant,
    /// Whether it is a folder, when the listing that found it said so (else it is looked at
    /// when the rule is made).
    pub is_dir: Option<bool>,
}

/// Device files every command may write (and read).
pub const DEVICES: &[&str] = &[
    "/dev/null",
    "/dev/zero",
    "/dev/full",
    "/dev/random",
    "/dev/urandom",
    "/dev/tty",
    "/dev/ptmx",
    "/dev/shm",
];

/// Which `/dev` the command sees.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Devices {
    /// The machine's: other terminals of the user (`/dev/pts/*`) are not granted.
    Shared,
    /// The sandbox's own (namespaces): its terminals are its own, so `/dev/pts` is granted.
    Private,
}

/// How deep a hierarchy is split around hidden paths before the rest is left ungranted.
const MAX_SPLIT_DEPTH: usize = 24;

/// The hidden paths as given and as resolved (a hidden folder may be a link elsewhere).
fn hidden_forms(policy: &SandboxPolicy) -> Vec<PathBuf> {
    let mut forms = Vec::new();
    for path in &policy.hidden {
        forms.push(path.clone());
        // Most hidden places do not exist (a home has few of the stores named): one look
        // instead of a look at each folder on the way.
        if path.symlink_metadata().is_ok()
            && let Ok(real) = path.canonicalize()
            && real != *path
        {
            forms.push(real);
        }
    }
    forms
}

/// The rules for `policy`: reads everywhere but the hidden paths, writes in the writable
/// hierarchies but the hidden paths, the readable exceptions, and the devices.
pub fn rules(policy: &SandboxPolicy, devices: Devices) -> Vec<Rule> {
    let mut hidden = hidden_forms(policy);
    if devices == Devices::Shared {
        // Other terminals of the user: neither read nor written.
        hidden.push(PathBuf::from("/dev/pts"));
    }
    let mut out = Vec::new();
    grant_around(
        Path::new("/"),
        Some(true),
        &hidden,
        Grant::Read,
        &mut out,
        0,
    );
    for root in policy
        .writable
        .iter()
        .filter_map(|root| crate::policy::still_itself(root))
    {
        grant_around(&root, Some(true), &hidden, Grant::Write, &mut out, 0);
    }
    for path in &policy.readable {
        if let Ok(real) = path.canonicalize()
            && real.starts_with(path.parent().unwrap_or(path))
        {
            out.push(Rule {
                path: real,
                grant: Grant::Read,
                is_dir: None,
            });
        }
    }
    out.extend(DEVICES.iter().map(|device| Rule {
        path: PathBuf::from(device),
        grant: Grant::Write,
        is_dir: None,
    }));
    if devices == Devices::Private {
        out.push(Rule {
            path: PathBuf::from("/dev/pts"),
            grant: Grant::Write,
            is_dir: Some(true),
        });
    }
    out
}

/// Grants `grant` on `path` (a folder or not, as far as known) minus the hidden paths below
/// it.
fn grant_around(
    path: &Path,
    is_dir: Option<bool>,
    hidden: &[PathBuf],
    grant: Grant,
    out: &mut Vec<Rule>,
    depth: usize,
) {
    if hidden.iter().any(|h| path.starts_with(h)) {
        return;
    }
    if !hidden.iter().any(|h| h.starts_with(path)) {
        out.push(Rule {
            path: path.to_path_buf(),
            grant,
            is_dir,
        });
        return;
    }
    if depth > MAX_SPLIT_DEPTH {
        return;
    }
    if grant == Grant::Read {
        out.push(Rule {
            path: path.to_path_buf(),
            grant: Grant::List,
            is_dir,
        });
    }
    let Ok(entries) = std::fs::read_dir(path) else {
        return;
    };
    for entry in entries.flatten() {
        let child = entry.path();
        let kind = entry.file_type().ok();
        if !kind.is_some_and(|t| t.is_symlink()) {
            let is_dir = kind.map(|t| t.is_dir());
            grant_around(&child, is_dir, hidden, grant, out, depth + 1);
            continue;
        }
        // A link grants what it points to: nothing hidden, and no ancestor of a hidden path
        // (that would grant the hidden path through it).
        let Ok(real) = child.canonicalize() else {
            continue;
        };
        if hidden
            .iter()
            .any(|h| real.starts_with(h) || h.starts_with(&real))
        {
            continue;
        }
        out.push(Rule {
            path: real,
            grant,
            is_dir: None,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree() -> tempfile::TempDir {
        let dir = tempfile::tempdir().expect("tempdir");
        for folder in [
            "home/.ssh",
            "home/project/src",
            "home/.talaria/skills",
            "other",
        ] {
            std::fs::create_dir_all(dir.path().join(folder)).expect("mkdir");
        }
        std::fs::write(dir.path().join("home/.ssh/id_rsa"), "KEY").expect("key");
        std::fs::write(dir.path().join("home/.netrc"), "machine").expect("netrc");
        std::fs::write(dir.path().join("home/notes.txt"), "n").expect("notes");
        std::os::unix::fs::symlink(
            dir.path().join("home/.ssh"),
            dir.path().join("home/keys-link"),
        )
        .expect("link");
        std::os::unix::fs::symlink(dir.path().join("home"), dir.path().join("other/home-link"))
            .expect("link");
        dir
    }

    fn granted(rules: &[Rule], grant: Grant) -> Vec<PathBuf> {
        rules
            .iter()
            .filter(|r| r.grant == grant)
            .map(|r| r.path.clone())
            .collect()
    }

    #[test]
    fn hidden_paths_are_carved_out_and_links_into_them_grant_nothing() {
        let dir = tree();
        let root = dir.path().canonicalize().expect("canonical");
        let home = root.join("home");
        let policy = SandboxPolicy {
            writable: vec![home.clone()],
            hidden: vec![
                home.join(".ssh"),
                home.join(".netrc"),
                home.join(".talaria"),
            ],
            readable: vec![home.join(".talaria/skills")],
            ..SandboxPolicy::default()
        };
        let rules = rules(&policy, Devices::Shared);
        let reads = granted(&rules, Grant::Read);
        let writes = granted(&rules, Grant::Write);
        let lists = granted(&rules, Grant::List);
        for path in [&home, &root] {
            assert!(lists.contains(path), "{path:?} listed");
            assert!(!reads.contains(path) && !writes.contains(path), "{path:?}");
        }
        assert!(reads.contains(&home.join("notes.txt")));
        assert!(reads.contains(&home.join("project")));
        assert!(writes.contains(&home.join("project")));
        assert!(reads.contains(&home.join(".talaria/skills")));
        assert!(!writes.iter().any(|w| w.starts_with(home.join(".talaria"))));
        for rule in &rules {
            assert!(
                !rule.path.starts_with(home.join(".ssh")) && rule.path != home.join(".netrc"),
                "{rule:?}"
            );
            // The link to the home (an ancestor of hidden paths) grants nothing either.
            assert!(rule.path != home || rule.grant == Grant::List, "{rule:?}");
        }
        assert!(reads.contains(&root.join("other")));
    }

    #[test]
    fn a_root_without_hidden_paths_is_one_rule() {
        let dir = tree();
        let project = dir.path().join("home/project").canonicalize().expect("c");
        let policy = SandboxPolicy {
            writable: vec![project.clone()],
            hidden: vec![dir.path().join("home/.ssh")],
            ..SandboxPolicy::default()
        };
        let writes = granted(&rules(&policy, Devices::Shared), Grant::Write);
        assert!(writes.contains(&project));
        assert!(
            writes
                .iter()
                .all(|w| w == &project || DEVICES.contains(&w.to_str().unwrap_or("")))
        );
    }
}
