//! Workspace trust: a folder's own behaviour-changing files — its instructions (`AGENTS.md`,
//! `CLAUDE.md`), skills (`.talaria/skills`, `.agents/skills`) and project configuration and
//! hooks (`.talaria/config.toml`) — are loaded only once the user trusted the folder.
//!
//! A folder is trusted by its resolved path (links on the way resolved, so a link to it or a
//! subfolder opened as the working directory is judged by where it really is) and covers
//! its subfolders; the trusted folder's identity (device and inode) is kept too, so a folder
//! renamed away and replaced by another under the same name is not trusted. Each trusted
//! folder keeps the hash of every instruction file the user accepted: a file that changed
//! (or appeared) since is left out until the user has seen it and accepted it again.
//! `TALARIA_TRUST_WORKSPACE=1` trusts the working directory for the process only (scripted
//! harnesses, CI), without a record. Anything that cannot be decided is untrusted.
//! Call these functions off the runtime thread (they read the disk).

mod store;

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use talaria_files::{Places, Root};

pub use crate::system_prompt::InstructionGate;
use crate::system_prompt::sha256;

pub use store::{Standing, TRUST_FILE, TrustError, TrustFile, TrustStore, TrustedFolder};

/// Set to `1` (or `true`, `yes`): the working directory is trusted for this process.
pub const TRUST_ENV: &str = "TALARIA_TRUST_WORKSPACE";

/// What in a folder needs trust, relative to the working directory.
pub const SENSITIVE: [&str; 5] = [
    "AGENTS.md",
    "CLAUDE.md",
    ".talaria/skills",
    ".agents/skills",
    ".talaria/config.toml",
];

/// The draft's `WorkspaceTrustStatus`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TrustStatus {
    /// Trusted persistently (the user's trust file).
    Trusted,
    /// Trusted for this session or process only.
    Session,
    Untrusted,
}

impl TrustStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Trusted => "trusted",
            Self::Session => "session",
            Self::Untrusted => "untrusted",
        }
    }

    pub fn is_trusted(self) -> bool {
        self != Self::Untrusted
    }
}

/// The draft's `WorkspaceTrustDecision`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TrustDecision {
    TrustRepo,
    TrustCwd,
    TrustSession,
    Decline,
}

impl TrustDecision {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::TrustRepo => "trust_repo",
            Self::TrustCwd => "trust_cwd",
            Self::TrustSession => "trust_session",
            Self::Decline => "decline",
        }
    }

    pub fn named(name: &str) -> Option<Self> {
        [
            Self::TrustRepo,
            Self::TrustCwd,
            Self::TrustSession,
            Self::Decline,
        ]
        .into_iter()
        .find(|d| d.as_str() == name)
    }
}

/// An instruction file of the working directory, as the system prompt would read it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InstructionFile {
    pub name: &'static str,
    /// Its resolved path (the working directory resolved, then the name).
    pub path: PathBuf,
    pub text: String,
    pub sha256: String,
}

/// A folder's trust, assessed at a session's start.
#[derive(Debug, Clone)]
pub struct Assessment {
    /// The working directory as the client gave it.
    pub cwd: PathBuf,
    /// It resolved; `None` when it cannot be (then it is untrusted).
    pub resolved: Option<PathBuf>,
    /// The enclosing repository's root (the nearest folder with a `.git`), when there is one.
    pub repo_root: Option<PathBuf>,
    pub status: TrustStatus,
    /// The trusted folder that covers it.
    pub through: Option<PathBuf>,
    /// The user declined this folder (or one above it) before: not asked again.
    pub declined: bool,
    /// The trust-sensitive paths present in the working directory.
    pub sensitive: Vec<PathBuf>,
    /// Its instruction files (plain files only; a link is never read).
    pub instructions: Vec<InstructionFile>,
    /// The instruction files that changed or appeared since the folder was trusted.
    pub changed: Vec<&'static str>,
    /// Why the trust file could not be used, or the trusted folder was replaced.
    pub problem: Option<String>,
}

/// Folders trusted for this process only (`trust/apply`'s `trust_session`), resolved.
static PROCESS_TRUST: std::sync::Mutex<Vec<PathBuf>> = std::sync::Mutex::new(Vec::new());

/// Trusts `dir` (and its subfolders) for the rest of this process, nothing recorded.
pub fn trust_for_process(dir: &Path) {
    if let Ok(resolved) = std::fs::canonicalize(dir) {
        talaria_util::lock(&PROCESS_TRUST).push(resolved);
    }
}

fn trusted_for_process(resolved: &Path) -> bool {
    talaria_util::lock(&PROCESS_TRUST)
        .iter()
        .any(|folder| resolved.starts_with(folder))
}

/// Whether the environment trusts the working directory (`TALARIA_TRUST_WORKSPACE`).
pub fn trusted_by_environment() -> bool {
    std::env::var(TRUST_ENV).is_ok_and(|v| matches!(v.trim(), "1" | "true" | "yes"))
}

