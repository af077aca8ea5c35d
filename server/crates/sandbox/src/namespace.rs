//! The namespaces layer, where unprivileged user namespaces exist: the supervisor moves
//! itself into new user, mount, PID and IPC namespaces and rebuilds the mount table there —
//! every mount read-only but the writable places (so `chmod`, `chown`, timestamps and
//! extended attributes outside them fail), a fresh `/dev` (the usual devices, a terminal
//! space and `/dev/shm` of its own), the hidden places masked (an empty folder or file
//! nobody may open, the readable exceptions bound back in read-only) and the UNIX sockets
//! commands may not reach masked — then starts the sandbox's init, the first process of the
//! new PID namespace, which mounts a `/proc` of its own and drops the one capability it was
//! handed for that. The masks are locked to the namespace: nothing inside can unmount them.

use std::ffi::CStr;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

use nix::sched::CloneFlags;
use rustix::fs::CWD;
use rustix::mount::{MountFlags, MountPropagationFlags, MoveMountFlags, OpenTreeFlags};
use rustix::thread::{CapabilitySet, CapabilitySets};

use crate::SandboxError;
use crate::policy::SandboxPolicy;

/// Device files copied into the fresh `/dev`.
const DEVICES: &[&str] = &["null", "zero", "full", "random", "urandom", "tty"];

fn failed(step: &str) -> impl Fn(std::io::Error) -> SandboxError + '_ {
    move |e| SandboxError::Namespaces(format!("{step}: {e}"))
}

fn failed_rustix(step: &str) -> impl Fn(rustix::io::Errno) -> SandboxError + '_ {
    move |e| SandboxError::Namespaces(format!("{step}: {e}"))
}

/// Moves the calling (single-threaded) process into the sandbox's namespaces and builds its
/// mount table for `policy`. The next child it starts is the PID namespace's init. Sets the
/// process limit, and hands that child `CAP_SYS_ADMIN` (for mounting `/proc`) and
/// `CAP_SYS_PTRACE` (for the watcher, to read the calls of commands that made themselves
/// undumpable; valid only in the sandbox's user namespace) through the ambient set. Returns the policy Landlock applies inside: reads everywhere, writes in the
/// writable places, and the hidden places no mask could cover.
pub fn enter(policy: &SandboxPolicy) -> Result<SandboxPolicy, SandboxError> {
    let (uid, gid) = (nix::unistd::getuid(), nix::unistd::getgid());
    let sockets = crate::sockets::to_mask(policy);
    let policy = &policy.resolved();
    nix::sched::unshare(
        CloneFlags::CLONE_NEWUSER
            | CloneFlags::CLONE_NEWNS
            | CloneFlags::CLONE_NEWPID
            | CloneFlags::CLONE_NEWIPC,
    )
    .map_err(|e| SandboxError::NoNamespaces(format!("unshare: {e}")))?;
    std::fs::write("/proc/self/setgroups", "deny").map_err(failed("setgroups"))?;
    std::fs::write("/proc/self/uid_map", format!("{uid} {uid} 1")).map_err(failed("uid_map"))?;
    std::fs::write("/proc/self/gid_map", format!("{gid} {gid} 1")).map_err(failed("gid_map"))?;
    rustix::mount::mount_change(
        "/",
        MountPropagationFlags::REC | MountPropagationFlags::PRIVATE,
    )
    .map_err(failed_rustix("private mounts"))?;
    let unmasked = build_mount_table(policy, &sockets)?;
    // The working directory was resolved on the mounts as they were: resolve it again.
    if let Ok(cwd) = std::env::current_dir() {
        let _ = std::env::set_current_dir(cwd);
    }
    if policy.max_processes > 0 {
        crate::procs::limit_processes_to(u64::from(policy.max_processes))
            .map_err(|e| SandboxError::Namespaces(format!("process limit: {e}")))?;
    }
    hand_over_capabilities()?;
    Ok(inside_policy(policy, unmasked))
}

/// What Landlock enforces inside the namespaces: the masks hide what they cover, Landlock
/// the rest (with the readable exceptions below it).
fn inside_policy(policy: &SandboxPolicy, unmasked: Vec<PathBuf>) -> SandboxPolicy {
    let mut inside = policy.with_hidden_masked();
    inside.readable = policy
        .readable
        .iter()
        .filter(|path| unmasked.iter().any(|hidden| path.starts_with(hidden)))
        .cloned()
        .collect();
    // A hidden place that does not exist yet cannot be masked: Landlock hides it (its folder
    // is granted entry by entry, so whatever appears there later stays out of reach for the
    // command's whole life: a key written into the home while the command runs included).
    inside.hidden = unmasked;
    inside.hidden.extend(
        policy
            .hidden
            .iter()
            .filter(|path| path.symlink_metadata().is_err())
            .cloned(),
    );
    inside
}

