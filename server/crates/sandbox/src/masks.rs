//! Masks over the hidden places, in a mount namespace of the sandbox's own: each hidden
//! folder covered by a read-only folder holding the same names, none of which can be opened
//! (the readable exceptions bound back in, read-only), each hidden file by an empty file
//! nobody may open; and the steps every namespace of the sandbox takes first (its own user
//! and mount namespaces, with no mount shared with the machine's). Used by the full
//! namespaces layer (`namespace.rs`) and by a run let out of the walls (`let_out.rs`).

use std::ffi::CStr;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

use nix::sched::CloneFlags;
use rustix::fs::CWD;
use rustix::mount::{MountFlags, MountPropagationFlags, MoveMountFlags, OpenTreeFlags};

use crate::SandboxError;
use crate::policy::SandboxPolicy;

pub(crate) fn failed(step: &str) -> impl Fn(std::io::Error) -> SandboxError + '_ {
    move |e| SandboxError::Namespaces(format!("{step}: {e}"))
}

pub(crate) fn failed_rustix(step: &str) -> impl Fn(rustix::io::Errno) -> SandboxError + '_ {
    move |e| SandboxError::Namespaces(format!("{step}: {e}"))
}

/// Moves the calling (single-threaded) process into new user and mount namespaces (and the
/// `extra` ones asked for), as the same user and group, with no mount propagating in or out:
/// nothing mounted on the machine afterwards reaches the command.
pub(crate) fn own_namespaces(extra: CloneFlags) -> Result<(), SandboxError> {
    let (uid, gid) = (nix::unistd::getuid(), nix::unistd::getgid());
    nix::sched::unshare(CloneFlags::CLONE_NEWUSER | CloneFlags::CLONE_NEWNS | extra)
        .map_err(|e| SandboxError::NoNamespaces(format!("unshare: {e}")))?;
    std::fs::write("/proc/self/setgroups", "deny").map_err(failed("setgroups"))?;
    std::fs::write("/proc/self/uid_map", format!("{uid} {uid} 1")).map_err(failed("uid_map"))?;
    std::fs::write("/proc/self/gid_map", format!("{gid} {gid} 1")).map_err(failed("gid_map"))?;
    rustix::mount::mount_change(
        "/",
        MountPropagationFlags::REC | MountPropagationFlags::PRIVATE,
    )
    .map_err(failed_rustix("private mounts"))
}

/// Copies of the readable exceptions that exist (taken before anything is masked).
pub(crate) fn readable_trees(policy: &SandboxPolicy) -> Vec<(PathBuf, OwnedFd)> {
    policy
        .readable
        .iter()
        .filter(|path| path.exists())
        .filter_map(|path| clone_tree(path, true).ok().map(|tree| (path.clone(), tree)))
        .collect()
}

pub(crate) fn clone_tree(path: &Path, recursive: bool) -> Result<OwnedFd, SandboxError> {
    let mut flags = OpenTreeFlags::OPEN_TREE_CLONE | OpenTreeFlags::OPEN_TREE_CLOEXEC;
    if recursive {
        flags |= OpenTreeFlags::AT_RECURSIVE;
    }
    rustix::mount::open_tree(CWD, path, flags)
        .map_err(|e| SandboxError::Namespaces(format!("copying {}: {e}", path.display())))
}

pub(crate) fn attach(tree: &OwnedFd, at: &Path) -> Result<(), SandboxError> {
    rustix::mount::move_mount(tree, "", CWD, at, MoveMountFlags::MOVE_MOUNT_F_EMPTY_PATH)
        .map_err(|e| SandboxError::Namespaces(format!("mounting on {}: {e}", at.display())))
}

/// A hidden place that exists, with what identifies it whatever path reaches it.
struct HiddenPlace {
    path: PathBuf,
    /// Where the path leads (links followed): one place, however many names lead to it. Not
    /// the inode: a hard link or a second mount of the folder is another place to mask.
    real: PathBuf,
    is_dir: bool,
}

/// The hidden places that exist, each once: one file is often named by several rules (a
/// home's token file and a key at its top, two homes that are one folder, a link), and
/// a place inside a hidden folder is hidden with it. Outer places first.
fn hidden_places(policy: &SandboxPolicy) -> Vec<HiddenPlace> {
    let mut paths: Vec<&PathBuf> = policy.hidden.iter().collect();
    paths.sort_by_key(|path| path.components().count());
    let mut places: Vec<HiddenPlace> = Vec::new();
    for path in paths {
        let Ok(meta) = std::fs::metadata(path) else {
            continue;
        };
        let Ok(real) = path.canonicalize() else {
            continue;
        };
        let inside_one = places.iter().any(|place| {
            place.is_dir && (path.starts_with(&place.path) || real.starts_with(&place.real))
        });
        if inside_one || places.iter().any(|place| place.real == real) {
            continue;
        }
        places.push(HiddenPlace {
            path: path.clone(),
            real,
            is_dir: meta.is_dir(),
        });
    }
    places
}

