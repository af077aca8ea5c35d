//! How an agent is started: its program, arguments and environment, as configured.

use std::path::PathBuf;

/// What a program needs from the environment to run (where things are, who and where it
/// is, its language); an agent's keys come from its `env`.
fn inherited(name: &str) -> bool {
    const NAMES: [&str; 11] = [
        "PATH",
        "HOME",
        "USER",
        "LOGNAME",
        "SHELL",
        "LANG",
        "TERM",
        "TMPDIR",
        "TZ",
        "SSL_CERT_FILE",
        "SSL_CERT_DIR",
    ];
    NAMES.contains(&name) || name.starts_with("LC_") || name.starts_with("XDG_")
}

#[cfg(test)]
mod tests {
    #[test]
    fn only_what_a_program_needs_to_run_is_inherited() {
        for name in ["PATH", "HOME", "LC_ALL", "XDG_CONFIG_HOME", "LANG"] {
            assert!(super::inherited(name), "{name}");
        }
        for name in [
            "OPENAI_API_KEY",
            "TALARIA_HOME",
            "TALARIA_STORE_URL",
            "AWS_SECRET_ACCESS_KEY",
            "LD_PRELOAD",
        ] {
            assert!(!super::inherited(name), "{name}");
        }
    }
}

/// An agent's command line (`[agents.NAME] command, args, env`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentCommand {
    /// The name it is configured under (shown on cards and questions).
    pub name: String,
    pub program: PathBuf,
    pub args: Vec<String>,
    /// Added to the environment Talaria's own process has.
    pub env: Vec<(String, String)>,
    /// Words run before the program (which then runs it with its arguments): Talaria's
    /// helper, so the agent dies with Talaria (`__follow-parent PID`); none: it runs as is.
    pub launcher: Vec<std::ffi::OsString>,
}

impl AgentCommand {
    /// The process, not yet started: in a process group of its own (so what it starts ends
    /// with it), stdio piped, in `cwd`, with only the environment a program needs to run
    /// and what its configuration gives it — never Talaria's keys or store address.
    pub(crate) fn process(&self, cwd: &std::path::Path) -> tokio::process::Command {
        let mut command = match self.launcher.split_first() {
            Some((launcher, words)) => {
                let mut command = tokio::process::Command::new(launcher);
                command.args(words).arg(&self.program);
                command
            }
            None => tokio::process::Command::new(&self.program),
        };
        let inherited = std::env::vars().filter(|(name, _)| inherited(name));
        command
            .args(&self.args)
            .env_clear()
            .envs(inherited)
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .current_dir(cwd)
            .process_group(0)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true);
        command
    }
}
