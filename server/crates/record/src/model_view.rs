//! The record rendered as the provider-neutral message list every API adapter starts from.
//! This is the only place history becomes model messages.
//!
//! Rules: compacted entries are skipped, and a summary is a user message just before the entry
//! it is anchored to (the first it stands for, or the pinned latest user message); markers are not model
//! messages; a tool result is kept only right after its call (orphans are dropped); calls
//! left without a result when another message begins get a failed result; an interrupted
//! turn whose last model message is the user's gets a short assistant note (an answer right
//! after it takes its place), so roles stay valid for every provider; images that tool results carried follow the results of their
//! response as one user message (no API takes them in every tool result).

use std::borrow::Cow;

use crate::entry::{Entry, EntryBody, Reasoning, ToolCallRequest, UserPart};

/// The text a model reads for a call that never finished.
pub const INTERRUPTED_RESULT: &str =
    "Error: this call was interrupted before it finished; it may not have run.";

/// One message as the model sees it, borrowing from the record where it can.
#[derive(Debug, Clone, PartialEq)]
pub enum ModelMessage<'a> {
    System(&'a str),
    User(Cow<'a, [UserPart]>),
    Assistant {
        text: Cow<'a, str>,
        reasoning: Option<&'a Reasoning>,
        tool_calls: &'a [ToolCallRequest],
    },
    Tool {
        call_id: &'a str,
        content: Cow<'a, str>,
    },
}

fn close_open<'a>(out: &mut Vec<ModelMessage<'a>>, open: &mut Vec<&'a str>) {
    for call_id in open.drain(..) {
        out.push(ModelMessage::Tool {
            call_id,
            content: Cow::Borrowed(INTERRUPTED_RESULT),
        });
    }
}

/// The images tool results carried, as one user message after the results.
fn flush_images<'a>(out: &mut Vec<ModelMessage<'a>>, images: &mut Vec<UserPart>) {
    if images.is_empty() {
        return;
    }
    let mut parts = vec![UserPart::text(TOOL_IMAGES_NOTE)];
    parts.append(images);
    out.push(ModelMessage::User(Cow::Owned(parts)));
}

/// What introduces the images of tool results to the model.
pub const TOOL_IMAGES_NOTE: &str = "[Images returned by the tool calls above]";

/// Puts the system prompt's environment in front of the first user message after it (never
/// as a message of its own: some chat templates refuse two user messages in a row). What
/// comes before it — the instructions and the tool schemas — stays the same between sessions.
fn prepend_environment<'a>(entries: &'a [Entry], out: &mut [ModelMessage<'a>]) {
    let Some(environment) = entries.iter().find_map(|e| match &e.body {
        EntryBody::System { environment, .. } => environment.as_deref(),
        _ => None,
    }) else {
        return;
    };
    if let Some(ModelMessage::User(parts)) = out
        .iter_mut()
        .find(|message| matches!(message, ModelMessage::User(_)))
    {
        let mut with_environment = vec![UserPart::text(environment.trim_end())];
        with_environment.extend(parts.iter().cloned());
        *parts = Cow::Owned(with_environment);
    }
}

/// Renders entries in order.
pub(crate) fn render(entries: &[Entry]) -> Vec<ModelMessage<'_>> {
    let mut renderer = Renderer {
        out: Vec::with_capacity(entries.len()),
        open: Vec::new(),
        images: Vec::new(),
        note_at: None,
    };
    // Live summaries, by the first entry they stand for.
    let summaries: Vec<(crate::EntryId, &str)> = entries
        .iter()
        .filter(|e| !e.compacted)
        .filter_map(|e| match &e.body {
            EntryBody::Summary { text, first, .. } => Some((*first, text.as_str())),
            _ => None,
        })
        .collect();
    for entry in entries {
        if let Some((_, text)) = summaries.iter().find(|(first, _)| *first == entry.id) {
            renderer.user_text((*text).to_string());
        }
        if !entry.compacted {
            renderer.entry(&entry.body);
        }
    }
    let Renderer {
        mut out,
        open,
        mut images,
        ..
    } = renderer;
    if open.is_empty() {
        flush_images(&mut out, &mut images);
    }
    prepend_environment(entries, &mut out);
    out
}

/// How an answer cut off by an interruption is marked for the model (and on replay).
pub const CUT_OFF: &str = "This answer was cut off before it was complete";

/// The messages rendered so far, and what the next entry must know.
struct Renderer<'a> {
    out: Vec<ModelMessage<'a>>,
    /// Calls of the latest assistant message still without a result.
    open: Vec<&'a str>,
    /// Images of tool results, sent as a user message after them.
    images: Vec<UserPart>,
    /// Where the latest interruption note is.
    note_at: Option<usize>,
}

impl<'a> Renderer<'a> {
    /// A new message that is not a tool result: open calls are closed, images flushed.
    fn boundary(&mut self) {
        close_open(&mut self.out, &mut self.open);
        flush_images(&mut self.out, &mut self.images);
    }

    fn user_text(&mut self, text: String) {
        self.boundary();
        self.out
            .push(ModelMessage::User(Cow::Owned(vec![UserPart::Text {
                text,
            }])));
    }

    fn entry(&mut self, body: &'a EntryBody) {
        match body {
            EntryBody::System { text, .. } => self.out.push(ModelMessage::System(text)),
            EntryBody::User { model_view, .. } => {
                self.boundary();
                self.out.push(ModelMessage::User(Cow::Borrowed(model_view)));
            }
            EntryBody::Assistant(assistant) => {
                self.boundary();
                // An answer right after an interruption's note (its call group compacted
                // away) takes the note's place: two assistant messages in a row are refused.
                if self.note_at.is_some_and(|at| at + 1 == self.out.len()) {
                    self.out.pop();
                }
                self.out.push(ModelMessage::Assistant {
                    text: Cow::Borrowed(&assistant.text),
                    reasoning: assistant.reasoning.as_ref(),
                    tool_calls: &assistant.tool_calls,
                });
                self.open = assistant.tool_calls.iter().map(|c| c.id.as_str()).collect();
            }
            EntryBody::ToolResult(result) => {
                if let Some(position) = self.open.iter().position(|id| *id == result.call_id) {
                    self.open.remove(position);
                    self.out.push(ModelMessage::Tool {
                        call_id: &result.call_id,
                        content: Cow::Borrowed(&result.model_text),
                    });
                    self.images.extend(result.images.iter().cloned());
                }
            }
            EntryBody::Nudge { text } => self.user_text(text.clone()),
            EntryBody::Interrupted { reason } => {
                self.boundary();
                match self.out.last_mut() {
                    Some(ModelMessage::User(_)) => {
                        self.note_at = Some(self.out.len());
                        self.out.push(ModelMessage::Assistant {
                            text: Cow::Owned(format!("[This turn did not complete: {reason}]")),
                            reasoning: None,
                            tool_calls: &[],
                        });
                    }
                    // An answer cut off while it was being written says so, so the model
                    // does not take it for a complete one.
                    Some(ModelMessage::Assistant {
                        text,
                        tool_calls: [],
                        ..
                    }) => {
                        *text = Cow::Owned(format!("{text}\n\n[{CUT_OFF}: {reason}]"));
                    }
                    _ => {}
                }
            }
            EntryBody::Notice { .. }
            | EntryBody::ModeChanged { .. }
            | EntryBody::ModelChanged { .. }
            | EntryBody::Plan { .. }
            | EntryBody::Summary { .. }
            | EntryBody::Rewound { .. }
            | EntryBody::FilesRestored { .. }
            | EntryBody::SteerWaiting { .. } => {}
        }
    }
}
