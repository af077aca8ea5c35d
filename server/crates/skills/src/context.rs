//! What the skill and memory tools of one session share: the stores, the session, and whether
//! writes are live (a user's turn) or staged as proposals (the background review).

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::Mutex;

use crate::catalog::{Catalog, Roots};
use crate::memory::MemoryStore;
use crate::proposals::Proposals;
use crate::provenance::Origin;

/// Where writes go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WriteMode {
    /// Straight to the skill and memory files.
    Live,
    /// Into proposals of the review with this id, for the user to accept or reject.
    Staged { review: String },
}

/// The shared state of one session's skill and memory tools.
#[derive(Debug)]
pub struct SkillsContext {
    pub roots: Roots,
    pub memory: MemoryStore,
    pub proposals: Proposals,
    pub session: String,
    pub mode: WriteMode,
    /// Who the writes are recorded as coming from.
    pub origin: Origin,
    /// Skills viewed so far (a review must view a skill before changing it).
    viewed: Mutex<HashSet<String>>,
    /// Proposals staged so far (by a review), in order.
    staged: Mutex<Vec<String>>,
}

impl SkillsContext {
    pub fn new(
        roots: Roots,
        memory: MemoryStore,
        proposals_dir: PathBuf,
        session: &str,
        mode: WriteMode,
    ) -> Self {
        Self {
            roots,
            memory,
            proposals: Proposals::new(proposals_dir),
            session: session.to_string(),
            origin: match mode {
                WriteMode::Live => Origin::Foreground,
                WriteMode::Staged { .. } => Origin::Review,
            },
            mode,
            viewed: Mutex::default(),
            staged: Mutex::default(),
        }
    }

    /// The same stores, with writes staged for review `review`.
    pub fn staged(&self, review: &str) -> Self {
        Self::new(
            self.roots.clone(),
            self.memory.clone(),
            self.proposals_dir(),
            &self.session,
            WriteMode::Staged {
                review: review.to_string(),
            },
        )
    }

    /// The same stores for a review whose writes go live (`stage_reviews = false`).
    pub fn live_review(&self) -> Self {
        let mut context = Self::new(
            self.roots.clone(),
            self.memory.clone(),
            self.proposals_dir(),
            &self.session,
            WriteMode::Live,
        );
        context.origin = Origin::Review;
        context
    }

    pub fn proposals_dir(&self) -> PathBuf {
        self.proposals.dir().to_path_buf()
    }

    pub fn catalog(&self) -> Catalog {
        Catalog::scan(&self.roots)
    }

    pub fn note_viewed(&self, name: &str) {
        talaria_util::lock(&self.viewed).insert(name.to_string());
    }

    pub fn was_viewed(&self, name: &str) -> bool {
        talaria_util::lock(&self.viewed).contains(name)
    }

    pub fn note_staged(&self, id: &str) {
        let mut staged = talaria_util::lock(&self.staged);
        if !staged.iter().any(|s| s == id) {
            staged.push(id.to_string());
        }
    }

    /// The proposals this context staged.
    pub fn staged_ids(&self) -> Vec<String> {
        talaria_util::lock(&self.staged).clone()
    }
}
