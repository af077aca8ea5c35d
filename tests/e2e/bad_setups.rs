//! Bad set-ups, as new users make them, and exactly what they are told: one case per
//! mistake (a file, variables, a server), run through what users run (`talaria doctor`, an
//! editor's `session/new`, `talaria-chat -p`, `talaria setup`, a turn), with the one-line
//! message and its fix asserted word for word. `{config}`, `{home}` and `{mock}` stand for
//! the case's config file, TALARIA_HOME and the mock model's address.

use futures_util::StreamExt;
use serde_json::{Value, json};
use talaria_harness::{MockReply, binary::talaria_bin, binary::workspace_bin};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::support::*;

/// What the case runs.
#[derive(Clone, Copy)]
enum Run {
    /// `talaria doctor` (with `--call` when true).
    Doctor(bool),
    /// `talaria doctor` as the agent's unprivileged user (when the tests run as root).
    DoctorUnprivileged,
    /// An editor's `initialize` then `session/new`: what the JSON-RPC error says.
    SessionNew,
    /// `talaria-chat -p "go"` with standard input closed, in `ask` mode.
    ChatOneShot,
    /// `talaria setup` with standard input closed.
    SetupWithoutInput,
}

struct Case {
    name: &'static str,
    file: Option<&'static str>,
    env: &'static [(&'static str, &'static str)],
    /// Replies the mock model gives, in order.
    replies: fn() -> Vec<MockReply>,
    run: Run,
    /// Lines (or line fragments, in order of appearance) the user sees.
    said: &'static [&'static str],
    /// `{mock}` is a plain OpenAI-compatible server that answers only `/v1/models` (not the
    /// mock model, which answers every path and any model name as llama.cpp does).
    plain_server: bool,
}

fn none() -> Vec<MockReply> {
    Vec::new()
}

fn unauthorized() -> Vec<MockReply> {
    vec![MockReply::Error {
        status: 401,
        body:
            r#"{"error":{"message":"Incorrect API key provided","type":"invalid_request_error"}}"#
                .into(),
        headers: Vec::new(),
    }]
}

fn patch_that_cannot_apply() -> Vec<MockReply> {
    vec![
        batch(&[
            (
                "p1",
                "patch",
                json!({"path": "notes.txt", "old_string": "not in the file", "new_string": "x"}),
            ),
            (
                "p2",
                "patch",
                json!({"path": "missing.txt", "old_string": "a", "new_string": "b"}),
            ),
        ]),
        MockReply::text(&["done"]),
    ]
}

fn asks_to_write() -> Vec<MockReply> {
    vec![
        MockReply::tool_call(
            "w1",
            "write_file",
            json!({"path": "new.txt", "content": "x"}),
        ),
        MockReply::text(&["done"]),
    ]
}

