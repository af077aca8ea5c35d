//! No request over the window, ever. Before a request goes out it is counted (with the
//! model family's tokenizer, corrected by what the provider reported) against the window
//! less room for the answer; while it does not fit, the newest oversized tool results are
//! stored to files (a preview and the path stay, as for any oversized result), then the
//! context is compacted; a request that still does not fit is not sent and the call fails
//! with a clear message.

use std::path::Path;

use talaria_record::{EntryBody, Transcript};

use super::compaction::Trigger;
use super::{CallError, CallSink, ModelCaller};

/// A tool result longer than this (characters) may be stored to a file to make room.
const SPILLABLE_CHARS: usize = 2_000;

/// The characters of a stored result kept in the request, for a window of `window` tokens.
fn preview_chars(window: u64) -> usize {
    usize::try_from(window / 10)
        .unwrap_or(usize::MAX)
        .clamp(200, crate::budget::PREVIEW_CHARS)
}

/// Stores the newest tool result longer than [`SPILLABLE_CHARS`] under `dir` and keeps a
/// preview and the path in its place; `false` when there is none (or it cannot be stored).
async fn spill_newest(transcript: &mut Transcript, dir: &Path, window: u64) -> bool {
    let Some(index) = transcript.entries().iter().rposition(|entry| {
        !entry.compacted
            && matches!(&entry.body, EntryBody::ToolResult(result)
                if result.model_text.chars().count() > SPILLABLE_CHARS)
    }) else {
        return false;
    };
    let entry = &mut transcript.entries_mut()[index];
    let id = entry.id;
    let EntryBody::ToolResult(result) = &mut entry.body else {
        return false;
    };
    let safe_id: String = result
        .client_id
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    let path = dir.join(format!("{safe_id}-full.txt"));
    let stored = match tokio::fs::create_dir_all(dir).await {
        Ok(()) => tokio::fs::write(&path, &result.model_text).await,
        Err(e) => Err(e),
    };
    if let Err(error) = stored {
        tracing::warn!("cannot store a tool result to make room: {error}");
        return false;
    }
    let chars = result.model_text.chars().count();
    let preview: String = result
        .model_text
        .chars()
        .take(preview_chars(window))
        .collect();
    result.model_text = format!(
        "{preview}\n\n[Shortened to fit the context window ({chars} characters). The full result \
         is stored at {}; read parts of it with read_file (offset/limit) or search it with \
         search_files.]",
        path.display()
    );
    transcript.mark_rewritten(id);
    true
}

impl ModelCaller<'_> {
    /// The tokens a request may take: the window less room for the answer (the call's
    /// `max_tokens`, between a sixteenth and a quarter of the window).
    pub(crate) fn request_limit(&self, max_tokens: Option<u32>) -> u64 {
        let window = self.context.window;
        let answer = u64::from(max_tokens.unwrap_or(0))
            .max(window / 16)
            .min(window / 4);
        window.saturating_sub(answer)
    }

    /// The request's size as the provider will count it: a cheap, deliberately high estimate
    /// when that already fits; else exact.
    async fn measure(&mut self, transcript: &Transcript, tools: &str, limit: u64) -> u64 {
        let model = self.model();
        let estimate = self.context.accounting.counted(transcript, tools);
        let estimate = self.context.accounting.correct(estimate, &model);
        if estimate <= limit || self.context.accounting.is_exact() {
            return estimate;
        }
        self.context.ensure_exact().await;
        let exact = self.context.accounting.counted(transcript, tools);
        self.context.accounting.correct(exact, &model)
    }

    /// Makes the request fit the window (see the module's description); `Err` says why it
    /// could not, and nothing is sent then.
    pub(crate) async fn fit_to_window<S: CallSink>(
        &mut self,
        transcript: &mut Transcript,
        tools: &str,
        max_tokens: Option<u32>,
        sink: &mut S,
    ) -> Result<(), CallError> {
        let limit = self.request_limit(max_tokens);
        let mut needed = self.measure(transcript, tools, limit).await;
        while needed > limit {
            let Some(dir) = self.spill_dir.clone() else {
                break;
            };
            if !spill_newest(transcript, &dir, self.context.window).await {
                break;
            }
            needed = self.measure(transcript, tools, limit).await;
        }
        if needed > limit {
            // Compaction is the next resort (a failure leaves the record as it was).
            let _ = self
                .compact(transcript, tools, Trigger::Overflow, sink)
                .await;
            needed = self.measure(transcript, tools, limit).await;
        }
        if needed > limit {
            return Err(CallError::DoesNotFit {
                needed,
                window: self.context.window,
                limit,
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use talaria_compress::Settings;
    use talaria_record::testing::{assistant, result, user};
    use tokio_util::sync::CancellationToken;

    use super::*;
    use crate::context::ContextState;
    use crate::model_call::{CallResult, SessionUsage, SilentSink};
    use crate::router::ModelRouter;
    use crate::testkit::{ScriptedProvider, text};

    #[tokio::test]
    async fn an_oversized_result_is_stored_and_a_request_that_cannot_fit_is_never_sent() {
        let dir = tempfile::tempdir().expect("dir");
        let provider = Arc::new(ScriptedProvider::new(vec![text("fits")]));
        let router = ModelRouter::single(provider.clone());
        let cancel = CancellationToken::new();
        let mut context = ContextState::new(2000, Settings::default(), Arc::default(), "m");
        let mut usage = SessionUsage::default();
        let mut transcript = Transcript::with_system("You help.");
        transcript.push(user("read the log"));
        transcript.push(assistant("", &[("c1", "read_file", "{\"path\":\"log\"}")]));
        let log: String = (0..2000)
            .map(|n| format!("line {n} of the log\n"))
            .collect();
        transcript.push(result("c1", "read_file", &log));
        let mut sink = SilentSink::default();
        {
            let mut caller = crate::testkit::caller(&router, &cancel, &mut context, &mut usage);
            caller.spill_dir = Some(dir.path().to_path_buf());
            let answer = caller.call(&mut transcript, &[], None, &mut sink).await;
            assert!(matches!(answer, Ok(CallResult::Finished(_))), "{answer:?}");
        }
        let sent = provider.transcripts();
        let shortened = sent[0]
            .entries()
            .iter()
            .find_map(|e| match &e.body {
                EntryBody::ToolResult(r) => Some(r.model_text.clone()),
                _ => None,
            })
            .unwrap_or_default();
        assert!(
            shortened.contains("Shortened to fit the context window"),
            "{shortened}"
        );
        let stored = std::fs::read_dir(dir.path()).expect("dir").count();
        assert_eq!(stored, 1, "the full result is kept in a file");

        // A system prompt larger than the window: nothing is sent.
        let silent = Arc::new(ScriptedProvider::new(vec![text("never")]));
        let router = ModelRouter::single(silent.clone());
        let mut context = ContextState::new(1024, Settings::default(), Arc::default(), "m");
        let mut transcript = Transcript::with_system("word ".repeat(3000));
        transcript.push(user("q"));
        let mut caller = crate::testkit::caller(&router, &cancel, &mut context, &mut usage);
        let refused = caller.call(&mut transcript, &[], None, &mut sink).await;
        assert!(
            refused.as_ref().is_err_and(|why| {
                let message = why.to_string();
                matches!(why, CallError::DoesNotFit { needed, limit, .. } if needed > limit)
                    && message.contains("context window")
                    && message.contains("nothing was sent")
            }),
            "{refused:?}"
        );
        assert!(
            silent.transcripts().is_empty(),
            "no request over the window"
        );
    }
}
