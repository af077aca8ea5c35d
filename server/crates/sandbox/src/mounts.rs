//! The mount table as `/proc/self/mountinfo` lists it, and making each mount read-only in a
//! mount namespace of the sandbox's own (keeping the flags the parent namespace locked).

use std::path::PathBuf;

use rustix::mount::MountFlags;

/// One mount: where it is and the per-mount options that matter when it is remounted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mount {
    pub point: PathBuf,
    pub read_only: bool,
    /// `nosuid`, `nodev`, `noexec` and the atime mode, which a remount must repeat (a user
    /// namespace may not change them).
    pub kept: MountFlags,
}

fn flags_of(options: &str) -> (bool, MountFlags) {
    let mut kept = MountFlags::empty();
    let mut read_only = false;
    let mut atime = MountFlags::STRICTATIME;
    for option in options.split(',') {
        match option {
            "ro" => read_only = true,
            "nosuid" => kept |= MountFlags::NOSUID,
            "nodev" => kept |= MountFlags::NODEV,
            "noexec" => kept |= MountFlags::NOEXEC,
            "noatime" => atime = MountFlags::NOATIME,
            "relatime" => atime = MountFlags::RELATIME,
            "nodiratime" => kept |= MountFlags::NODIRATIME,
            _ => {}
        }
    }
    (read_only, kept | atime)
}

/// The mounts in `mountinfo`'s text, in its order (parents before children).
pub fn parse(mountinfo: &str) -> Vec<Mount> {
    mountinfo
        .lines()
        .filter_map(|line| {
            // id parent major:minor root point options …
            let mut fields = line.split(' ');
            let point = fields.nth(4)?;
            let options = fields.next()?;
            let (read_only, kept) = flags_of(options);
            Some(Mount {
                point: crate::mountinfo_path::mountinfo_path(point),
                read_only,
                kept,
            })
        })
        .collect()
}

/// The mounts of the caller's mount namespace.
pub fn current() -> std::io::Result<Vec<Mount>> {
    Ok(parse(&std::fs::read_to_string("/proc/self/mountinfo")?))
}

/// Makes `mount` read-only (the top mount at its point). Needs a mount namespace of the
/// caller's own.
pub fn make_read_only(mount: &Mount) -> rustix::io::Result<()> {
    if mount.read_only {
        return Ok(());
    }
    rustix::mount::mount_remount(
        &mount.point,
        MountFlags::BIND | MountFlags::RDONLY | mount.kept,
        "",
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mountinfo_lines_give_points_and_kept_flags() {
        let text = "27 1 254:0 / / rw,relatime - ext4 /dev/vda rw\n\
28 27 0:25 / /mnt/with\\040space ro,nosuid,nodev,relatime - tmpfs x ro\n\
29 27 0:26 / /srv rw,noexec,noatime - tmpfs y rw\n\
30 27 0:27 / /data rw - xfs z rw\n";
        let mounts = parse(text);
        assert_eq!(mounts.len(), 4);
        assert_eq!(mounts[0].point, PathBuf::from("/"));
        assert!(!mounts[0].read_only);
        assert_eq!(mounts[0].kept, MountFlags::RELATIME);
        assert_eq!(mounts[1].point, PathBuf::from("/mnt/with space"));
        assert!(mounts[1].read_only);
        assert_eq!(
            mounts[1].kept,
            MountFlags::NOSUID | MountFlags::NODEV | MountFlags::RELATIME
        );
        assert_eq!(mounts[2].kept, MountFlags::NOEXEC | MountFlags::NOATIME);
        assert_eq!(mounts[3].kept, MountFlags::STRICTATIME);
    }
}
