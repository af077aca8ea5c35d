//! Staged writes of the background review: each proposal is a folder under
//! `TALARIA_HOME/proposals/<id>/` holding `proposal.json` and, for a skill, the whole proposed
//! skill folder. The user lists, inspects (a diff against the live skill), accepts or rejects
//! them; accepting swaps the proposed folder in and records the provenance.

use crate::SkillError;

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::manage::write_atomic;
use crate::memory::{MemoryStore, Operation};
use crate::provenance::{self, Origin, Record};
use crate::skill::{self, SKILL_FILE};

const PROPOSAL_FILE: &str = "proposal.json";
const SKILL_DIR: &str = "skill";

/// What a proposal changes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Change {
    Skill {
        name: String,
        /// The last action staged (`create`, `patch`, …); `delete` removes the skill.
        action: String,
    },
    Memory {
        operations: Vec<Operation>,
    },
}

/// One staged proposal.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Proposal {
    pub id: String,
    pub change: Change,
    pub session: String,
    pub created_ms: i64,
    /// One line for the user: `name — description`, or what the memory change does.
    pub summary: String,
}

/// The proposals of one `TALARIA_HOME`.
#[derive(Debug, Clone)]
pub struct Proposals {
    dir: PathBuf,
}

/// Copies a folder (regular files and folders only; links are skipped).
pub fn copy_dir(from: &Path, to: &Path) -> std::io::Result<()> {
    talaria_util::tree::copy_tree(from, to, talaria_util::tree::Links::Skip)
}

/// Refuses bytes read from a path that may not be read as they are (`Roots::admit`).
pub type Admit<'a> = &'a dyn Fn(&Path, &[u8]) -> Result<(), SkillError>;

/// Checks every file of the copy `staged` of `live` with `admit`, by the path it was copied
/// from and the bytes the copy holds (what was copied is what is checked).
fn admitted_copy(live: &Path, staged: &Path, admit: Admit<'_>) -> Result<(), SkillError> {
    for relative in every_file_below(staged, true) {
        let copied = staged.join(&relative);
        let bytes = std::fs::read(&copied).map_err(SkillError::io("read", &copied))?;
        admit(&live.join(&relative), &bytes)?;
    }
    Ok(())
}

fn files_below(dir: &Path) -> Vec<String> {
    every_file_below(dir, false)
}

/// The files below `dir` (relative, sorted), those whose names start with `.` only when
/// `hidden` too.
fn every_file_below(dir: &Path, hidden: bool) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(current) = stack.pop() {
        for entry in std::fs::read_dir(&current).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else if let Ok(relative) = path.strip_prefix(dir) {
                let name = relative.display().to_string();
                if hidden || !name.starts_with('.') {
                    out.push(name);
                }
            }
        }
    }
    out.sort();
    out
}

