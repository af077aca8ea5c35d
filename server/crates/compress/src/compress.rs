//! One compaction: the cheap pass, then (when that is not enough, or on request) head/middle/tail
//! with a summary of the middle, then sanitising and validation. Split in two so the only
//! asynchronous step, the summariser, stays with the caller: [`prepare`] returns either the
//! result or a [`Pending`] compaction holding the summariser's request, and
//! [`Pending::finish`] completes it with the summariser's answer.
//!
//! Invariants (each tested): the input record is never changed, only a copy; the result passes
//! the record's `validate`; the system prompt and the latest user and assistant messages reach
//! the model verbatim; compacted entries are marked, never deleted; on an aborting summariser
//! failure nothing changes; a failed summary is replaced by a marked fallback.

use talaria_record::{EntryBody, EntryId, Transcript, UserPart, Violation};

use crate::budget::{Budget, Settings};
use crate::cheap::{Pruned, account_answered, cheap_pass};
use crate::partition::{Partition, partition};
use crate::sanitise::sanitise;
use crate::summary::{self, SummaryFailure, SummaryRequest};
use crate::tokens::TokenAccounting;

/// What to compact, and why.
#[derive(Debug, Clone)]
pub struct Request<'a> {
    pub transcript: &'a Transcript,
    pub budget: Budget,
    pub settings: Settings,
    /// Tokens of the tool schemas sent with every request.
    pub tools_tokens: u64,
    /// What the summary should concentrate on (`/compact <focus>`).
    pub focus: Option<String>,
    /// Summarise even when the cheap pass is enough (a manual `/compact`).
    pub force: bool,
}

/// What a summary replaced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SummaryInfo {
    /// The summary as the client may show it (without the reference frame).
    pub text: String,
    /// Messages it stands for.
    pub messages: usize,
    /// Why the summariser failed, when the summary is the deterministic fallback.
    pub fallback: Option<String>,
}

/// What a compaction did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report {
    /// Counted request tokens before and after (uncorrected).
    pub before: u64,
    pub after: u64,
    pub pruned: Pruned,
    pub summary: Option<SummaryInfo>,
    /// Entries changed in place (marked compacted or rewritten), for stores and caches.
    pub rewritten: Vec<EntryId>,
}

impl Report {
    /// The share of the request saved (0 to 1).
    pub fn saved_share(&self) -> f64 {
        if self.before == 0 {
            return 0.0;
        }
        self.before.saturating_sub(self.after) as f64 / self.before as f64
    }
}

/// A compacted record and its report.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub transcript: Transcript,
    pub report: Report,
}

/// Why nothing was compacted (the record is unchanged).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CompressError {
    #[error("there is nothing old enough to compact")]
    NothingToCompact,
    #[error("compaction was abandoned: {0}")]
    Aborted(String),
    #[error("compaction produced an invalid record ({0:?}); the record was left unchanged")]
    Invalid(Vec<Violation>),
}

/// A compaction waiting for its summary.
#[derive(Debug)]
pub struct Pending {
    transcript: Transcript,
    request: SummaryRequest,
    middle: Vec<EntryId>,
    previous: Option<(EntryId, String)>,
    anchor: EntryId,
    /// What a fallback summary lists, gathered from the middle before the cheap pass.
    fallback_material: String,
    /// The longest summary, in tokens.
    summary_max: u64,
    before: u64,
    tools_tokens: u64,
    pruned: Pruned,
}

/// Either done, or waiting for a summary.
#[derive(Debug)]
pub enum Prepared {
    Done(Outcome),
    Summarise(Pending),
}

fn tokens_of(transcript: &Transcript, accounting: &mut TokenAccounting) -> Vec<u32> {
    transcript
        .entries()
        .iter()
        .map(|entry| accounting.entry(entry))
        .collect()
}

fn user_text(parts: &[UserPart]) -> String {
    UserPart::joined_text(parts, "\n")
}

/// The latest live summary: its id and text.
fn previous_summary(transcript: &Transcript) -> Option<(EntryId, EntryId, String)> {
    transcript
        .entries()
        .iter()
        .rev()
        .find_map(|e| match &e.body {
            EntryBody::Summary { text, first, .. } if !e.compacted => {
                Some((e.id, *first, text.clone()))
            }
            _ => None,
        })
}

