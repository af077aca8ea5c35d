//! Rewind: naming a message by its id and fingerprint, and finding where the conversation
//! goes on from (the entry before that user message, or the end of the turn that holds a
//! named answer).
//!
//! A message's fingerprint is `sha256:<hex>` of its text blocks joined as they are, with no
//! normalisation (the contract of the Claude adapter's `_session/rewind`, so clients written
//! for it work unchanged).

use talaria_record::{Entry, EntryBody, EntryId, FileChange, InputBlock, Transcript};

/// A message a client names: its id and the fingerprint of its text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MessagePoint {
    pub message_id: String,
    pub fingerprint: String,
}

/// What a client asks a rewind to do.
#[derive(Debug, Clone, Default)]
pub struct RewindRequest {
    /// The user message to cut before (it and what follows leave the path).
    pub before: Option<MessagePoint>,
    /// The answer just before `before` (a guard), or, without `before`, the answer whose
    /// turn the conversation goes on after (back to a branch an earlier rewind cut).
    pub resume_at: Option<MessagePoint>,
    /// Cancel a running turn (and queued prompts) first; without it a busy session refuses.
    pub interrupt_if_running: bool,
    /// Put back the files the cut turns changed.
    pub restore_files: bool,
    /// Put them back even where they were changed since the agent did.
    pub force: bool,
}

/// How a rewind ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RewindOutcome {
    /// The conversation goes on from the named point; with `restoreFiles`, what the files
    /// report says.
    Rewound {
        files: Option<talaria_checkpoints::RestoreReport>,
    },
    /// Not done, and nothing changed: `busy`, `files_unavailable`, `session_closed`.
    Refused(String),
    /// The request names no message of this session, or the wrong one: nothing changed.
    Invalid(String),
}

/// Why a rewind names no message of the session rightly (nothing changed).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RewindError {
    #[error("beforeMessage or resumeAtMessage is required")]
    NoTarget,
    #[error("Message fingerprint does not match the selected message")]
    Fingerprint,
    #[error("Rewind message {0} was not found in this session")]
    NotFound(String),
    #[error("the message has no place in the record")]
    NoPlace,
    #[error("resumeAtMessage is required for a non-initial user message")]
    GuardRequired,
    #[error("resumeAtMessage is not the assistant message immediately preceding beforeMessage")]
    WrongGuard,
}

/// The `messageId` of a user message: its record entry's, stable across loads.
pub fn user_message_id(entry: EntryId) -> String {
    format!("user-{entry}")
}

/// The fingerprint of a text (`sha256:<hex>`).
pub fn fingerprint(text: &str) -> String {
    talaria_checkpoints::hash_of(text.as_bytes())
}

/// The text blocks of a user message joined (what its fingerprint is of).
pub fn text_of(input: &[InputBlock]) -> String {
    user_text(input).0
}

/// The text blocks of a user message joined, and whether it is only text.
fn user_text(input: &[InputBlock]) -> (String, bool) {
    let mut text = String::new();
    let mut text_only = true;
    for block in input {
        match block {
            InputBlock::Text { text: part } => text.push_str(part),
            _ => text_only = false,
        }
    }
    (text, text_only)
}

/// A message of the record as a client names it.
struct Named<'a> {
    entry: &'a Entry,
    id: String,
    text: String,
    text_only: bool,
}

fn users<'a>(all: &[&'a Entry]) -> impl Iterator<Item = Named<'a>> {
    all.iter().filter_map(|entry| match &entry.body {
        EntryBody::User { input, .. } => {
            let (text, text_only) = user_text(input);
            Some(Named {
                entry,
                id: user_message_id(entry.id),
                text,
                text_only,
            })
        }
        _ => None,
    })
}

fn answers<'a>(all: &[&'a Entry]) -> impl Iterator<Item = Named<'a>> {
    all.iter().filter_map(|entry| match &entry.body {
        EntryBody::Assistant(answer) => Some(Named {
            entry,
            id: answer.message_id.clone()?,
            text: answer.text.clone(),
            text_only: true,
        }),
        _ => None,
    })
}

/// The message `point` names among `named`: by id (the fingerprint must match), else by a
/// unique, non-empty, text-only fingerprint match on the path.
fn find<'a>(
    named: Vec<Named<'a>>,
    point: &MessagePoint,
    on_path: &dyn Fn(EntryId) -> bool,
) -> Result<&'a Entry, RewindError> {
    if let Some(exact) = named.iter().find(|n| n.id == point.message_id) {
        return if fingerprint(&exact.text) == point.fingerprint {
            Ok(exact.entry)
        } else {
            Err(RewindError::Fingerprint)
        };
    }
    let matching: Vec<&Named<'_>> = named
        .iter()
        .filter(|n| on_path(n.entry.id) && fingerprint(&n.text) == point.fingerprint)
        .collect();
    match matching.as_slice() {
        [only] if only.text_only && !only.text.trim().is_empty() => Ok(only.entry),
        _ => Err(RewindError::NotFound(point.message_id.clone())),
    }
}