impl Proposals {
    pub fn new(dir: PathBuf) -> Self {
        Self { dir }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn path(&self, id: &str) -> Result<PathBuf, SkillError> {
        if id.is_empty() || id.contains(['/', '\\']) || id.starts_with('.') {
            return Err(SkillError::NotFound(format!("no proposal {id:?}")));
        }
        let path = self.dir.join(id);
        if path.join(PROPOSAL_FILE).is_file() {
            Ok(path)
        } else {
            Err(SkillError::NotFound(format!(
                "no proposal {id:?}; /skills lists them"
            )))
        }
    }

    fn save(&self, proposal: &Proposal) -> Result<(), SkillError> {
        let text = serde_json::to_string_pretty(proposal)
            .map_err(|e| SkillError::Corrupt(format!("proposal {}: {e}", proposal.id)))?;
        write_atomic(
            &self.dir.join(&proposal.id).join(PROPOSAL_FILE),
            text.as_bytes(),
        )
    }

    fn load(&self, id: &str) -> Result<Proposal, SkillError> {
        let file = self.path(id)?.join(PROPOSAL_FILE);
        let text = std::fs::read_to_string(&file).map_err(SkillError::io("read", &file))?;
        serde_json::from_str(&text)
            .map_err(|e| SkillError::Corrupt(format!("proposal {id} is unreadable: {e}")))
    }

    /// The staged folder of skill `name` for review `review`: created on first use from the
    /// live skill (when there is one), each file of the copy as `admit` lets it be read from
    /// where it came (a workspace skill as its folder's trust accepted it), else nothing is
    /// staged. Returns the proposal id and the folder.
    pub fn stage_skill(
        &self,
        review: &str,
        name: &str,
        live: Option<&Path>,
        session: &str,
        admit: Admit<'_>,
    ) -> Result<(String, PathBuf), SkillError> {
        skill::check_name(name)?;
        let id = format!("{name}-{review}");
        let staged = self.dir.join(&id).join(SKILL_DIR);
        if !self.dir.join(&id).join(PROPOSAL_FILE).is_file() {
            if let Some(live) = live {
                copy_dir(live, &staged)
                    .map_err(|e| SkillError::Invalid(format!("cannot stage {name}: {e}")))?;
                if let Err(why) = admitted_copy(live, &staged, admit) {
                    let _ = std::fs::remove_dir_all(self.dir.join(&id));
                    return Err(why);
                }
            }
            self.save(&Proposal {
                id: id.clone(),
                change: Change::Skill {
                    name: name.to_string(),
                    action: "create".into(),
                },
                session: session.to_string(),
                created_ms: provenance::now_ms(),
                summary: name.to_string(),
            })?;
        }
        Ok((id, staged))
    }

    /// Records the last staged action on a skill proposal and refreshes its summary.
    pub fn note_skill_action(&self, id: &str, action: &str) -> Result<Proposal, SkillError> {
        let mut proposal = self.load(id)?;
        let staged = self.dir.join(id).join(SKILL_DIR);
        if let Change::Skill { name, action: last } = &mut proposal.change {
            *last = action.to_string();
            proposal.summary = match std::fs::read_to_string(staged.join(SKILL_FILE))
                .ok()
                .and_then(|t| skill::parse(&t).ok())
            {
                Some((_, description, _)) if action != "delete" => {
                    format!("{name} — {}", crate::catalog::one_line(&description))
                }
                _ if action == "delete" => format!("delete {name}"),
                _ => name.clone(),
            };
        }
        self.save(&proposal)?;
        Ok(proposal)
    }

    /// Adds memory operations to review `review`'s memory proposal.
    pub fn stage_memory(
        &self,
        review: &str,
        operations: &[Operation],
        session: &str,
    ) -> Result<Proposal, SkillError> {
        let id = format!("memory-{review}");
        let mut proposal = self.load(&id).unwrap_or_else(|_| Proposal {
            id: id.clone(),
            change: Change::Memory {
                operations: Vec::new(),
            },
            session: session.to_string(),
            created_ms: provenance::now_ms(),
            summary: String::new(),
        });
        if let Change::Memory { operations: staged } = &mut proposal.change {
            staged.extend(operations.iter().cloned());
            proposal.summary = format!("{} memory change(s)", staged.len());
        }
        self.save(&proposal)?;
        Ok(proposal)
    }

    /// Every proposal, oldest first.
    pub fn list(&self) -> Vec<Proposal> {
        let mut out: Vec<Proposal> = std::fs::read_dir(&self.dir)
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| e.file_name().to_str().map(str::to_string))
            .filter_map(|id| self.load(&id).ok())
            .collect();
        out.sort_by(|a, b| a.created_ms.cmp(&b.created_ms).then(a.id.cmp(&b.id)));
        out
    }