fn split(transcript: &Transcript, tokens: &[u32], request: &Request<'_>, fixed: u64) -> Partition {
    let summarised_before = transcript
        .entries()
        .iter()
        .any(|e| matches!(e.body, EntryBody::Summary { .. }));
    let keep = if summarised_before {
        0
    } else {
        request.settings.head_entries
    };
    let room = request
        .budget
        .threshold
        .saturating_sub(fixed + request.budget.summary_max);
    // A manual compaction of a short record still leaves something to summarise.
    let tail = if request.force {
        let total: u64 = tokens.iter().map(|t| u64::from(*t)).sum();
        request.budget.tail.min(total / 5)
    } else {
        request.budget.tail
    };
    partition(transcript.entries(), tokens, keep, tail, room)
}

/// The cheap pass was enough (or there is no middle worth a summary).
fn done_cheaply(
    mut transcript: Transcript,
    before: u64,
    after_cheap: u64,
    pruned: Pruned,
) -> Result<Prepared, CompressError> {
    if pruned.is_empty() {
        return Err(CompressError::NothingToCompact);
    }
    let rewritten = pruned.rewritten.clone();
    for id in &rewritten {
        transcript.mark_rewritten(*id);
    }
    Ok(Prepared::Done(Outcome {
        transcript,
        report: Report {
            before,
            after: after_cheap,
            pruned,
            summary: None,
            rewritten,
        },
    }))
}

/// The summary's plan: what the summariser reads (the middle as it was before the cheap
/// pass: exact errors and outputs make a better summary than one-line accounts), the
/// anchor the summary takes the place of, and the fallback's material.
fn plan_summary(
    request: &Request<'_>,
    transcript: Transcript,
    tokens: &[u32],
    parts: &Partition,
    middle: &[usize],
    (before, pruned): (u64, Pruned),
) -> Prepared {
    let previous = previous_summary(&transcript);
    let entries = transcript.entries();
    let middle_tokens: u64 = middle.iter().map(|&i| u64::from(tokens[i])).sum();
    let latest_ask = parts.pinned.or_else(|| {
        entries
            .iter()
            .rposition(|e| !e.compacted && matches!(e.body, EntryBody::User { .. }))
    });
    let latest_ask = latest_ask.and_then(|i| match &entries[i].body {
        EntryBody::User { model_view, .. } => Some(user_text(model_view)),
        _ => None,
    });
    let original = request.transcript.entries();
    let inputs = summary::Inputs {
        middle: middle.iter().map(|&i| &original[i]).collect(),
        previous: previous.as_ref().map(|(_, _, text)| text.as_str()),
        latest_ask,
        focus: request.focus.as_deref(),
        target_tokens: request.budget.summary_target(middle_tokens),
        max_tokens: request.budget.summary_max,
        max_chars: usize::try_from(request.budget.window.saturating_mul(2)).unwrap_or(usize::MAX),
    };
    let summary_request = summary::request(&inputs);
    let fallback_material = summary::fallback_material(&inputs.middle);
    let first_middle = entries[middle[0]].id;
    let mut anchor = first_middle;
    if let Some(pinned) = parts.pinned {
        anchor = anchor.min(entries[pinned].id);
    }
    if let Some((_, first, _)) = &previous {
        anchor = anchor.min(*first);
    }
    let middle_ids = middle.iter().map(|&i| entries[i].id).collect();
    Prepared::Summarise(Pending {
        request: summary_request,
        middle: middle_ids,
        previous: previous.map(|(id, _, text)| (id, text)),
        anchor,
        fallback_material,
        summary_max: request.budget.summary_max,
        before,
        tools_tokens: request.tools_tokens,
        pruned,
        transcript,
    })
}

/// Runs the cheap pass and, when needed, plans the summary.
pub fn prepare(
    request: &Request<'_>,
    accounting: &mut TokenAccounting,
) -> Result<Prepared, CompressError> {
    let mut transcript = request.transcript.clone();
    let tokens = tokens_of(&transcript, accounting);
    let before = tokens.iter().map(|t| u64::from(*t)).sum::<u64>() + request.tools_tokens;
    let system: u64 = transcript
        .entries()
        .iter()
        .zip(&tokens)
        .filter(|(e, _)| matches!(e.body, EntryBody::System { .. }))
        .map(|(_, t)| u64::from(*t))
        .sum();
    let fixed = system + request.tools_tokens;
    let parts = split(&transcript, &tokens, request, fixed);
    let mut pruned = cheap_pass(
        transcript.entries_mut(),
        parts.protect_from,
        parts.latest_user,
    );
    let mut tokens = tokens_of(&transcript, accounting);
    let mut after_cheap = tokens.iter().map(|t| u64::from(*t)).sum::<u64>() + request.tools_tokens;
    let mut parts = split(&transcript, &tokens, request, fixed);
    let mut middle = parts.middle(transcript.entries());
    // When even a summary of the middle would leave the request over the threshold, the
    // tail's outputs the model has already answered are accounted too.
    let middle_tokens: u64 = middle.iter().map(|&i| u64::from(tokens[i])).sum();
    let projected = after_cheap.saturating_sub(middle_tokens) + request.budget.summary_max;
    if request.budget.exceeded_by(projected)
        && let Some(latest_answer) = transcript
            .entries()
            .iter()
            .rposition(|e| !e.compacted && matches!(e.body, EntryBody::Assistant(_)))
        && account_answered(
            transcript.entries_mut(),
            parts.protect_from,
            latest_answer,
            &mut pruned,
        )
    {
        tokens = tokens_of(&transcript, accounting);
        after_cheap = tokens.iter().map(|t| u64::from(*t)).sum::<u64>() + request.tools_tokens;
        parts = split(&transcript, &tokens, request, fixed);
        middle = parts.middle(transcript.entries());
    }
    let fits = !request.budget.exceeded_by(after_cheap);
    if (fits && !request.force) || middle.len() < 2 {
        return done_cheaply(transcript, before, after_cheap, pruned);
    }
    Ok(plan_summary(
        request,
        transcript,
        &tokens,
        &parts,
        &middle,
        (before, pruned),
    ))
}

