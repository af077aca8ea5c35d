//! Small windows and local servers: no request over the window, side work never in front of
//! a prompt (and never beside one on a one-slot server), a prompt prefix the server can cache
//! across sessions, and a small model's near-misses acted on.

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use talaria_harness::{AgentProcess, MockReply, RecordedRequest};

use crate::support::*;

const WINDOW: u64 = 8_000;
const TITLE_MODEL: &str = "title-model";
const REVIEW_MODEL: &str = "review-model";
const SUMMARY_MODEL: &str = "summary-model";

/// About 30 kB of varied text.
fn big_file() -> String {
    (1..=600)
        .map(|n| {
            format!(
                "entry {n:04}: the parser keeps state_{n} for token kind {}\n",
                n * 7 % 31
            )
        })
        .collect()
}

/// A command whose output is about 30 kB.
const LOUD_COMMAND: &str = "seq 100000 105999";

fn answer(n: usize) -> MockReply {
    MockReply::text(&[&format!(
        "Turn {n}: noted. {}",
        "The state is kept per token kind. ".repeat(8)
    )])
}

/// Ten turns, alternating a whole-file read and a loud command.
fn ten_turns() -> Vec<MockReply> {
    (1..=10)
        .flat_map(|n| {
            let call = if n % 2 == 1 {
                MockReply::tool_call(&format!("r{n}"), "read_file", json!({"path": "big.txt"}))
            } else {
                MockReply::tool_call(
                    &format!("t{n}"),
                    "terminal",
                    json!({"command": LOUD_COMMAND}),
                )
            };
            [call, answer(n)]
        })
        .collect()
}

#[tokio::test]
async fn no_request_in_an_8k_window_goes_over_it_and_the_model_is_told_where_the_rest_is() {
    let mut env = TestEnv::new(ten_turns()).await;
    std::fs::write(env.workspace.path().join("big.txt"), big_file()).expect("file");
    assert!(big_file().len() > 29_000);
    env.extra_env
        .push(("TALARIA_CONTEXT_WINDOW".into(), WINDOW.to_string()));
    env.write_config(&format!(
        "mode = \"yolo\"\nretry_base_ms = 1\n[learning]\nskill_review_after = 4\nmemory_review_after = 0\non_local_servers = true\n[auxiliary.review]\nmodel = \"{REVIEW_MODEL}\"\n[auxiliary.compression]\nmodel = \"{SUMMARY_MODEL}\"\n"
    ));
    env.mock.script_for_model(
        REVIEW_MODEL,
        (0..4)
            .map(|_| MockReply::text(&["Nothing worth saving."]))
            .collect(),
    );
    env.mock.script_for_model(
        SUMMARY_MODEL,
        (0..12)
            .map(|n| {
                MockReply::text(&[&format!(
                    "## Goal\nLearn how the parser keeps state.\n## Completed actions\n{n}. READ big.txt and ran seq"
                )])
            })
            .collect(),
    );
    let (mut agent, session) = env.session().await;
    for n in 1..=10 {
        let ask = format!(
            "Step {n}: look again. {}",
            "Say how the parser keeps its state and what changes between steps. ".repeat(20)
        );
        let (response, _) = prompt(&mut agent, &session, &ask).await;
        assert_eq!(stop_reason(&response), "end_turn", "turn {n}: {response}");
    }
    // The reviews after turns 4 and 8 have run.
    assert!(
        env.mock
            .wait_until(WAIT, |requests| {
                requests
                    .iter()
                    .filter(|r| r.body["model"] == REVIEW_MODEL && r.completed)
                    .count()
                    >= 2
            })
            .await,
        "two reviews ran"
    );
    let requests = env.mock.requests();
    for (index, request) in requests.iter().enumerate() {
        let tokens = request_tokens(&request.body);
        eprintln!(
            "request {index}: {tokens} tokens ({})",
            request.body["model"]
        );
        assert!(
            tokens < WINDOW,
            "request {index} ({}) has {tokens} tokens",
            request.body["model"]
        );
    }
    let models: Vec<&str> = requests
        .iter()
        .filter_map(|r| r.body["model"].as_str())
        .collect();
    assert!(
        models.contains(&SUMMARY_MODEL),
        "compaction ran: {models:?}"
    );
    // The model read where the rest of the file and of the output are.
    let sent = everything_sent(&env.mock);
    assert!(sent.contains("call read_file with offset="), "file paging");
    assert!(
        sent.contains("Result too large for the context") && sent.contains("tool-results"),
        "command output stored"
    );
}

