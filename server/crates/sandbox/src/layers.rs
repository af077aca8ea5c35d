//! Which of the sandbox's layers are active for a session's commands, in words for
//! `talaria doctor`, the session's first notice and logs, including what a missing layer
//! leaves uncovered; and the probe that tells whether the namespaces layer works here.

use std::path::Path;
use std::sync::OnceLock;

use crate::policy::{HelperSpec, SandboxPolicy};
use crate::{Availability, HELPER_ARG, SandboxError};

/// The layers a command runs under.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layers {
    /// Landlock and the filters.
    pub landlock: Availability,
    /// The namespaces layer: `Ok` when commands run in it, else why not.
    pub namespaces: Result<(), SandboxError>,
    /// Whether Talaria runs as root (the process limit does not bind root).
    pub as_root: bool,
}

impl Layers {
    /// One line: what is active.
    pub fn describe(&self) -> String {
        let landlock = self.landlock.describe();
        match &self.namespaces {
            Ok(()) => format!(
                "{landlock}, inside user, mount and PID namespaces (a read-only world outside \
                 the writable places, a fresh /dev and /proc)"
            ),
            Err(SandboxError::NoNamespaces(why)) => {
                format!("{landlock}, without namespaces ({why})")
            }
            Err(why) => format!("{landlock}, without namespaces ({why})"),
        }
    }

    /// What the active layers leave uncovered, when something is.
    pub fn gaps(&self) -> Option<String> {
        let mut gaps = Vec::new();
        if self.namespaces.is_err() {
            gaps.push(
                "metadata outside the writable places (chmod, chown, timestamps, extended \
                 attributes) can still be changed; /dev/shm is shared with other sessions, \
                 and ipcs lists your other programs' System V objects (not what they hold); \
                 a mount made while a command runs that shows a hidden place ends it, but a \
                 command reading at that moment can win the race; commands cannot use UNIX \
                 sockets at all (socketpair only; [sandbox] unix_sockets needs namespaces), \
                 start new sessions or process groups, or open pseudo-terminals of their own; \
                 a program that made itself undumpable cannot connect anywhere, and its \
                 refused writes are not logged, so they offer no run outside the sandbox"
                    .to_string(),
            );
        }
        if let Availability::Enforced { abi, .. } = self.landlock
            && abi < 6
        {
            gaps.push(format!(
                "this kernel's Landlock (ABI {abi}) cannot stop signals to other processes or \
                 abstract UNIX sockets (ABI 6, Linux 6.12)"
            ));
        }
        if self.as_root {
            gaps.push("the process limit does not bind the root user".to_string());
        }
        (!gaps.is_empty()).then(|| gaps.join("; "))
    }
}

static SUPPORT: OnceLock<Result<(), SandboxError>> = OnceLock::new();

/// Whether the namespaces layer works on this machine, found once per process by running a
/// command through it with `helper` (Talaria's binary): `Err` says why not. Blocking (a few
/// milliseconds, the first time).
pub fn namespace_support(helper: &Path) -> Result<(), SandboxError> {
    SUPPORT.get_or_init(|| probe(helper)).clone()
}

/// Whether [`namespace_support`] has found out already.
pub fn namespace_support_known() -> bool {
    SUPPORT.get().is_some()
}

/// What [`namespace_support`] found, if it has run; else what the kernel's settings say
/// (unprivileged user namespaces turned off by `user.max_user_namespaces`, Debian's
/// `kernel.unprivileged_userns_clone` or Ubuntu's AppArmor restriction), without waiting.
pub fn namespace_support_now() -> Result<(), SandboxError> {
    match SUPPORT.get() {
        Some(found) => found.clone(),
        None => namespaces_allowed_by_settings(),
    }
}

fn namespaces_allowed_by_settings() -> Result<(), SandboxError> {
    let read = |path: &str| {
        std::fs::read_to_string(path)
            .ok()
            .and_then(|text| text.trim().parse::<i64>().ok())
    };
    let no = |why: &str| Err(SandboxError::NoNamespaces(why.to_string()));
    if !cfg!(target_os = "linux") {
        return no(&format!("not on {}", std::env::consts::OS));
    }
    if read("/proc/sys/user/max_user_namespaces") == Some(0) {
        return no("user namespaces are turned off (user.max_user_namespaces = 0)");
    }
    if read("/proc/sys/kernel/unprivileged_userns_clone") == Some(0) {
        return no(
            "unprivileged user namespaces are turned off (kernel.unprivileged_userns_clone = 0)",
        );
    }
    if read("/proc/sys/kernel/apparmor_restrict_unprivileged_userns") == Some(1) {
        return no("AppArmor restricts unprivileged user namespaces \
             (kernel.apparmor_restrict_unprivileged_userns = 1)");
    }
    Ok(())
}

/// The command that runs `/bin/true` through the namespaces, failing if they cannot be set
/// up.
fn probe_command(helper: &Path) -> Result<std::process::Command, SandboxError> {
    let no = SandboxError::NoNamespaces;
    if !cfg!(target_os = "linux") {
        return Err(no(format!("not on {}", std::env::consts::OS)));
    }
    let spec = HelperSpec {
        sandbox: Some(SandboxPolicy {
            writable: vec![std::env::temp_dir()],
            network: false,
            ..SandboxPolicy::default()
        }),
        env: None,
        require_namespaces: true,
        ..HelperSpec::default()
    };
    let spec = serde_json::to_string(&spec).map_err(|e| no(e.to_string()))?;
    let mut command = std::process::Command::new(helper);
    command
        .args([HELPER_ARG, "/bin/true"])
        .env(crate::SPEC_ENV, spec)
        .stdin(std::process::Stdio::null());
    Ok(command)
}

fn probe(helper: &Path) -> Result<(), SandboxError> {
    let no = SandboxError::NoNamespaces;
    let output = probe_command(helper)?
        .output()
        .map_err(|e| no(format!("the helper did not start: {e}")))?;
    if output.status.success() {
        return Ok(());
    }
    let said = String::from_utf8_lossy(&output.stderr);
    let why = said
        .lines()
        .find_map(|line| line.strip_prefix("talaria sandbox: "))
        .map_or_else(
            || format!("the check failed ({})", output.status),
            |reason| {
                reason
                    .trim_end_matches("; the command did not run")
                    .to_string()
            },
        );
    Err(no(why))
}
