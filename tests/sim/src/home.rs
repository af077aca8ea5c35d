//! One run's world: a private `TALARIA_HOME` and workspace, a scripted mock LLM of its own,
//! the store the agent keeps sessions in (a real SQLite file, or a real PostgreSQL database),
//! and the agent processes started on it with the faults a run asks for.

use std::path::{Path, PathBuf};

use serde_json::json;
use talaria_harness::{AgentProcess, MockLlm, MockReply, WireFraming};
use talaria_store::{SessionStore, SqliteStore, StoreError};
use tempfile::TempDir;

use crate::agent_bin::failpoints_bin;
use crate::points::Pass;

/// Where the agent keeps sessions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreKind {
    /// `$TALARIA_HOME/state.db`.
    Sqlite,
    /// A database on a real PostgreSQL server (`TALARIA_STORE_URL`).
    Postgres(String),
}

/// What a process is asked to suffer at the failpoints.
#[derive(Debug, Clone, Default)]
pub struct Faults {
    /// `TALARIA_FAILPOINT_TRACE`: each point passed appends its name here.
    pub trace: Option<PathBuf>,
    /// `TALARIA_CRASH_AT`: SIGKILL at this pass.
    pub crash_at: Option<Pass>,
    /// `FAILPOINTS`: the `fail` crate's actions (`NAME=return;NAME=sleep(2000)`).
    pub failpoints: Option<String>,
}

/// A home, a workspace and a mock LLM for one run.
pub struct Home {
    dir: TempDir,
    pub mock: MockLlm,
    pub store: StoreKind,
    /// Variables every process of this home gets besides the usual ones.
    pub extra_env: Vec<(String, String)>,
}

impl Home {
    /// A fresh home on `store`, its config in `config` (TOML).
    pub async fn new(store: StoreKind, config: &str) -> anyhow::Result<Home> {
        let dir = tempfile::Builder::new().prefix("talaria-sim-").tempdir()?;
        let home = Home {
            mock: MockLlm::start(Vec::new()).await?,
            dir,
            store,
            extra_env: Vec::new(),
        };
        std::fs::create_dir_all(home.talaria_home())?;
        std::fs::create_dir_all(home.workspace())?;
        std::fs::write(home.talaria_home().join("config.toml"), config)?;
        Ok(home)
    }

    /// `$TALARIA_HOME`.
    pub fn talaria_home(&self) -> PathBuf {
        self.dir.path().join("home").join("talaria")
    }

    /// The folder sessions work in.
    pub fn workspace(&self) -> PathBuf {
        self.dir.path().join("workspace")
    }

    /// A file beside the home for this run's own notes (traces).
    pub fn scratch(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// The SQLite store's file.
    pub fn sqlite_path(&self) -> PathBuf {
        self.talaria_home().join("state.db")
    }

    /// Appends replies to the mock's script.
    pub fn script(&self, replies: impl IntoIterator<Item = MockReply>) {
        for reply in replies {
            self.mock.push(reply);
        }
    }

    /// The environment of an agent process with `faults`.
    pub fn env(&self, faults: &Faults) -> Vec<(String, String)> {
        let home = self.dir.path().join("home");
        let mut env = vec![
            ("HOME".to_string(), home.display().to_string()),
            (
                "TALARIA_HOME".into(),
                self.talaria_home().display().to_string(),
            ),
            ("OPENAI_BASE_URL".into(), self.mock.base_url()),
            ("OPENAI_API_KEY".into(), "test-key".into()),
            ("TALARIA_MODEL".into(), "mock-model".into()),
            ("TALARIA_CONTEXT_WINDOW".into(), "64000".into()),
            ("TALARIA_LOG".into(), "debug".into()),
            ("TALARIA_TITLES".into(), "off".into()),
        ];
        if let StoreKind::Postgres(url) = &self.store {
            env.push(("TALARIA_STORE_URL".into(), url.clone()));
        }
        if let Some(trace) = &faults.trace {
            env.push((
                "TALARIA_FAILPOINT_TRACE".into(),
                trace.display().to_string(),
            ));
        }
        if let Some(at) = &faults.crash_at {
            env.push(("TALARIA_CRASH_AT".into(), at.to_string()));
        }
        if let Some(actions) = &faults.failpoints {
            env.push(("FAILPOINTS".into(), actions.clone()));
        }
        env.extend(self.extra_env.iter().cloned());
        env
    }

    /// An agent (`talaria acp`) on this home, not yet initialized.
    pub async fn spawn(&self, faults: &Faults) -> anyhow::Result<AgentProcess> {
        AgentProcess::spawn(
            &failpoints_bin(),
            &["acp"],
            &self.env(faults),
            WireFraming::NewlineDelimited,
        )
        .await
    }

    /// An initialized agent on this home.
    pub async fn initialized(&self, faults: &Faults) -> anyhow::Result<AgentProcess> {
        let mut agent = self.spawn(faults).await?;
        agent.call("initialize", initialize_params()).await?;
        Ok(agent)
    }

    /// The store the agent uses, opened by this test process (after the agents are gone, or
    /// beside them: both stores take several processes).
    pub fn open_store(&self) -> Result<Box<dyn SessionStore>, StoreError> {
        match &self.store {
            StoreKind::Sqlite => Ok(Box::new(SqliteStore::open(&self.sqlite_path())?)),
            StoreKind::Postgres(url) => Ok(Box::new(talaria_store::PgStore::connect(url)?)),
        }
    }

    /// Files in the workspace whose names a restore uses for its temporary copies.
    pub fn leftover_temporaries(&self) -> Vec<PathBuf> {
        let mut found = Vec::new();
        walk(&self.workspace(), &mut |path| {
            let name = path
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            if name.contains(".talaria-restore") {
                found.push(path.to_path_buf());
            }
        });
        found
    }

    /// The spool files with something in them.
    pub fn spooled(&self) -> Vec<PathBuf> {
        std::fs::read_dir(self.talaria_home().join("spool"))
            .map(|listing| {
                listing
                    .filter_map(|e| e.ok().map(|e| e.path()))
                    .filter(|p| std::fs::metadata(p).is_ok_and(|m| m.len() > 0))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Every file under the workspace and its bytes, in path order.
    pub fn workspace_files(&self) -> Vec<(PathBuf, Vec<u8>)> {
        let mut files = Vec::new();
        walk(&self.workspace(), &mut |path| {
            if let Ok(bytes) = std::fs::read(path) {
                files.push((path.to_path_buf(), bytes));
            }
        });
        files.sort();
        files
    }

    /// Keeps the home's folder after the run (for a failure's report); its path.
    pub fn keep(self) -> PathBuf {
        self.dir.keep()
    }
}

/// Calls `found` for every regular file under `dir` (links not followed).
fn walk(dir: &Path, found: &mut dyn FnMut(&Path)) {
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        match entry.file_type() {
            Ok(kind) if kind.is_dir() => walk(&path, found),
            Ok(kind) if kind.is_file() => found(&path),
            _ => {}
        }
    }
}

/// What the harness's client says at `initialize`.
pub fn initialize_params() -> serde_json::Value {
    json!({"protocolVersion": 1, "clientCapabilities": {}})
}