const CASES: &[Case] = &[
    Case {
        name: "a mistyped key names the key it probably is",
        file: Some("modle = \"mock-model\"\n"),
        env: &[],
        replies: none,
        run: Run::Doctor(false),
        said: &[
            "✗ config key     {config}: unknown key `modle` ignored; did you mean `model`? (until it is renamed, the default applies)",
            "fix: rename the key as suggested",
        ],
        plain_server: false,
    },
    Case {
        name: "a mistyped key in a table",
        file: Some("[sandbox]\nnetwrok = false\n"),
        env: &[],
        replies: none,
        run: Run::Doctor(false),
        said: &["unknown key `sandbox.netwrok` ignored; did you mean `sandbox.network`?"],
        plain_server: false,
    },
    Case {
        name: "text where a number belongs",
        file: Some("max_turn_requests = \"ten\"\n"),
        env: &[],
        replies: none,
        run: Run::Doctor(false),
        said: &[
            "✗ config file    {config}, line 1, key `max_turn_requests`: a whole number (like 90) is expected, not the text \"ten\"",
            "fix: correct the file at the place named",
        ],
        plain_server: false,
    },
    Case {
        name: "a negative number where a count belongs",
        file: Some("[sandbox]\nmax_processes = -1\n"),
        env: &[],
        replies: none,
        run: Run::Doctor(false),
        said: &[
            "line 2, key `sandbox.max_processes`: a whole number (like 90) is expected, not the number `-1`",
        ],
        plain_server: false,
    },
    Case {
        name: "every problem of a file, not the first only",
        file: Some("max_turn_requests = \"ten\"\nmode = \"maybe\"\nmodels = \"gpt\"\n"),
        env: &[],
        replies: none,
        run: Run::Doctor(false),
        said: &[
            "✗ config file    3 problems in the configuration:",
            "line 1, key `max_turn_requests`: a whole number (like 90) is expected, not the text \"ten\"",
            "line 3, key `models`: a list (like [\"a\", \"b\"]) is expected, not the text \"gpt\"",
            "line 2: mode = \"maybe\": unknown mode; expected one of read-only, plan, ask, accept-edits, yolo",
            "fix: correct each place named",
        ],
        plain_server: false,
    },
    Case {
        name: "a file that is not TOML",
        file: Some("model = \"unclosed\n"),
        env: &[],
        replies: none,
        run: Run::Doctor(false),
        said: &["✗ config file    {config}, line 1, key `model`: invalid basic string"],
        plain_server: false,
    },
    Case {
        name: "a mistyped provider",
        file: Some("provider = \"openia\"\n"),
        env: &[],
        replies: none,
        run: Run::Doctor(false),
        said: &[
            "✗ config file    {config}, line 1: provider = \"openia\": unknown provider; did you mean \"openai\"? (expected \"openai\", \"anthropic\", \"openai-responses\" or \"demo\")",
        ],
        plain_server: false,
    },
    Case {
        name: "a variable's bad value is fixed where the variable is set",
        file: None,
        env: &[("TALARIA_CONTEXT_WINDOW", "abc")],
        replies: none,
        run: Run::Doctor(false),
        said: &[
            "✗ config file    environment: TALARIA_CONTEXT_WINDOW = \"abc\": TALARIA_CONTEXT_WINDOW must be a whole number of tokens",
            "fix: correct TALARIA_CONTEXT_WINDOW where it is set (your shell or the editor's agent settings), or unset it",
        ],
        plain_server: false,
    },
    Case {
        name: "an unknown provider in a variable",
        file: None,
        env: &[("TALARIA_PROVIDER", "anthropc")],
        replies: none,
        run: Run::Doctor(false),
        said: &[
            "environment: TALARIA_PROVIDER = \"anthropc\": unknown provider; did you mean \"anthropic\"?",
            "fix: correct TALARIA_PROVIDER where it is set",
        ],
        plain_server: false,
    },
    Case {
        name: "an address without http:// in a variable",
        file: None,
        env: &[("OPENAI_BASE_URL", "127.0.0.1:8080/v1")],
        replies: none,
        run: Run::Doctor(false),
        said: &[
            "✗ config file    environment: OPENAI_BASE_URL = \"127.0.0.1:8080/v1\": an address starting with http:// or https:// is expected (e.g. http://127.0.0.1:8080/v1)",
        ],
        plain_server: false,
    },
    Case {
        name: "an address without http:// in the file",
        file: Some("[openai]\nbase_url = \"api.example.com/v1\"\n"),
        env: &[("OPENAI_BASE_URL", "")],
        replies: none,
        run: Run::Doctor(false),
        said: &[
            "✗ config file    {config}, line 2: openai.base_url = \"api.example.com/v1\": an address starting with http:// or https:// is expected (e.g. https://api.example.com/v1)",
        ],
        plain_server: false,
    },
    Case {
        name: "an address without http:// fails the session at once, not the first prompt",
        file: None,
        env: &[("OPENAI_BASE_URL", "localhost:8080/v1")],
        replies: none,
        run: Run::SessionNew,
        said: &[
            "environment: OPENAI_BASE_URL = \"localhost:8080/v1\": an address starting with http:// or https:// is expected (e.g. http://localhost:8080/v1)",
        ],
        plain_server: false,
    },
    Case {
        name: "an address whose path lacks /v1",
        file: None,
        env: &[("OPENAI_BASE_URL", "{mock}")],
        replies: none,
        run: Run::Doctor(false),
        said: &[
            "✗ endpoint       nothing answers at {mock}/models (HTTP 404), but {mock}/v1/models does: the address's path is wrong",
            "fix: set base_url under [openai] / OPENAI_BASE_URL to {mock}/v1",
        ],
        plain_server: true,
    },
    Case {
        name: "a server that is not running",
        file: None,
        env: &[("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")],
        replies: none,
        run: Run::Doctor(false),
        said: &[
            "✗ endpoint       cannot connect to http://127.0.0.1:9/v1 (connection refused)",
            "fix: start the server, or set the right base_url under [openai] / OPENAI_BASE_URL",
        ],
        plain_server: false,
    },
    Case {
        name: "an Anthropic server that is not running names Anthropic's variable",
        file: None,
        env: &[
            ("TALARIA_PROVIDER", "anthropic"),
            ("ANTHROPIC_BASE_URL", "http://127.0.0.1:9"),
            ("ANTHROPIC_API_KEY", "k"),
        ],
        replies: none,
        run: Run::Doctor(false),
        said: &[
            "✗ endpoint       cannot connect to http://127.0.0.1:9 (connection refused)",
            "fix: start the server, or set the right base_url under [anthropic] / ANTHROPIC_BASE_URL",
        ],
        plain_server: false,
    },
    Case {
        name: "a host that does not exist",
        file: None,
        env: &[("OPENAI_BASE_URL", "http://no-such-host.invalid/v1")],
        replies: none,
        run: Run::Doctor(false),
        said: &[
            "✗ endpoint       cannot find the host of http://no-such-host.invalid/v1 (the name does not resolve)",
            "fix: correct the host name in base_url under [openai] / OPENAI_BASE_URL",
        ],
        plain_server: false,
    },
    Case {
        name: "a model the server does not serve",
        file: None,
        env: &[
            ("TALARIA_MODEL", "gpt-nope"),
            ("OPENAI_BASE_URL", "{mock}/v1"),
        ],
        replies: none,
        run: Run::Doctor(false),
        said: &[
            "✗ endpoint       reachable, but gpt-nope is not among its models (mock-model)",
            "fix: set model (or TALARIA_MODEL) to one of those",
        ],
        plain_server: true,
    },
    Case {
        name: "a key the server refuses",
        file: None,
        env: &[],
        replies: unauthorized,
        run: Run::Doctor(true),
        said: &[
            "✗ test call",
            "401",
            "fix: check OPENAI_API_KEY or api_key under [openai] in {config}",
        ],
        plain_server: false,
    },
    Case {
        name: "no key for a hosted provider",
        file: None,
        env: &[("OPENAI_API_KEY", ""), ("OPENAI_BASE_URL", "")],
        replies: none,
        run: Run::SessionNew,
        said: &[
            "Authentication required: no API key for the openai provider; run `talaria setup` in a terminal",
            "no API key for the openai provider: set OPENAI_API_KEY",
            "authenticate with \"talaria-setup\" (runs `talaria setup` in a terminal",
        ],
        plain_server: false,
    },
    Case {
        name: "a home nobody may write to",
        file: None,
        env: &[],
        replies: none,
        run: Run::DoctorUnprivileged,
        said: &[
            "✗ session store  {home} cannot be written (Permission denied): sessions, skills and memory would not be saved",
            "fix: make it writable, or set TALARIA_HOME to a folder you can write",
        ],
        plain_server: false,
    },
    Case {
        name: "talaria-chat with nobody to answer a question",
        file: Some("model = \"mock-model\"\n"),
        env: &[],
        replies: asks_to_write,
        run: Run::ChatOneShot,
        said: &[
            "! Nobody could be asked to allow",
            "standard input is closed, so it and every later question are declined. Pass --approve once (or always) to allow calls without asking, --approve reject to decline them.",
        ],
        plain_server: false,
    },
    Case {
        name: "an edit that cannot apply fails without asking",
        file: Some("model = \"mock-model\"\n"),
        env: &[],
        replies: patch_that_cannot_apply,
        run: Run::ChatOneShot,
        said: &["done"],
        plain_server: false,
    },
    Case {
        name: "setup without a terminal writes nothing",
        file: None,
        env: &[],
        replies: none,
        run: Run::SetupWithoutInput,
        said: &["talaria setup: the input ended before the set-up was done; nothing was written"],
        plain_server: false,
    },
];