impl Pending {
    /// What to ask the summariser.
    pub fn request(&self) -> &SummaryRequest {
        &self.request
    }

    /// Messages the summary will stand for.
    pub fn messages(&self) -> usize {
        self.middle.len()
    }

    /// Completes the compaction with the summariser's answer.
    pub fn finish(
        self,
        answer: Result<String, SummaryFailure>,
        accounting: &mut TokenAccounting,
    ) -> Result<Outcome, CompressError> {
        let Pending {
            mut transcript,
            middle,
            previous,
            anchor,
            fallback_material,
            summary_max,
            before,
            tools_tokens,
            pruned,
            ..
        } = self;
        let previous_text = previous.as_ref().map(|(_, text)| text.as_str());
        let answer = match answer {
            Ok(text) if !text.trim().is_empty() => Ok(text),
            Ok(_) => Err("the summariser returned an empty answer".to_string()),
            Err(SummaryFailure::Abort(why)) => return Err(CompressError::Aborted(why)),
            Err(SummaryFailure::Failed(why)) => Err(why),
        };
        let (body, fallback) = match answer {
            Ok(text) => (summary::summary_body(&text).to_string(), None),
            Err(why) => (
                summary::fallback(&fallback_material, middle.len(), previous_text, &why),
                Some(why),
            ),
        };
        let mut rewritten = pruned.rewritten.clone();
        let last = middle.iter().copied().max().unwrap_or(anchor);
        let mut covered: std::collections::HashSet<EntryId> = middle.iter().copied().collect();
        covered.extend(previous.as_ref().map(|(id, _)| *id));
        for entry in transcript.entries_mut() {
            if covered.contains(&entry.id) {
                entry.compacted = true;
                rewritten.push(entry.id);
            }
        }
        // The frame is counted in the budget too.
        let frame_tokens = u64::from(accounting.counting().count(&summary::frame("")));
        let body = summary::limit(
            &body,
            summary_max.saturating_sub(frame_tokens).max(64),
            accounting.counting(),
        );
        transcript.push(EntryBody::Summary {
            text: summary::frame(&body),
            first: anchor,
            last,
        });
        rewritten.extend(sanitise(transcript.entries_mut()));
        rewritten.sort_unstable();
        rewritten.dedup();
        transcript.validate().map_err(CompressError::Invalid)?;
        for id in &rewritten {
            transcript.mark_rewritten(*id);
        }
        accounting.forget(&rewritten);
        let after = accounting.transcript(&transcript) + tools_tokens;
        Ok(Outcome {
            transcript,
            report: Report {
                before,
                after,
                pruned,
                summary: Some(SummaryInfo {
                    text: body,
                    messages: middle.len(),
                    fallback,
                }),
                rewritten,
            },
        })
    }
}

/// Something that writes summaries (the engine's model call, or a test's script).
pub trait Summariser {
    fn summarise(
        &mut self,
        request: &SummaryRequest,
    ) -> impl std::future::Future<Output = Result<String, SummaryFailure>>;
}

/// A whole compaction with a summariser.
pub async fn compress<S: Summariser>(
    request: &Request<'_>,
    accounting: &mut TokenAccounting,
    summariser: &mut S,
) -> Result<Outcome, CompressError> {
    match prepare(request, accounting)? {
        Prepared::Done(outcome) => Ok(outcome),
        Prepared::Summarise(pending) => {
            let answer = summariser.summarise(pending.request()).await;
            pending.finish(answer, accounting)
        }
    }
}
