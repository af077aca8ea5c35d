//! A session's shell: the OS sandbox policy built from the configuration, the workspace roots
//! and the places that hold secrets, and the clean environment its commands start with.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use talaria_sandbox::{Availability, EnvRules, Layers, SandboxPolicy};
use talaria_tools::SensitivePaths;
use talaria_tools::{Sandboxing, Shell, ShellSettings};

use crate::config::Config;

mod writable_roots;

/// Where the sandbox helper (Talaria's own binary) is found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Helper {
    /// For commands this process starts (`/proc/self/exe` on Linux: the very binary running,
    /// even if the file was replaced since).
    pub local: PathBuf,
    /// For commands another process starts on this machine (an editor terminal).
    pub elsewhere: PathBuf,
}

impl Helper {
    /// The sandbox helper installed beside the running binary (`talaria-sandbox`, small and
    /// quick to start), else the running binary itself (`talaria __sandbox` does the same).
    pub fn this_binary() -> Option<Self> {
        let this = std::env::current_exe().ok()?;
        if let Some(beside) = this.parent().map(|dir| dir.join(HELPER_BINARY))
            && is_executable(&beside)
        {
            return Some(Self {
                local: opened_once(&beside).unwrap_or_else(|| beside.clone()),
                elsewhere: beside,
            });
        }
        let local = if Path::new("/proc/self/exe").exists() {
            PathBuf::from("/proc/self/exe")
        } else {
            this.clone()
        };
        Some(Self {
            local,
            elsewhere: this,
        })
    }
}

/// The helper at `path`, opened once per process: this process's commands run it through
/// that descriptor (`/proc/self/fd/N`), so a program put in its place later — Talaria
/// installed inside a workspace its commands may write — is never run. `None` where the
/// descriptor cannot be named (no `/proc`).
fn opened_once(path: &Path) -> Option<PathBuf> {
    use std::os::fd::AsRawFd;
    static OPENED: std::sync::OnceLock<Option<(std::fs::File, PathBuf)>> =
        std::sync::OnceLock::new();
    OPENED
        .get_or_init(|| {
            let file = std::fs::File::open(path).ok()?;
            let named = PathBuf::from(format!("/proc/self/fd/{}", file.as_raw_fd()));
            named.exists().then_some((file, named))
        })
        .as_ref()
        .map(|(_, named)| named.clone())
}

/// The name of the sandbox helper's own program, installed beside `talaria`.
pub const HELPER_BINARY: &str = "talaria-sandbox";

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// `~/x` → the home's `x`; a relative path is the project's.
fn expand(path: &str, home: Option<&Path>, project: &Path) -> PathBuf {
    match (path.strip_prefix("~/"), home) {
        (Some(rest), Some(home)) => home.join(rest),
        _ if path == "~" => home.map_or_else(|| PathBuf::from(path), Path::to_path_buf),
        _ => project.join(path),
    }
}

/// The policy commands run under in a session with these roots (namespaces asked for as
/// configured; [`sandboxing`] turns them off where the machine has none).
pub fn policy(config: &Config, roots: &[PathBuf]) -> SandboxPolicy {
    policy_for_homes(config, roots, talaria_sandbox::home::user_homes())
}

