//! Entering the sandbox on Linux: Landlock for the file system (and signals), a seccomp
//! filter for the network. Applied by the helper to itself just before it executes the
//! command, so Talaria itself is never restricted.

use landlock::{
    ABI, Access, AccessFs, BitFlags, CompatLevel, Compatible, LandlockStatus, PathBeneath, PathFd,
    Ruleset, RulesetAttr, RulesetCreatedAttr, RulesetStatus, Scope,
};

use crate::SandboxError;
use crate::plan::{self, Grant};
use crate::policy::SandboxPolicy;

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
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Enforcement {
    /// The Landlock ABI in effect.
    pub abi: i32,
    /// Every right Talaria asked for is enforced (else an older kernel enforces a subset).
    pub full: bool,
}

fn abi_number(status: LandlockStatus) -> i32 {
    match status {
        LandlockStatus::Available { effective_abi, .. } => effective_abi as i32,
        _ => 0,
    }
}

/// Restricts the calling thread (and what it executes) to `policy`.
pub fn enter(policy: &SandboxPolicy) -> Result<Enforcement, SandboxError> {
    let landlock = |e: landlock::RulesetError| SandboxError::Landlock(e.to_string());
    let mut ruleset = Ruleset::default()
        .handle_access(handled())
        .map_err(landlock)?
        .scope(Scope::Signal)
        .map_err(landlock)?;
    if !policy.network {
        ruleset = ruleset.scope(Scope::AbstractUnixSocket).map_err(landlock)?;
    }
    let mut created = ruleset.create().map_err(landlock)?;
    for rule in plan::rules(policy) {
        // A path that vanished or cannot be opened is simply not granted.
        let Ok(metadata) = std::fs::metadata(&rule.path) else {
            continue;
        };
        let Ok(fd) = PathFd::new(&rule.path) else {
            continue;
        };
        // Only file rights apply to a file (asking for more would mark the ruleset partial).
        let mut allowed = rights(rule.grant);
        if !metadata.is_dir() {
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
    if !policy.network {
        deny_network()?;
    }
    Ok(Enforcement {
        abi: abi_number(status.landlock),
        full: status.ruleset == RulesetStatus::FullyEnforced,
    })
}

/// A seccomp filter that refuses every socket but UNIX ones (and `io_uring`, which could open
/// sockets around the filter).
fn deny_network() -> Result<(), SandboxError> {
    use seccompiler::{
        BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
        SeccompRule, TargetArch,
    };
    let seccomp = |e: &dyn std::fmt::Display| SandboxError::Seccomp(e.to_string());
    let arch = TargetArch::try_from(std::env::consts::ARCH).map_err(|e| seccomp(&e))?;
    let not_unix = SeccompCondition::new(
        0,
        SeccompCmpArgLen::Dword,
        SeccompCmpOp::Ne,
        libc::AF_UNIX as u64,
    )
    .map_err(|e| seccomp(&e))?;
    let rules = [
        (
            libc::SYS_socket,
            vec![SeccompRule::new(vec![not_unix]).map_err(|e| seccomp(&e))?],
        ),
        (libc::SYS_io_uring_setup, Vec::new()),
    ]
    .into_iter()
    .collect();
    let filter = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EACCES as u32),
        arch,
    )
    .map_err(|e| seccomp(&e))?;
    let program: BpfProgram = filter.try_into().map_err(|e| seccomp(&e))?;
    seccompiler::apply_filter(&program).map_err(|e| seccomp(&e))
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
