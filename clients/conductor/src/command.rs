//! How an agent is started: its program, arguments and environment, as configured.

use std::path::PathBuf;

/// An agent's command line (`[agents.NAME] command, args, env`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentCommand {
    /// The name it is configured under (shown on cards and questions).
    pub name: String,
    pub program: PathBuf,
    pub args: Vec<String>,
    /// Added to the environment Talaria's own process has.
    pub env: Vec<(String, String)>,
}

impl AgentCommand {
    /// The process, not yet started: stdio piped, in `cwd`, killed when its handle drops.
    pub(crate) fn process(&self, cwd: &std::path::Path) -> tokio::process::Command {
        let mut command = tokio::process::Command::new(&self.program);
        command
            .args(&self.args)
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .current_dir(cwd)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true);
        command
    }
}
