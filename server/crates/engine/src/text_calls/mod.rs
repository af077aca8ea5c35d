//! Tool calls a model wrote as text (small local models often put a call in a ```json fence
//! or `<tool_call>` tags instead of the API's tool-call field, and a server that cannot parse
//! its calls is asked without native tools). A call is taken from the text only when it names
//! an offered tool with arguments that pass that tool's schema; when the answer holds several,
//! the first runs and the model is told the others did not. A call of a tool that is not
//! offered, or with arguments that do not fit, runs nothing: the model is told why.

mod advice;
mod near_json;
pub(crate) mod prompt;
mod shape;
mod stream;

use talaria_provider::ToolCallRequest;
use talaria_tools::Registry;

pub(crate) use advice::{
    misfit_instruction, unknown_tool_instruction, unreadable_instruction, unrun_note,
};
pub(crate) use stream::showable;

/// What the text held.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum TextCall {
    /// A valid call, the answer's text without it, and the other calls the answer wrote
    /// (their tools' names), which are not run.
    Call {
        call: ToolCallRequest,
        rest: String,
        unrun: Vec<String>,
    },
    /// It names an offered tool, but its arguments do not fit (not run).
    Invalid {
        tool: String,
        why: talaria_tools::ArgsError,
    },
    /// It is plainly a call (a name and arguments) of a tool that is not offered.
    Unknown { tool: String },
    /// A block that names an offered tool and looks like a call, but cannot be read even as
    /// near-JSON (the parser's reason).
    Unreadable { tool: String, why: String },
}

/// A call read from the answer, checked against the registry.
enum Checked {
    Valid {
        name: String,
        arguments: String,
        span: std::ops::Range<usize>,
    },
    Invalid {
        name: String,
        why: talaria_tools::ArgsError,
    },
    Unknown {
        name: String,
    },
}

fn checked_calls(
    candidates: &[shape::Candidate],
    registry: &Registry,
    offered: &[String],
) -> Vec<Checked> {
    let mut checked = Vec::new();
    for candidate in candidates {
        for parsed in shape::calls_in(&candidate.info, &candidate.body, offered) {
            if !offered.contains(&parsed.name) {
                if parsed.explicit {
                    checked.push(Checked::Unknown { name: parsed.name });
                }
                continue;
            }
            let arguments = parsed.arguments.to_string();
            checked.push(match registry.parse_args(&parsed.name, &arguments) {
                Ok(_) => Checked::Valid {
                    name: parsed.name,
                    arguments,
                    span: candidate.span.clone(),
                },
                Err(why) => Checked::Invalid {
                    name: parsed.name,
                    why,
                },
            });
        }
    }
    checked
}

/// Looks for tool calls in `text`; `offered` are the tools the model was given.
pub(crate) fn find(text: &str, registry: &Registry, offered: &[String]) -> Option<TextCall> {
    let candidates = shape::candidates(text);
    let checked = checked_calls(&candidates, registry, offered);
    let first_valid = checked
        .iter()
        .position(|c| matches!(c, Checked::Valid { .. }));
    if let Some(index) = first_valid
        && let Checked::Valid {
            name, arguments, ..
        } = &checked[index]
    {
        let unrun = checked
            .iter()
            .enumerate()
            .filter(|(i, _)| *i != index)
            .filter_map(|(_, c)| match c {
                Checked::Valid { name, .. } | Checked::Invalid { name, .. } => Some(name.clone()),
                Checked::Unknown { .. } => None,
            })
            .collect();
        // Every call is taken out of the answer (the model reads which did not run).
        let mut spans: Vec<std::ops::Range<usize>> = checked
            .iter()
            .filter_map(|c| match c {
                Checked::Valid { span, .. } => Some(span.clone()),
                _ => None,
            })
            .collect();
        spans.sort_by_key(|s| std::cmp::Reverse(s.start));
        spans.dedup();
        let mut rest = text.to_string();
        for span in spans {
            rest.replace_range(span, "\n");
        }
        return Some(TextCall::Call {
            call: ToolCallRequest {
                id: format!("text_{name}"),
                name: name.clone(),
                arguments: arguments.clone(),
            },
            rest: tidy(&shape::without_call_tags(&rest)),
            unrun,
        });
    }
    let invalid = checked.iter().find_map(|c| match c {
        Checked::Invalid { name, why } => Some(TextCall::Invalid {
            tool: name.clone(),
            why: why.clone(),
        }),
        _ => None,
    });
    invalid
        .or_else(|| {
            checked.iter().find_map(|c| match c {
                Checked::Unknown { name } => Some(TextCall::Unknown { tool: name.clone() }),
                _ => None,
            })
        })
        .or_else(|| unreadable(&candidates, offered))
}

/// The first block that looks like a call of an offered tool (JSON-like, naming the tool or
/// labelled with it) but cannot be read, with why.
fn unreadable(candidates: &[shape::Candidate], offered: &[String]) -> Option<TextCall> {
    candidates.iter().find_map(|candidate| {
        let body = candidate.body.trim();
        let labelled = offered.iter().find(|name| **name == candidate.info.trim());
        if !(body.starts_with('{') || body.starts_with('[') || labelled.is_some()) {
            return None;
        }
        let tool = labelled.or_else(|| offered.iter().find(|name| names_tool(body, name)))?;
        let why = match near_json::values(body) {
            Err(why) => why.to_string(),
            Ok(_) if labelled.is_some() && !body.starts_with('{') => {
                "the arguments are not a JSON object".to_string()
            }
            Ok(_) => return None,
        };
        Some(TextCall::Unreadable {
            tool: tool.clone(),
            why,
        })
    })
}

/// Whether `text` holds `name` as a whole word.
pub(crate) fn names_tool(text: &str, name: &str) -> bool {
    text.match_indices(name).any(|(at, _)| {
        let before = text[..at].chars().next_back();
        let after = text[at + name.len()..].chars().next();
        !before.is_some_and(shape::is_name_char) && !after.is_some_and(shape::is_name_char)
    })
}

/// What is left of an answer once its calls are out: no empty or dangling fences, no runs of
/// blank lines.
fn tidy(text: &str) -> String {
    let is_fence = |line: &str| line.trim_start().starts_with("```");
    let lines: Vec<&str> = text.lines().collect();
    let mut kept: Vec<&str> = Vec::with_capacity(lines.len());
    let mut index = 0;
    while index < lines.len() {
        let line = lines[index];
        if is_fence(line) {
            let next = (index + 1..lines.len()).find(|&i| !lines[i].trim().is_empty());
            match next {
                // An empty block: both fences go.
                Some(close) if lines[close].trim() == "```" => {
                    index = close + 1;
                    continue;
                }
                // A fence with nothing after it.
                None => break,
                _ => {}
            }
        }
        kept.push(line);
        index += 1;
    }
    let mut out = String::with_capacity(text.len());
    let mut blank_run = 0;
    for line in kept {
        if line.trim().is_empty() {
            blank_run += 1;
            if blank_run > 1 {
                continue;
            }
        } else {
            blank_run = 0;
        }
        out.push_str(line);
        out.push('\n');
    }
    out.trim().to_string()
}

#[cfg(test)]
mod tests;