/// Assesses `cwd` against the user's trust file in `home`; the instruction files are read as
/// `places` lets them be (beneath the folder held, no link followed).
pub fn assess(home: &Path, cwd: &Path, places: Arc<dyn Places>) -> Assessment {
    let resolved = std::fs::canonicalize(cwd).ok();
    let mut assessment = Assessment {
        cwd: cwd.to_path_buf(),
        repo_root: resolved.as_deref().and_then(repo_root),
        resolved: resolved.clone(),
        status: TrustStatus::Untrusted,
        through: None,
        declined: false,
        sensitive: sensitive_paths(cwd),
        instructions: resolved
            .as_deref()
            .map(|r| instruction_files(r, places))
            .unwrap_or_default(),
        changed: Vec::new(),
        problem: None,
    };
    let Some(resolved) = resolved else {
        assessment.problem = Some(format!("{} cannot be resolved", cwd.display()));
        return assessment;
    };
    if trusted_by_environment() || trusted_for_process(&resolved) {
        assessment.status = TrustStatus::Session;
        return assessment;
    }
    match TrustStore::new(home).read() {
        Ok(file) => assessment.apply_standing(file.standing(&resolved)),
        Err(e) => assessment.problem = Some(e.to_string()),
    }
    assessment
}

impl Assessment {
    fn apply_standing(&mut self, standing: Standing) {
        match standing {
            Standing::Trusted(folder, entry) => {
                if !same_folder(&folder, &entry) {
                    self.problem = Some(format!(
                        "{} was trusted, but the folder there now is another one; trust it \
                         again if it is yours",
                        folder.display()
                    ));
                    return;
                }
                self.status = TrustStatus::Trusted;
                self.changed = self
                    .instructions
                    .iter()
                    .filter(|f| {
                        entry.instructions.get(&f.path.display().to_string()) != Some(&f.sha256)
                    })
                    .map(|f| f.name)
                    .collect();
                self.through = Some(folder);
            }
            Standing::Declined(_) => self.declined = true,
            Standing::Unknown => {}
        }
    }

    /// Which instruction files the prompt may carry.
    pub fn gate(&self) -> InstructionGate {
        match self.status {
            TrustStatus::Untrusted => InstructionGate::Closed,
            TrustStatus::Session => InstructionGate::Open,
            TrustStatus::Trusted => InstructionGate::Accepted(
                self.instructions
                    .iter()
                    .filter(|f| !self.changed.contains(&f.name))
                    .map(|f| (f.name, f.sha256.clone()))
                    .collect(),
            ),
        }
    }

    /// Whether the folder's skills, project configuration and hooks load.
    pub fn loads_project(&self) -> bool {
        self.status.is_trusted()
    }

    /// What is left out: every sensitive path when untrusted, else the changed instructions.
    pub fn left_out(&self) -> Vec<PathBuf> {
        if !self.status.is_trusted() {
            return self.sensitive.clone();
        }
        self.changed
            .iter()
            .map(|name| self.cwd.join(name))
            .collect()
    }

    /// The decisions the user may take now (none when trusted, or when the folder cannot be
    /// resolved).
    pub fn decisions(&self) -> Vec<TrustDecision> {
        if self.status.is_trusted() || self.resolved.is_none() {
            return Vec::new();
        }
        let mut decisions = Vec::new();
        if self.repo_root.is_some() && self.repo_root != self.resolved {
            decisions.push(TrustDecision::TrustRepo);
        }
        decisions.extend([
            TrustDecision::TrustCwd,
            TrustDecision::TrustSession,
            TrustDecision::Decline,
        ]);
        decisions
    }

    /// Whether the user should be asked: something is left out, and the folder was not
    /// declined before (a changed instruction file is always shown).
    pub fn worth_asking(&self) -> bool {
        if self.status.is_trusted() {
            return !self.changed.is_empty();
        }
        !self.declined && !self.sensitive.is_empty() && self.resolved.is_some()
    }

    /// The changed instruction files, whole, as the user is shown them.
    pub fn changed_files(&self) -> impl Iterator<Item = &InstructionFile> {
        self.instructions
            .iter()
            .filter(|f| self.changed.contains(&f.name))
    }

    /// Applies the user's `decision`, remembering it in `home` unless it is for the session.
    pub fn decide(&mut self, home: &Path, decision: TrustDecision) -> Result<(), TrustError> {
        if !self.decisions().contains(&decision) {
            return Err(TrustError::Refused(format!(
                "{} is not a decision available for {}",
                decision.as_str(),
                self.cwd.display()
            )));
        }
        let resolved = self.resolved.clone().ok_or_else(|| {
            TrustError::Refused(format!("{} cannot be resolved", self.cwd.display()))
        })?;
        match decision {
            TrustDecision::TrustSession => self.status = TrustStatus::Session,
            TrustDecision::Decline => {
                TrustStore::new(home).update(|file| {
                    let path = resolved.display().to_string();
                    if !file.declined.contains(&path) {
                        file.declined.push(path);
                    }
                    Ok(())
                })?;
                self.declined = true;
            }
            TrustDecision::TrustCwd | TrustDecision::TrustRepo => {
                let folder = match decision {
                    TrustDecision::TrustRepo => self.repo_root.clone().unwrap_or(resolved),
                    _ => resolved,
                };
                record_trust(home, &folder, &self.instructions)?;
                self.status = TrustStatus::Trusted;
                self.through = Some(folder);
                self.changed.clear();
            }
        }
        Ok(())
    }

