//! Remembered "always allow" / "always reject" decisions, per project, kept in
//! `$TALARIA_HOME/permissions.json` keyed by the workspace root.
//!
//! Scopes are narrow: a command scope is a program and its subcommand (`git push`), an edit
//! or read scope is one path, a tool scope is one tool name. A file that cannot be read or parsed is
//! reported and treated as empty; it is only rewritten when a new decision is remembered.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// What an "always" decision covers.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Scope {
    Command(String),
    Edit(PathBuf),
    Read(PathBuf),
    Tool(String),
    /// Every tool of one MCP server.
    Server(String),
}

impl Scope {
    fn key(&self) -> String {
        match self {
            Scope::Command(c) => format!("command:{c}"),
            Scope::Edit(p) => format!("edit:{}", p.display()),
            Scope::Read(p) => format!("read:{}", p.display()),
            Scope::Tool(t) => format!("tool:{t}"),
            Scope::Server(s) => format!("mcp-server:{s}"),
        }
    }
}

impl std::fmt::Display for Scope {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Scope::Command(c) => write!(f, "the command `{c}`"),
            Scope::Edit(p) => write!(f, "edits to {}", p.display()),
            Scope::Read(p) => write!(f, "reading {}", p.display()),
            Scope::Tool(t) => write!(f, "the tool `{t}`"),
            Scope::Server(s) => write!(f, "every tool of the MCP server `{s}`"),
        }
    }
}

#[derive(Debug, Default, Clone, Serialize, Deserialize)]
struct ProjectRules {
    #[serde(default)]
    allow: BTreeSet<String>,
    #[serde(default)]
    reject: BTreeSet<String>,
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct RulesFile {
    #[serde(default)]
    projects: BTreeMap<String, ProjectRules>,
}

/// The rules of one project, backed by the shared file (or by nothing, in tests).
#[derive(Debug, Clone)]
pub struct RuleStore {
    file: Option<PathBuf>,
    project: String,
    rules: ProjectRules,
}

impl RuleStore {
    /// Loads the rules of the project rooted at `root` from `$TALARIA_HOME/permissions.json`.
    pub fn load(home: &Path, root: &Path) -> Self {
        let file = home.join("permissions.json");
        let project = root.display().to_string();
        let rules = read_file(&file)
            .projects
            .remove(&project)
            .unwrap_or_default();
        Self {
            file: Some(file),
            project,
            rules,
        }
    }

    /// Rules that live only in memory.
    pub fn in_memory() -> Self {
        Self {
            file: None,
            project: String::new(),
            rules: ProjectRules::default(),
        }
    }

    pub fn allows(&self, scope: &Scope) -> bool {
        self.rules.allow.contains(&scope.key())
    }

    pub fn rejects(&self, scope: &Scope) -> bool {
        self.rules.reject.contains(&scope.key())
    }

    /// Remembers a decision for each scope and saves the file (merging with what other
    /// sessions saved meanwhile). Within a runtime the file is written on the blocking pool and
    /// the returned handle finishes when it is on disk; without one it is written at once.
    #[must_use = "await the save so the decision is on disk before it is relied on"]
    pub fn remember(
        &mut self,
        scopes: &[Scope],
        allow: bool,
    ) -> Option<tokio::task::JoinHandle<()>> {
        for scope in scopes {
            let key = scope.key();
            if allow {
                self.rules.reject.remove(&key);
                self.rules.allow.insert(key);
            } else {
                self.rules.allow.remove(&key);
                self.rules.reject.insert(key);
            }
        }
        let path = self.file.clone()?;
        let (project, scopes) = (self.project.clone(), scopes.to_vec());
        // The shared file is merged and written off the runtime thread when there is one.
        let save = move || {
            let mut file = read_file(&path);
            let entry = file.projects.entry(project).or_default();
            for scope in &scopes {
                let key = scope.key();
                if allow {
                    entry.reject.remove(&key);
                    entry.allow.insert(key);
                } else {
                    entry.allow.remove(&key);
                    entry.reject.insert(key);
                }
            }
            if let Err(e) = write_file(&path, &file) {
                tracing::warn!("cannot save permission rules to {}: {e}", path.display());
            }
        };
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => Some(runtime.spawn_blocking(save)),
            Err(_) => {
                save();
                None
            }
        }
    }
}

fn read_file(path: &Path) -> RulesFile {
    match std::fs::read_to_string(path) {
        Ok(text) => serde_json::from_str(&text).unwrap_or_else(|e| {
            tracing::warn!("ignoring unreadable {}: {e}", path.display());
            RulesFile::default()
        }),
        Err(_) => RulesFile::default(),
    }
}

fn write_file(path: &Path, rules: &RulesFile) -> std::io::Result<()> {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)?;
    }
    let text = serde_json::to_string_pretty(rules).map_err(std::io::Error::other)?;
    let temporary = path.with_extension("json.tmp");
    std::fs::write(&temporary, text)?;
    std::fs::rename(&temporary, path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_persist_per_project() {
        let home = tempfile::tempdir().expect("home");
        let mut a = RuleStore::load(home.path(), Path::new("/proj/a"));
        let _ = a.remember(&[Scope::Command("cargo test".into())], true);
        let _ = a.remember(&[Scope::Edit(PathBuf::from("/proj/a/x.rs"))], false);
        let again = RuleStore::load(home.path(), Path::new("/proj/a"));
        assert!(again.allows(&Scope::Command("cargo test".into())));
        assert!(again.rejects(&Scope::Edit(PathBuf::from("/proj/a/x.rs"))));
        let other = RuleStore::load(home.path(), Path::new("/proj/b"));
        assert!(!other.allows(&Scope::Command("cargo test".into())));
    }
}
