//! A trajectory in the ShareGPT shape training tools read: `conversations` of `{from, value}`
//! turns (`system`, `human`, `gpt`, `tool`), a call written in the answer as
//! `<tool_call>{"name", "arguments"}</tool_call>` and a result as
//! `<tool_response>{"tool_call_id", "content"}</tool_response>`, as Hermes Agent writes them.

use serde_json::{Value, json};

/// Text of a message's `content`: a string, or the text of its parts.
fn text_of(content: &Value) -> String {
    match content {
        Value::String(text) => text.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter_map(|p| p["text"].as_str())
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

fn turn(message: &Value) -> Value {
    let role = message["role"].as_str().unwrap_or("");
    let mut value = text_of(&message["content"]);
    let from = match role {
        "system" | "developer" => "system",
        "user" => "human",
        "assistant" => {
            for call in message["tool_calls"].as_array().into_iter().flatten() {
                let arguments: Value =
                    serde_json::from_str(call["function"]["arguments"].as_str().unwrap_or(""))
                        .unwrap_or_else(|_| call["function"]["arguments"].clone());
                let body = json!({"name": call["function"]["name"], "arguments": arguments});
                if !value.is_empty() {
                    value.push('\n');
                }
                value.push_str(&format!("<tool_call>\n{body}\n</tool_call>"));
            }
            "gpt"
        }
        "tool" => {
            let body = json!({"tool_call_id": message["tool_call_id"], "content": value});
            value = format!("<tool_response>\n{body}\n</tool_response>");
            "tool"
        }
        _ => "human",
    };
    json!({"from": from, "value": value})
}

/// The ShareGPT form of a trajectory in the OpenAI chat format (its other fields kept).
pub fn from_openai(trajectory: &Value) -> Value {
    let conversations: Vec<Value> = trajectory["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .map(turn)
        .collect();
    let mut shaped = trajectory.clone();
    if let Some(object) = shaped.as_object_mut() {
        object.remove("messages");
        object.insert("conversations".into(), Value::Array(conversations));
    }
    shaped
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roles_become_speakers_and_calls_and_results_are_tagged() {
        let trajectory = json!({"format": "talaria-trajectory/1", "messages": [
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": [{"type": "text", "text": "list"}]},
            {"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "type": "function",
                "function": {"name": "terminal", "arguments": "{\"command\":\"ls\"}"}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "a.txt"},
            {"role": "assistant", "content": "one file"},
        ]});
        let shaped = from_openai(&trajectory);
        let turns = shaped["conversations"].as_array().expect("turns");
        let froms: Vec<&str> = turns.iter().filter_map(|t| t["from"].as_str()).collect();
        assert_eq!(froms, ["system", "human", "gpt", "tool", "gpt"]);
        assert_eq!(turns[1]["value"], "list");
        assert_eq!(
            turns[2]["value"],
            "<tool_call>\n{\"name\":\"terminal\",\"arguments\":{\"command\":\"ls\"}}\n</tool_call>"
        );
        assert!(
            turns[3]["value"]
                .as_str()
                .expect("text")
                .contains("\"tool_call_id\":\"c1\"")
        );
        assert_eq!(shaped["format"], "talaria-trajectory/1");
        assert!(shaped.get("messages").is_none());
    }
}