/// Masks each hidden place that exists, once: a folder with a read-only folder holding the
/// same names, none of which can be opened (a readable exception below is bound back in
/// read-only), a file with an empty file nobody may open. So a command sees the names, as
/// without namespaces, and "Permission denied" for what they hold. A mask never fails the
/// command: the places that could not be masked are returned (Landlock hides them).
pub(crate) fn mask_hidden(
    policy: &SandboxPolicy,
    readable: &[(PathBuf, OwnedFd)],
) -> Result<Vec<PathBuf>, SandboxError> {
    let places = hidden_places(policy);
    let source = MaskSource::new()?;
    let mut unmasked = Vec::new();
    for place in &places {
        let masked = if place.is_dir {
            mask_folder(&place.path, readable)
        } else {
            source.mask_file(&place.path)
        };
        if masked.is_err() {
            unmasked.push(place.path.clone());
        }
    }
    Ok(unmasked)
}

/// The file every hidden file is masked with: empty, and nobody may open it, in a file
/// system of its own that is mounted nowhere (so it needs no place, and no command can reach
/// it but through a mask).
struct MaskSource {
    /// The root of a fresh, detached `tmpfs`.
    root: OwnedFd,
}

impl MaskSource {
    const NAME: &'static str = "mask";

    fn new() -> Result<Self, SandboxError> {
        use rustix::fs::{Mode, OFlags};
        use rustix::mount::{FsMountFlags, FsOpenFlags, MountAttrFlags};
        let fs = rustix::mount::fsopen("tmpfs", FsOpenFlags::FSOPEN_CLOEXEC)
            .map_err(failed_rustix("the masks' file system"))?;
        rustix::mount::fsconfig_set_string(&fs, "size", "4k")
            .and_then(|()| rustix::mount::fsconfig_create(&fs))
            .map_err(failed_rustix("the masks' file system"))?;
        let root = rustix::mount::fsmount(
            &fs,
            FsMountFlags::FSMOUNT_CLOEXEC,
            MountAttrFlags::MOUNT_ATTR_NOSUID
                | MountAttrFlags::MOUNT_ATTR_NODEV
                | MountAttrFlags::MOUNT_ATTR_NOEXEC,
        )
        .map_err(failed_rustix("the masks' file system"))?;
        // Mode 0: nobody may open it (each mask is also mounted read-only).
        rustix::fs::openat(
            &root,
            Self::NAME,
            OFlags::CREATE | OFlags::EXCL | OFlags::WRONLY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(failed_rustix("the mask file"))?;
        Ok(Self { root })
    }

    /// Mounts the empty file over `at`, read-only.
    fn mask_file(&self, at: &Path) -> Result<(), SandboxError> {
        let tree = rustix::mount::open_tree(
            &self.root,
            Self::NAME,
            OpenTreeFlags::OPEN_TREE_CLONE | OpenTreeFlags::OPEN_TREE_CLOEXEC,
        )
        .map_err(failed_rustix("the mask file"))?;
        attach(&tree, at)?;
        read_only(at)
    }
}

/// Masks one hidden folder (see [`mask_hidden`]).
fn mask_folder(hidden: &Path, readable: &[(PathBuf, OwnedFd)]) -> Result<(), SandboxError> {
    use std::os::unix::fs::PermissionsExt;
    let inside: Vec<&(PathBuf, OwnedFd)> = readable
        .iter()
        .filter(|(path, _)| path.starts_with(hidden) && path != hidden)
        .collect();
    let names = placeholders(hidden);
    tmpfs_at(hidden, c"mode=0555,size=64k,nr_inodes=4096")?;
    for (name, is_dir) in names {
        let path = hidden.join(name);
        let made = if is_dir {
            std::fs::create_dir(&path)
        } else {
            std::fs::write(&path, "")
        };
        if made.is_ok() {
            let _ = std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o000));
        }
    }
    for (path, tree) in inside {
        let Ok(below) = path.strip_prefix(hidden) else {
            continue;
        };
        let mount_point = hidden.join(below);
        std::fs::create_dir_all(&mount_point).map_err(failed("a readable exception"))?;
        for ancestor in mount_point
            .ancestors()
            .take_while(|a| a.starts_with(hidden) && *a != hidden)
        {
            let _ = std::fs::set_permissions(ancestor, std::fs::Permissions::from_mode(0o555));
        }
        attach(tree, &mount_point)?;
        read_only(&mount_point)?;
    }
    read_only(hidden)
}

/// The entries of a hidden folder (at most a few thousand; names only), to show in its
/// mask.
fn placeholders(folder: &Path) -> Vec<(std::ffi::OsString, bool)> {
    std::fs::read_dir(folder)
        .map(|entries| {
            entries
                .flatten()
                .take(4000)
                .map(|entry| {
                    let is_dir = entry.file_type().is_ok_and(|t| t.is_dir());
                    (entry.file_name(), is_dir)
                })
                .collect()
        })
        .unwrap_or_default()
}

fn tmpfs_at(at: &Path, options: &CStr) -> Result<(), SandboxError> {
    rustix::mount::mount(
        "tmpfs",
        at,
        "tmpfs",
        MountFlags::NOSUID | MountFlags::NODEV | MountFlags::NOEXEC,
        options,
    )
    .map_err(|e| SandboxError::Namespaces(format!("masking {}: {e}", at.display())))
}

pub(crate) fn read_only(at: &Path) -> Result<(), SandboxError> {
    rustix::mount::mount_remount(
        at,
        MountFlags::BIND
            | MountFlags::RDONLY
            | MountFlags::NOSUID
            | MountFlags::NODEV
            | MountFlags::NOEXEC,
        "",
    )
    .map_err(|e| SandboxError::Namespaces(format!("making {} read-only: {e}", at.display())))
}
