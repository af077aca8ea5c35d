//! An agent's turn as a trajectory's messages (OpenAI chat format), built from its ACP
//! updates (its words, its own tool calls and their ends) and the requests it made of its
//! client (files, terminals), in the order they came.

use serde_json::{Value, json};

/// What the agent said and did so far in one delegation.
#[derive(Debug, Default)]
pub(super) struct Steps {
    messages: Vec<Value>,
    /// Its words since its last call.
    text: String,
    /// The calls that have no result yet, by id.
    open: Vec<String>,
    calls: u64,
}

impl Steps {
    pub(super) fn said(&mut self, text: &str) {
        self.text.push_str(text);
    }

    /// A call it made (its words before it are the call's message).
    pub(super) fn call(&mut self, id: &str, name: &str, arguments: &Value) {
        let call = json!({"id": id, "type": "function",
            "function": {"name": name, "arguments": arguments.to_string()}});
        self.messages.push(json!({"role": "assistant",
            "content": std::mem::take(&mut self.text), "tool_calls": [call]}));
        self.open.push(id.to_string());
        self.calls += 1;
    }

    /// A call's result (once: a call without an open id is not one of its calls).
    pub(super) fn result(&mut self, id: &str, content: &str) {
        if let Some(at) = self.open.iter().position(|open| open == id) {
            self.open.remove(at);
            self.messages
                .push(json!({"role": "tool", "tool_call_id": id, "content": content}));
        }
    }

    /// The messages before its final answer (the task first), the answer, and its calls;
    /// a call left without a result is closed as such.
    pub(super) fn finish(mut self, task: &str) -> (Vec<Value>, String, u64) {
        for id in std::mem::take(&mut self.open) {
            self.messages.push(
                json!({"role": "tool", "tool_call_id": id, "content": "(no result reported)"}),
            );
        }
        let mut messages = vec![json!({"role": "user", "content": task})];
        messages.extend(self.messages);
        (messages, self.text, self.calls)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    #[test]
    fn words_calls_and_results_become_messages_in_order_each_call_answered_once() {
        let mut steps = super::Steps::default();
        steps.said("Looking. ");
        steps.call("c1", "Read notes", &json!({"path": "notes.txt"}));
        steps.result("c1", "hello");
        steps.result("c1", "again");
        steps.call("c2", "Run tests", &json!(null));
        steps.said("Done.");
        let (messages, answer, calls) = steps.finish("check the notes");
        assert_eq!(answer, "Done.");
        assert_eq!(calls, 2);
        let roles: Vec<&str> = messages.iter().filter_map(|m| m["role"].as_str()).collect();
        assert_eq!(roles, ["user", "assistant", "tool", "assistant", "tool"]);
        assert_eq!(messages[1]["content"], "Looking. ");
        assert_eq!(messages[2]["content"], "hello");
        assert_eq!(messages[4]["content"], "(no result reported)");
    }
}
