//! The invariants' reading of one record: whether a promise holds in it, and what a load's
//! replay misses of the answers promised on a session's path.

use serde_json::Value;
use talaria_record::{EntryBody, InputBlock, Transcript, UserPart};

use super::{Replay, live_facts};
use crate::ledger::{Fact, on_path};

/// What a load's replay misses of the answers promised on its session's path. An answer the
/// stored record holds off its path, behind a later rewind marker, was cut by a rewind that
/// was not answered (it may have been made before the crash): not missing.
pub fn replay_problems(replay: &Replay, stored: Option<&Transcript>) -> Vec<String> {
    let session = replay.session.as_str();
    let replayed: Vec<Value> = replay
        .messages
        .iter()
        .filter(|m| m["method"] == "session/update" && m["params"]["sessionId"] == session)
        .map(|m| m["params"]["update"].clone())
        .collect();
    let mut problems = Vec::new();
    for fact in on_path(&live_facts(&replay.promised), session) {
        let Fact::Said { message, text, .. } = fact else {
            continue;
        };
        let shown = replayed_text(&replayed, message);
        if shown == *text || stored.is_some_and(|t| cut_by_a_rewind(t, message)) {
            continue;
        }
        problems.push(format!(
            "{}'s load of {session}: answer {message} {text:?} replays as {shown:?}",
            replay.who
        ));
    }
    problems
}

/// Whether the answer streamed as `message` is off `transcript`'s path with a rewind marker
/// after it.
fn cut_by_a_rewind(transcript: &Transcript, message: &str) -> bool {
    let all = transcript.all_entries();
    let Some(id) = answer_entry(&all, message).map(|e| e.id) else {
        return false;
    };
    !transcript.entries().iter().any(|e| e.id == id)
        && all
            .iter()
            .any(|e| e.id > id && matches!(e.body, EntryBody::Rewound { .. }))
}

/// The answer a record keeps under message id `message` (an answer recorded before ids
/// were kept is named after its entry).
pub(super) fn answer_entry<'a>(
    all: &[&'a talaria_record::Entry],
    message: &str,
) -> Option<&'a talaria_record::Entry> {
    all.iter().copied().find(|e| match &e.body {
        EntryBody::Assistant(answer) => match &answer.message_id {
            Some(id) => id == message,
            None => format!("agent-{}", e.id) == message,
        },
        _ => false,
    })
}

/// The text an answer's chunks showed in a replay.
pub(super) fn replayed_text(replayed: &[Value], message_id: &str) -> String {
    replayed
        .iter()
        .filter(|u| u["sessionUpdate"] == "agent_message_chunk" && u["messageId"] == message_id)
        .filter_map(|u| u["content"]["text"].as_str())
        .collect()
}

/// Whether `fact` holds in `transcript` (the session's record), or why not.
pub(super) fn holds(fact: &Fact, transcript: &Transcript) -> Result<(), String> {
    let all = transcript.all_entries();
    let find = |id: u64| all.iter().find(|e| e.id == id);
    match fact {
        Fact::Said { message, text, .. } => match answer_entry(&all, message).map(|e| &e.body) {
            Some(EntryBody::Assistant(answer)) if answer.text == *text => Ok(()),
            Some(other) => Err(format!(
                "answer {message} {text:?} is {other:?} in the record"
            )),
            None => Err(format!("answer {message} {text:?} is not in the record")),
        },
        Fact::Asked { entry, text, .. } => match find(*entry).map(|e| &e.body) {
            Some(EntryBody::User { input, model_view }) if user_text(input, model_view).contains(text.as_str()) => Ok(()),
            Some(other) => Err(format!("message {entry} {text:?} is {other:?} in the record")),
            None => Err(format!("message {entry} {text:?} is not in the record")),
        },
        Fact::ToolDone { client_id, .. } => all
            .iter()
            .any(|e| matches!(&e.body, EntryBody::ToolResult(r) if r.client_id == *client_id))
            .then_some(())
            .ok_or_else(|| format!("the result of tool call {client_id} is not in the record")),
        Fact::Steered { text, .. } => all
            .iter()
            .any(|e| matches!(&e.body, EntryBody::User { input, model_view } if user_text(input, model_view).contains(text.as_str())))
            .then_some(())
            .ok_or_else(|| format!("the steered message {text:?} is not in the record")),
        Fact::Forked { parent, holds: held, .. } => {
            if !matches!(transcript.entries().first().map(|e| &e.body), Some(EntryBody::System { .. })) {
                return Err(format!("the fork of {parent} has no system prompt"));
            }
            held.iter()
                .try_for_each(|h| holds(h, transcript))
                .map_err(|why| format!("the fork of {parent} is not whole: {why}"))
        }
        Fact::Rewound { .. } => all
            .iter()
            .any(|e| matches!(e.body, EntryBody::Rewound { .. }))
            .then_some(())
            .ok_or_else(|| "an answered rewind is not in the record".to_string()),
        Fact::Compacted { .. } => all
            .iter()
            .any(|e| matches!(e.body, EntryBody::Summary { .. }))
            .then_some(())
            .ok_or_else(|| "an answered compaction has no summary in the record".to_string()),
        Fact::Deleted { .. } | Fact::WholeOrGone { .. } | Fact::CopiesOf { .. } => Ok(()),
    }
}

/// A user entry's text, as received and as the model saw it.
fn user_text(input: &[InputBlock], model_view: &[UserPart]) -> String {
    let mut text = UserPart::joined_text(model_view, "\n");
    for block in input {
        if let InputBlock::Text { text: t } = block {
            text.push('\n');
            text.push_str(t);
        }
    }
    text
}