    /// What accepting a proposal would change: a diff against the live skill, or the memory
    /// operations.
    pub fn show(&self, id: &str, live: Option<&Path>) -> Result<String, SkillError> {
        let proposal = self.load(id)?;
        let mut out = format!("Proposal {id}: {}\n", proposal.summary);
        match &proposal.change {
            Change::Memory { operations } => {
                for operation in operations {
                    out.push_str(&format!(
                        "- {} {}: {}{}\n",
                        operation.action,
                        operation.target.file(),
                        operation.content.as_deref().unwrap_or(""),
                        operation
                            .old_text
                            .as_deref()
                            .map(|o| format!(" (entry containing {o:?})"))
                            .unwrap_or_default()
                    ));
                }
            }
            Change::Skill { action, .. } if action == "delete" => {
                out.push_str("The skill would be deleted.\n");
            }
            Change::Skill { .. } => {
                let staged = self.dir.join(id).join(SKILL_DIR);
                let old = live
                    .and_then(|l| std::fs::read_to_string(l.join(SKILL_FILE)).ok())
                    .unwrap_or_default();
                let new = std::fs::read_to_string(staged.join(SKILL_FILE)).unwrap_or_default();
                let diff = similar::TextDiff::from_lines(&old, &new);
                out.push_str(
                    &diff
                        .unified_diff()
                        .header("live/SKILL.md", "proposed/SKILL.md")
                        .to_string(),
                );
                let files = files_below(&staged);
                if files.len() > 1 {
                    out.push_str(&format!("Files: {}\n", files.join(", ")));
                }
            }
        }
        Ok(out)
    }

    /// Makes a proposal live: the skill folder swapped in under `writable_root` (or removed),
    /// or the memory operations applied; provenance recorded; the proposal removed.
    pub fn accept(
        &self,
        id: &str,
        writable_root: &Path,
        live: Option<&Path>,
        memory: &MemoryStore,
        session: &str,
    ) -> Result<String, SkillError> {
        let proposal = self.load(id)?;
        let message = match &proposal.change {
            Change::Memory { operations } => memory.apply(operations, Origin::Accepted, session)?,
            Change::Skill { name, action } => {
                let target = live
                    .filter(|l| l.starts_with(writable_root))
                    .map_or_else(|| writable_root.join(name), Path::to_path_buf);
                if action == "delete" {
                    if target.exists() {
                        std::fs::remove_dir_all(&target)
                            .map_err(SkillError::io("delete", &target))?;
                    }
                    format!("Deleted skill {name}.")
                } else {
                    let staged = self.dir.join(id).join(SKILL_DIR);
                    let text = std::fs::read_to_string(staged.join(SKILL_FILE)).map_err(|e| {
                        SkillError::Corrupt(format!("the proposal has no SKILL.md: {e}"))
                    })?;
                    skill::parse(&text)?;
                    crate::scan::check(&text)?;
                    swap_in(&staged, &target)?;
                    let _ = provenance::append(
                        &target,
                        &Record {
                            origin: Origin::Accepted,
                            session: session.to_string(),
                            at_ms: provenance::now_ms(),
                            action: action.clone(),
                            subject: name.clone(),
                        },
                    );
                    format!("Accepted: skill {name} is live.")
                }
            }
        };
        self.reject(id)?;
        Ok(message)
    }

    /// Drops a proposal.
    pub fn reject(&self, id: &str) -> Result<String, SkillError> {
        let path = self.path(id)?;
        std::fs::remove_dir_all(&path).map_err(SkillError::io("remove", &path))?;
        Ok(format!("Removed proposal {id}."))
    }
}

/// Replaces `target` with a copy of `staged`, never leaving it half-written.
fn swap_in(staged: &Path, target: &Path) -> Result<(), SkillError> {
    let parent = target
        .parent()
        .ok_or_else(|| SkillError::Invalid("no parent folder".into()))?;
    let name = target
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or("skill");
    let stamp = provenance::now_ms();
    let incoming = parent.join(format!(".{name}.incoming-{stamp}"));
    let outgoing = parent.join(format!(".{name}.outgoing-{stamp}"));
    copy_dir(staged, &incoming).map_err(SkillError::io("copy the proposal to", &incoming))?;
    // The staged copy started from the live skill, its provenance included.
    if target.exists() {
        std::fs::rename(target, &outgoing).map_err(SkillError::io("move aside", target))?;
    }
    std::fs::rename(&incoming, target).map_err(SkillError::io("move into place", target))?;
    let _ = std::fs::remove_dir_all(&outgoing);
    Ok(())
}