/// Waits for the session's title update, returning when it came.
async fn title_update(agent: &mut AgentProcess) -> (Value, Instant) {
    tokio::time::timeout(WAIT, async {
        loop {
            if let Some(update) = agent
                .updates()
                .into_iter()
                .find(|u| u["sessionUpdate"] == "session_info_update")
            {
                return (update, Instant::now());
            }
            agent.next_message().await;
        }
    })
    .await
    .expect("title")
}

#[tokio::test]
async fn a_slow_title_does_not_hold_up_the_next_prompt() {
    let mut env = TestEnv::new(vec![
        MockReply::text(&["first answer"]),
        MockReply::text(&["second answer"]),
    ])
    .await;
    env.extra_env.push(("TALARIA_TITLES".into(), "on".into()));
    env.write_config(&format!("[auxiliary.title]\nmodel = \"{TITLE_MODEL}\"\n"));
    env.mock.script_for_model(
        TITLE_MODEL,
        vec![MockReply::Delayed {
            delay_ms: 5_000,
            reply: Box::new(MockReply::text(&["Parser state"])),
        }],
    );
    let (mut agent, session) = env.session().await;
    prompt(&mut agent, &session, "how does the parser keep state?").await;
    assert!(
        env.mock
            .wait_until(WAIT, |r| r.iter().any(|r| r.body["model"] == TITLE_MODEL))
            .await,
        "the title was asked"
    );
    agent.drain_backlog();
    let sent = Instant::now();
    let id = agent
        .start_request("session/prompt", text_prompt(&session, "and then?"))
        .await
        .expect("prompt");
    let first_chunk = agent
        .wait_for(WAIT, |m| {
            m["params"]["update"]["sessionUpdate"] == "agent_message_chunk"
        })
        .await
        .expect("a chunk");
    let waited = sent.elapsed();
    assert_eq!(
        first_chunk["params"]["update"]["content"]["text"],
        "second answer"
    );
    let response = agent.wait_response(id, WAIT).await.expect("response");
    assert_eq!(stop_reason(&response), "end_turn");
    // The title call was still running: the prompt did not wait for it (its 5 s), and the
    // title still arrives afterwards.
    assert!(
        !agent
            .updates()
            .iter()
            .any(|u| u["sessionUpdate"] == "session_info_update"),
        "the title came first"
    );
    assert!(waited < Duration::from_secs(2), "waited {waited:?}");
    let (title, _) = title_update(&mut agent).await;
    assert_eq!(title["title"], "Parser state");
}

/// When each prompt was pending (sent until answered), by the test's clock.
struct Pending {
    from: Instant,
    to: Instant,
}

async fn timed_prompt(agent: &mut AgentProcess, session: &str, text: &str) -> Pending {
    let from = Instant::now();
    let (response, _) = prompt(agent, session, text).await;
    assert_eq!(stop_reason(&response), "end_turn", "{response}");
    Pending {
        from,
        to: Instant::now(),
    }
}

fn side_requests(requests: &[RecordedRequest]) -> Vec<&RecordedRequest> {
    requests
        .iter()
        .filter(|r| r.body["model"] == TITLE_MODEL || r.body["model"] == REVIEW_MODEL)
        .collect()
}

