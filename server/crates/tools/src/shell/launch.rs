//! How a session's commands are started: through the sandbox helper (Talaria's own binary,
//! re-executed: a supervisor that puts the command in a session of its own and ends
//! everything it starts with it, and, unless the sandbox is off, missing or the user let this
//! one command out, enters the OS sandbox first), always with the clean environment, and in
//! the session's private temporary directory.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use talaria_sandbox::{EnvRules, HELPER_ARG, HelperSpec, Layers, SPEC_ENV, SandboxPolicy};

use super::shell_program;

/// Whether a session's commands run in the OS sandbox.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Sandboxing {
    /// Every command runs in the sandbox (unless the user lets one command out).
    Enforced(Arc<SandboxPolicy>),
    /// The user turned the sandbox off (`[sandbox] mode = "off"` or `TALARIA_SANDBOX=off`).
    Off,
    /// This machine offers none, and why.
    Unavailable(String),
}

/// A process to start: what to execute and with which environment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Launch {
    pub program: PathBuf,
    pub args: Vec<OsString>,
    /// The whole environment (replacing the agent's); `None` when the program is started by
    /// another process (an editor terminal) and the helper cleans it itself.
    pub env: Option<Arc<Vec<(OsString, OsString)>>>,
    /// The helper's specification (the policy and the environment rules), for the
    /// [`SPEC_ENV`] variable of the process: never an argument, which an editor's terminal
    /// shows and every local user can read.
    pub spec: Option<String>,
    /// What the user would have typed: the command itself, not the helper's plumbing.
    pub shown: String,
    /// Whether the process runs in the OS sandbox.
    pub sandboxed: bool,
    /// Whether the helper supervises it (it makes its own session; the runner must not make
    /// it a process group leader first).
    pub supervised: bool,
}

/// What a session's shell is built from.
#[derive(Debug, Clone, Default)]
pub struct ShellSettings {
    /// The sandbox, with the writable roots already in its policy (plus the private
    /// temporary directory this shell adds).
    pub sandboxing: Option<Sandboxing>,
    /// How commands' environment is cleaned.
    pub env: EnvRules,
    /// The sandbox helper (Talaria's binary) for commands started here, and its path for
    /// commands another process starts (an editor terminal).
    pub helper: Option<PathBuf>,
    pub helper_elsewhere: Option<PathBuf>,
    /// The sandbox's layers on this machine, for notices.
    pub layers: Option<Layers>,
    /// Where commands' refusal logs are made: a folder commands cannot reach
    /// (`$TALARIA_HOME/refusals`). Without one, nothing a command is refused can offer a run
    /// outside the sandbox.
    pub refusals_dir: Option<PathBuf>,
}

/// A session's way of starting commands.
#[derive(Debug)]
pub struct Shell {
    sandboxing: Sandboxing,
    rules: EnvRules,
    env: Arc<Vec<(OsString, OsString)>>,
    helper: Option<PathBuf>,
    helper_elsewhere: Option<PathBuf>,
    private_tmp: Option<PathBuf>,
    layers: Option<Layers>,
    refusals_dir: Option<PathBuf>,
    /// The sandbox's decision of what is hidden, as the file tools, checkpoints and restores
    /// ask it (nothing hidden without a sandbox).
    places: Arc<dyn talaria_files::Places>,
}

impl Default for Shell {
    /// Commands run on this machine without a sandbox, with the clean environment: for tests
    /// and tools used outside a session.
    fn default() -> Self {
        Self::new(ShellSettings::default())
    }
}

