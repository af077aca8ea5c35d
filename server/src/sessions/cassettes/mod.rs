//! `talaria acp --record DIR` and `--replay DIR`: each session's model calls recorded to a
//! cassette of its own (`DIR/session-001.jsonl`, in the order sessions start), or served from
//! one, through a router of the session's own whose providers are wrapped (recording) or
//! replaced (replay). The engine sees a router like any other.

mod tools;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use super::error::SessionError;
use talaria_engine::Config;
use talaria_provider::ChatProvider;
use talaria_provider::cassette::{
    Cassette, CassetteLog, Normaliser, RecordingProvider, ReplayProvider, ReplayTiming,
};
use tools::{Tape, Taped};

/// What a session's router does with each provider it is built with.
pub(super) type Through = Box<dyn Fn(Arc<dyn ChatProvider>) -> Arc<dyn ChatProvider>>;

/// What the command line asked for.
#[derive(Debug, Clone, Default)]
pub struct CassetteOptions {
    /// Record each session's model calls into this directory.
    pub record: Option<PathBuf>,
    /// Serve each session's model calls from the cassettes in this directory.
    pub replay: Option<PathBuf>,
    pub timing: ReplayTiming,
    /// In a replay, serve tool calls from the cassette instead of running them.
    pub replay_tools: bool,
}

/// The cassettes of this process: where recordings go, or the recordings read at start-up.
#[derive(Default)]
pub(super) struct Cassettes {
    record: Option<PathBuf>,
    /// Each recorded session's cassette, in the order the sessions started.
    replay: Option<Vec<Cassette>>,
    timing: ReplayTiming,
    replay_tools: bool,
    /// Sessions started so far (the next one's cassette number).
    started: AtomicUsize,
}

/// The file of the `number`th session (from 1).
fn cassette_file(dir: &Path, number: usize) -> PathBuf {
    dir.join(format!("session-{number:03}.jsonl"))
}

impl Cassettes {
    /// Reads what a replay serves (off the runtime thread); a cassette that cannot be read is
    /// an error that names it.
    pub(super) async fn open(options: CassetteOptions) -> anyhow::Result<Self> {
        let replay = match options.replay {
            None => None,
            Some(dir) => Some(
                tokio::task::spawn_blocking(move || read_all(&dir))
                    .await
                    .map_err(|e| anyhow::anyhow!("reading the cassettes failed: {e}"))??,
            ),
        };
        if let Some(dir) = &options.record {
            let dir = dir.clone();
            tokio::task::spawn_blocking(move || talaria_util::private::private_dir(&dir))
                .await
                .map_err(|e| anyhow::anyhow!("creating the cassette directory failed: {e}"))??;
        }
        Ok(Self {
            record: options.record,
            replay,
            timing: options.timing,
            replay_tools: options.replay_tools,
            started: AtomicUsize::new(0),
        })
    }

    /// Whether sessions get routers of their own.
    pub(super) fn active(&self) -> bool {
        self.record.is_some() || self.replay.is_some()
    }

