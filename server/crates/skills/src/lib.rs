//! Skills and memory: what the agent learns and keeps across sessions.
//!
//! - Skills ([`catalog`], [`skill`]): folders with `SKILL.md` (agentskills.io front matter)
//!   in several roots, with a compact index for the system prompt and progressive disclosure
//!   through `skills_list` and `skill_view`.
//! - Writes ([`manage`]): `skill_manage` actions, atomic, confined to the skill's folder,
//!   size-limited and scanned ([`scan`]) for prompt injection and secret exfiltration.
//! - Memory ([`memory`]): bounded `MEMORY.md` and `USER.md`, atomic batches under a file lock.
//! - Proposals ([`proposals`]): the background review's staged writes, which the user lists,
//!   inspects, accepts or rejects. Every write records its provenance ([`provenance`]).
//!
//! Knows nothing of ACP or the engine; the tools ([`tools`]) plug into any registry.

pub mod catalog;
pub mod context;
mod error;
mod frontmatter;
pub mod manage;
pub mod memory;
pub mod proposals;
pub mod provenance;
pub mod scan;
pub mod skill;
pub mod tools;

pub use catalog::{Catalog, ContentPin, Root, Roots};
pub use context::{SkillsContext, WriteMode};
pub use error::SkillError;
pub use memory::{MemoryStore, Target};
pub use proposals::{Change, Proposal, Proposals};