/// Where the conversation goes on from after the rewind `request` names (the entry the
/// path will end at; 0: right after the system prompt), or why the request is invalid.
pub fn resolve(history: &Transcript, request: &RewindRequest) -> Result<EntryId, RewindError> {
    let all = history.all_entries();
    let path: std::collections::HashSet<EntryId> = history.entries().iter().map(|e| e.id).collect();
    let on_path = |id: EntryId| path.contains(&id);
    let Some(before) = &request.before else {
        let point = request.resume_at.as_ref().ok_or(RewindError::NoTarget)?;
        let answer = find(answers(&all).collect(), point, &on_path)?;
        return Ok(history.turn_end_of(answer.id));
    };
    let target = find(users(&all).collect(), before, &on_path)?;
    // The entries on the branch before the target, nearest first.
    let chain = history
        .ancestors_of(target.id)
        .ok_or(RewindError::NoPlace)?;
    let head = chain.first().copied().unwrap_or(0);
    let users: std::collections::HashSet<EntryId> = all
        .iter()
        .filter(|e| matches!(e.body, EntryBody::User { .. }))
        .map(|e| e.id)
        .collect();
    let previous_user = chain.iter().copied().find(|id| users.contains(id));
    match (&request.resume_at, previous_user) {
        (None, Some(_)) => Err(RewindError::GuardRequired),
        (None, None) => Ok(head),
        (Some(point), previous) => {
            let on_branch: std::collections::HashSet<EntryId> = chain.iter().copied().collect();
            let answer = find(answers(&all).collect(), point, &|id| {
                on_branch.contains(&id)
            })?;
            let in_turn =
                on_branch.contains(&answer.id) && previous.is_none_or(|user| answer.id > user);
            if in_turn {
                Ok(head)
            } else {
                Err(RewindError::WrongGuard)
            }
        }
    }
}

/// The messages of the path as a client names them: `(messageId, fingerprint)` of each user
/// message and answer among `entries`.
pub fn points_of(entries: &[Entry]) -> Vec<(String, String)> {
    let all: Vec<&Entry> = entries.iter().collect();
    users(&all)
        .chain(answers(&all))
        .map(|named| (named.id, fingerprint(&named.text)))
        .collect()
}

/// Checks a rewind that arrives while a turn runs against the messages known when the turn
/// started: a message named by a known id with another fingerprint is refused before the
/// turn is cancelled. (A message of the running turn is checked once it has stopped.)
pub fn precheck(known: &[(String, String)], request: &RewindRequest) -> Result<(), RewindError> {
    for point in [&request.before, &request.resume_at].into_iter().flatten() {
        let wrong = known
            .iter()
            .any(|(id, print)| *id == point.message_id && *print != point.fingerprint);
        if wrong {
            return Err(RewindError::Fingerprint);
        }
    }
    if request.before.is_none() && request.resume_at.is_none() {
        return Err(RewindError::NoTarget);
    }
    Ok(())
}

/// The file changes of the entries `ids` (in id order, as they were made).
pub fn changes_of(history: &Transcript, ids: &[EntryId]) -> Vec<FileChange> {
    let ids: std::collections::HashSet<&EntryId> = ids.iter().collect();
    history
        .all_entries()
        .into_iter()
        .filter(|e| ids.contains(&e.id))
        .filter_map(|e| match &e.body {
            EntryBody::ToolResult(result) => Some(result.changes.clone()),
            _ => None,
        })
        .flatten()
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use talaria_record::testing::user;
    use talaria_record::{AssistantEntry, EntryBody};

    fn answer(text: &str, id: &str) -> EntryBody {
        EntryBody::Assistant(AssistantEntry {
            text: text.into(),
            message_id: Some(id.into()),
            ..AssistantEntry::default()
        })
    }

    fn point(id: &str, text: &str) -> MessagePoint {
        MessagePoint {
            message_id: id.into(),
            fingerprint: fingerprint(text),
        }
    }

    fn conversation() -> Transcript {
        let mut t = Transcript::with_system("system");
        t.push(user("one"));
        t.push(answer("a1", "agent-3"));
        t.push(user("two"));
        t.push(answer("a2", "agent-5"));
        t
    }

    fn request(before: Option<MessagePoint>, resume: Option<MessagePoint>) -> RewindRequest {
        RewindRequest {
            before,
            resume_at: resume,
            ..RewindRequest::default()
        }
    }

    #[test]
    fn a_rewind_names_its_message_by_id_and_fingerprint_with_the_answer_before_as_guard() {
        let t = conversation();
        let first = request(Some(point("user-2", "one")), None);
        assert_eq!(resolve(&t, &first), Ok(0));
        let second = request(Some(point("user-4", "two")), Some(point("agent-3", "a1")));
        assert_eq!(resolve(&t, &second), Ok(3));
    }

    #[test]
    fn wrong_fingerprints_unknown_ids_and_missing_guards_are_refused() {
        let t = conversation();
        let wrong = request(Some(point("user-4", "TWO")), Some(point("agent-3", "a1")));
        assert!(
            resolve(&t, &wrong)
                .unwrap_err()
                .to_string()
                .contains("fingerprint")
        );
        let unknown = request(Some(point("user-99", "nope")), None);
        assert!(
            resolve(&t, &unknown)
                .unwrap_err()
                .to_string()
                .contains("not found")
        );
        let unguarded = request(Some(point("user-4", "two")), None);
        assert!(
            resolve(&t, &unguarded)
                .unwrap_err()
                .to_string()
                .contains("required")
        );
        let wrong_guard = request(Some(point("user-4", "two")), Some(point("agent-5", "a2")));
        assert!(
            resolve(&t, &wrong_guard)
                .unwrap_err()
                .to_string()
                .contains("preceding")
        );
    }

    #[test]
    fn an_unknown_id_falls_back_to_a_unique_text_match_on_the_path() {
        let t = conversation();
        let renamed = request(Some(point("old-id", "two")), Some(point("agent-3", "a1")));
        assert_eq!(resolve(&t, &renamed), Ok(3));
    }

    #[test]
    fn an_answer_alone_returns_to_the_end_of_its_turn_on_a_cut_branch() {
        let mut t = conversation();
        t.rewind_to(3);
        let back = request(None, Some(point("agent-5", "a2")));
        assert_eq!(resolve(&t, &back), Ok(5));
    }
}
