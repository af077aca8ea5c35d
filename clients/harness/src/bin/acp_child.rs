//! `talaria-acp-child`: a scripted ACP agent for tests of Talaria as a client of other agents.
//! It answers `initialize` and `session/new`, and plays one script per `session/prompt` from
//! the JSON file `TALARIA_CHILD_SCRIPT` names (`{"prompts": [[STEP, …], …]}`), then ends the
//! turn. Steps: `{"say": TEXT}`, `{"tool_call": TITLE}`, `{"tool_run": TITLE, "output": TEXT}`
//! (a call of its own, running then done), `{"read": PATH}`,
//! `{"write": {"path": P, "content": C}}`, `{"ask": TITLE}` (a permission question),
//! `{"form": MESSAGE}` (a form asking for a colour),
//! `{"terminal": COMMAND}`, `{"crash": CODE}`, `{"hang": true}`, `{"wait_cancel": true}`,
//! `{"usage": {"input": N, "output": M}}` (on the prompt's answer), `{"cost": USD}` (a
//! `usage_update` with the session's cost so far), `{"whoami": true}` (says its process id,
//! its session and the MCP servers `session/new` gave it), `{"echo_prompt": true}` (says
//! the prompt's text and its session); a script whose first step is `{"error": MESSAGE}`
//! answers its prompt with that JSON-RPC error. Each prompt starts uncancelled. Each `session/new` opens a new
//! session, unless `TALARIA_CHILD_ONE_SESSION` is set (then a second one is refused);
//! with `TALARIA_CHILD_IGNORE_EOF` it runs on when its input ends. What
//! each request answered is said back as text, so a test sees it in the answer.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::sync::{mpsc, oneshot, watch};

type Pending = Arc<Mutex<HashMap<i64, oneshot::Sender<Value>>>>;

struct Child {
    out: mpsc::UnboundedSender<String>,
    pending: Pending,
    next_id: i64,
    cancelled: watch::Receiver<bool>,
    /// Clears a cancel at the start of each prompt.
    uncancel: Arc<watch::Sender<bool>>,
    session: String,
    /// The text of the prompt being played.
    prompt: String,
    /// The names of the MCP servers each session was given.
    mcp: HashMap<String, Vec<String>>,
}

impl Child {
    fn send(&self, message: Value) {
        let _ = self.out.send(message.to_string());
    }

    fn update(&self, update: Value) {
        self.send(json!({"jsonrpc": "2.0", "method": "session/update",
            "params": {"sessionId": self.session, "update": update}}));
    }

    fn say(&self, text: &str) {
        self.update(json!({"sessionUpdate": "agent_message_chunk",
            "content": {"type": "text", "text": text}}));
    }

