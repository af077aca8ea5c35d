//! Paths as the kernel sees them: for each path a call names, the real file behind any
//! symbolic link, and whether it is a regular file with more than one hard link (whose origin
//! is unknown). Looked up on the blocking pool right before the policy decides, so a link
//! made earlier in the same batch is seen.

use std::path::{Path, PathBuf};

/// The paths a call names, with the real files behind them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Grounded {
    /// Every path as named and as resolved (each once).
    pub paths: Vec<PathBuf>,
    /// Those that are regular files with more than one hard link.
    pub linked: Vec<PathBuf>,
}

/// The real file behind `path`: every link resolved; for what does not exist yet, the
/// deepest part that exists, resolved, with the rest (a new file under new folders under a
/// link is where the link leads). The one resolution of the engine (the policy's grounding,
/// another agent's writes and questions).
pub(crate) fn real_path(path: &Path) -> PathBuf {
    let mut rest = Vec::new();
    let mut at = path;
    loop {
        if let Ok(real) = at.canonicalize() {
            return rest.iter().rev().fold(real, |real, part| real.join(part));
        }
        match (at.file_name(), at.parent()) {
            (Some(name), Some(parent)) => {
                rest.push(name);
                at = parent;
            }
            _ => return path.to_path_buf(),
        }
    }
}

fn hard_linked(path: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.nlink() > 1)
}

fn ground_now(named: Vec<PathBuf>) -> Grounded {
    let mut grounded = Grounded::default();
    for path in named {
        let real = real_path(&path);
        let linked = hard_linked(&real);
        for each in [path, real] {
            if !grounded.paths.contains(&each) {
                if linked {
                    grounded.linked.push(each.clone());
                }
                grounded.paths.push(each);
            }
        }
    }
    grounded
}

/// Grounds `named` on the blocking pool (the runtime thread never waits on the disk).
pub(crate) async fn ground(named: Vec<PathBuf>) -> Grounded {
    if named.is_empty() {
        return Grounded::default();
    }
    let fallback = named.clone();
    tokio::task::spawn_blocking(move || ground_now(named))
        .await
        .unwrap_or(Grounded {
            paths: fallback,
            linked: Vec::new(),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn links_are_resolved_and_hard_links_found() {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path().canonicalize().expect("canonical");
        std::fs::write(root.join("key"), "k").expect("key");
        std::os::unix::fs::symlink(root.join("key"), root.join("soft")).expect("symlink");
        std::fs::hard_link(root.join("key"), root.join("hard")).expect("hard link");
        std::fs::write(root.join("plain"), "p").expect("plain");
        let grounded = ground_now(vec![
            root.join("soft"),
            root.join("plain"),
            root.join("new"),
        ]);
        assert_eq!(
            grounded.paths,
            [
                root.join("soft"),
                root.join("key"),
                root.join("plain"),
                root.join("new")
            ]
        );
        assert!(grounded.linked.contains(&root.join("key")));
        assert!(grounded.linked.contains(&root.join("soft")));
        assert!(!grounded.linked.contains(&root.join("plain")));
        assert_eq!(real_path(&root.join("hard")), root.join("hard"));
    }

    #[test]
    fn what_does_not_exist_yet_under_a_link_is_where_the_link_leads() {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path().canonicalize().expect("canonical");
        std::fs::create_dir(root.join("elsewhere")).expect("elsewhere");
        std::os::unix::fs::symlink(root.join("elsewhere"), root.join("link")).expect("symlink");
        assert_eq!(
            real_path(&root.join("link/new/deeper/file")),
            root.join("elsewhere/new/deeper/file")
        );
        assert_eq!(
            real_path(&root.join("link/file")),
            root.join("elsewhere/file")
        );
    }
}