fn policy_for_homes(config: &Config, roots: &[PathBuf], homes: Vec<PathBuf>) -> SandboxPolicy {
    let home = homes.first().cloned();
    let project = roots.first().cloned().unwrap_or_else(|| PathBuf::from("/"));
    let secrets = SensitivePaths::with_homes(homes, Some(config.home.clone()));
    let (mut hidden, readable) = secrets.hidden_locations();
    hidden.extend(
        config
            .sandbox
            .hidden
            .iter()
            .map(|p| expand(p, home.as_deref(), &project)),
    );
    // This process's own endpoints (`talaria serve`'s token and listeners), wherever the
    // token lies; the helper adds every other server's when each command starts.
    let own = talaria_sandbox::endpoints::own();
    hidden.extend(own.secrets);
    // Resolved once, now: a command that later swaps an entry (or a folder above it) for a
    // link cannot move the writable place, since the helper grants a root only while it
    // still resolves to itself; and a `[sandbox] writable` entry is granted only while it
    // leads where it led when the user listed it (`writable_roots.rs`). One that does not
    // exist yet is made now (Talaria decides where it is), or not granted.
    let mut writable: Vec<PathBuf> = roots.iter().map(|root| resolved_root(root)).collect();
    writable.extend(writable_roots::granted(
        &config.home,
        config
            .sandbox
            .writable
            .iter()
            .map(|p| expand(p, home.as_deref(), &project))
            .collect(),
    ));
    SandboxPolicy {
        writable,
        hidden,
        readable,
        network: config.sandbox.network,
        homes: secrets.homes().to_vec(),
        private_tmp: None,
        unix_sockets: unix_sockets(config, home.as_deref(), &project),
        max_processes: config.sandbox.max_processes,
        namespaces: config.sandbox.namespaces,
        endpoints: own.listeners,
        let_out: false,
    }
}

/// A writable root as it resolves now (a root that cannot be resolved stays as given: the
/// helper grants nothing there then).
fn resolved_root(root: &Path) -> PathBuf {
    root.canonicalize().unwrap_or_else(|_| root.to_path_buf())
}

fn unix_sockets(config: &Config, home: Option<&Path>, project: &Path) -> Vec<PathBuf> {
    config
        .sandbox
        .unix_sockets
        .iter()
        .map(|p| expand(p, home, project))
        .collect()
}

/// The environment rules of the configuration.
pub fn env_rules(config: &Config) -> EnvRules {
    let home = talaria_sandbox::home::user_homes().into_iter().next();
    EnvRules {
        remove: config.shell_environment.withheld.clone(),
        keep: config.shell_environment.keep.clone(),
        set: config.shell_environment.set.clone(),
        sockets: unix_sockets(config, home.as_deref(), Path::new("/"))
            .into_iter()
            .map(|p| p.display().to_string())
            .collect(),
    }
}

/// Whether commands will run sandboxed under this configuration on this machine.
pub fn sandboxing(config: &Config, roots: &[PathBuf], helper: Option<&Helper>) -> Sandboxing {
    if !config.sandbox.enabled {
        return Sandboxing::Off;
    }
    if helper.is_none() {
        return Sandboxing::Unavailable("no sandbox helper in this build".into());
    }
    match (talaria_sandbox::availability(), helper) {
        (Availability::Enforced { .. }, Some(helper)) => {
            let _ = helper;
            let mut policy = policy(config, roots);
            // Without waiting: what the probe found, or what the kernel's settings say; the
            // first command runs the probe (`Shell::find_layers`) and each launch has its
            // answer.
            policy.namespaces = layers_now(config).namespaces.is_ok();
            Sandboxing::Enforced(Arc::new(policy))
        }
        (Availability::Unavailable(why), _) => Sandboxing::Unavailable(why.clone()),
        (_, None) => Sandboxing::Unavailable("no sandbox helper in this build".into()),
    }
}

/// The sandbox's layers for this configuration on this machine, proven (blocking: the
/// first call in a process runs a command through the namespaces to see whether they work).
pub fn layers(config: &Config, helper: Option<&Helper>) -> Layers {
    layers_with(config, |no| match helper {
        Some(helper) => talaria_sandbox::namespace_support(&helper.local),
        None => Err(no("no sandbox helper in this build".into())),
    })
}

/// The sandbox's layers as far as is known now, without waiting for the probe.
pub fn layers_now(config: &Config) -> Layers {
    layers_with(config, |_| talaria_sandbox::namespace_support_now())
}

