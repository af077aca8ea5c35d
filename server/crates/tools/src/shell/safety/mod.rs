//! Classifies a shell command for the approval policy and the `terminal` tool, by walking its
//! `tree-sitter-bash` syntax tree: the hard floor (refused in every mode), the programs it
//! runs (the scopes an "always allow" covers), whether every program is known statically, and
//! the paths it names.
//!
//! [`classify`] is pure apart from reading `$HOME` from the process ([`classify_in`] takes it
//! explicitly). Every simple command anywhere in the tree is checked: lists, pipelines, `!`,
//! subshells, brace groups, `if`/`case`/loops, function bodies, command and process
//! substitutions, here-documents fed to a shell, `sh -c`/`eval`/`trap` strings and wrappers
//! (`sudo`, `env`, `xargs`, `find -exec`, …). Shell keywords are never programs.

mod tables;
mod targets;
mod variables;
mod walk;
mod words;
mod wrappers;

#[cfg(test)]
mod kinds;
#[cfg(test)]
mod tests;

/// What a shell command is, for the approval policy.
///
/// - `floor`: why it is refused in every mode, whatever the user or a rule says.
/// - `scopes`: the programs it runs, with the subcommand for programs that multiplex
///   (`git push`, `cargo test`, `ls`); never keywords such as `for` or `if`. An "always allow"
///   covers the command only when it covers every scope.
/// - `unknown`: why not every program it runs can be known before it runs (a variable or
///   substitution as the program, `eval`/`source` of a non-literal, a shell reading its
///   script from a pipe or a here-document, a syntax error). Such a command asks in every mode
///   and is never remembered.
/// - `paths`: paths named as operands or redirect targets (`~` and `$HOME` expanded, relative
///   ones resolved against a static `cd`), so the policy can guard credential files.
/// - `unscoped`: why no "always allow" may cover it, although every program is known: an
///   environment prefix that changes which program runs or how it is configured (`PATH`,
///   `LD_*`, `GIT_*`, …), `git -c`, `sudo`.
/// - `read_only`: every program only reads (from a short list of such programs) and nothing
///   is redirected into a file: proven harmless without a sandbox.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CommandClass {
    pub floor: Option<String>,
    pub scopes: Vec<String>,
    pub unknown: Option<String>,
    pub paths: Vec<String>,
    pub unscoped: Option<String>,
    pub read_only: bool,
}

impl CommandClass {
    /// Whether every program is known statically.
    pub fn is_known(&self) -> bool {
        self.unknown.is_none()
    }
}

/// Where a command starts.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum StartDir {
    /// Somewhere in the project, not named (relative paths are the project's own).
    #[default]
    Project,
    /// This absolute directory (the `workdir` of the call, else the session's).
    At(String),
    /// Not known: text typed into a shell that is already running may follow any `cd`.
    Unknown,
}

/// The environment a command is classified in.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ShellEnv {
    /// The user's home directory (`~`, `$HOME`).
    pub home: Option<String>,
    /// The directory the command starts in.
    pub start: StartDir,
}

impl ShellEnv {
    /// The environment of this process, starting in the project.
    pub fn from_process() -> Self {
        Self {
            home: std::env::var("HOME")
                .ok()
                .filter(|h| !h.is_empty() && h != "/")
                .map(|h| h.trim_end_matches('/').to_string()),
            start: StartDir::Project,
        }
    }

    /// The same environment, starting in `start`.
    pub fn starting(mut self, start: StartDir) -> Self {
        self.start = start;
        self
    }
}

/// Classifies `command` with `$HOME` from this process, starting in `start`.
pub fn classify_at(command: &str, start: StartDir) -> CommandClass {
    classify_in(command, &ShellEnv::from_process().starting(start))
}

/// Classifies `command` in `env`.
pub fn classify_in(command: &str, env: &ShellEnv) -> CommandClass {
    let mut walker = walk::Walker::new(env);
    walker.script(command);
    walker.finish()
}
