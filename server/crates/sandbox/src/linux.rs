//! Entering the sandbox on Linux: Landlock for the file system (and signals and abstract
//! sockets), then the syscall filters (`seccomp.rs`). Applied by the sandbox's init to
//! itself just before it starts the command, so Talaria itself is never restricted.

use landlock::{
    ABI, Access, AccessFs, BitFlags, CompatLevel, Compatible, LandlockStatus, PathBeneath, PathFd,
    Ruleset, RulesetAttr, RulesetCreatedAttr, RulesetStatus, Scope,
};

use crate::SandboxError;
use crate::plan::{self, Grant};
use crate::policy::SandboxPolicy;
use crate::seccomp::{self, FilterOptions};

/// The newest Landlock ABI whose file-system rights Talaria handles (V6 and V7 add scopes
/// and logging, not file rights).
const FS_ABI: ABI = ABI::V5;

/// The file-system rights Talaria restricts. Device ioctls are left alone: terminals need
/// them and they reach no file the rules protect.
fn handled() -> BitFlags<AccessFs> {
    AccessFs::from_all(FS_ABI) & !AccessFs::IoctlDev
}

fn rights(grant: Grant) -> BitFlags<AccessFs> {
    match grant {
        Grant::Read => AccessFs::from_read(FS_ABI),
        Grant::List => AccessFs::ReadDir.into(),
        Grant::Write => handled(),
    }
}

/// How strongly the kernel enforces the sandbox.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Enforcement {
    /// The Landlock ABI in effect.
    pub abi: i32,
    /// Every right Talaria asked for is enforced (else an older kernel enforces a subset).
    pub full: bool,
    /// The hierarchies the rules let the command write (for the watcher's record of refused
    /// writes: the same carve, not made twice).
    pub writable: Vec<std::path::PathBuf>,
}

fn abi_number(status: LandlockStatus) -> i32 {
    match status {
        LandlockStatus::Available { effective_abi, .. } => effective_abi as i32,
        _ => 0,
    }
}

/// Restricts the calling thread (and what it executes) to `policy` (resolved, once, by the
/// caller: its hidden places' other names included). `in_namespaces` says
/// whether the caller runs in the sandbox's namespaces (a private `/dev`, a read-only world,
/// masked sockets, its own PID namespace); without them the filters keep the command in its
/// process group and away from UNIX sockets, and other terminals and `/dev/shm` are not
/// granted.
pub fn enter(
    policy: &SandboxPolicy,
    in_namespaces: bool,
    protected: Option<i32>,
    sockets_watched: bool,
) -> Result<Enforcement, SandboxError> {
    let landlock = |e: landlock::RulesetError| SandboxError::Landlock(e.to_string());
    let ruleset = Ruleset::default()
        .handle_access(handled())
        .map_err(landlock)?
        .scope(Scope::Signal)
        .map_err(landlock)?
        .scope(Scope::AbstractUnixSocket)
        .map_err(landlock)?;
    let mut created = ruleset.create().map_err(landlock)?;
    let devices = if in_namespaces {
        plan::Devices::Private
    } else {
        plan::Devices::Shared
    };
    let rules = plan::rules(policy, devices);
    let writable = rules
        .iter()
        .filter(|rule| rule.grant == Grant::Write)
        .map(|rule| rule.path.clone())
        .collect();
    for rule in rules {
        // A path that vanished or cannot be opened is simply not granted.
        let Ok(fd) = PathFd::new(&rule.path) else {
            continue;
        };
        // Only file rights apply to a file (asking for more would mark the ruleset partial).
        // The listing that found it usually said which it is; else the descriptor says.
        let is_dir = rule.is_dir.unwrap_or_else(|| {
            rustix::fs::fstat(&fd).is_ok_and(|stat| {
                rustix::fs::FileType::from_raw_mode(stat.st_mode) == rustix::fs::FileType::Directory
            })
        });
        let mut allowed = rights(rule.grant);
        if !is_dir {
            allowed &= AccessFs::from_file(FS_ABI);
        }
        created = created
            .add_rule(PathBeneath::new(fd, allowed))
            .map_err(landlock)?;
    }
    let status = created.restrict_self().map_err(landlock)?;
    if status.ruleset == RulesetStatus::NotEnforced {
        return Err(SandboxError::Unsupported(
            "the kernel does not enforce Landlock (Linux 5.13 or newer with Landlock enabled is needed)"
                .into(),
        ));
    }
    seccomp::apply(filter_options(
        policy,
        in_namespaces,
        protected,
        sockets_watched,
    ))?;
    Ok(Enforcement {
        abi: abi_number(status.landlock),
        full: status.ruleset == RulesetStatus::FullyEnforced,
        writable,
    })
}

/// The filters for a command in (or out of) the namespaces.
pub fn filter_options(
    policy: &SandboxPolicy,
    in_namespaces: bool,
    protected: Option<i32>,
    sockets_watched: bool,
) -> FilterOptions {
    FilterOptions {
        network: policy.network,
        unix_sockets: in_namespaces,
        new_groups: in_namespaces,
        protected,
        sockets_watched,
    }
}

/// Whether this kernel enforces the sandbox: creating a ruleset that requires the rights
/// Talaria asks for succeeds only where Landlock is built in, enabled and new enough. Nothing
/// is restricted (so this costs the calling process almost nothing); `talaria doctor`
/// proves enforcement by running a command in the sandbox.
pub fn probe() -> Result<Enforcement, SandboxError> {
    let requires = |abi: ABI| {
        Ruleset::default()
            .set_compatibility(CompatLevel::HardRequirement)
            .handle_access(AccessFs::from_all(abi) & !AccessFs::IoctlDev)
            .and_then(|ruleset| ruleset.create())
            .is_ok()
    };
    for (abi, number) in [
        (ABI::V5, 5),
        (ABI::V4, 4),
        (ABI::V3, 3),
        (ABI::V2, 2),
        (ABI::V1, 1),
    ] {
        if requires(abi) {
            return Ok(Enforcement {
                abi: if number == 5 { newest_abi() } else { number },
                full: number == 5,
                writable: Vec::new(),
            });
        }
    }
    Err(SandboxError::Unsupported(
        "the kernel does not offer Landlock (Linux 5.13 or newer with Landlock enabled is needed)"
            .into(),
    ))
}

/// The newest ABI the kernel offers, as far as a probe without restricting can tell: 6 (it
/// scopes signals; maybe newer) or 5.
fn newest_abi() -> i32 {
    let scoped = |scope| {
        Ruleset::default()
            .set_compatibility(CompatLevel::HardRequirement)
            .handle_access(AccessFs::Execute)
            .and_then(|ruleset| ruleset.scope(scope))
            .and_then(|ruleset| ruleset.create())
            .is_ok()
    };
    if scoped(Scope::Signal) { 6 } else { 5 }
}