#[tokio::test]
async fn on_a_one_slot_server_side_work_waits_for_the_user_and_gives_way_to_a_prompt() {
    let slow = |text: &str| MockReply::Text {
        chunks: vec![text.into(), " done".into()],
        reasoning: Vec::new(),
        delay_ms: 300,
        usage: None,
        finish_reason: None,
    };
    let mut env = TestEnv::new(vec![slow("one"), slow("two"), slow("three")]).await;
    env.mock.serve_props(json!({"total_slots": 1}));
    env.extra_env.push(("TALARIA_TITLES".into(), "on".into()));
    env.write_config(&format!(
        "[learning]\nskill_review_after = 0\nmemory_review_after = 1\non_local_servers = true\n[auxiliary.title]\nmodel = \"{TITLE_MODEL}\"\n[auxiliary.review]\nmodel = \"{REVIEW_MODEL}\"\n"
    ));
    // The first title call is slow: the third prompt arrives while it runs.
    env.mock.script_for_model(
        TITLE_MODEL,
        vec![
            MockReply::Delayed {
                delay_ms: 10_000,
                reply: Box::new(MockReply::text(&["Too late"])),
            },
            MockReply::text(&["Parser state"]),
        ],
    );
    env.mock.script_for_model(
        REVIEW_MODEL,
        (0..10)
            .map(|_| MockReply::text(&["Nothing worth saving."]))
            .collect(),
    );
    let (mut agent, session) = env.session().await;
    let mut pending = vec![timed_prompt(&mut agent, &session, "first question").await];
    // Right away: the user is active, so no side work starts between the two prompts.
    pending.push(timed_prompt(&mut agent, &session, "second question").await);
    assert!(
        env.mock
            .wait_until(WAIT, |r| r.iter().any(|r| r.body["model"] == TITLE_MODEL))
            .await,
        "the title is asked once the user pauses: {}",
        agent.stderr()
    );
    // A prompt while the title call runs: the call is cancelled and asked again later.
    pending.push(timed_prompt(&mut agent, &session, "third question").await);
    assert!(
        env.mock
            .wait_until(WAIT, |r| {
                r.iter().filter(|r| r.body["model"] == TITLE_MODEL).count() == 2
            })
            .await,
        "the title is asked again"
    );
    let (title, _) = title_update(&mut agent).await;
    assert_eq!(title["title"], "Parser state");
    let requests = env.mock.requests();
    let side = side_requests(&requests);
    assert!(
        side.iter().any(|r| r.body["model"] == REVIEW_MODEL),
        "a review ran"
    );
    for request in &side {
        let at = request.received_at.expect("received");
        for prompt in &pending {
            assert!(
                at < prompt.from || at > prompt.to,
                "{} was sent while a prompt was pending",
                request.body["model"]
            );
        }
    }
    // The second title request came after the third prompt was answered: the first gave way.
    let titles: Vec<&&RecordedRequest> = side
        .iter()
        .filter(|r| r.body["model"] == TITLE_MODEL)
        .collect();
    assert!(titles[1].received_at.expect("received") > pending[2].to);
}

/// The raw body up to where the first user message begins.
fn through_instructions_and_tools(raw: &str) -> &str {
    let user = raw.find("{\"role\":\"user\"").expect("a user message");
    &raw[..user]
}

