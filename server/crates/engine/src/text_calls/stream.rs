//! How much of an answer can be shown while it streams: text that may become a tool call
//! written as text waits until the answer is complete, everything else streams as it comes.

use super::shape::{fence_may_be_call, is_call_tag};

/// Where a streaming answer may hold a tool call written as text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Showable {
    /// The answer can be shown up to here; the rest waits until the answer is complete.
    pub upto: usize,
    /// Scanning can resume here next time (outside any fence).
    pub resume: usize,
}

/// How much of a streaming answer can be shown now: everything before the first place where
/// a tool call written as text may begin — an answer that opens with `{`, a call tag
/// (`<tool_call>`), or a fence that is labelled with a tool's name or whose body is or may
/// still become a call of an offered tool. Other fences (code, or JSON that is not a call)
/// stream as they come. `resume` is from the previous scan.
pub(crate) fn showable(text: &str, resume: usize, offered: &[String]) -> Showable {
    let by_fences = fences_showable(text, resume, offered);
    match first_call_tag(text, resume) {
        Some(at) if at < by_fences.upto => Showable {
            upto: at,
            resume: by_fences.resume.min(at),
        },
        _ => by_fences,
    }
}

fn fences_showable(text: &str, resume: usize, offered: &[String]) -> Showable {
    let hold = |at: usize, resume: usize| Showable { upto: at, resume };
    let mut pos = resume;
    if resume == 0 {
        let start = text.len() - text.trim_start().len();
        if text[start..].starts_with('{') {
            match leading_value_not_a_call(&text[start..], offered) {
                // Whole JSON that is no call: shown at once, scanning goes on after it.
                Some(end) => pos = start + end,
                None => return hold(start, 0),
            }
        }
    }
    loop {
        let Some(fence) = next_fence(text, pos) else {
            // A line that may still become a fence waits for its next character.
            if let Some(at) = partial_fence(text, pos) {
                return hold(at, pos);
            }
            return hold(text.len(), settled(text, pos));
        };
        let Some(newline) = text[fence + 3..].find('\n') else {
            return hold(fence, pos);
        };
        let info = &text[fence + 3..fence + 3 + newline];
        let body = fence + 3 + newline + 1;
        let close = text[body..].find("```").map(|c| body + c);
        let content = &text[body..close.unwrap_or(text.len())];
        if fence_may_be_call(info, content, close.is_some(), offered) {
            return hold(fence, pos);
        }
        match close {
            // Code: shown as it streams; scanning resumes after its closing fence.
            None => return hold(text.len(), pos),
            Some(close) => pos = close + 3,
        }
    }
}

/// The first `<` from `from` that opens a call tag, or may still become one.
fn first_call_tag(text: &str, from: usize) -> Option<usize> {
    let mut at = from;
    while let Some(found) = text[at..].find('<') {
        let start = at + found;
        if opens_call_tag(&text[start..]) {
            return Some(start);
        }
        at = start + 1;
    }
    None
}

/// Whether text that starts with `<` opens a call tag (or what may still become one).
fn opens_call_tag(opening: &str) -> bool {
    match opening.find('>') {
        Some(close) => is_call_tag(&opening[1..close]),
        // Still streaming the tag: hold while it may become one.
        None => {
            let inner = &opening[1..];
            match inner.find(char::is_whitespace) {
                None => opening.len() <= 26,
                Some(space) => is_call_tag(&inner[..space]),
            }
        }
    }
}

/// Where the next scan can start when no fence follows `from`: the end, when the last line
/// has begun with something other than a backtick (no fence can open on it any more), else
/// that line's start. Stays at 0 until the answer's first character is known.
fn settled(text: &str, from: usize) -> usize {
    if text.trim_start().is_empty() {
        return from;
    }
    let line_start = match text[from..].rfind('\n') {
        Some(n) => from + n + 1,
        None if from == 0 || text[..from].ends_with('\n') => from,
        // Mid-line: this line was settled before.
        None => return text.len(),
    };
    match text[line_start..]
        .trim_start_matches([' ', '\t'])
        .chars()
        .next()
    {
        Some(c) if c != '`' => text.len(),
        _ => line_start,
    }
}

/// The next ``` that opens a line, from `from`.
fn next_fence(text: &str, from: usize) -> Option<usize> {
    let mut at = from;
    while let Some(found) = text[at..].find("```") {
        let index = at + found;
        if text[..index].trim_end_matches([' ', '\t']).ends_with('\n')
            || text[..index].trim().is_empty()
        {
            return Some(index);
        }
        at = index + 3;
    }
    None
}

/// A last line that is one or two backticks: it may become a fence. (A line begun before
/// `from`, mid-line, was settled as no fence.)
fn partial_fence(text: &str, from: usize) -> Option<usize> {
    let line_start = match text[from..].rfind('\n') {
        Some(n) => from + n + 1,
        None if from == 0 || text[..from].ends_with('\n') => from,
        None => return None,
    };
    let line = text[line_start..].trim_start();
    (line == "`" || line == "``").then(|| text.len() - line.len())
}

/// Opening JSON longer than this is held until the answer ends (read once, not per delta).
const LEADING_JSON_READ_MAX: usize = 64 * 1024;

/// The length of the whole JSON value `text` opens with, when it is no call of an offered
/// tool (so it need not be held back); `None` while it is incomplete, a call, or not JSON.
fn leading_value_not_a_call(text: &str, offered: &[String]) -> Option<usize> {
    if text.len() > LEADING_JSON_READ_MAX {
        return None;
    }
    let mut values = serde_json::Deserializer::from_str(text).into_iter::<serde_json::Value>();
    values.next()?.ok()?;
    let end = values.byte_offset();
    let is_call = super::shape::calls_in("", &text[..end], offered)
        .iter()
        .any(|call| offered.contains(&call.name));
    (!is_call).then_some(end)
}
