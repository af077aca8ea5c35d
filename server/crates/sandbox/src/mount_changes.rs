//! Whether the mount table changed since it was last asked, for those who keep a resolved
//! policy (the file tools of a session): the kernel marks an open `/proc/self/mountinfo` at
//! each change of the mount namespace (`POLLPRI`), so asking costs one `poll`, and a mount
//! made after the policy was resolved (an overlay of the home) is seen at the next ask.

/// The mount table as it stood when this was made or last said it changed.
#[derive(Debug)]
pub struct MountChanges {
    table: Option<std::fs::File>,
}

impl MountChanges {
    /// Starts watching from now. Where the table cannot be opened there are no mount names
    /// either (`aliases.rs` reads the same file): nothing is ever said to change.
    pub fn new() -> Self {
        Self {
            table: std::fs::File::open("/proc/self/mountinfo").ok(),
        }
    }

    /// Whether the table changed since [`MountChanges::new`] or the last call that said so.
    /// A table that cannot be asked is taken as changed (the caller resolves again).
    #[cfg(target_os = "linux")]
    pub fn changed(&mut self) -> bool {
        use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
        use std::os::fd::AsFd;
        let Some(table) = &self.table else {
            return false;
        };
        let mut fds = [PollFd::new(table.as_fd(), PollFlags::POLLPRI)];
        match poll(&mut fds, PollTimeout::ZERO) {
            Ok(0) => false,
            Ok(_) => true,
            Err(_) => true,
        }
    }

    /// Elsewhere there is no `/proc` mount table, and no mount names.
    #[cfg(not(target_os = "linux"))]
    pub fn changed(&mut self) -> bool {
        false
    }
}

impl Default for MountChanges {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mount_made_after_the_start_is_a_change_said_once() {
        // Mounting needs root (CI runs as root); the machine's other mounts may also count,
        // so only the change is asserted.
        let root = std::fs::metadata("/proc/self").is_ok_and(|m| {
            use std::os::unix::fs::MetadataExt;
            m.uid() == 0
        });
        let dir = tempfile::tempdir().expect("tempdir");
        let mut changes = MountChanges::new();
        let mounted = root
            && std::process::Command::new("mount")
                .args(["-t", "tmpfs", "tmpfs"])
                .arg(dir.path())
                .status()
                .is_ok_and(|status| status.success());
        if mounted {
            let seen = changes.changed();
            let _ = std::process::Command::new("umount")
                .arg("-l")
                .arg(dir.path())
                .status();
            assert!(seen, "a tmpfs mounted after the start");
        }
        assert!(!MountChanges { table: None }.changed());
    }
}
