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
use rustix::mount::MountFlags;
use rustix::thread::{CapabilitySet, CapabilitySets};

use crate::SandboxError;
use crate::masks::{attach, clone_tree, failed, failed_rustix, mask_hidden, own_namespaces};
use crate::policy::SandboxPolicy;

/// Device files copied into the fresh `/dev`.
const DEVICES: &[&str] = &["null", "zero", "full", "random", "urandom", "tty"];

/// Moves the calling (single-threaded) process into the sandbox's namespaces and builds its
/// mount table for `policy`. The next child it starts is the PID namespace's init. Sets the
/// process limit, and hands that child `CAP_SYS_ADMIN` (for mounting `/proc`) and
/// `CAP_SYS_PTRACE` (for the watcher, to read the calls of commands that made themselves
/// undumpable; valid only in the sandbox's user namespace) through the ambient set. Returns
/// the policy Landlock applies inside: reads everywhere, writes in the writable places, and
/// every hidden place hidden again beneath its mask.
pub fn enter(policy: &SandboxPolicy) -> Result<SandboxPolicy, SandboxError> {
    let sockets = crate::sockets::to_mask(policy);
    own_namespaces(CloneFlags::CLONE_NEWPID | CloneFlags::CLONE_NEWIPC)?;
    build_mount_table(policy, &sockets)?;
    // The working directory was resolved on the mounts as they were: resolve it again.
    if let Ok(cwd) = std::env::current_dir() {
        let _ = std::env::set_current_dir(cwd);
    }
    if policy.max_processes > 0 {
        crate::procs::limit_processes_to(u64::from(policy.max_processes))
            .map_err(|e| SandboxError::Namespaces(format!("process limit: {e}")))?;
    }
    hand_over_capabilities()?;
    Ok(inside_policy(policy))
}

/// What Landlock enforces inside the namespaces: every hidden place, masked or not. A mask
/// covers what a place holds when the command starts, but the kernel takes it off when the
/// file it covers is replaced from outside (a credential refreshed by a rename, `git
/// credential-store`'s lock file): Landlock, which grants the folders around a hidden place
/// entry by entry, keeps whatever later stands at that name out of reach for the command's
/// whole life (and hides alone a place no mask could cover).
fn inside_policy(policy: &SandboxPolicy) -> SandboxPolicy {
    let mut inside = policy.clone();
    inside.homes.clear();
    inside.private_tmp = None;
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

/// Builds the mount table.
fn build_mount_table(policy: &SandboxPolicy, sockets: &[PathBuf]) -> Result<(), SandboxError> {
    // Copies taken before anything turns read-only keep their write access.
    let writable: Vec<(PathBuf, OwnedFd)> = writable_roots(policy)
        .into_iter()
        .map(|root| clone_tree(&root, true).map(|tree| (root, tree)))
        .collect::<Result<_, _>>()?;
    let readable = crate::masks::readable_trees(policy);
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
    // Landlock hides every place too, masked or not (see `inside_policy`).
    mask_hidden(policy, &readable)?;
    for socket in sockets {
        // A socket that vanished meanwhile needs no mask.
        let _ = rustix::mount::mount_bind("/dev/null", socket);
    }
    Ok(())
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

/// Puts `CAP_SYS_ADMIN` in the inheritable and ambient sets, so the init (executed next,
/// under the same user) may mount its `/proc`; it drops it at once. Before that, locks the
/// secure bits so that root inside (when Talaria runs as root) gains nothing by executing.
fn hand_over_capabilities() -> Result<(), SandboxError> {
    keep_root_powerless()?;
    let mut sets = rustix::thread::capabilities(None).map_err(failed_rustix("capabilities"))?;
    sets.inheritable |= CapabilitySet::SYS_ADMIN | CapabilitySet::SYS_PTRACE;
    rustix::thread::set_capabilities(None, sets).map_err(failed_rustix("capabilities"))?;
    for capability in [CapabilitySet::SYS_ADMIN, CapabilitySet::SYS_PTRACE] {
        rustix::thread::configure_capability_in_ambient_set(capability, true)
            .map_err(failed_rustix("the ambient capabilities"))?;
    }
    Ok(())
}

/// Locks the secure bits so that root inside a user namespace of the sandbox's (when Talaria
/// runs as root) gains no capability by executing a program.
pub(crate) fn keep_root_powerless() -> Result<(), SandboxError> {
    use rustix::thread::CapabilitiesSecureBits as Bits;
    rustix::thread::set_capabilities_secure_bits(
        Bits::NO_ROOT | Bits::NO_ROOT_LOCKED | Bits::NO_SETUID_FIXUP | Bits::NO_SETUID_FIXUP_LOCKED,
    )
    .map_err(failed_rustix("keeping root without capabilities"))
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