/// A server that answers only `/v1/models` (an OpenAI-compatible server, addressed without
/// its `/v1`); everything else is 404.
async fn v1_only_server() -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let address = listener.local_addr().expect("address");
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut buf = vec![0u8; 4096];
                let n = stream.read(&mut buf).await.unwrap_or(0);
                let request = String::from_utf8_lossy(&buf[..n]);
                let path = request.split_whitespace().nth(1).unwrap_or("/");
                let (status, body) = if path == "/v1/models" {
                    (
                        "200 OK",
                        r#"{"object":"list","data":[{"id":"mock-model"}]}"#,
                    )
                } else {
                    ("404 Not Found", "{}")
                };
                let response = format!(
                    "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = stream.write_all(response.as_bytes()).await;
            });
        }
    });
    format!("http://{address}")
}

/// The case's environment: the usual one with the case's variables over it, `{mock}` filled.
fn case_env(env: &TestEnv, case: &Case, mock: &str) -> Vec<(String, String)> {
    let mut vars = env.env();
    for (name, value) in case.env {
        vars.retain(|(n, _)| n != name);
        let value = value.replace("{mock}", mock);
        if !value.is_empty() || *name == "TALARIA_CONTEXT_WINDOW" {
            vars.push(((*name).to_string(), value));
        }
    }
    vars
}

