//! How session updates look in a terminal: the answer on stdout, everything else on stderr.

use std::io::Write;

use serde_json::Value;

/// Prints one `session/update`.
pub fn update(update: &Value) {
    let text = update["content"]["text"].as_str().unwrap_or_default();
    match update["sessionUpdate"].as_str().unwrap_or_default() {
        "agent_message_chunk" => {
            print!("{text}");
            let _ = std::io::stdout().flush();
        }
        "agent_thought_chunk" => eprint!("\x1b[2m{text}\x1b[0m"),
        "tool_call" => eprintln!("\n⚙ {}", update["title"].as_str().unwrap_or("tool call")),
        "tool_call_update" => match update["status"].as_str() {
            Some("completed") => {
                eprintln!("  ✓ {}", update["toolCallId"].as_str().unwrap_or_default())
            }
            Some("failed") => {
                let why = update["content"][0]["content"]["text"]
                    .as_str()
                    .unwrap_or_default();
                eprintln!("  ✗ {}", why.lines().next().unwrap_or("failed"));
            }
            _ => {}
        },
        "plan" => {
            eprintln!("\nplan:");
            for entry in update["entries"].as_array().into_iter().flatten() {
                let mark = match entry["status"].as_str() {
                    Some("completed") => "[x]",
                    Some("in_progress") => "[>]",
                    _ => "[ ]",
                };
                eprintln!("  {mark} {}", entry["content"].as_str().unwrap_or_default());
            }
        }
        "notice" => eprintln!(
            "\n[{}] {}",
            update["severity"].as_str().unwrap_or("info"),
            update["title"].as_str().unwrap_or_default()
        ),
        _ => {}
    }
}

/// Reports the outcome of a command like `/mode`.
pub fn reply_status(reply: &Value) {
    match reply.get("error") {
        Some(error) => eprintln!("! {}", error["message"].as_str().unwrap_or("failed")),
        None => eprintln!("ok"),
    }
}