fn layers_with(
    config: &Config,
    namespaces: impl FnOnce(
        fn(String) -> talaria_sandbox::SandboxError,
    ) -> Result<(), talaria_sandbox::SandboxError>,
) -> Layers {
    let no = talaria_sandbox::SandboxError::NoNamespaces;
    let namespaces = if config.sandbox.namespaces {
        namespaces(no)
    } else {
        Err(no(
            "turned off: [sandbox] namespaces = false or TALARIA_SANDBOX_NAMESPACES=off".into(),
        ))
    };
    Layers {
        landlock: talaria_sandbox::availability().clone(),
        namespaces,
        as_root: nix::unistd::Uid::effective().is_root(),
    }
}

/// The shell of a session with these roots (blocking: it probes the kernel once per process,
/// creates the private temporary directory and lists the home for keys).
pub fn shell(config: &Config, roots: &[PathBuf], helper: Option<Helper>) -> Shell {
    Shell::new(ShellSettings {
        sandboxing: Some(sandboxing(config, roots, helper.as_ref())),
        env: env_rules(config),
        layers: Some(layers_now(config)),
        helper: helper.as_ref().map(|h| h.local.clone()),
        helper_elsewhere: helper.map(|h| h.elsewhere),
        refusals_dir: Some(refusals_dir(config)),
    })
}

/// Where commands' refusal logs are made: inside `TALARIA_HOME`, which commands cannot
/// reach.
pub fn refusals_dir(config: &Config) -> PathBuf {
    config.home.join("refusals")
}