#[tokio::test]
async fn sessions_share_a_byte_identical_prefix_through_instructions_and_tool_schemas() {
    let env = TestEnv::new(vec![
        MockReply::text(&["a"]),
        MockReply::text(&["b"]),
        MockReply::text(&["c"]),
    ])
    .await;
    std::fs::write(env.workspace.path().join("notes.txt"), "x").expect("file");
    let other = tempfile::tempdir().expect("other project");
    std::fs::write(other.path().join("src.rs"), "fn main() {}").expect("file");
    let mut agent = env.spawn().await;
    agent
        .call("initialize", json!({"protocolVersion": 1}))
        .await
        .expect("initialize");
    let mut sessions = Vec::new();
    for cwd in [env.workspace.path(), env.workspace.path(), other.path()] {
        sessions.push(agent.start_session(cwd).await.expect("session"));
    }
    for (n, session) in sessions.iter().enumerate() {
        prompt(&mut agent, session, &format!("question {n}")).await;
    }
    let requests = env.mock.requests();
    let raws: Vec<&str> = requests.iter().map(|r| r.raw.as_str()).collect();
    let stable = through_instructions_and_tools(raws[0]);
    assert!(stable.contains("\"tools\":[") && stable.contains("\"role\":\"system\""));
    for (n, raw) in raws.iter().enumerate().skip(1) {
        assert_eq!(
            through_instructions_and_tools(raw),
            stable,
            "session {n} differs before its first user message"
        );
    }
    // What differs comes after: the environment, then the question.
    assert_ne!(
        environment_of(&requests[0].body),
        environment_of(&requests[2].body)
    );
    assert!(
        environment_of(&requests[0].body).contains(&env.workspace.path().display().to_string())
    );
}

#[tokio::test]
async fn of_two_fenced_calls_the_first_runs_as_asked_and_the_model_hears_of_the_second() {
    let plan = "I'll run the tests, then track the work.\n```\nterminal {\"command\": \"echo ran-first\"}\n```\n```\ntodo {\"todos\": [{\"id\": \"1\", \"content\": \"fix tests\", \"status\": \"pending\"}]}\n```";
    let env = TestEnv::new(vec![
        MockReply::text(&[plan]),
        MockReply::text(&["The tests ran."]),
    ])
    .await;
    let (mut agent, session) = env.session().await;
    let id = agent
        .start_request("session/prompt", text_prompt(&session, "run the tests"))
        .await
        .expect("prompt");
    let response = agent
        .drive(id, WAIT, |method, _| match method {
            "session/request_permission" => Ok(Some(
                json!({"outcome": {"outcome": "selected", "optionId": "allow_once"}}),
            )),
            other => Err((-32601, format!("unexpected {other}"))),
        })
        .await
        .expect("response");
    assert_eq!(stop_reason(&response), "end_turn");
    let asks = agent.agent_requests();
    assert_eq!(asks.len(), 1, "asked as usual, once: {asks:?}");
    assert!(
        asks[0].1["toolCall"].to_string().contains("echo ran-first"),
        "{asks:?}"
    );
    let results = tool_results(&env.mock, 1);
    assert_eq!(results.len(), 1, "{results:?}");
    assert!(results[0].contains("ran-first"), "{}", results[0]);
    assert!(
        results[0].contains("were not run") && results[0].contains("`todo`"),
        "{}",
        results[0]
    );
    // The second call never ran: no plan was made.
    assert!(
        !agent.updates().iter().any(|u| u["sessionUpdate"] == "plan"),
        "todo ran"
    );
}

#[tokio::test]
async fn a_call_of_a_missing_tool_gets_a_nudge_naming_the_tools_and_runs_nothing() {
    let env = TestEnv::new(vec![
        MockReply::text(&[
            "```json\n{\"name\": \"add\", \"arguments\": {\"a\": 5, \"b\": 3}}\n```",
        ]),
        MockReply::text(&["I will use patch."]),
    ])
    .await;
    let (mut agent, session) = env.session().await;
    let (response, updates) =
        prompt(&mut agent, &session, "add a function that adds two numbers").await;
    assert_eq!(stop_reason(&response), "end_turn");
    let requests = env.mock.requests();
    assert_eq!(requests.len(), 2, "nudged once");
    let nudge = last_user(&requests[1].body);
    assert!(nudge.contains("no `add` tool"), "{nudge}");
    for tool in CORE_TOOLS {
        assert!(nudge.contains(&format!("`{tool}`")), "{tool}: {nudge}");
    }
    assert!(nudge.contains("call `patch` or `write_file`"), "{nudge}");
    assert!(
        !updates.iter().any(|u| u["sessionUpdate"] == "tool_call"),
        "nothing ran: {updates:?}"
    );
    assert!(agent.agent_requests().is_empty(), "nothing asked");
}