    async fn ask(&mut self, method: &str, params: Value) -> Value {
        self.next_id += 1;
        let (tx, rx) = oneshot::channel();
        talaria_util::lock(&self.pending).insert(self.next_id, tx);
        self.send(
            json!({"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params}),
        );
        rx.await
            .unwrap_or(json!({"error": {"message": "no answer"}}))
    }

    /// Asks its client to fill in a form (a colour) and says what came back.
    async fn form(&mut self, message: &str) {
        let params = json!({"sessionId": self.session.clone(), "mode": "form", "message": message,
            "requestedSchema": {"type": "object", "properties":
                {"colour": {"type": "string", "title": "Colour"}}, "required": ["colour"]}});
        let answer = self.ask("elicitation/create", params).await;
        let said = match answer.get("result") {
            Some(result) => format!(
                "{} {}",
                result["action"].as_str().unwrap_or("?"),
                result["content"]["colour"].as_str().unwrap_or("")
            ),
            None => outcome(&answer, "action"),
        };
        self.say(&format!("form: {}", said.trim()));
    }

    /// Plays one step; `false` when the turn ends cancelled.
    async fn play(&mut self, step: &Value) -> bool {
        let session = self.session.clone();
        if let Some(text) = step["say"].as_str() {
            self.say(text);
        } else if let Some(title) = step["tool_call"].as_str() {
            self.update(json!({"sessionUpdate": "tool_call", "toolCallId": "c1",
                "title": title, "kind": "execute", "status": "completed"}));
        } else if let Some(title) = step["tool_run"].as_str() {
            self.update(json!({"sessionUpdate": "tool_call", "toolCallId": "r1",
                "title": title, "kind": "search", "status": "in_progress",
                "rawInput": {"pattern": title}}));
            self.update(
                json!({"sessionUpdate": "tool_call_update", "toolCallId": "r1",
                "status": "completed", "content": [{"type": "content",
                "content": {"type": "text", "text": step["output"].as_str().unwrap_or("")}}]}),
            );
        } else if let Some(path) = step["read"].as_str() {
            let answer = self
                .ask(
                    "fs/read_text_file",
                    json!({"sessionId": session, "path": path}),
                )
                .await;
            self.say(&format!("read {path}: {}", outcome(&answer, "content")));
        } else if step["write"].is_object() {
            let params = json!({"sessionId": session, "path": step["write"]["path"],
                "content": step["write"]["content"]});
            let answer = self.ask("fs/write_text_file", params).await;
            self.say(&format!("wrote: {}", outcome(&answer, "")));
        } else if let Some(title) = step["ask"].as_str() {
            let params = json!({"sessionId": session, "toolCall": {"toolCallId": "p1", "title": title},
                "options": [{"optionId": "yes", "name": "Allow", "kind": "allow_once"},
                            {"optionId": "no", "name": "Reject", "kind": "reject_once"}]});
            let answer = self.ask("session/request_permission", params).await;
            let chosen = answer["result"]["outcome"]["optionId"]
                .as_str()
                .unwrap_or("none");
            self.say(&format!("permission: {chosen}"));
        } else if let Some(message) = step["form"].as_str() {
            self.form(message).await;
        } else if let Some(command) = step["terminal"].as_str() {
            self.run_terminal(command).await;
        } else if let Some(cost) = step["cost"].as_f64() {
            self.update(
                json!({"sessionUpdate": "usage_update", "used": 1000, "size": 200_000,
                "cost": {"amount": cost, "currency": "USD"}}),
            );
        } else if step["echo_prompt"].as_bool() == Some(true) {
            self.say(&format!("prompt on {}: {}\n", self.session, self.prompt));
        } else if step["whoami"].as_bool() == Some(true) {
            let mcp = self.mcp.get(&self.session).cloned().unwrap_or_default();
            self.say(&format!(
                "pid {} session {} mcp [{}]\n",
                std::process::id(),
                self.session,
                mcp.join(",")
            ));
        } else if let Some(code) = step["crash"].as_i64() {
            eprintln!("acp-child: crashing on purpose with {code}");
            std::process::exit(i32::try_from(code).unwrap_or(1));
        } else if step["hang"].as_bool() == Some(true) {
            eprintln!("acp-child: hanging on purpose");
            std::future::pending::<()>().await;
        } else if step["wait_cancel"].as_bool() == Some(true) {
            let _ = self.cancelled.wait_for(|c| *c).await;
            return false;
        }
        true
    }

    /// Plays one prompt's steps; the prompt's result.
    async fn turn(&mut self, steps: &Value) -> Value {
        self.uncancel.send_replace(false);
        let _ = self.cancelled.borrow_and_update();
        let mut stop = "end_turn";
        let mut usage = Value::Null;
        for step in steps.as_array().cloned().unwrap_or_default() {
            if step.get("usage").is_some() {
                let input = step["usage"]["input"].as_u64().unwrap_or(0);
                let output = step["usage"]["output"].as_u64().unwrap_or(0);
                usage = json!({"inputTokens": input, "outputTokens": output,
                    "totalTokens": input + output});
            } else if !self.play(&step).await {
                stop = "cancelled";
                break;
            }
        }
        let mut result = json!({"stopReason": stop});
        if !usage.is_null() {
            result["usage"] = usage;
        }
        result
    }

    /// Plays `steps` for a `session/prompt` request: its result, or the JSON-RPC error the
    /// script answers it with.
    async fn prompted(&mut self, request: &Value, steps: &Value) -> Result<Value, Value> {
        let asked = request["params"]["sessionId"].as_str().unwrap_or("");
        self.session = asked.to_string();
        self.prompt = prompt_text(request);
        if let Some(message) = steps[0]["error"].as_str() {
            return Err(json!({"code": -32603, "message": message}));
        }
        Ok(self.turn(steps).await)
    }

    /// Opens a session (refused past the first when `one_session`); its answer.
    fn open_session(&mut self, request: &Value, one_session: bool) -> Result<Value, &'static str> {
        if one_session && !self.mcp.is_empty() {
            return Err("one session only");
        }
        self.session = format!("child-{}-{}", std::process::id(), self.mcp.len() + 1);
        let names = request["params"]["mcpServers"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|s| s["name"].as_str().map(str::to_string))
            .collect();
        self.mcp.insert(self.session.clone(), names);
        Ok(json!({"sessionId": self.session}))
    }

    async fn run_terminal(&mut self, command: &str) {
        let session = self.session.clone();
        let created = self
            .ask(
                "terminal/create",
                json!({"sessionId": session,
            "command": "sh", "args": ["-c", command]}),
            )
            .await;
        let Some(id) = created["result"]["terminalId"].as_str().map(str::to_string) else {
            self.say(&format!("terminal refused: {}", outcome(&created, "")));
            return;
        };
        let exit = self
            .ask(
                "terminal/wait_for_exit",
                json!({"sessionId": session, "terminalId": id}),
            )
            .await;
        let output = self
            .ask(
                "terminal/output",
                json!({"sessionId": session, "terminalId": id}),
            )
            .await;
        self.ask(
            "terminal/release",
            json!({"sessionId": session, "terminalId": id}),
        )
        .await;
        self.say(&format!(
            "terminal exit {}: {}",
            exit["result"]["exitCode"],
            output["result"]["output"].as_str().unwrap_or("")
        ));
    }
}

/// A request's answer as text: its `field`, "ok", or "error: MESSAGE".
fn outcome(answer: &Value, field: &str) -> String {
    match (answer.get("result"), answer.get("error")) {
        (Some(result), _) if field.is_empty() => {
            let _ = result;
            "ok".into()
        }
        (Some(result), _) => result[field].as_str().unwrap_or("").to_string(),
        (_, Some(error)) => format!("error: {}", error["message"].as_str().unwrap_or("?")),
        _ => "no answer".into(),
    }
}

/// The text blocks of a `session/prompt`, joined.
fn prompt_text(request: &Value) -> String {
    request["params"]["prompt"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|block| block["text"].as_str())
        .collect::<Vec<_>>()
        .join("\n")
}

/// Reads the client's lines: answers to the child's requests go to their askers, a
/// `session/cancel` cancels the turn, requests go to `requests`; exits when input ends.
async fn read_input(
    reading: Pending,
    cancel_tx: Arc<watch::Sender<bool>>,
    requests_tx: mpsc::UnboundedSender<Value>,
) {
    let mut lines = BufReader::new(tokio::io::stdin()).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        let Ok(message) = serde_json::from_str::<Value>(&line) else {
            continue;
        };
        if message.get("method").is_none() {
            let id = message["id"].as_i64().unwrap_or(-1);
            if let Some(tx) = talaria_util::lock(&reading).remove(&id) {
                let _ = tx.send(message);
            }
        } else if message["method"] == "session/cancel" {
            let _ = cancel_tx.send(true);
        } else if message.get("id").is_some() {
            let _ = requests_tx.send(message);
        }
    }
    // An agent that does not watch its input (it must be ended otherwise); silent, as
    // a write to a closed stderr would end it.
    if std::env::var_os("TALARIA_CHILD_IGNORE_EOF").is_some() {
        std::future::pending::<()>().await;
    }
    eprintln!("acp-child: input ended");
    std::process::exit(0);
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let script: Value = std::env::var("TALARIA_CHILD_SCRIPT")
        .ok()
        .and_then(|p| std::fs::read_to_string(p).ok())
        .and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or(json!({"prompts": []}));
    let mut prompts: Vec<Value> = script["prompts"].as_array().cloned().unwrap_or_default();
    prompts.reverse();
    eprintln!("acp-child: started");
    // Unbounded (test support): the lines of a scripted child, as many as its script says.
    let (out, mut outgoing) = mpsc::unbounded_channel::<String>();
    tokio::spawn(async move {
        let mut stdout = tokio::io::stdout();
        while let Some(line) = outgoing.recv().await {
            let _ = stdout.write_all(format!("{line}\n").as_bytes()).await;
            let _ = stdout.flush().await;
        }
    });
    let pending: Pending = Arc::default();
    let (cancel_tx, cancelled) = watch::channel(false);
    let cancel_tx = Arc::new(cancel_tx);
    let uncancel = cancel_tx.clone();
    let (requests_tx, mut requests) = mpsc::unbounded_channel::<Value>();
    let reading = pending.clone();
    tokio::spawn(read_input(reading, cancel_tx, requests_tx));
    let mut child = Child {
        out,
        pending,
        next_id: 0,
        cancelled,
        uncancel,
        session: String::new(),
        prompt: String::new(),
        mcp: HashMap::new(),
    };
    let one_session = std::env::var_os("TALARIA_CHILD_ONE_SESSION").is_some();
    while let Some(request) = requests.recv().await {
        let id = request["id"].clone();
        let result = match request["method"].as_str().unwrap_or("") {
            "initialize" => json!({"protocolVersion": 1, "agentCapabilities": {},
                "agentInfo": {"name": "acp-child", "version": "0.0.1"}, "authMethods": []}),
            "session/new" => match child.open_session(&request, one_session) {
                Ok(result) => result,
                Err(message) => {
                    child.send(json!({"jsonrpc": "2.0", "id": id,
                        "error": {"code": -32000, "message": message}}));
                    continue;
                }
            },
            "session/prompt" => {
                let steps = prompts.pop().unwrap_or(json!([{"say": "no script left"}]));
                match child.prompted(&request, &steps).await {
                    Ok(result) => result,
                    Err(error) => {
                        child.send(json!({"jsonrpc": "2.0", "id": id, "error": error}));
                        continue;
                    }
                }
            }
            other => {
                child.send(json!({"jsonrpc": "2.0", "id": id,
                    "error": {"code": -32601, "message": format!("no {other}")}}));
                continue;
            }
        };
        child.send(json!({"jsonrpc": "2.0", "id": id, "result": result}));
    }
}