    /// What a new session's providers go through (recorded or replayed) and its tools'
    /// tape; `record` is a directory the session itself asked to be recorded into (`_meta`,
    /// or `[record] dir` in the configuration it started with), `replay` one whose cassette
    /// it asked to be served from.
    pub(super) fn session(
        &self,
        normaliser: Normaliser,
        record: Option<&Path>,
        replay: Option<&Path>,
    ) -> Result<SessionTape, SessionError> {
        let number = self.started.fetch_add(1, Ordering::Relaxed) + 1;
        let record = record.or(self.record.as_deref());
        let asked = match replay {
            Some(dir) => Some(own_replay(dir)?),
            None => None,
        };
        let cassette = match (&asked, &self.replay) {
            (Some(own), _) => Some(own),
            (None, Some(sessions)) => Some(sessions.get(number - 1).ok_or_else(|| {
                SessionError::Invalid(format!(
                    "the replay has {} recorded sessions; this is session {number}",
                    sessions.len()
                ))
            })?),
            (None, None) => None,
        };
        let (through, tape): (Through, Tape) = match (cassette, record) {
            (Some(cassette), _) => {
                let replay: Arc<dyn ChatProvider> = Arc::new(ReplayProvider::new(
                    cassette.exchanges.clone(),
                    normaliser.clone(),
                    self.timing,
                ));
                let tape = Tape::replay(cassette.tools.clone(), self.replay_tools);
                (Box::new(move |_| replay.clone()), tape)
            }
            (None, Some(dir)) => {
                let log = CassetteLog::writing_to(write_lines(cassette_file(dir, number)));
                let tape = Tape::Record(log.clone());
                let recording = normaliser.clone();
                let through: Through = Box::new(move |inner| {
                    Arc::new(RecordingProvider::new(
                        inner,
                        recording.clone(),
                        log.clone(),
                    ))
                });
                (through, tape)
            }
            (None, None) => {
                return Err(SessionError::Internal(
                    "no cassette is recorded or replayed".into(),
                ));
            }
        };
        Ok(SessionTape {
            through,
            tools: ToolTape { tape, normaliser },
        })
    }
}

/// The one cassette of a directory a session asked to be replayed from.
fn own_replay(dir: &Path) -> Result<Cassette, SessionError> {
    let mut found = read_all(dir).map_err(|e| {
        SessionError::Invalid(format!("_meta.talaria.replay {}: {e:#}", dir.display()))
    })?;
    if found.is_empty() {
        return Err(SessionError::Invalid(format!(
            "_meta.talaria.replay {}: no recorded session there",
            dir.display()
        )));
    }
    Ok(found.swap_remove(0))
}

/// What a recorded or replayed session's providers go through, and its tools' tape.
pub(super) struct SessionTape {
    pub(super) through: Through,
    pub(super) tools: ToolTape,
}

/// How a session's tools meet the tape.
#[derive(Clone)]
pub(super) struct ToolTape {
    tape: Tape,
    normaliser: Normaliser,
}

impl ToolTape {
    /// The registry with each tool recorded, served or checked.
    pub(super) fn wrap(&self, registry: &talaria_tools::Registry) -> talaria_tools::Registry {
        registry.wrapped(|inner| {
            Arc::new(Taped {
                inner,
                tape: self.tape.clone(),
                normaliser: self.normaliser.clone(),
            })
        })
    }
}

/// A thread that appends each line it is sent to `path`, flushed, until the senders are gone.
fn write_lines(path: PathBuf) -> std::sync::mpsc::Sender<String> {
    // Unbounded: a line per model request and answer of a recorded session (opt-in), each
    // produced slower than a local append writes it.
    let (lines, received) = std::sync::mpsc::channel::<String>();
    let spawned = std::thread::Builder::new()
        .name("talaria-cassette".into())
        .spawn(move || {
            use std::io::Write;
            if let Some(dir) = path.parent() {
                let _ = std::fs::create_dir_all(dir);
            }
            // A cassette holds the session's prompts and answers: this user's alone.
            let file = talaria_util::private::append_private(&path);
            let mut file = match file {
                Ok(file) => file,
                Err(error) => {
                    tracing::error!(path = %path.display(), "cannot write the cassette: {error}");
                    return;
                }
            };
            for line in received {
                if let Err(error) = writeln!(file, "{line}").and_then(|()| file.flush()) {
                    tracing::error!(path = %path.display(), "cannot write the cassette: {error}");
                    return;
                }
            }
        });
    if let Err(error) = spawned {
        tracing::error!("cannot start the cassette writer: {error}");
    }
    lines
}

/// Every `session-NNN.jsonl` of `dir`, parsed, in order.
fn read_all(dir: &Path) -> anyhow::Result<Vec<Cassette>> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| anyhow::anyhow!("cannot read the cassettes in {}: {e}", dir.display()))?
        .flatten()
        .map(|entry| entry.path())
        .filter(|path| {
            path.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("session-") && n.ends_with(".jsonl"))
        })
        .collect();
    files.sort();
    anyhow::ensure!(
        !files.is_empty(),
        "{} has no cassettes (session-001.jsonl, …)",
        dir.display()
    );
    files
        .iter()
        .map(|path| {
            let text = std::fs::read_to_string(path)
                .map_err(|e| anyhow::anyhow!("cannot read {}: {e}", path.display()))?;
            talaria_provider::cassette::parse(&text)
                .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))
        })
        .collect()
}

