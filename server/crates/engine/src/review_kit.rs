//! What the edge hands the engine for background reviews: the skill and memory tools of one
//! review and what it staged. A leaf: the session's settings carry the factory, the review
//! runs the kit.

use std::sync::Arc;

use talaria_tools::Tool;

/// The skill and memory tools for one review, and what it staged.
pub struct ReviewKit {
    /// Tools registered over the session's (same names and definitions).
    pub tools: Vec<Arc<dyn Tool>>,
    /// One line per proposal (or live write) the review made so far.
    pub staged: Arc<dyn Fn() -> Vec<String> + Send + Sync>,
}

/// Builds a review's kit from its id.
#[derive(Clone)]
pub struct ReviewFactory(pub Arc<dyn Fn(&str) -> ReviewKit + Send + Sync>);

impl std::fmt::Debug for ReviewFactory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ReviewFactory")
    }
}