/// The writable places that exist and still are what Talaria resolved, outer ones first.
fn writable_roots(policy: &SandboxPolicy) -> Vec<PathBuf> {
    let mut roots: Vec<PathBuf> = policy
        .writable
        .iter()
        .filter_map(|root| crate::policy::still_itself(root))
        .filter(|root| root.is_dir())
        .collect();
    roots.sort_by_key(|root| root.components().count());
    roots.dedup();
    roots
}

fn clone_tree(path: &Path, recursive: bool) -> Result<OwnedFd, SandboxError> {
    let mut flags = OpenTreeFlags::OPEN_TREE_CLONE | OpenTreeFlags::OPEN_TREE_CLOEXEC;
    if recursive {
        flags |= OpenTreeFlags::AT_RECURSIVE;
    }
    rustix::mount::open_tree(CWD, path, flags)
        .map_err(|e| SandboxError::Namespaces(format!("copying {}: {e}", path.display())))
}

fn attach(tree: &OwnedFd, at: &Path) -> Result<(), SandboxError> {
    rustix::mount::move_mount(tree, "", CWD, at, MoveMountFlags::MOVE_MOUNT_F_EMPTY_PATH)
        .map_err(|e| SandboxError::Namespaces(format!("mounting on {}: {e}", at.display())))
}

/// Builds the mount table; returns the hidden places no mask covers.
fn build_mount_table(
    policy: &SandboxPolicy,
    sockets: &[PathBuf],
) -> Result<Vec<PathBuf>, SandboxError> {
    // Copies taken before anything turns read-only keep their write access.
    let writable: Vec<(PathBuf, OwnedFd)> = writable_roots(policy)
        .into_iter()
        .map(|root| clone_tree(&root, true).map(|tree| (root, tree)))
        .collect::<Result<_, _>>()?;
    let readable: Vec<(PathBuf, OwnedFd)> = policy
        .readable
        .iter()
        .filter(|path| path.exists())
        .filter_map(|path| clone_tree(path, true).ok().map(|tree| (path.clone(), tree)))
        .collect();
    let devices: Vec<(&str, OwnedFd)> = DEVICES
        .iter()
        .filter_map(|name| {
            clone_tree(&Path::new("/dev").join(name), false)
                .ok()
                .map(|tree| (*name, tree))
        })
        .collect();
    let mounts = crate::mounts::current().map_err(failed("reading the mount table"))?;
    for mount in &mounts {
        let special = ["/proc", "/dev"].iter().any(|p| mount.point.starts_with(p));
        if special {
            continue;
        }
        // A mount this user cannot reach (below a folder it may not enter) stays as it is;
        // Landlock still refuses writes there.
        if let Err(e) = crate::mounts::make_read_only(mount)
            && mount.point == Path::new("/")
        {
            return Err(SandboxError::Namespaces(format!("making / read-only: {e}")));
        }
    }
    for (root, tree) in &writable {
        attach(tree, root)?;
    }
    fresh_dev(&devices)?;
    let unmasked = mask_hidden(policy, &readable)?;
    for socket in sockets {
        // A socket that vanished meanwhile needs no mask.
        let _ = rustix::mount::mount_bind("/dev/null", socket);
    }
    Ok(unmasked)
}

fn tmpfs(at: &str, options: &CStr) -> Result<(), SandboxError> {
    rustix::mount::mount(
        "tmpfs",
        at,
        "tmpfs",
        MountFlags::NOSUID | MountFlags::NODEV,
        options,
    )
    .map_err(failed_rustix(at))
}

/// A `/dev` of the sandbox's own: the usual devices (the machine's, bound in), terminals of
/// its own (`devpts` in a new instance), a private `/dev/shm`.
fn fresh_dev(devices: &[(&str, OwnedFd)]) -> Result<(), SandboxError> {
    tmpfs("/dev", c"mode=0755,size=64k")?;
    for (name, tree) in devices {
        let path = Path::new("/dev").join(name);
        std::fs::write(&path, "").map_err(failed("creating a device file"))?;
        attach(tree, &path)?;
    }
    std::fs::create_dir("/dev/pts").map_err(failed("/dev/pts"))?;
    rustix::mount::mount(
        "devpts",
        "/dev/pts",
        "devpts",
        MountFlags::NOSUID | MountFlags::NOEXEC,
        c"newinstance,ptmxmode=0666,mode=0620",
    )
    .map_err(failed_rustix("a terminal space of its own"))?;
    std::fs::create_dir("/dev/shm").map_err(failed("/dev/shm"))?;
    tmpfs("/dev/shm", c"mode=1777")?;
    for (link, target) in [
        ("ptmx", "pts/ptmx"),
        ("fd", "/proc/self/fd"),
        ("stdin", "/proc/self/fd/0"),
        ("stdout", "/proc/self/fd/1"),
        ("stderr", "/proc/self/fd/2"),
    ] {
        std::os::unix::fs::symlink(target, Path::new("/dev").join(link))
            .map_err(failed("a /dev link"))?;
    }
    Ok(())
}