/// Where a session runs: what changes from one run of it to the next.
pub(super) struct Place<'a> {
    pub(super) session: &'a str,
    /// The cwd, then the additional directories.
    pub(super) roots: &'a [PathBuf],
    /// The private temporary directory its commands get.
    pub(super) tmp: Option<&'a Path>,
}

/// What a session's requests keep of their run: its directories, its home, its temporary
/// directory and its id become placeholders; configured keys and anything the secret filter
/// catches are redacted.
pub(super) fn normaliser(config: &Config, place: &Place<'_>) -> Normaliser {
    let mut normaliser = Normaliser::default()
        .redacting(talaria_compress::redact::redact)
        .replace(place.session, "<session>")
        .replace(config.home.display().to_string(), "<talaria_home>");
    if let Some(tmp) = place.tmp {
        normaliser = normaliser.replace(tmp.display().to_string(), "<tmp>");
    }
    for (index, root) in place.roots.iter().enumerate() {
        let placeholder = if index == 0 {
            "<cwd>".to_string()
        } else {
            format!("<dir{index}>")
        };
        normaliser = normaliser.replace(root.display().to_string(), placeholder);
    }
    if let Some(home) = std::env::var_os("HOME") {
        normaliser = normaliser.replace(home.to_string_lossy().to_string(), "<home>");
    }
    for endpoint in config.endpoints.values() {
        for key in &endpoint.api_keys {
            normaliser = normaliser.secret(key.clone());
        }
    }
    normaliser
}

/// What a `session/new` asks of its own model calls, in `_meta.talaria` (a batch runner's
/// or a harness's): `record` (a directory its cassette goes to), `replay` (a directory whose
/// cassette serves it), `trajectory` (a file its trajectory is kept in) — each an absolute
/// path — and `maxTurnRequests` (its own cap on model calls per turn).
#[derive(Debug, Default)]
pub struct SessionTaps {
    pub(super) record: Option<PathBuf>,
    pub(super) replay: Option<PathBuf>,
    pub(super) trajectory: Option<PathBuf>,
    pub max_turn_requests: Option<u32>,
}

impl SessionTaps {
    /// Reads them from a `session/new`'s `_meta`; a value of the wrong shape is an error.
    pub fn asked(
        meta: Option<&serde_json::Map<String, serde_json::Value>>,
    ) -> Result<Self, SessionError> {
        let Some(talaria) = meta.and_then(|meta| meta.get("talaria")) else {
            return Ok(Self::default());
        };
        let max_turn_requests = match talaria.get("maxTurnRequests") {
            None => None,
            Some(n) => Some(
                n.as_u64()
                    .and_then(|n| u32::try_from(n).ok())
                    .filter(|n| *n > 0)
                    .ok_or_else(|| {
                        SessionError::Invalid(format!(
                            "_meta.talaria.maxTurnRequests must be a positive whole number, got {n}"
                        ))
                    })?,
            ),
        };
        Ok(Self {
            record: absolute(talaria, "record")?,
            replay: absolute(talaria, "replay")?,
            trajectory: absolute(talaria, "trajectory")?,
            max_turn_requests,
        })
    }
}

fn absolute(talaria: &serde_json::Value, key: &str) -> Result<Option<PathBuf>, SessionError> {
    let Some(asked) = talaria.get(key) else {
        return Ok(None);
    };
    match asked.as_str().map(PathBuf::from) {
        Some(path) if path.is_absolute() => Ok(Some(path)),
        _ => Err(SessionError::Invalid(format!(
            "_meta.talaria.{key} must be an absolute path, got {asked}"
        ))),
    }
}