async fn output_of(mut command: tokio::process::Command) -> String {
    command
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true);
    let output = tokio::time::timeout(WAIT, command.output())
        .await
        .expect("finishes")
        .expect("runs");
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

fn command(program: &std::path::Path, vars: &[(String, String)]) -> tokio::process::Command {
    let mut command = tokio::process::Command::new(program);
    command
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .envs(vars.iter().cloned());
    command
}

async fn run_case(case: &Case) -> (String, TestEnv, String) {
    let env = TestEnv::new((case.replies)()).await;
    let mock = if case.plain_server {
        v1_only_server().await
    } else {
        env.mock.base_url()
    };
    if let Some(text) = case.file {
        env.write_config(text);
    }
    let vars = case_env(&env, case, &mock);
    let said = match case.run {
        Run::Doctor(call) => {
            let mut doctor = command(&talaria_bin(), &vars);
            doctor.arg("doctor");
            if call {
                doctor.arg("--call");
            }
            output_of(doctor).await
        }
        Run::DoctorUnprivileged => {
            let home = env.home.path().join("talaria");
            std::fs::create_dir_all(&home).expect("home");
            let mut doctor = command(&talaria_bin(), &vars);
            doctor.arg("doctor");
            if running_as_root() {
                give_to(env.home.path(), NOBODY);
                doctor.uid(NOBODY.0).gid(NOBODY.1);
            }
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&home, std::fs::Permissions::from_mode(0o555)).expect("chmod");
            output_of(doctor).await
        }
        Run::SessionNew => {
            let mut agent = talaria_harness::AgentProcess::spawn(
                &talaria_bin(),
                &["acp"],
                &vars,
                talaria_harness::WireFraming::NewlineDelimited,
            )
            .await
            .expect("agent");
            agent
                .call("initialize", json!({"protocolVersion": 1}))
                .await
                .expect("initialize");
            let answer: Value = agent
                .request(
                    "session/new",
                    json!({"cwd": env.workspace.path(), "mcpServers": []}),
                )
                .await
                .expect("answer");
            // The short message, then the detail clients with room show.
            format!(
                "{}\n{}",
                answer["error"]["message"].as_str().unwrap_or_default(),
                answer["error"]["data"]["talaria"]["detail"]
                    .as_str()
                    .unwrap_or_default()
            )
        }
        Run::ChatOneShot => {
            std::fs::write(env.workspace.path().join("notes.txt"), "the text\n").expect("file");
            let mut chat = command(&workspace_bin("talaria-chat", "talaria-chat"), &vars);
            chat.args(["--agent"])
                .arg(talaria_bin())
                .args(["--agent-arg", "acp", "--cwd"])
                .arg(env.workspace.path())
                .args(["-p", "go"]);
            output_of(chat).await
        }
        Run::SetupWithoutInput => {
            let mut setup = command(&talaria_bin(), &vars);
            setup.arg("setup");
            output_of(setup).await
        }
    };
    (said, env, mock)
}

#[tokio::test]
async fn each_bad_setup_is_told_in_one_line_with_its_fix() {
    assert!(CASES.len() >= 20, "{} cases", CASES.len());
    let mut failures = Vec::new();
    // Four cases at a time (each has its own home, mock and processes; many wait on a
    // timeout), checked in order.
    let outcomes: Vec<_> = futures_util::stream::iter(CASES)
        .map(|case| async move { (case, run_case(case).await) })
        .buffered(4)
        .collect()
        .await;
    for (case, (said, env, mock)) in outcomes {
        let config = env.home.path().join("talaria/config.toml");
        let home = env.home.path().join("talaria");
        let mut from = 0;
        for expected in case.said {
            let expected = expected
                .replace("{config}", &config.display().to_string())
                .replace("{home}", &home.display().to_string())
                .replace("{mock}", &mock);
            match said[from..].find(&expected) {
                Some(at) => from += at + expected.len(),
                None => failures.push(format!("{}: expected {expected:?} in:\n{said}", case.name)),
            }
        }
        if case.name.contains("fails without asking") {
            // Neither edit asked; the model read why each failed.
            assert!(
                !said.contains("Allow") && !said.contains("Nobody could be asked"),
                "{}: asked:\n{said}",
                case.name
            );
            let results = tool_results(&env.mock, 1);
            assert!(
                results
                    .iter()
                    .any(|r| r.contains("not found") || r.contains("could not find")),
                "{results:#?}"
            );
            assert!(
                results.iter().any(|r| r.contains("does not exist")),
                "{results:#?}"
            );
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}
