//! `talaria-mcp-fixture`: a small MCP server over stdio for tests (newline-delimited JSON-RPC).
//!
//! Tools: `echo {text}` (text back), `picture {}` (a text and an image), `fail {}` (`isError`),
//! `slow {}` (answers after 30 s unless cancelled), `crash {}` (the process exits). With
//! `--hang` it never answers `initialize`; with `--exit` it exits at once. Every message it
//! receives is appended to the file named by `MCP_FIXTURE_LOG`, when set.

use std::io::{BufRead, Write};

use serde_json::{Value, json};

fn send(message: &Value) {
    let mut stdout = std::io::stdout().lock();
    let _ = writeln!(stdout, "{message}");
    let _ = stdout.flush();
}

fn log(message: &str) {
    if let Some(path) = std::env::var_os("MCP_FIXTURE_LOG")
        && let Ok(mut file) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
    {
        let _ = writeln!(file, "{message}");
    }
}

fn tools() -> Value {
    let object = |properties: Value, required: Value| json!({"type": "object", "properties": properties, "required": required});
    json!({"tools": [
        {"name": "echo", "description": "Echo the text back.", "inputSchema": object(json!({"text": {"type": "string"}}), json!(["text"])),
         "annotations": {"readOnlyHint": true}},
        {"name": "picture", "description": "A caption and a picture.", "inputSchema": object(json!({}), json!([]))},
        {"name": "fail", "description": "Always fails.", "inputSchema": object(json!({}), json!([]))},
        {"name": "slow", "description": "Takes 30 seconds.", "inputSchema": object(json!({}), json!([]))},
        {"name": "crash", "description": "Exits the server.", "inputSchema": object(json!({}), json!([]))}
    ]})
}

fn call(name: &str, args: &Value) -> Value {
    match name {
        "echo" => {
            json!({"content": [{"type": "text", "text": format!("echo: {}", args["text"].as_str().unwrap_or(""))}]})
        }
        "picture" => json!({"content": [
            {"type": "text", "text": "a red dot"},
            {"type": "image", "mimeType": "image/png", "data": "iVBORw0KGgo="}
        ]}),
        "fail" => {
            json!({"content": [{"type": "text", "text": "the fixture refuses"}], "isError": true})
        }
        _ => {
            json!({"content": [{"type": "text", "text": format!("unknown tool {name}")}], "isError": true})
        }
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.iter().any(|a| a == "--exit") {
        eprintln!("fixture: exiting at once");
        std::process::exit(3);
    }
    let hang = args.iter().any(|a| a == "--hang");
    let stdin = std::io::stdin();
    for line in stdin.lock().lines() {
        let Ok(line) = line else { break };
        log(&line);
        let Ok(message) = serde_json::from_str::<Value>(&line) else {
            continue;
        };
        let Some(id) = message.get("id").cloned() else {
            continue;
        };
        let method = message["method"].as_str().unwrap_or("");
        let result = match method {
            "initialize" if hang => {
                std::thread::sleep(std::time::Duration::from_secs(3600));
                continue;
            }
            "initialize" => {
                let asked = message["params"]["protocolVersion"]
                    .as_str()
                    .unwrap_or("2025-06-18");
                let version = if asked > "2025-11-25" {
                    "2025-11-25"
                } else {
                    asked
                };
                json!({"protocolVersion": version, "capabilities": {"tools": {}},
                       "serverInfo": {"name": "talaria-mcp-fixture", "version": "1.0.0"}})
            }
            "ping" => json!({}),
            "tools/list" => tools(),
            "tools/call" => {
                let name = message["params"]["name"].as_str().unwrap_or("");
                match name {
                    "crash" => std::process::exit(1),
                    "slow" => {
                        // Answers later, from a thread: cancellations are still read (and logged).
                        std::thread::spawn(move || {
                            std::thread::sleep(std::time::Duration::from_secs(30));
                            send(
                                &json!({"jsonrpc": "2.0", "id": id, "result": {"content": [{"type": "text", "text": "done slowly"}]}}),
                            );
                        });
                        continue;
                    }
                    _ => call(name, &message["params"]["arguments"]),
                }
            }
            _ => {
                send(
                    &json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32601, "message": format!("no method {method}")}}),
                );
                continue;
            }
        };
        send(&json!({"jsonrpc": "2.0", "id": id, "result": result}));
    }
}