fn parser_error() -> String {
    json!({"error": {"code": 500, "type": "server_error", "message":
        "The model produced output that does not match the expected peg-native format"}})
    .to_string()
}

#[tokio::test]
async fn a_parser_error_is_asked_again_without_native_tools_and_the_call_in_the_text_runs() {
    let chunk = |text: &str| {
        json!({"choices": [{"index": 0, "delta": {"content": text}, "finish_reason": null}]})
            .to_string()
    };
    let env = TestEnv::new(vec![
        // Prompt 1: the server refuses with its status line; the retry has no tools.
        MockReply::Error {
            status: 500,
            body: parser_error(),
            headers: Vec::new(),
        },
        MockReply::text(&[
            "Let me read it.\n<tool_call>\n{\"name\": \"read_file\", \"arguments\": {\"path\": \"main.py\"}}\n</tool_call>",
        ]),
        MockReply::text(&["main.py prints hello."]),
        // Prompt 2: the error arrives in the stream; the second in the session.
        MockReply::RawSse {
            data: vec![chunk("```json\n{\"name\": \"read_"), parser_error()],
        },
        MockReply::text(&["It prints hello, as said."]),
        // Prompt 3: from now on the tools are in the prompt.
        MockReply::text(&["Still hello."]),
    ])
    .await;
    std::fs::write(env.workspace.path().join("main.py"), "print('hello')\n").expect("file");
    let (mut agent, session) = env.session().await;
    let (response, updates) = prompt(&mut agent, &session, "What does main.py do?").await;
    assert_eq!(stop_reason(&response), "end_turn", "{response}");
    let requests = env.mock.requests();
    assert!(requests[0].body.get("tools").is_some(), "tools first");
    let retry = &requests[1].body;
    assert!(
        retry.get("tools").is_none(),
        "the retry has no tools: {retry}"
    );
    let system = retry["messages"][0]["content"].as_str().unwrap_or_default();
    assert!(system.contains("<tools>") && system.contains("\"name\": \"read_file\""));
    assert!(
        system.contains("<tool_call>"),
        "the call format is described"
    );
    // The call in the answer's text ran.
    let results = tool_results(&env.mock, 2);
    assert!(
        results.iter().any(|r| r.contains("print('hello')")),
        "{results:?}"
    );
    assert!(
        updates.iter().any(|u| u["sessionUpdate"] == "tool_call"),
        "the client saw the call"
    );
    // The chat is not told about the switch; the log is.
    let shown = serde_json::to_string(&updates).unwrap_or_default();
    assert!(!shown.contains("described in the prompt"), "{shown}");
    assert!(!shown.contains("peg-native"), "{shown}");
    let (response, _) = prompt(&mut agent, &session, "Sure?").await;
    assert_eq!(stop_reason(&response), "end_turn", "{response}");
    let (response, _) = prompt(&mut agent, &session, "Really?").await;
    assert_eq!(stop_reason(&response), "end_turn", "{response}");
    let requests = env.mock.requests();
    assert_eq!(requests.len(), 6);
    assert!(requests[3].body.get("tools").is_some());
    assert!(requests[4].body.get("tools").is_none());
    assert!(
        requests[5].body.get("tools").is_none(),
        "after two rejections the session stays without native tools"
    );
    // Earlier calls and results are text in that mode: no tool messages without tools.
    let roles: Vec<&str> = requests[5].body["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .filter_map(|m| m["role"].as_str())
        .collect();
    assert!(!roles.contains(&"tool"), "{roles:?}");
    assert!(requests[5].raw.contains("<tool_response>"));
    assert_eq!(
        agent
            .stderr()
            .matches("from now on its tools are described")
            .count(),
        1,
        "said once in the log"
    );
}
