//! Checks the mock applies to every request it receives, in each API's wire format: every
//! tool call is answered by exactly one result before the conversation goes on, and no result
//! answers a call that was not made. A broken transcript fails the test that sent it.

use serde_json::Value;

/// Which wire format a request uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WireApi {
    /// OpenAI Chat Completions (`messages`, `tool_calls`, role `tool`).
    Chat,
    /// Anthropic Messages (`tool_use` / `tool_result` blocks).
    Messages,
    /// OpenAI Responses (`function_call` / `function_call_output` items).
    Responses,
}

/// What is wrong with the tool-call pairing of a request body (empty when nothing is).
pub fn pairing_problems(api: WireApi, body: &Value) -> Vec<String> {
    match api {
        WireApi::Chat => chat(body),
        WireApi::Messages => messages(body),
        WireApi::Responses => responses(body),
    }
}

fn array<'a>(value: &'a Value, key: &str) -> &'a [Value] {
    value
        .get(key)
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice)
}

/// Tracks calls that wait for results.
#[derive(Default)]
struct Pending {
    open: Vec<String>,
    problems: Vec<String>,
}

impl Pending {
    fn call(&mut self, id: &str) {
        if self.open.iter().any(|o| o == id) {
            self.problems
                .push(format!("tool call id {id:?} used twice"));
        }
        self.open.push(id.to_string());
    }

    fn result(&mut self, id: &str, at: usize) {
        match self.open.iter().position(|o| o == id) {
            Some(position) => {
                self.open.remove(position);
            }
            None => self.problems.push(format!(
                "message {at}: a result for {id:?}, which no open tool call has"
            )),
        }
    }

    /// Another message begins: every open call should have been answered.
    fn close(&mut self, at: usize) {
        for id in self.open.drain(..) {
            self.problems.push(format!(
                "message {at}: the conversation goes on while tool call {id:?} has no result"
            ));
        }
    }

    fn finish(mut self, at: usize) -> Vec<String> {
        self.close(at);
        self.problems
    }
}

fn chat(body: &Value) -> Vec<String> {
    let mut pending = Pending::default();
    let messages = array(body, "messages");
    for (index, message) in messages.iter().enumerate() {
        match message["role"].as_str().unwrap_or_default() {
            "tool" => pending.result(message["tool_call_id"].as_str().unwrap_or_default(), index),
            role => {
                pending.close(index);
                if role == "assistant" {
                    for call in array(message, "tool_calls") {
                        pending.call(call["id"].as_str().unwrap_or_default());
                    }
                }
            }
        }
    }
    pending.finish(messages.len())
}

fn messages(body: &Value) -> Vec<String> {
    let mut pending = Pending::default();
    let messages = array(body, "messages");
    for (index, message) in messages.iter().enumerate() {
        let blocks = array(message, "content");
        match message["role"].as_str().unwrap_or_default() {
            "user" => {
                for block in blocks.iter().filter(|b| b["type"] == "tool_result") {
                    pending.result(block["tool_use_id"].as_str().unwrap_or_default(), index);
                }
                pending.close(index);
            }
            _ => {
                pending.close(index);
                for block in blocks.iter().filter(|b| b["type"] == "tool_use") {
                    pending.call(block["id"].as_str().unwrap_or_default());
                }
            }
        }
    }
    pending.finish(messages.len())
}

fn responses(body: &Value) -> Vec<String> {
    let mut pending = Pending::default();
    let items = array(body, "input");
    for (index, item) in items.iter().enumerate() {
        match item["type"].as_str().unwrap_or_default() {
            "function_call" => pending.call(item["call_id"].as_str().unwrap_or_default()),
            "function_call_output" => {
                pending.result(item["call_id"].as_str().unwrap_or_default(), index);
            }
            // Several calls of one answer come as consecutive items; a message item that is
            // not an output closes them.
            _ if pending.open.is_empty() => {}
            _ => pending.close(index),
        }
    }
    pending.finish(items.len())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn chat_pairing() {
        let good = json!({"messages": [
            {"role": "user", "content": "q"},
            {"role": "assistant", "tool_calls": [{"id": "a"}, {"id": "b"}]},
            {"role": "tool", "tool_call_id": "b"},
            {"role": "tool", "tool_call_id": "a"},
            {"role": "user", "content": "next"},
        ]});
        assert!(pairing_problems(WireApi::Chat, &good).is_empty());
        let bad = json!({"messages": [
            {"role": "assistant", "tool_calls": [{"id": "a"}]},
            {"role": "user", "content": "skipped the result"},
            {"role": "tool", "tool_call_id": "ghost"},
        ]});
        assert_eq!(pairing_problems(WireApi::Chat, &bad).len(), 2);
    }

    #[test]
    fn anthropic_and_responses_pairing() {
        let good = json!({"messages": [
            {"role": "user", "content": [{"type": "text", "text": "q"}]},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "t"}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t"}, {"type": "text", "text": "more"}]},
        ]});
        assert!(pairing_problems(WireApi::Messages, &good).is_empty());
        let bad = json!({"messages": [
            {"role": "assistant", "content": [{"type": "tool_use", "id": "t"}]},
            {"role": "user", "content": [{"type": "text", "text": "no result"}]},
        ]});
        assert_eq!(pairing_problems(WireApi::Messages, &bad).len(), 1);
        let good = json!({"input": [
            {"role": "user", "content": []},
            {"type": "function_call", "call_id": "c"},
            {"type": "function_call_output", "call_id": "c"},
        ]});
        assert!(pairing_problems(WireApi::Responses, &good).is_empty());
        let bad = json!({"input": [{"type": "function_call", "call_id": "c"}, {"role": "user"}]});
        assert_eq!(pairing_problems(WireApi::Responses, &bad).len(), 1);
    }
}
