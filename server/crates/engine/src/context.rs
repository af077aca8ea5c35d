//! A session's context window: its size, the token accounting of its record, the compaction
//! settings, and the anti-thrash state of automatic compaction.
//!
//! Invariants:
//! - Counts are exact (the model family's tiktoken encoding) whenever a compaction decision
//!   depends on them: the coarse estimate is only used while a request is below
//!   [`talaria_compress::tokens::EXACT_FROM`] of the threshold.
//! - The BPE tables are loaded off the async threads.
//! - Automatic compaction pauses after two passes in a row that saved under 10 %; a manual
//!   `/compact` resumes it.

use std::collections::HashMap;
use std::sync::Arc;

use talaria_compress::tokens::EXACT_FROM;
use talaria_compress::{Budget, Encoding, Settings, TokenAccounting};
use talaria_provider::ToolSpec;
use talaria_record::Transcript;

/// A pass saving less than this share of the request counts as ineffective.
pub(crate) const INEFFECTIVE_SHARE: f64 = 0.10;
/// Ineffective passes in a row after which automatic compaction pauses.
pub(crate) const PAUSE_AFTER: u32 = 2;

/// The context state of a session (or a side task's copy).
#[derive(Debug, Clone)]
pub(crate) struct ContextState {
    /// The effective window (lowered when a provider states a smaller one).
    pub window: u64,
    pub settings: Settings,
    pub accounting: TokenAccounting,
    tokenizers: Arc<HashMap<String, Encoding>>,
    /// Whether a compaction may call the summariser (side tasks fall back instead).
    pub summarise: bool,
    /// Ineffective automatic passes in a row.
    pub ineffective: u32,
    /// Compactions so far (their ids).
    pub compactions: u64,
    /// Times the server rejected the model's own output as a malformed tool call.
    pub malformed_outputs: u32,
    /// Tools are described in the prompt instead of sent natively (after two rejections).
    pub tools_in_prompt: bool,
}

impl ContextState {
    pub fn new(
        window: u64,
        settings: Settings,
        tokenizers: Arc<HashMap<String, Encoding>>,
        model: &str,
    ) -> Self {
        let encoding = encoding_for(&tokenizers, model);
        Self {
            window,
            settings,
            accounting: TokenAccounting::new(encoding),
            tokenizers,
            summarise: true,
            ineffective: 0,
            compactions: 0,
            malformed_outputs: 0,
            tools_in_prompt: false,
        }
    }

    /// A side task's state: same window and accounting, no automatic compaction, and no
    /// summariser of its own.
    pub fn for_side_task(&self) -> Self {
        let mut state = self.clone();
        state.settings.enabled = false;
        state.summarise = false;
        state
    }

    /// Follows a model switch: its encoding may differ.
    pub fn set_model(&mut self, model: &str) {
        self.accounting
            .set_encoding(encoding_for(&self.tokenizers, model));
    }

    pub fn budget(&self) -> Budget {
        Budget::new(self.window, &self.settings)
    }

    /// Whether automatic compaction is paused after ineffective passes.
    pub fn paused(&self) -> bool {
        self.ineffective >= PAUSE_AFTER
    }

    /// Switches to exact counts, loading the BPE on a blocking thread.
    pub async fn ensure_exact(&mut self) {
        if self.accounting.is_exact() {
            return;
        }
        let encoding = self.accounting.encoding();
        let loaded = tokio::task::spawn_blocking(move || {
            encoding.bpe();
        })
        .await;
        if loaded.is_ok() {
            self.accounting.use_exact();
        } else {
            tracing::warn!("could not load the {} tokenizer", encoding.name());
        }
    }

    /// The counted tokens of a request (uncorrected), exact once near the threshold.
    pub async fn count_request(&mut self, transcript: &Transcript, tools: &str) -> u64 {
        let counted = self.accounting.counted(transcript, tools);
        if !self.accounting.is_exact()
            && counted as f64 >= EXACT_FROM * self.budget().threshold as f64
        {
            self.ensure_exact().await;
            return self.accounting.counted(transcript, tools);
        }
        counted
    }
}

fn encoding_for(tokenizers: &HashMap<String, Encoding>, model: &str) -> Encoding {
    tokenizers
        .get(model)
        .copied()
        .unwrap_or_else(|| Encoding::for_model(model))
}

/// The tool schemas as the text that is counted (names, descriptions, parameter schemas).
pub(crate) fn tools_text(tools: &[ToolSpec]) -> String {
    let mut text = String::new();
    for tool in tools {
        text.push_str(&tool.name);
        text.push('\n');
        text.push_str(&tool.description);
        text.push('\n');
        text.push_str(&tool.parameters.to_string());
        text.push('\n');
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use talaria_record::testing::user;

    #[tokio::test]
    async fn counts_turn_exact_near_the_threshold() {
        let mut state = ContextState::new(
            10_000,
            Settings::default(),
            Arc::new(HashMap::new()),
            "local-model",
        );
        let mut transcript = Transcript::with_system("s");
        transcript.push(user("hello"));
        state.count_request(&transcript, "").await;
        assert!(!state.accounting.is_exact(), "far below: the estimate");
        transcript.push(user(&"word ".repeat(4_000)));
        state.count_request(&transcript, "").await;
        assert!(state.accounting.is_exact(), "near the threshold: exact");
        let side = state.for_side_task();
        assert!(!side.settings.enabled && !side.summarise);
    }

    #[test]
    fn configured_tokenizers_win_over_the_family() {
        let mut map = HashMap::new();
        map.insert("gpt-4o".to_string(), Encoding::Cl100k);
        let state = ContextState::new(1000, Settings::default(), Arc::new(map), "gpt-4o");
        assert_eq!(state.accounting.encoding(), Encoding::Cl100k);
        let state = ContextState::new(1000, Settings::default(), Arc::default(), "gpt-4o");
        assert_eq!(state.accounting.encoding(), Encoding::O200k);
    }
}
