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

use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use talaria_files::{Places, Root};

pub use crate::system_prompt::InstructionGate;
use crate::system_prompt::sha256;

pub use store::{Standing, TRUST_FILE, TrustError, TrustFile, TrustStore, TrustedFolder};

/// Set to `1` (or `true`, `yes`): the working directory is trusted for this process.
pub const TRUST_ENV: &str = "TALARIA_TRUST_WORKSPACE";

/// The project's configuration (its hooks): shown in the trust question and kept by its hash
/// like an instruction file, so a change since the folder was trusted (a command the agent
/// ran may write it) is shown before any of it runs.
pub const PROJECT_CONFIG: &str = ".talaria/config.toml";

/// The project's skill folders: each kept by the hash of everything in it and shown as the
/// list of its files with each `SKILL.md`, so a skill added or changed since the folder was
/// trusted is shown before it loads.
pub const SKILL_DIRS: [&str; 2] = [".talaria/skills", ".agents/skills"];

/// The most files of a skill folder fingerprinted; a folder with more is not loaded unasked.
const MAX_SKILL_FILES: usize = 512;

/// The most bytes of one skill file read (its length counts beyond).
const MAX_SKILL_FILE_BYTES: u64 = 256 * 1024;

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
    /// A skill folder's files, each by its path below the working directory and the hash of
    /// its bytes (`None`: it cannot be read whole, so it is never admitted); empty for a file.
    pub files: std::collections::BTreeMap<PathBuf, Option<String>>,
    /// `false` for a skill folder too big to fingerprint (past [`MAX_SKILL_FILES`] files or
    /// [`MAX_SKILL_FOLDER_BYTES`]): its fingerprint is stable, so the folder can be trusted,
    /// but its skills never load unasked.
    pub loadable: bool,
}

/// The skill files a session may read, each by its path below the working directory and the
/// hash of its bytes as the user accepted them: a file changed or added since the folder's
/// trust was judged is never read in that session (a new session shows it first).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PinnedSkillFiles(std::collections::BTreeMap<PathBuf, Option<String>>);

impl PinnedSkillFiles {
    /// Whether `bytes` read from `relative` (below the working directory) are what was
    /// accepted there.
    pub fn admits(&self, relative: &Path, bytes: &[u8]) -> bool {
        matches!(self.0.get(relative), Some(Some(hash)) if *hash == sha256_of(bytes))
    }
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
    /// Trusted for the session by the user's answer to a question that showed the files: only
    /// what was shown loads (not whatever is there by the time the prompt is read).
    pub pinned: bool,
    /// The resolved folder's identity when it was assessed (device, inode, birth time).
    pub identity: Option<(u64, u64, Option<u64>)>,
    /// The enclosing repository root's identity then (`trust_repo` records that folder).
    pub repo_identity: Option<(u64, u64, Option<u64>)>,
}

/// Folders trusted for this process only (`trust/apply`'s `trust_session`): each as a trusted
/// folder is recorded (its identity, the hashes of the files as they were assessed), in
/// memory only, so it is judged by the same rules — what changed since is left out, a
/// repository inside it is not covered, another folder under its name is not it.
static PROCESS_TRUST: std::sync::Mutex<Vec<(PathBuf, TrustedFolder)>> =
    std::sync::Mutex::new(Vec::new());

/// Trusts the folder `assessment` judged for the rest of this process, with its files as
/// they were read then; nothing recorded.
pub fn trust_for_process(assessment: &Assessment) {
    let Some(resolved) = assessment.resolved.clone() else {
        return;
    };
    if let Ok(entry) = folder_entry(&resolved, &assessment.instructions) {
        talaria_util::lock(&PROCESS_TRUST).push((resolved, entry));
    }
}