    /// The user saw the changed instruction files and accepts them: their hashes are kept.
    pub fn accept_changes(&mut self, home: &Path) -> Result<(), TrustError> {
        let Some(folder) = self.through.clone() else {
            return Ok(());
        };
        let accepted: Vec<InstructionFile> = self.changed_files().cloned().collect();
        TrustStore::new(home).update(|file| {
            let entry = file
                .folders
                .get_mut(&folder.display().to_string())
                .ok_or_else(|| {
                    TrustError::Refused(format!("{} is no longer trusted", folder.display()))
                })?;
            for f in &accepted {
                entry
                    .instructions
                    .insert(f.path.display().to_string(), f.sha256.clone());
            }
            Ok(())
        })?;
        self.changed.clear();
        Ok(())
    }
}

/// Trusts `folder` (resolved) persistently with `instructions` accepted as they are now; a
/// decline recorded for it or a folder below it is forgotten.
fn record_trust(
    home: &Path,
    folder: &Path,
    instructions: &[InstructionFile],
) -> Result<(), TrustError> {
    let meta = std::fs::metadata(folder).map_err(|source| TrustError::Io {
        path: folder.to_path_buf(),
        source,
    })?;
    TrustStore::new(home).update(|file| {
        let key = folder.display().to_string();
        let entry = file.folders.entry(key).or_default();
        entry.trusted_at = store::now_ms();
        entry.device = Some(meta.dev());
        entry.inode = Some(meta.ino());
        for f in instructions {
            entry
                .instructions
                .insert(f.path.display().to_string(), f.sha256.clone());
        }
        file.declined.retain(|d| !Path::new(d).starts_with(folder));
        Ok(())
    })
}

/// `talaria trust DIR`: trusts the folder, with its instruction files as they are now.
pub fn trust_folder(home: &Path, dir: &Path) -> Result<Vec<InstructionFile>, TrustError> {
    let resolved = std::fs::canonicalize(dir).map_err(|source| TrustError::Io {
        path: dir.to_path_buf(),
        source,
    })?;
    if !resolved.is_dir() {
        return Err(TrustError::Refused(format!(
            "{} is not a folder",
            dir.display()
        )));
    }
    let instructions = instruction_files(&resolved, Arc::new(talaria_files::Unguarded));
    record_trust(home, &resolved, &instructions)?;
    Ok(instructions)
}

/// `talaria trust --revoke DIR`: forgets the decision recorded for exactly that folder;
/// answers what covered it before (`None`: nothing was recorded there).
pub fn revoke_folder(home: &Path, dir: &Path) -> Result<Option<Standing>, TrustError> {
    let resolved = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
    let key = resolved.display().to_string();
    TrustStore::new(home).update(|file| {
        let removed = file.folders.remove(&key).is_some();
        let was_declined = file.declined.contains(&key);
        file.declined.retain(|d| d != &key);
        Ok((removed || was_declined).then(|| file.standing(&resolved)))
    })
}

/// Whether `folder` is still the folder that was trusted (records without an identity match).
fn same_folder(folder: &Path, entry: &TrustedFolder) -> bool {
    let (Some(device), Some(inode)) = (entry.device, entry.inode) else {
        return true;
    };
    std::fs::metadata(folder).is_ok_and(|m| m.dev() == device && m.ino() == inode)
}

/// The trust-sensitive paths present under `cwd` (a link counts: it is there).
fn sensitive_paths(cwd: &Path) -> Vec<PathBuf> {
    SENSITIVE
        .iter()
        .map(|name| cwd.join(name))
        .filter(|path| std::fs::symlink_metadata(path).is_ok())
        .collect()
}

/// The nearest folder at or above `resolved` holding a `.git`.
fn repo_root(resolved: &Path) -> Option<PathBuf> {
    resolved
        .ancestors()
        .find(|dir| std::fs::symlink_metadata(dir.join(".git")).is_ok())
        .map(Path::to_path_buf)
}

/// The instruction files of `resolved` that are plain files, read as the prompt reads them.
fn instruction_files(resolved: &Path, places: Arc<dyn Places>) -> Vec<InstructionFile> {
    let Ok(workspace) = Root::open(resolved, places) else {
        return Vec::new();
    };
    crate::system_prompt::PROJECT_FILES
        .into_iter()
        .filter_map(|name| {
            let text = crate::system_prompt::read_capped(&workspace, name).ok()??;
            Some(InstructionFile {
                name,
                path: resolved.join(name),
                sha256: sha256(&text),
                text,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests;