/// Creates a private temporary directory (mode 0700) for one session's commands.
fn make_private_tmp() -> Option<PathBuf> {
    use std::os::unix::fs::DirBuilderExt;
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let base = std::env::temp_dir();
    for _ in 0..8 {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let dir = base.join(format!(
            "talaria-{}-{}-{nanos:x}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
            Ok(()) => return dir.canonicalize().ok().or(Some(dir)),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => {
                tracing::warn!("cannot create a private temporary directory: {e}");
                return None;
            }
        }
    }
    None
}

impl Shell {
    /// A shell with these settings; a sandboxed one gets its private temporary directory.
    pub fn new(settings: ShellSettings) -> Self {
        let mut sandboxing = settings.sandboxing.unwrap_or(Sandboxing::Off);
        if matches!(sandboxing, Sandboxing::Enforced(_)) && settings.helper.is_none() {
            sandboxing = Sandboxing::Unavailable("no sandbox helper in this build".into());
        }
        let private_tmp = match &sandboxing {
            Sandboxing::Enforced(_) => make_private_tmp(),
            _ => None,
        };
        if let (Sandboxing::Enforced(policy), Some(tmp)) = (&mut sandboxing, &private_tmp) {
            let policy = Arc::make_mut(policy);
            policy.writable.push(tmp.clone());
            policy.private_tmp = Some(tmp.clone());
        }
        let mut rules = settings.env;
        if let Some(tmp) = &private_tmp {
            for name in ["TMPDIR", "TMP", "TEMP"] {
                rules
                    .set
                    .entry(name.into())
                    .or_insert_with(|| tmp.display().to_string());
            }
        }
        let env = Arc::new(rules.apply(std::env::vars_os()));
        let places = crate::fs::SandboxPlaces::of(match &sandboxing {
            Sandboxing::Enforced(policy) => Some(policy),
            _ => None,
        });
        Self {
            places,
            sandboxing,
            rules,
            env,
            helper: settings.helper,
            helper_elsewhere: settings.helper_elsewhere,
            private_tmp,
            layers: settings.layers,
            refusals_dir: settings.refusals_dir,
        }
    }

    /// A new refusal log for one sandboxed command (none when the sandbox is not enforced,
    /// there is no folder for logs, or it cannot be made).
    pub fn refusal_log(&self) -> Option<talaria_sandbox::refusals::RefusalLog> {
        if !matches!(self.sandboxing, Sandboxing::Enforced(_)) {
            return None;
        }
        let folder = self.refusals_dir.as_ref()?;
        talaria_sandbox::refusals::RefusalLog::create(folder)
            .map_err(|e| tracing::warn!("cannot make a refusal log in {}: {e}", folder.display()))
            .ok()
    }

    /// The sandbox's layers on this machine, when they were looked at.
    pub fn layers(&self) -> Option<&Layers> {
        self.layers.as_ref()
    }

    /// Finds out, once per process and on the blocking pool, whether the namespaces layer
    /// works here (a command run through it, a few milliseconds), so that launching a command
    /// never waits for it on the runtime thread.
    pub async fn find_layers(&self) {
        let wanted = self.policy().is_some_and(|policy| policy.namespaces);
        if let (true, Some(helper)) = (wanted, &self.helper)
            && !talaria_sandbox::namespace_support_known()
        {
            let helper = helper.clone();
            let _ =
                tokio::task::spawn_blocking(move || talaria_sandbox::namespace_support(&helper))
                    .await;
        }
    }

    /// Whether commands run sandboxed, and with which policy.
    pub fn sandboxing(&self) -> &Sandboxing {
        &self.sandboxing
    }

    /// The sandbox policy commands run under, when they do.
    pub fn policy(&self) -> Option<&SandboxPolicy> {
        match &self.sandboxing {
            Sandboxing::Enforced(policy) => Some(policy),
            _ => None,
        }
    }

    /// The environment commands get.
    pub fn environment(&self) -> &[(OsString, OsString)] {
        &self.env
    }

    /// What the sandbox hides and lets commands write, for the one way to the user's files.
    pub fn places(&self) -> Arc<dyn talaria_files::Places> {
        self.places.clone()
    }

    /// The private temporary directory, when there is one.
    pub fn private_tmp(&self) -> Option<&Path> {
        self.private_tmp.as_deref()
    }

    /// The policy a command runs under: the session's, or with `confine = false` (the
    /// user's one-command escalation) the same lifted ([`SandboxPolicy::lifted`]: secrets
    /// stay hidden); none when the sandbox is off.
    fn policy_for(&self, confine: bool) -> Option<SandboxPolicy> {
        match &self.sandboxing {
            Sandboxing::Enforced(policy) if confine => Some(policy.as_ref().clone()),
            Sandboxing::Enforced(policy) => Some(policy.lifted()),
            _ => None,
        }
    }

    /// How to start `bash -c script` here; `confine = false` lifts the sandbox's walls but
    /// its hidden places (the user's one-command escalation). Through the helper whenever
    /// there is one, so every command has a session of its own and leaves nothing running.
    pub fn local(&self, script: &str, confine: bool) -> Launch {
        self.local_logged(script, confine, None)
    }

    /// [`Shell::local`], with the sandbox's refusals logged to `log`.
    pub fn local_logged(&self, script: &str, confine: bool, log: Option<&Path>) -> Launch {
        let shell_args = [OsString::from("-c"), OsString::from(script)];
        let policy = self.policy_for(confine);
        let policy = policy.as_ref();
        match &self.helper {
            Some(helper) => Launch {
                program: helper.clone(),
                args: helper_args(&shell_args),
                env: Some(self.env.clone()),
                spec: Some(self.helper_spec(policy, None, log)),
                shown: script.to_string(),
                sandboxed: policy.is_some(),
                supervised: true,
            },
            None => Launch {
                program: PathBuf::from(shell_program()),
                args: shell_args.to_vec(),
                env: Some(self.env.clone()),
                spec: None,
                shown: script.to_string(),
                sandboxed: false,
                supervised: false,
            },
        }
    }

    /// How another process (an editor terminal) starts `bash -c script`: through the helper,
    /// which cleans the environment it inherits and enters the sandbox. `None` when the
    /// helper lies where sandboxed commands may write (Talaria installed inside a
    /// workspace): another process runs it by name, and a command could have put its own
    /// program there, so such commands run on this machine, through the helper opened once.
    pub fn elsewhere(&self, script: &str, confine: bool) -> Option<Launch> {
        self.elsewhere_logged(script, confine, None)
    }

    /// [`Shell::elsewhere`], with the sandbox's refusals logged to `log`.
    pub fn elsewhere_logged(
        &self,
        script: &str,
        confine: bool,
        log: Option<&Path>,
    ) -> Option<Launch> {
        let shell_args = [OsString::from("-c"), OsString::from(script)];
        let Some(helper) = &self.helper_elsewhere else {
            return Some(Launch {
                program: PathBuf::from(shell_program()),
                args: shell_args.to_vec(),
                env: None,
                spec: None,
                shown: script.to_string(),
                sandboxed: false,
                supervised: false,
            });
        };
        if self
            .policy()
            .is_some_and(|policy| commands_may_replace(policy, helper))
        {
            return None;
        }
        let policy = self.policy_for(confine);
        let policy = policy.as_ref();
        Some(Launch {
            program: helper.clone(),
            args: editor_args(helper, script, &shell_args),
            env: None,
            spec: Some(self.helper_spec(policy, Some(&self.rules), log)),
            shown: script.to_string(),
            sandboxed: policy.is_some(),
            supervised: true,
        })
    }

    /// The helper's specification: the policy (with the namespaces only where they work) and
    /// the environment rules, as JSON.
    fn helper_spec(
        &self,
        policy: Option<&SandboxPolicy>,
        rules: Option<&EnvRules>,
        log: Option<&Path>,
    ) -> String {
        let mut sandbox = policy.cloned();
        if let (Some(policy), Some(helper)) = (&mut sandbox, &self.helper)
            && policy.namespaces
        {
            // Found out by `find_layers` before the first command (else here, once).
            policy.namespaces = talaria_sandbox::namespace_support(helper).is_ok();
        }
        let refusals = log.filter(|_| sandbox.is_some()).map(Path::to_path_buf);
        let spec = HelperSpec {
            sandbox,
            env: rules.cloned(),
            require_namespaces: false,
            refusals,
            refusals_fd: None,
        };
        serde_json::to_string(&spec).unwrap_or_default()
    }
}

/// Whether a sandboxed command could replace the program at `path` (it, or the folder
/// holding it, as named or as resolved, is writable under `policy`).
fn commands_may_replace(policy: &SandboxPolicy, path: &Path) -> bool {
    let real = path.canonicalize().ok();
    [Some(path.to_path_buf()), real]
        .into_iter()
        .flatten()
        .flat_map(|p| [p.parent().map(Path::to_path_buf), Some(p)])
        .flatten()
        .any(|p| policy.access(&p) == talaria_sandbox::PathAccess::Writable)
}

/// The helper's arguments in an editor's terminal: the command's own words when the helper
/// is `talaria-sandbox` (which joins them back into `SHELL -c SCRIPT`), so the editor shows
/// the user's command after the helper's name; else `__sandbox SHELL -c SCRIPT`.
fn editor_args(helper: &Path, script: &str, shell_args: &[OsString]) -> Vec<OsString> {
    let dedicated = helper.file_name() == Some(std::ffi::OsStr::new("talaria-sandbox"));
    dedicated
        .then(|| talaria_sandbox::command_words(script))
        .flatten()
        .unwrap_or_else(|| helper_args(shell_args))
}

/// The helper's arguments: `__sandbox SHELL -c SCRIPT` (the policy travels in [`SPEC_ENV`]).
fn helper_args(shell_args: &[OsString]) -> Vec<OsString> {
    let mut args = vec![OsString::from(HELPER_ARG), OsString::from(shell_program())];
    args.extend(shell_args.iter().cloned());
    args
}

/// The helper's specification as the variable a process is started with.
pub fn spec_variable(launch: &Launch) -> Option<(&'static str, &str)> {
    launch.spec.as_deref().map(|spec| (SPEC_ENV, spec))
}

impl Drop for Shell {
    fn drop(&mut self) {
        if let Some(tmp) = self.private_tmp.take() {
            // Off the runtime thread: the session's end never waits on the disk.
            let remove = move || {
                let _ = std::fs::remove_dir_all(tmp);
            };
            match tokio::runtime::Handle::try_current() {
                Ok(runtime) => drop(runtime.spawn_blocking(remove)),
                Err(_) => remove(),
            }
        }
    }
}

/// Removes the private temporary directories of Talaria processes that are gone (killed, or
/// ended before their sessions' cleanup ran). Blocking; run it off the runtime thread.
pub fn sweep_private_tmps() {
    let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix("talaria-"))
            .and_then(|rest| rest.split('-').next())
            .and_then(|pid| pid.parse::<u32>().ok())
        else {
            continue;
        };
        let gone = !std::path::Path::new(&format!("/proc/{pid}")).exists();
        if gone && entry.file_type().is_ok_and(|t| t.is_dir()) {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn private_tmps_of_processes_that_are_gone_are_swept() {
        let base = std::env::temp_dir();
        let gone = base.join("talaria-2147483000-0-swept");
        let mine = base.join(format!("talaria-{}-999-kept", std::process::id()));
        for dir in [&gone, &mine] {
            std::fs::create_dir_all(dir.join("inner")).expect("mkdir");
        }
        sweep_private_tmps();
        assert!(!gone.exists(), "a dead process's directory is removed");
        assert!(mine.exists(), "a live process's directory stays");
        let _ = std::fs::remove_dir_all(mine);
    }

    #[test]
    fn commands_get_the_clean_environment_and_the_helper_when_sandboxed() {
        let logs = tempfile::tempdir().expect("logs");
        let shell = Shell::new(ShellSettings {
            sandboxing: Some(Sandboxing::Enforced(Arc::new(SandboxPolicy {
                writable: vec!["/work/p".into()],
                // No probe of the namespaces through this test's own binary.
                namespaces: false,
                ..SandboxPolicy::default()
            }))),
            env: EnvRules::default(),
            helper: Some("/proc/self/exe".into()),
            helper_elsewhere: Some("/usr/bin/talaria".into()),
            layers: None,
            refusals_dir: Some(logs.path().join("refusals")),
        });
        let tmp = shell.private_tmp().expect("private tmp").to_path_buf();
        assert!(tmp.is_dir());
        let launch = shell.local("echo hi", true);
        assert!(launch.sandboxed);
        assert_eq!(launch.program, PathBuf::from("/proc/self/exe"));
        assert_eq!(launch.args, ["__sandbox", shell_program(), "-c", "echo hi"]);
        assert_eq!(launch.shown, "echo hi");
        let spec: HelperSpec =
            serde_json::from_str(launch.spec.as_deref().expect("spec")).expect("spec");
        let policy = spec.sandbox.expect("policy");
        assert!(policy.writable.contains(&tmp));
        let env = launch.env.expect("env");
        assert!(
            env.iter()
                .any(|(n, v)| n == "TMPDIR" && *v == tmp.as_os_str())
        );
        assert!(!env.iter().any(|(n, _)| {
            let n = n.to_string_lossy();
            n.contains("KEY") || n.starts_with("OPENAI_")
        }));
        assert_eq!(policy.private_tmp.as_ref(), Some(&tmp));
        assert_eq!(spec.refusals, None, "no log unless one is made");
        let log = shell.refusal_log().expect("a refusal log");
        assert!(log.path().starts_with(logs.path().join("refusals")));
        let logged = shell.local_logged("echo hi", true, Some(log.path()));
        let spec: HelperSpec =
            serde_json::from_str(logged.spec.as_deref().expect("spec")).expect("spec");
        assert_eq!(spec.refusals.as_deref(), Some(log.path()));
        let escaped = shell.local("echo hi", false);
        assert!(escaped.sandboxed && escaped.supervised);
        assert_eq!(escaped.program, PathBuf::from("/proc/self/exe"));
        let spec: HelperSpec =
            serde_json::from_str(escaped.spec.as_deref().expect("spec")).expect("spec");
        let lifted = spec
            .sandbox
            .expect("let out of the walls, not of the hidden places");
        assert_eq!(lifted.writable, [PathBuf::from("/")]);
        assert_eq!(lifted.hidden, policy.hidden, "secrets stay hidden");
        let elsewhere = shell
            .elsewhere("echo hi", true)
            .expect("outside the workspace");
        assert_eq!(elsewhere.program, PathBuf::from("/usr/bin/talaria"));
        assert!(elsewhere.env.is_none() && elsewhere.sandboxed);
        assert!(
            !elsewhere
                .args
                .iter()
                .any(|a| a.to_string_lossy().contains("/work/p")),
            "the policy is not on the command line: {:?}",
            elsewhere.args
        );
        let spec: HelperSpec =
            serde_json::from_str(elsewhere.spec.as_deref().expect("spec")).expect("spec");
        assert!(
            spec.env.is_some(),
            "the helper cleans the editor's environment"
        );
        drop(shell);
        for _ in 0..100 {
            if !tmp.exists() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        assert!(!tmp.exists(), "the private tmp is removed with the session");
    }

    #[test]
    fn a_helper_commands_may_replace_is_never_handed_to_another_process() {
        let workspace = tempfile::tempdir().expect("workspace");
        let installed = workspace.path().join("bin/talaria-sandbox");
        let outside = tempfile::tempdir().expect("outside");
        let linked = outside.path().join("talaria-sandbox");
        std::fs::create_dir_all(installed.parent().expect("bin")).expect("mkdir");
        std::fs::write(&installed, "").expect("helper");
        std::os::unix::fs::symlink(&installed, &linked).expect("link");
        let shell_with = |elsewhere: &Path| {
            Shell::new(ShellSettings {
                sandboxing: Some(Sandboxing::Enforced(Arc::new(SandboxPolicy {
                    writable: vec![workspace.path().canonicalize().expect("real")],
                    namespaces: false,
                    ..SandboxPolicy::default()
                }))),
                env: EnvRules::default(),
                helper: Some("/proc/self/exe".into()),
                helper_elsewhere: Some(elsewhere.to_path_buf()),
                layers: None,
                refusals_dir: None,
            })
        };
        for helper in [&installed, &linked] {
            assert!(
                shell_with(helper).elsewhere("true", true).is_none(),
                "{}",
                helper.display()
            );
        }
        assert!(
            shell_with(Path::new("/usr/bin/talaria-sandbox"))
                .elsewhere("true", true)
                .is_some()
        );
    }
}