/// The nearest folder trusted for this process at or above `resolved`.
fn trusted_for_process(resolved: &Path) -> Option<(PathBuf, TrustedFolder)> {
    talaria_util::lock(&PROCESS_TRUST)
        .iter()
        .filter(|(folder, _)| resolved.starts_with(folder))
        .max_by_key(|(folder, _)| folder.components().count())
        .cloned()
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
        pinned: false,
        identity: resolved.as_deref().and_then(identity_of),
        repo_identity: None,
    };
    assessment.repo_identity = assessment.repo_root.as_deref().and_then(identity_of);
    let Some(resolved) = resolved else {
        assessment.problem = Some(format!("{} cannot be resolved", cwd.display()));
        return assessment;
    };
    if trusted_by_environment() {
        assessment.status = TrustStatus::Session;
        return assessment;
    }
    if let Some((folder, entry)) = trusted_for_process(&resolved) {
        assessment.apply_standing(Standing::Trusted(folder, entry));
        if assessment.status.is_trusted() {
            assessment.status = TrustStatus::Session;
            assessment.pinned = true;
        }
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
                if let Some(root) = self
                    .repo_root
                    .as_ref()
                    .filter(|root| **root != folder && root.starts_with(&folder))
                {
                    // A repository cloned under a trusted folder is a project of its own.
                    self.problem = Some(format!(
                        "{} is a repository of its own inside the trusted {}: it is trusted \
                         on its own",
                        root.display(),
                        folder.display()
                    ));
                    return;
                }
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
            TrustStatus::Session if !self.pinned => InstructionGate::Open,
            TrustStatus::Session | TrustStatus::Trusted => InstructionGate::Accepted(
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

    /// Whether the project's skills load: its folder is trusted and every skill folder it has
    /// is as the user accepted it.
    pub fn loads_project_skills(&self) -> bool {
        let live = matches!(self.gate(), InstructionGate::Open);
        self.loads_project()
            && self
                .instructions
                .iter()
                .filter(|f| SKILL_DIRS.contains(&f.name))
                .all(|f| self.accepts(f) && (f.loadable || live))
    }

    /// The skill files as accepted, when the folder's skills load and were judged by the
    /// hashes the user accepted (`None`: nothing to pin — the skills load live, as when the
    /// environment trusts the folder, or not at all).
    pub fn pinned_skill_files(&self) -> Option<PinnedSkillFiles> {
        if !self.loads_project_skills() || !matches!(self.gate(), InstructionGate::Accepted(_)) {
            return None;
        }
        let files = self
            .instructions
            .iter()
            .filter(|f| SKILL_DIRS.contains(&f.name))
            .flat_map(|f| f.files.clone())
            .collect();
        Some(PinnedSkillFiles(files))
    }

    /// Whether the folder's trust lets `file` in, as it was read.
    fn accepts(&self, file: &InstructionFile) -> bool {
        match self.gate() {
            InstructionGate::Closed => false,
            InstructionGate::Open => true,
            InstructionGate::Accepted(hashes) => hashes.get(file.name) == Some(&file.sha256),
        }
    }

    /// The project's configuration as the user accepted it (the text read for the question,
    /// never read again): none when the folder is untrusted, the file is absent, or it
    /// changed since it was accepted.
    pub fn project_config(&self) -> Option<&InstructionFile> {
        let file = self
            .instructions
            .iter()
            .find(|f| f.name == PROJECT_CONFIG)?;
        self.accepts(file).then_some(file)
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

    /// The skill folders of a trusted folder whose skills do not load for their size.
    pub fn too_big_to_load(&self) -> Vec<&'static str> {
        if !self.status.is_trusted() || matches!(self.gate(), InstructionGate::Open) {
            return Vec::new();
        }
        self.instructions
            .iter()
            .filter(|f| !f.loadable)
            .map(|f| f.name)
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
            TrustDecision::TrustSession => {
                self.status = TrustStatus::Session;
                self.pinned = true;
            }
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
    let fresh = folder_entry(folder, instructions)?;
    TrustStore::new(home).update(|file| {
        let key = folder.display().to_string();
        let entry = file.folders.entry(key).or_default();
        entry.trusted_at = fresh.trusted_at;
        entry.device = fresh.device;
        entry.inode = fresh.inode;
        entry.born_ns = fresh.born_ns;
        entry.instructions.extend(fresh.instructions.clone());
        file.declined.retain(|d| !Path::new(d).starts_with(folder));
        Ok(())
    })
}

/// `folder` as a trusted folder is kept: its identity now and `instructions` accepted.
fn folder_entry(
    folder: &Path,
    instructions: &[InstructionFile],
) -> Result<TrustedFolder, TrustError> {
    let meta = std::fs::metadata(folder).map_err(|source| TrustError::Io {
        path: folder.to_path_buf(),
        source,
    })?;
    Ok(TrustedFolder {
        trusted_at: store::now_ms(),
        device: Some(meta.dev()),
        inode: Some(meta.ino()),
        born_ns: born_ns(&meta),
        instructions: instructions
            .iter()
            .map(|f| (f.path.display().to_string(), f.sha256.clone()))
            .collect(),
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

/// Whether `folder` is still the folder that was trusted (records without an identity match):
/// its device, inode and, where the file system keeps it, its birth time (an inode number is
/// reused when a folder is deleted and another made).
fn same_folder(folder: &Path, entry: &TrustedFolder) -> bool {
    let (Some(device), Some(inode)) = (entry.device, entry.inode) else {
        return true;
    };
    std::fs::metadata(folder).is_ok_and(|m| {
        m.dev() == device
            && m.ino() == inode
            && entry.born_ns.is_none_or(|born| born_ns(&m) == Some(born))
    })
}

/// A folder's identity: its device, inode and birth time (where kept).
fn identity_of(folder: &Path) -> Option<(u64, u64, Option<u64>)> {
    let meta = std::fs::metadata(folder).ok()?;
    Some((meta.dev(), meta.ino(), born_ns(&meta)))
}

impl Assessment {
    /// Whether `self` judged the very folder `earlier` judged: the same resolved path, and
    /// the same folder there (not one put under its name since), in the same repository (a
    /// `.git` removed or made since moves the root `trust_repo` would record).
    pub fn same_place_as(&self, earlier: &Assessment) -> bool {
        self.resolved.is_some()
            && self.resolved == earlier.resolved
            && self.identity.is_some()
            && self.identity == earlier.identity
            && self.repo_root == earlier.repo_root
            && self.repo_identity == earlier.repo_identity
    }
}

/// When a file was made (nanoseconds since the epoch), where the file system keeps it.
fn born_ns(meta: &std::fs::Metadata) -> Option<u64> {
    let born = meta.created().ok()?;
    let since = born.duration_since(std::time::UNIX_EPOCH).ok()?;
    u64::try_from(since.as_nanos()).ok()
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
    let mut files: Vec<InstructionFile> = crate::system_prompt::PROJECT_FILES
        .into_iter()
        .chain([PROJECT_CONFIG])
        .filter_map(|name| {
            let text = crate::system_prompt::read_capped(&workspace, name).ok()??;
            Some(InstructionFile {
                name,
                path: resolved.join(name),
                sha256: sha256(&text),
                text,
                files: Default::default(),
                loadable: true,
            })
        })
        .collect();
    files.extend(
        SKILL_DIRS
            .into_iter()
            .filter_map(|name| skill_folder(resolved, name)),
    );
    files
}

/// A skill folder as trust keeps it: its text lists every file (each `SKILL.md` whole) and
/// its hash covers every file's content; links are listed, never followed. A folder too big
/// to list is hashed as unreadable, so it never matches what was accepted.
fn skill_folder(resolved: &Path, name: &'static str) -> Option<InstructionFile> {
    let dir = resolved.join(name);
    if !std::fs::symlink_metadata(&dir).ok()?.is_dir() {
        return None;
    }
    let mut listing = Vec::new();
    let mut budget = MAX_SKILL_FOLDER_BYTES;
    let complete = list_files(&dir, Path::new(""), &mut listing, &mut budget);
    listing.sort();
    let mut text = String::new();
    let mut digest = String::new();
    let mut files = std::collections::BTreeMap::new();
    for (relative, content, hash, admitted) in &listing {
        files.insert(Path::new(name).join(relative), admitted.clone());
        digest.push_str(&format!("{relative}\0{hash}\n"));
        if relative.ends_with("SKILL.md") {
            text.push_str(&format!("\n# {name}/{relative}\n{content}\n"));
        } else {
            text.push_str(&format!("\n# {name}/{relative}\n"));
        }
    }
    if !complete {
        text.push_str(&format!(
            "\n[… more than {MAX_SKILL_FILES} files or {} MiB: its skills are not loaded …]\n",
            MAX_SKILL_FOLDER_BYTES >> 20
        ));
        digest.push_str("incomplete\n");
    }
    Some(InstructionFile {
        name,
        path: dir,
        sha256: sha256(&digest),
        text,
        files,
        loadable: complete,
    })
}

/// A file of a skill folder: its path below the folder, its content as shown, its hash in
/// the fingerprint, and the hash of its bytes the skill tools admit (a plain file shown
/// whole).
type Listed = (String, String, String, Option<String>);

/// Every file below `dir` (at most [`MAX_SKILL_FILES`] files and `budget` bytes), as
/// relative path and content (a link: its target as text; an unreadable file: why). `false`
/// when there were more.
fn list_files(dir: &Path, relative: &Path, out: &mut Vec<Listed>, budget: &mut u64) -> bool {
    let Ok(entries) = std::fs::read_dir(dir.join(relative)) else {
        return true;
    };
    for entry in entries.flatten() {
        if out.len() >= MAX_SKILL_FILES {
            return false;
        }
        let path = relative.join(entry.file_name());
        let shown = path.display().to_string();
        match entry.file_type() {
            Ok(kind) if kind.is_dir() => {
                if !list_files(dir, &path, out, budget) {
                    return false;
                }
            }
            Ok(kind) if kind.is_symlink() => {
                let target = std::fs::read_link(dir.join(&path)).unwrap_or_default();
                let said = format!("a link to {}", target.display());
                let hash = sha256(&said);
                out.push((shown, said, hash, None));
            }
            Ok(kind) if kind.is_file() => {
                // The folder's bytes hashed are bounded (a sparse file is as long as it says).
                let length = entry.metadata().map_or(0, |m| m.len());
                if length > *budget {
                    return false;
                }
                *budget -= length;
                let file = file_content(&dir.join(&path));
                out.push((shown, file.shown, file.digest, file.admitted));
            }
            // A pipe or a device is never opened (a read could wait forever).
            _ => out.push((
                shown,
                "a special file".into(),
                sha256("a special file"),
                None,
            )),
        }
    }
    true
}

/// A skill file as trust keeps it: what the question shows (at most
/// [`MAX_SKILL_FILE_BYTES`], as text), what its fingerprint holds (the hash of all its
/// bytes; past [`MAX_HASHED_FILE_BYTES`], a value that never matches), and the hash the
/// skill tools admit (that of all its bytes, when it was hashed).
struct SkillFile {
    shown: String,
    digest: String,
    admitted: Option<String>,
}

/// The most bytes of one skill file hashed; a longer file never matches what was accepted.
const MAX_HASHED_FILE_BYTES: u64 = 64 * 1024 * 1024;

/// The most bytes of a skill folder's files hashed at a session's start; a folder holding
/// more is not loaded unasked (it never matches what was accepted).
const MAX_SKILL_FOLDER_BYTES: u64 = 64 * 1024 * 1024;

/// Reads a skill file for trust: its start shown, every byte hashed.
fn file_content(path: &Path) -> SkillFile {
    match read_skill_file(path) {
        Ok((length, shown, whole)) if length > MAX_SKILL_FILE_BYTES => SkillFile {
            shown: format!(
                "{}\n[… {length} bytes in all …]",
                String::from_utf8_lossy(&shown)
            ),
            digest: whole
                .clone()
                .unwrap_or_else(|| format!("unhashed {}", now_nanos())),
            // Admitted by the hash of all of it (its bytes past the shown part were never
            // shown, like a support file's: they are what was there when trust was given).
            admitted: whole,
        },
        Ok((_, shown, whole)) => SkillFile {
            shown: String::from_utf8_lossy(&shown).into_owned(),
            digest: whole
                .clone()
                .unwrap_or_else(|| format!("unhashed {}", now_nanos())),
            admitted: whole,
        },
        Err(e) => {
            // Nobody reads it (Talaria's reads and commands run as the same user).
            let shown = format!("unreadable: {e}");
            SkillFile {
                digest: sha256(&shown),
                shown,
                admitted: None,
            }
        }
    }
}

/// A skill file's length, its first [`MAX_SKILL_FILE_BYTES`], and the hash of all of it
/// (`None` past [`MAX_HASHED_FILE_BYTES`]).
fn read_skill_file(path: &Path) -> std::io::Result<(u64, Vec<u8>, Option<String>)> {
    use sha2::Digest;
    use std::io::Read;
    // Not followed, never waiting (a pipe swapped in after the listing is refused below).
    let flags = rustix::fs::OFlags::NOFOLLOW | rustix::fs::OFlags::NONBLOCK;
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(flags.bits() as i32)
        .open(path)?;
    let meta = file.metadata()?;
    if !meta.is_file() {
        return Err(std::io::Error::other("not a plain file"));
    }
    let mut shown = Vec::new();
    (&mut file)
        .take(MAX_SKILL_FILE_BYTES)
        .read_to_end(&mut shown)?;
    let mut hasher = sha2::Sha256::new();
    hasher.update(&shown);
    let mut read = shown.len() as u64;
    let mut chunk = vec![0; 64 * 1024];
    loop {
        let n = file.read(&mut chunk)?;
        if n == 0 {
            break;
        }
        read += n as u64;
        if read > MAX_HASHED_FILE_BYTES {
            return Ok((meta.len().max(read), shown, None));
        }
        hasher.update(&chunk[..n]);
    }
    let whole = crate::system_prompt::hex(&hasher.finalize());
    Ok((meta.len().max(read), shown, Some(whole)))
}

/// The SHA-256 of `bytes`, in hex.
fn sha256_of(bytes: &[u8]) -> String {
    use sha2::Digest;
    crate::system_prompt::hex(&sha2::Sha256::digest(bytes))
}

/// A value no earlier read can have had.
fn now_nanos() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0)
}

#[cfg(test)]
mod tests;