/// The file every hidden file is masked with: empty, and nobody may open it.
const MASK_FILE: &str = "/dev/.talaria-mask";

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
        let (Ok(meta), Ok(real)) = (std::fs::metadata(path), path.canonicalize()) else {
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
/// command: a place that could not be masked is returned, and Landlock hides it instead.
fn mask_hidden(
    policy: &SandboxPolicy,
    readable: &[(PathBuf, OwnedFd)],
) -> Result<Vec<PathBuf>, SandboxError> {
    use std::os::unix::fs::PermissionsExt;
    let places = hidden_places(policy);
    std::fs::write(MASK_FILE, "").map_err(failed("the mask file"))?;
    std::fs::set_permissions(MASK_FILE, std::fs::Permissions::from_mode(0o000))
        .map_err(failed("the mask file"))?;
    let mut unmasked = Vec::new();
    for place in &places {
        let masked = if place.is_dir {
            mask_folder(&place.path, readable)
        } else {
            rustix::mount::mount_bind(MASK_FILE, &place.path)
                .map_err(failed_rustix("masking a file"))
                .and_then(|()| read_only(&place.path))
        };
        if masked.is_err() {
            unmasked.push(place.path.clone());
        }
    }
    // Each place was masked once, so the mask file is no mount's root and can go; were it
    // to stay, it is an empty file nobody may open in the sandbox's own `/dev`.
    let _ = std::fs::remove_file(MASK_FILE);
    Ok(unmasked)
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

fn read_only(at: &Path) -> Result<(), SandboxError> {
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

/// Puts `CAP_SYS_ADMIN` in the inheritable and ambient sets, so the init (executed next,
/// under the same user) may mount its `/proc`; it drops it at once. Before that, locks the
/// secure bits so that root inside (when Talaria runs as root) gains nothing by executing.
fn hand_over_capabilities() -> Result<(), SandboxError> {
    // Root inside (when Talaria runs as root) gains no capability by executing a program.
    use rustix::thread::CapabilitiesSecureBits as Bits;
    rustix::thread::set_capabilities_secure_bits(
        Bits::NO_ROOT | Bits::NO_ROOT_LOCKED | Bits::NO_SETUID_FIXUP | Bits::NO_SETUID_FIXUP_LOCKED,
    )
    .map_err(failed_rustix("keeping root without capabilities"))?;
    let mut sets = rustix::thread::capabilities(None).map_err(failed_rustix("capabilities"))?;
    sets.inheritable |= CapabilitySet::SYS_ADMIN | CapabilitySet::SYS_PTRACE;
    rustix::thread::set_capabilities(None, sets).map_err(failed_rustix("capabilities"))?;
    for capability in [CapabilitySet::SYS_ADMIN, CapabilitySet::SYS_PTRACE] {
        rustix::thread::configure_capability_in_ambient_set(capability, true)
            .map_err(failed_rustix("the ambient capabilities"))?;
    }
    Ok(())
}

/// In the init, first thing: a `/proc` of the new PID namespace, then no capability left but
/// `CAP_SYS_PTRACE` (for the watcher's thread, which is started next; the init drops it too
/// before it starts the command) and none to hand on.
pub fn finish_in_init() -> Result<(), SandboxError> {
    rustix::mount::mount(
        "proc",
        "/proc",
        "proc",
        MountFlags::NOSUID | MountFlags::NODEV | MountFlags::NOEXEC,
        None::<&CStr>,
    )
    .map_err(failed_rustix("mounting /proc"))?;
    keep_capabilities(CapabilitySet::SYS_PTRACE)
}

/// Drops the calling thread's last capability (threads started before keep theirs).
pub fn drop_capabilities() -> Result<(), SandboxError> {
    keep_capabilities(CapabilitySet::empty())
}

fn keep_capabilities(kept: CapabilitySet) -> Result<(), SandboxError> {
    rustix::thread::clear_ambient_capability_set().map_err(failed_rustix("capabilities"))?;
    rustix::thread::set_capabilities(
        None,
        CapabilitySets {
            effective: kept,
            permitted: kept,
            inheritable: CapabilitySet::empty(),
        },
    )
    .map_err(failed_rustix("dropping capabilities"))
}