/// Why the sandbox's self-test failed.
#[derive(Debug, thiserror::Error)]
pub enum SelfTestError {
    #[error("cannot prepare the check: {0}")]
    Prepare(#[source] std::io::Error),
    #[error("the helper did not start: {0}")]
    NotStarted(#[source] std::io::Error),
    #[error("the helper failed: {0}")]
    HelperFailed(String),
    #[error("a sandboxed command wrote outside its writable places")]
    Escaped,
    #[error("a sandboxed command could not write in its writable place")]
    NoWrite,
    #[error("a sandboxed command changed the permissions of a folder outside its writable places")]
    MetadataChanged,
}

/// Proves the sandbox works end to end through `helper`, under this configuration's own
/// policy on this user's home (its hidden places, credential stores and process limit), so
/// what would fail every command fails here: a shell in it may write in one temporary
/// directory and not in another, and, with namespaces, not change the other's permissions
/// either. Blocking (it runs a command).
pub fn self_test(helper: &Helper, config: &Config, namespaces: bool) -> Result<(), SelfTestError> {
    let base = std::env::temp_dir().join(format!("talaria-sandbox-check-{}", std::process::id()));
    let (inside, outside) = (base.join("inside"), base.join("outside"));
    for dir in [&inside, &outside] {
        std::fs::create_dir_all(dir).map_err(SelfTestError::Prepare)?;
    }
    let mut checked = policy(config, std::slice::from_ref(&inside));
    checked.network = false;
    checked.namespaces = namespaces;
    let spec = talaria_sandbox::HelperSpec {
        sandbox: Some(checked),
        env: None,
        require_namespaces: namespaces,
        ..Default::default()
    };
    let ran = std::process::Command::new(&helper.local)
        .arg(talaria_sandbox::HELPER_ARG)
        .env(
            talaria_sandbox::SPEC_ENV,
            serde_json::to_string(&spec).unwrap_or_default(),
        )
        .args([
            "/bin/sh",
            "-c",
            "touch \"$1/ok\"; touch \"$2/escaped\" 2>/dev/null; \
             chmod 0777 \"$2\" 2>/dev/null && touch \"$1/chmod-ran\"; exit 0",
            "sh",
        ])
        .arg(&inside)
        .arg(&outside)
        .output();
    let verdict = match ran {
        Err(e) => Err(SelfTestError::NotStarted(e)),
        Ok(out) if !out.status.success() => Err(SelfTestError::HelperFailed(
            String::from_utf8_lossy(&out.stderr).trim().to_string(),
        )),
        Ok(_) if outside.join("escaped").exists() => Err(SelfTestError::Escaped),
        Ok(_) if !inside.join("ok").exists() => Err(SelfTestError::NoWrite),
        Ok(_) if namespaces && inside.join("chmod-ran").exists() => {
            Err(SelfTestError::MetadataChanged)
        }
        Ok(_) => Ok(()),
    };
    let _ = std::fs::remove_dir_all(&base);
    verdict
}

/// What a session's first notice says about its commands, when it must say something: the
/// sandbox is off or missing, or a layer is missing and what that leaves uncovered.
pub fn notice(shell: &Shell) -> Option<String> {
    match shell.sandboxing() {
        Sandboxing::Enforced(policy) => {
            let mut layers = shell.layers()?.clone();
            // Running as root is said by `talaria doctor`, not in every session.
            layers.as_root = false;
            if !policy.namespaces && layers.namespaces.is_ok() {
                layers.namespaces = Err(talaria_sandbox::SandboxError::NoNamespaces(
                    "not in use".into(),
                ));
            }
            layers.gaps().map(|gaps| {
                format!(
                    "Commands run in the OS sandbox ({}). Not covered here: {gaps}.",
                    layers.describe()
                )
            })
        }
        Sandboxing::Off => Some(
            "Commands run WITHOUT the OS sandbox: it is turned off ([sandbox] mode = \"off\" \
             or TALARIA_SANDBOX=off). They run with your rights; only the safety floor and \
             your approvals stand in their way."
                .into(),
        ),
        Sandboxing::Unavailable(why) => Some(format!(
            "This machine offers no OS sandbox ({why}): commands run with your rights. In yolo \
             mode every command not proven read-only asks first."
        )),
    }
}

/// One word for clients' banners: `enforced`, `off` or `unavailable`.
pub fn state(shell: &Shell) -> &'static str {
    match shell.sandboxing() {
        Sandboxing::Enforced(_) => "enforced",
        Sandboxing::Off => "off",
        Sandboxing::Unavailable(_) => "unavailable",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_policy_hides_secrets_and_writes_only_where_allowed() {
        let config = Config::load_with(&|key| match key {
            "TALARIA_HOME" => Some("/home/dev/.talaria".into()),
            "HOME" => Some("/home/dev".into()),
            _ => None,
        })
        .expect("config");
        let mut config = config;
        let project = tempfile::tempdir().expect("project");
        let project = project.path().canonicalize().expect("canonical");
        config.sandbox.writable = vec!["~/.cache/pip".into(), "out".into()];
        config.sandbox.hidden = vec!["~/private".into()];
        let roots = [project.clone(), PathBuf::from("/nonexistent-talaria-lib")];
        // The home of the configuration, not of whoever runs the test (whose `~/.cache` may
        // well exist).
        let policy = policy_for_homes(&config, &roots, vec![PathBuf::from("/home/dev")]);
        assert_eq!(policy.writable[..2], roots);
        assert!(
            policy.writable.contains(&project.join("out")) && project.join("out").is_dir(),
            "a writable entry that did not exist is made before it is granted"
        );
        assert!(
            !policy.writable.iter().any(|w| w.ends_with(".cache/pip")),
            "one that cannot be made (its folder is missing) is not granted"
        );
        assert!(policy.hidden.contains(&PathBuf::from("/home/dev/.talaria")));
        assert!(
            policy
                .readable
                .contains(&PathBuf::from("/home/dev/.talaria/skills"))
        );
        assert!(policy.network);
        let off = Config {
            sandbox: crate::config::SandboxConfig {
                enabled: false,
                ..config.sandbox.clone()
            },
            ..config.clone()
        };
        assert_eq!(sandboxing(&off, &roots, None), Sandboxing::Off);
    }
}
