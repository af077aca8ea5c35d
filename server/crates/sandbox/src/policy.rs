//! What a sandboxed command may touch: the hierarchies it may write, the places hidden from
//! it, and whether it may use the network. Serialised to JSON for the sandbox helper.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::env::EnvRules;

/// The file-system and network policy of one sandboxed command.
///
/// Everything is readable except `hidden` (apart from `readable`, which is readable again
/// but not writable); only `writable` (minus `hidden`) is writable.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SandboxPolicy {
    /// Hierarchies the command may change: the workspace roots, the private temporary
    /// directory and `[sandbox] writable`.
    pub writable: Vec<PathBuf>,
    /// Hidden from reads and writes: credential stores, private keys, `TALARIA_HOME`.
    pub hidden: Vec<PathBuf>,
    /// Inside `hidden`, readable again (never writable): e.g. `TALARIA_HOME/skills`.
    pub readable: Vec<PathBuf>,
    /// Whether the command may open network sockets (UNIX sockets always work).
    pub network: bool,
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

impl SandboxPolicy {
    /// What this policy lets a command do with `path` (absolute; symlinks as given: callers
    /// pass both the path and its resolved form when they differ).
    pub fn access(&self, path: &Path) -> PathAccess {
        let under = |roots: &[PathBuf]| roots.iter().any(|root| path.starts_with(root));
        if under(&self.hidden) {
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
}

/// What the helper is told to do before it runs the command.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HelperSpec {
    /// The sandbox to enter; `None` runs the command unconfined (still with a clean
    /// environment when `env` is set).
    pub sandbox: Option<SandboxPolicy>,
    /// Environment rules the helper applies itself (for commands started by another
    /// process, such as an editor terminal, whose environment Talaria does not choose).
    pub env: Option<EnvRules>,
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
            network: true,
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
    }
}
