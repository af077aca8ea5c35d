//! Result-size budgets: a per-result and a per-turn limit scaled to the context window. A
//! result over budget is stored under `$TALARIA_HOME` and replaced by a preview plus the path.

use std::path::PathBuf;

/// Characters of a stored result kept inline.
pub const PREVIEW_CHARS: usize = 1500;
/// No budget goes below this.
pub const FLOOR_CHARS: usize = 8000;

/// The budget of one turn.
#[derive(Debug)]
pub struct ResultBudget {
    per_result: usize,
    per_turn: usize,
    used: usize,
    store_dir: PathBuf,
}

impl ResultBudget {
    /// Per result: 15 % of the window; per turn: 30 % (about 4 characters a token).
    pub fn new(context_window: u64, store_dir: PathBuf) -> Self {
        let window_chars = usize::try_from(context_window)
            .unwrap_or(usize::MAX / 8)
            .saturating_mul(4);
        Self {
            per_result: (window_chars / 100 * 15).max(FLOOR_CHARS),
            per_turn: (window_chars / 100 * 30).max(FLOOR_CHARS),
            used: 0,
            store_dir,
        }
    }

    /// The most characters the next result may take: its share of the window, and what is
    /// left of the turn's (never below two previews).
    pub fn room(&self) -> usize {
        self.per_result
            .min(self.per_turn.saturating_sub(self.used))
            .max(PREVIEW_CHARS * 2)
    }

    /// Fits one result into the budget. `tool_limit` overrides the per-result limit
    /// (`usize::MAX` exempts the tool, e.g. `read_file`, whose output is paged already).
    pub async fn apply(
        &mut self,
        tool_limit: Option<usize>,
        call_id: &str,
        content: String,
    ) -> String {
        let limit = tool_limit.unwrap_or(self.per_result);
        let chars = content.chars().count();
        let over_result = chars > limit;
        let over_turn =
            limit != usize::MAX && self.used + chars > self.per_turn && chars > PREVIEW_CHARS;
        let fitted = if over_result || over_turn {
            self.store(call_id, &content, chars).await
        } else {
            content
        };
        self.used += fitted.chars().count();
        fitted
    }

    async fn store(&self, call_id: &str, content: &str, chars: usize) -> String {
        let preview: String = content.chars().take(PREVIEW_CHARS).collect();
        let safe_id: String = call_id
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        let path = self.store_dir.join(format!("{safe_id}.txt"));
        let stored = match tokio::fs::create_dir_all(&self.store_dir).await {
            Ok(()) => tokio::fs::write(&path, content).await,
            Err(e) => Err(e),
        };
        match stored {
            Ok(()) => format!(
                "{preview}\n\n[Result too large for the context ({chars} characters). The full result is stored at {}; read parts of it with read_file (offset/limit) or search it with search_files.]",
                path.display()
            ),
            Err(e) => format!(
                "{preview}\n\n[Result too large for the context ({chars} characters) and could not be stored ({e}); only the beginning is shown.]"
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn oversized_results_are_stored_with_a_preview() {
        let dir = tempfile::tempdir().expect("dir");
        let mut budget = ResultBudget::new(1000, dir.path().to_path_buf());
        assert_eq!(budget.apply(None, "a", "small".into()).await, "small");
        let big = "x".repeat(20_000);
        let fitted = budget.apply(None, "call/1", big.clone()).await;
        assert!(fitted.starts_with(&"x".repeat(PREVIEW_CHARS)));
        assert!(fitted.contains("20000 characters"), "{fitted}");
        assert_eq!(
            std::fs::read_to_string(dir.path().join("call_1.txt")).expect("stored"),
            big
        );
        assert_eq!(
            budget.apply(Some(usize::MAX), "r", big.clone()).await,
            big,
            "exempt tools pass"
        );
        // The turn budget (8000 floor) is now spent: a medium result is stored too.
        let medium = "y".repeat(3000);
        assert!(budget.apply(None, "m", medium).await.contains("stored at"));
    }
}
