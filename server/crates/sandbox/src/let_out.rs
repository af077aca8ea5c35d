//! A run the user let out of the sandbox's walls ([`SandboxPolicy::lifted`]): it may write
//! wherever the user may and use the network, sees the machine's processes and devices, and
//! still cannot read the hidden places.
//!
//! Landlock cannot let a command make new files in a folder (the home, `~/.cache`,
//! `~/.config`) and read them back without granting every file below that folder, hidden
//! ones included. So where user namespaces exist the run gets a mount namespace of its own
//! (and no other), in which the hidden places are masked as in the namespaces layer, and
//! Landlock hides only what no mask covered; the process limit, the filters and the watcher
//! stay as without namespaces. Where they do not, Landlock hides the hidden places that
//! exist (a folder holding one then takes no new entries). Either way what the run hides is
//! what exists when it starts: a credential replaced by a rename, or a store made, while
//! this one run goes on is not hidden from it.

use nix::sched::CloneFlags;

use crate::SandboxError;
use crate::masks::{mask_hidden, own_namespaces, readable_trees};
use crate::policy::SandboxPolicy;

/// How a let-out run hides: the policy Landlock applies, and whether masks hide the rest
/// (so nothing mounted on the machine while it runs reaches it).
pub(crate) struct LetOut {
    pub landlock: SandboxPolicy,
    pub masked: bool,
}

/// Hides `policy`'s places (resolved) for a let-out run, with a mount namespace where the
/// policy asks for namespaces and the machine has them. Where the namespace or its masks
/// cannot be made, Landlock hides every place that exists instead (the run then cannot add
/// to a folder holding one); where the capabilities the masks needed cannot be dropped, the
/// run does not start.
pub(crate) fn hide(policy: &SandboxPolicy) -> Result<LetOut, SandboxError> {
    if policy.namespaces && own_namespaces(CloneFlags::empty()).is_ok() {
        let masks = mask(policy);
        // Nothing the run executes may undo the masks, whether they were all made or not.
        crate::namespace::keep_root_powerless()?;
        crate::namespace::drop_capabilities()?;
        if let Ok(unmasked) = masks {
            return Ok(LetOut {
                landlock: SandboxPolicy {
                    hidden: unmasked,
                    ..policy.clone()
                },
                masked: true,
            });
        }
    }
    let existing = policy
        .hidden
        .iter()
        .filter(|path| path.symlink_metadata().is_ok())
        .cloned()
        .collect();
    Ok(LetOut {
        landlock: SandboxPolicy {
            hidden: existing,
            ..policy.clone()
        },
        masked: false,
    })
}

/// Masks the hidden places in the run's own mount namespace; the places no mask covered.
fn mask(policy: &SandboxPolicy) -> Result<Vec<std::path::PathBuf>, SandboxError> {
    let readable = readable_trees(policy);
    let unmasked = mask_hidden(policy, &readable)?;
    // The working directory was resolved on the mounts as they were: resolve it again.
    if let Ok(cwd) = std::env::current_dir() {
        let _ = std::env::set_current_dir(cwd);
    }
    Ok(unmasked)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_namespaces_landlock_hides_the_places_that_exist() {
        let dir = tempfile::tempdir().expect("tempdir");
        let there = dir.path().join(".ssh");
        std::fs::create_dir(&there).expect("mkdir");
        let missing = dir.path().join(".aws");
        let policy = SandboxPolicy {
            hidden: vec![there.clone(), missing],
            namespaces: false,
            ..SandboxPolicy::default()
        }
        .lifted();
        let let_out = hide(&policy).expect("hidden");
        assert!(!let_out.masked);
        assert_eq!(let_out.landlock.hidden, [there]);
        assert!(let_out.landlock.let_out);
    }
}
