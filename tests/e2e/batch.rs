//! `talaria batch` end to end: a dataset run against the scripted mock (each task's
//! conversation scripted by a marker in its prompt, since parallel tasks interleave), every
//! output file checked; a run killed with SIGKILL and resumed; a recorded batch replayed
//! with no model; bad lines named by their line numbers while the rest runs.

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};
use talaria_harness::MockReply;
use talaria_harness::binary::talaria_bin;

use crate::support::*;

/// Runs `talaria batch ARGS` with the env's variables, as its user; its exit code and stderr.
pub(crate) async fn batch_run(env: &TestEnv, args: &[&str]) -> (Option<i32>, String) {
    let mut command = tokio::process::Command::new(talaria_bin());
    if let Some((uid, gid)) = env.user {
        command.uid(uid).gid(gid);
    }
    let output = command
        .arg("batch")
        .args(args)
        .env_clear()
        .envs(env.env())
        .output()
        .await
        .expect("talaria batch ran");
    assert!(output.stdout.is_empty(), "stdout stays empty: {output:?}");
    (
        output.status.code(),
        String::from_utf8_lossy(&output.stderr).to_string(),
    )
}

pub(crate) fn write_lines(path: &Path, lines: &[Value]) {
    let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
    std::fs::write(path, text).expect("dataset");
}

pub(crate) fn results(out: &Path) -> HashMap<String, Value> {
    let text = std::fs::read_to_string(out.join("results.jsonl")).expect("results.jsonl");
    let mut by_id = HashMap::new();
    for line in text.lines() {
        let result: Value = serde_json::from_str(line).expect("a whole JSON line");
        let id = result["id"].as_str().expect("id").to_string();
        assert!(by_id.insert(id.clone(), result).is_none(), "{id} twice");
    }
    by_id
}

pub(crate) fn trajectory(out: &Path, id: &str) -> Value {
    let path = out.join("trajectories").join(format!("{id}.json"));
    serde_json::from_str(&std::fs::read_to_string(&path).expect("trajectory")).expect("json")
}

/// The last request the mock received for the conversation marked `marker`.
fn last_request_for(env: &TestEnv, marker: &str) -> Value {
    env.mock
        .requests()
        .into_iter()
        .rfind(|r| r.body["messages"].to_string().contains(marker))
        .expect("a request for the task")
        .body
}

/// The fifty tasks: answers, tool calls, a failing check, a timeout, a failing setup, a
/// repository copied afresh, a system prompt and a cap on model calls.
fn fifty_tasks(env: &TestEnv, repo: &Path) -> Vec<Value> {
    let mut tasks = Vec::new();
    for n in 0..40 {
        let marker = format!("[task a{n:02}]");
        env.mock
            .script_for_prompt(&marker, vec![MockReply::text(&["answer ", &n.to_string()])]);
        tasks.push(
            json!({"id": format!("a{n:02}"), "prompt": format!("{marker} say hi"),
                          "metadata": {"n": n}}),
        );
    }
    for n in 0..5 {
        let marker = format!("[task w{n}]");
        env.mock.script_for_prompt(
            &marker,
            vec![
                batch(&[(
                    "c1",
                    "write_file",
                    json!({"path": "made.txt", "content": "hi\n"}),
                )]),
                MockReply::text(&["written"]),
            ],
        );
        tasks.push(
            json!({"id": format!("w{n}"), "prompt": format!("{marker} write"),
                          "check": "grep -q hi made.txt"}),
        );
    }
    env.mock
        .script_for_prompt("[task bad-check]", vec![MockReply::text(&["sure"])]);
    // Its mode and model are set on the session (an unknown one would fail the task).
    tasks.push(
        json!({"id": "bad-check", "prompt": "[task bad-check] go", "check": "exit 4",
                      "mode": "read-only", "model": "mock-model"}),
    );
    env.mock.script_for_prompt(
        "[task slow]",
        vec![MockReply::Hang {
            chunks: vec!["thinking".into()],
        }],
    );
    tasks.push(json!({"id": "slow", "prompt": "[task slow] go", "timeout_s": 1.0}));
    tasks.push(
        json!({"id": "no-setup", "prompt": "[task no-setup] never asked",
                      "setup": "echo broken >&2; exit 3"}),
    );
    env.mock
        .script_for_prompt("[task repo]", vec![MockReply::text(&["seen"])]);
    tasks.push(
        json!({"id": "repo", "prompt": "[task repo] look", "repo": repo,
                      "setup": "test -f seed.txt && touch set-up.txt",
                      "check": "test -f set-up.txt && test -f seed.txt"}),
    );
    env.mock.script_for_prompt(
        "[task capped]",
        vec![
            batch(&[("r1", "read_file", json!({"path": "x.txt"}))]),
            batch(&[("r2", "read_file", json!({"path": "y.txt"}))]),
        ],
    );
    tasks.push(
        json!({"id": "capped", "prompt": "[task capped] read", "max_turns": 2,
                      "system_prompt": "Answer like a pirate."}),
    );
    tasks
}

#[tokio::test]
async fn fifty_tasks_in_parallel_write_every_output_and_bad_lines_are_named_by_number() {
    let env = TestEnv::new(vec![]).await;
    let dir = tempfile::tempdir().expect("dir");
    let repo = dir.path().join("repo");
    std::fs::create_dir(&repo).expect("repo");
    std::fs::write(repo.join("seed.txt"), "seed").expect("seed");
    let mut lines = fifty_tasks(&env, &repo);
    assert_eq!(lines.len(), 50);
    // Bad lines among them: lines 51–54.
    lines.push(json!({"id": "a00", "prompt": "a duplicate"}));
    lines.push(json!({"id": "odd", "prompt": "x", "colour": "red"}));
    lines.push(json!({"id": "gone", "prompt": "x", "repo": "no/such/dir"}));
    let dataset = dir.path().join("tasks.jsonl");
    write_lines(&dataset, &lines);
    let mut text = std::fs::read_to_string(&dataset).expect("read");
    text.push_str("{this is not json\n");
    std::fs::write(&dataset, text).expect("write");
    let out = dir.path().join("out");
    let (code, said) = batch_run(
        &env,
        &[
            dataset.to_str().expect("utf-8"),
            "--out",
            out.to_str().expect("utf-8"),
            "--parallel",
            "8",
            "--approve",
            "once",
        ],
    )
    .await;
    assert_eq!(code, Some(0), "{said}");
    for line in [
        "line 51: duplicate id",
        "line 52: not a task",
        "line 53: repo",
        "line 54: not a task",
    ] {
        assert!(said.contains(line), "stderr names {line}: {said}");
    }
    let results = results(&out);
    assert_eq!(results.len(), 50);
    let verdict = |id: &str| {
        results[id]["verdict"]
            .as_str()
            .expect("verdict")
            .to_string()
    };
    for n in 0..40 {
        let id = format!("a{n:02}");
        assert_eq!(verdict(&id), "done");
        assert_eq!(results[&id]["metadata"]["n"], n);
        assert_eq!(results[&id]["stop_reason"], "end_turn");
        assert_eq!(results[&id]["model_calls"], 1);
    }
    for n in 0..5 {
        let id = format!("w{n}");
        assert_eq!(verdict(&id), "pass", "{}", results[&id]);
        assert_eq!(results[&id]["tool_calls"], 1);
        assert_eq!(results[&id]["model_calls"], 2);
    }
    assert_eq!(verdict("bad-check"), "fail");
    assert_eq!(results["bad-check"]["check_exit"], 4);
    assert_eq!(verdict("slow"), "timeout");
    assert_eq!(verdict("no-setup"), "setup_failed");
    assert!(
        results["no-setup"]["error"]
            .as_str()
            .expect("why")
            .contains("broken")
    );
    assert_eq!(verdict("repo"), "pass", "{}", results["repo"]);
    assert!(
        !repo.join("set-up.txt").exists(),
        "the repository itself is untouched"
    );
    assert_eq!(results["capped"]["stop_reason"], "max_turn_requests");
    assert_eq!(results["capped"]["model_calls"], 2);
    // Nothing asked the model for the task whose setup failed.
    assert!(
        !env.mock
            .requests()
            .iter()
            .any(|r| r.body.to_string().contains("[task no-setup]"))
    );
    assert_trajectories(&env, &out);
    let problems = std::fs::read_to_string(out.join("problems.jsonl")).expect("problems");
    let numbers: Vec<u64> = problems
        .lines()
        .map(|l| {
            serde_json::from_str::<Value>(l).expect("json")["line"]
                .as_u64()
                .expect("n")
        })
        .collect();
    assert_eq!(numbers, [51, 52, 53, 54]);
    let summary = std::fs::read_to_string(out.join("summary.md")).expect("summary");
    for row in [
        "| tasks finished | 50 |",
        "| pass | 6 |",
        "| fail | 1 |",
        "| timeout | 1 |",
        "| setup failed | 1 |",
        "| bad dataset lines | 4 |",
    ] {
        assert!(summary.contains(row), "{row} in {summary}");
    }
    assert_session_loads(
        &env,
        results["a07"]["session_id"].as_str().expect("id"),
        "answer 7",
    )
    .await;
}

/// A trajectory's messages are those of the last request the model got, its answer after.
fn assert_trajectories(env: &TestEnv, out: &Path) {
    for (id, marker, answer) in [
        ("a03", "[task a03]", "answer 3"),
        ("w2", "[task w2]", "written"),
    ] {
        let kept = trajectory(out, id);
        assert_eq!(kept["format"], "talaria-trajectory/1");
        let sent = last_request_for(env, marker);
        let messages = kept["messages"].as_array().expect("messages");
        let (answered, seen) = messages.split_last().expect("an answer");
        assert_eq!(
            seen,
            sent["messages"].as_array().expect("sent").as_slice(),
            "{id}"
        );
        assert_eq!(answered["role"], "assistant");
        assert_eq!(answered["content"], answer);
        assert_eq!(kept["tools"], sent["tools"]);
        assert_eq!(kept["task"]["id"], id);
    }
    let pirate = last_request_for(env, "[task capped]");
    assert!(
        pirate["messages"][0]["content"]
            .to_string()
            .contains("Answer like a pirate.")
    );
}

/// The task's session opens in an agent on the same home, its answer replayed.
async fn assert_session_loads(env: &TestEnv, session: &str, answer: &str) {
    let mut agent = initialized(env).await;
    let params = json!({"sessionId": session, "cwd": env.workspace.path(), "mcpServers": []});
    agent.request("session/load", params).await.expect("loaded");
    let replayed = chunks(&agent.updates(), "agent_message_chunk").join("");
    assert!(replayed.contains(answer), "{replayed}");
}

#[tokio::test]
async fn a_run_killed_mid_batch_resumes_with_no_task_lost_or_doubled() {
    let env = TestEnv::new(vec![]).await;
    let dir = tempfile::tempdir().expect("dir");
    let mut lines = Vec::new();
    for n in 0..20 {
        let marker = format!("[task k{n:02}]");
        // Twice: a task running when the kill came is asked again.
        let slow = || MockReply::Delayed {
            delay_ms: 150,
            reply: Box::new(MockReply::text(&["done ", &n.to_string()])),
        };
        env.mock.script_for_prompt(&marker, vec![slow(), slow()]);
        lines.push(json!({"id": format!("k{n:02}"), "prompt": format!("{marker} go")}));
    }
    let dataset = dir.path().join("tasks.jsonl");
    write_lines(&dataset, &lines);
    let out = dir.path().join("out");
    let args = [
        dataset.to_str().expect("utf-8"),
        "--out",
        out.to_str().expect("utf-8"),
        "--parallel",
        "4",
    ];
    let mut child = tokio::process::Command::new(talaria_bin())
        .arg("batch")
        .args(args)
        .env_clear()
        .envs(env.env())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("batch");
    let results_path = out.join("results.jsonl");
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let done = std::fs::read_to_string(&results_path).map_or(0, |t| t.lines().count());
        if done >= 6 {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "no progress");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let pid = child.id().expect("pid");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(i32::try_from(pid).expect("pid")),
        nix::sys::signal::Signal::SIGKILL,
    )
    .expect("killed");
    let _ = child.wait().await;
    let before: HashSet<String> = results(&out).into_keys().collect();
    assert!(before.len() < 20, "killed mid-run");
    let (code, said) = batch_run(&env, &args).await;
    assert_eq!(
        code,
        Some(2),
        "a folder with results is not overwritten: {said}"
    );
    assert!(said.contains("--resume"), "{said}");
    let mut resumed = args.to_vec();
    resumed.push("--resume");
    let (code, said) = batch_run(&env, &resumed).await;
    assert_eq!(code, Some(0), "{said}");
    let after = results(&out);
    assert_eq!(after.len(), 20, "every task once");
    for (id, result) in &after {
        assert_eq!(result["verdict"], "done", "{id}");
    }
    // The tasks finished before the kill were not asked again.
    for id in &before {
        let marker = format!("[task {id}]");
        let asked = env
            .mock
            .requests()
            .iter()
            .filter(|r| r.body["messages"].to_string().contains(&marker))
            .count();
        assert_eq!(asked, 1, "{id} ran once");
    }
}

#[tokio::test]
async fn a_recorded_batch_replays_with_no_model_and_the_same_outputs() {
    let env = TestEnv::new(vec![]).await;
    let dir = tempfile::tempdir().expect("dir");
    let mut lines = Vec::new();
    for n in 0..3 {
        let marker = format!("[task r{n}]");
        env.mock.script_for_prompt(
            &marker,
            vec![
                batch(&[(
                    "c1",
                    "write_file",
                    json!({"path": "f.txt", "content": format!("{n}\n")}),
                )]),
                MockReply::text(&["wrote ", &n.to_string()]),
            ],
        );
        lines.push(
            json!({"id": format!("r{n}"), "prompt": format!("{marker} write"),
                          "check": format!("grep -q {n} f.txt")}),
        );
    }
    let dataset = dir.path().join("tasks.jsonl");
    write_lines(&dataset, &lines);
    let recorded = dir.path().join("recorded");
    let (code, said) = batch_run(
        &env,
        &[
            dataset.to_str().expect("utf-8"),
            "--out",
            recorded.to_str().expect("utf-8"),
            "--record",
            "--approve",
            "always",
        ],
    )
    .await;
    assert_eq!(code, Some(0), "{said}");
    let asked = env.mock.requests().len();
    // No model: the endpoint goes nowhere.
    let mut offline = TestEnv::new(vec![]).await;
    offline
        .extra_env
        .push(("OPENAI_BASE_URL".into(), "http://127.0.0.1:9/v1".into()));
    let replayed = dir.path().join("replayed");
    let (code, said) = batch_run(
        &offline,
        &[
            dataset.to_str().expect("utf-8"),
            "--out",
            replayed.to_str().expect("utf-8"),
            "--replay",
            recorded.to_str().expect("utf-8"),
            "--approve",
            "always",
            "--format",
            "sharegpt",
        ],
    )
    .await;
    assert_eq!(code, Some(0), "{said}");
    assert_eq!(
        env.mock.requests().len(),
        asked,
        "the replay asked no model"
    );
    assert!(offline.mock.requests().is_empty());
    let (first, second) = (results(&recorded), results(&replayed));
    for n in 0..3 {
        let id = format!("r{n}");
        assert_eq!(first[&id]["verdict"], "pass");
        assert_eq!(second[&id]["verdict"], "pass", "{}", second[&id]);
        assert_eq!(first[&id]["model_calls"], second[&id]["model_calls"]);
        let shared = trajectory(&replayed, &id);
        let turns = shared["conversations"].as_array().expect("sharegpt");
        assert_eq!(turns.last().expect("answer")["value"], format!("wrote {n}"));
        assert!(turns.iter().any(|t| t["from"] == "tool"));
    }
}

#[tokio::test]
async fn a_rust_harness_runs_a_dataset_in_its_own_process_with_the_same_runner() {
    let env = TestEnv::new(vec![]).await;
    let dir = tempfile::tempdir().expect("dir");
    let mut text = String::new();
    for n in 0..3 {
        let marker = format!("[task h{n}]");
        env.mock.script_for_prompt(
            &marker,
            vec![
                batch(&[(
                    "c1",
                    "terminal",
                    json!({"command": format!("echo {n} > out.txt")}),
                )]),
                MockReply::text(&["ran ", &n.to_string()]),
            ],
        );
        let task = json!({"id": format!("h{n}"), "prompt": format!("{marker} run"),
                          "check": format!("grep -qx {n} out.txt")});
        text.push_str(&format!("{task}\n"));
    }
    let out = dir.path().join("out");
    let results = talaria_harness::batch::run(talaria_harness::batch::BatchRun {
        agent: &talaria_bin(),
        args: &["acp"],
        env: &env.env(),
        tasks: &text,
        base: dir.path(),
        out: &out,
        parallel: 3,
        approve: talaria_harness::batch::Approve::Once,
        resume: false,
    })
    .await
    .expect("the batch ran");
    assert_eq!(results.len(), 3);
    for result in &results {
        assert_eq!(
            result.verdict,
            talaria_harness::batch::Verdict::Pass,
            "{result:?}"
        );
        assert_eq!(result.tool_calls, 1);
    }
    let kept = talaria_harness::batch::trajectory(&out, "h1").expect("trajectory");
    let last = kept["messages"]
        .as_array()
        .and_then(|m| m.last())
        .expect("answer");
    assert_eq!(last["content"], "ran 1");
    let sent = last_request_for(&env, "[task h1]");
    assert_eq!(
        kept["messages"].as_array().map(Vec::len),
        sent["messages"].as_array().map(|m| m.len() + 1)
    );
}

#[tokio::test]
async fn setup_and_check_run_in_the_sessions_sandbox_on_a_home_with_credentials_and_sockets() {
    if !sandbox_enforced() {
        return;
    }
    const SECRET: &str = "BATCH-HOME-SECRET-4471";
    let mut env = TestEnv::new(vec![]).await;
    for store in [".netrc", ".pgpass"] {
        std::fs::write(env.home.path().join(store), format!("{SECRET}\n")).expect("store");
    }
    let outside = tempfile::tempdir().expect("outside");
    let socket = outside.path().join("agent.sock");
    crate::sandbox_doors::greeter(std::os::unix::net::UnixListener::bind(&socket).expect("bind"));
    let connect = format!(
        "/usr/bin/python3 -c \"import socket; s = socket.socket(socket.AF_UNIX); s.connect('{}'); print(s.recv(64).decode())\"",
        socket.display()
    );
    // A glob, as a script would write it: nothing can name the file before it runs.
    let probe = |into: &str| {
        format!("{{ cat ~/.[n]etrc ~/.[p]gpass; {connect}; }} > {into} 2>&1; echo ran >> {into}")
    };
    env.mock
        .script_for_prompt("[task home]", vec![MockReply::text(&["ok"])]);
    let dir = tempfile::tempdir().expect("dir");
    let dataset = dir.path().join("tasks.jsonl");
    let workspace = env.workspace.path().to_str().expect("utf-8").to_string();
    write_lines(
        &dataset,
        &[
            json!({"id": "home", "prompt": "[task home] go", "workspace": workspace,
                 "setup": probe("setup-saw.txt"),
                 "check": format!("{}; test -f setup-saw.txt", probe("check-saw.txt"))}),
        ],
    );
    let out = dir.path().join("out");
    env.unprivileged(&[outside.path(), dir.path()]);
    let (code, said) = batch_run(
        &env,
        &[
            dataset.to_str().expect("utf-8"),
            "--out",
            out.to_str().expect("utf-8"),
        ],
    )
    .await;
    assert_eq!(code, Some(0), "{said}");
    // The credential files in the home break neither command.
    assert_eq!(results(&out)["home"]["verdict"], "pass", "{said}");
    for seen in ["setup-saw.txt", "check-saw.txt"] {
        let text = std::fs::read_to_string(env.workspace.path().join(seen)).expect(seen);
        assert!(text.ends_with("ran\n"), "{seen}: {text}");
        assert!(!text.contains(SECRET), "{seen} read a credential: {text}");
        assert!(
            !text.contains("HELLO-FROM-OUTSIDE"),
            "{seen} reached a socket outside: {text}"
        );
    }
}

#[tokio::test]
async fn without_parallel_a_local_server_runs_as_many_tasks_at_once_as_it_has_slots() {
    let env = TestEnv::new(vec![]).await;
    env.mock.serve_props(json!({"total_slots": 2}));
    let dir = tempfile::tempdir().expect("dir");
    let mut lines = Vec::new();
    for n in 0..6 {
        let marker = format!("[task s{n}]");
        let answer = MockReply::Delayed {
            delay_ms: 400,
            reply: Box::new(MockReply::text(&["done"])),
        };
        env.mock.script_for_prompt(&marker, vec![answer]);
        lines.push(json!({"id": format!("s{n}"), "prompt": format!("{marker} go")}));
    }
    let dataset = dir.path().join("tasks.jsonl");
    write_lines(&dataset, &lines);
    let out = dir.path().join("out");
    let (code, said) = batch_run(
        &env,
        &[
            dataset.to_str().expect("utf-8"),
            "--out",
            out.to_str().expect("utf-8"),
        ],
    )
    .await;
    assert_eq!(code, Some(0), "{said}");
    assert!(said.contains("--parallel 2"), "{said}");
    assert!(results(&out).values().all(|r| r["verdict"] == "done"));
    // Never more than two model calls under way: each takes 400 ms, so no three begin
    // within 300 ms of each other.
    let mut began: Vec<_> = env
        .mock
        .requests()
        .into_iter()
        .filter(|r| r.path.ends_with("/chat/completions"))
        .filter_map(|r| r.received_at)
        .collect();
    began.sort();
    assert_eq!(began.len(), 6);
    for three in began.windows(3) {
        assert!(
            three[2] - three[0] >= Duration::from_millis(300),
            "three calls at once: {three:?}"
        );
    }
}

/// Runs a one-task dataset `task` into a fresh folder; the folder, exit code and stderr.
async fn run_one(
    env: &TestEnv,
    dir: &Path,
    name: &str,
    task: Value,
) -> (std::path::PathBuf, Option<i32>, String) {
    let dataset = dir.join(format!("{name}.jsonl"));
    write_lines(&dataset, &[task]);
    let out = dir.join(format!("out-{name}"));
    let (code, said) = batch_run(
        env,
        &[
            dataset.to_str().expect("utf-8"),
            "--out",
            out.to_str().expect("utf-8"),
        ],
    )
    .await;
    (out, code, said)
}

#[tokio::test]
async fn every_kind_of_task_gets_every_output_and_an_output_not_written_fails_the_run() {
    let env = TestEnv::new(vec![]).await;
    let dir = tempfile::tempdir().expect("dir");
    let repo = dir.path().join("repo");
    std::fs::create_dir(&repo).expect("repo");
    std::fs::write(repo.join("seed.txt"), "seed").expect("seed");
    let workspace = env.workspace.path().to_path_buf();
    // A dataset of one kind of task each: a `repo`, a `workspace`, neither.
    let kinds = [
        ("repo", json!({"repo": repo})),
        ("workspace", json!({"workspace": workspace})),
        ("neither", json!({})),
    ];
    for (kind, place) in kinds {
        let marker = format!("[task {kind}]");
        env.mock
            .script_for_prompt(&marker, vec![MockReply::text(&["kept ", kind])]);
        let mut task = json!({"id": kind, "prompt": format!("{marker} go")});
        for (key, value) in place.as_object().expect("object") {
            task[key] = value.clone();
        }
        let (out, code, said) = run_one(&env, dir.path(), kind, task).await;
        assert_eq!(code, Some(0), "{kind}: {said}");
        assert_eq!(results(&out)[kind]["verdict"], "done", "{kind}");
        let kept = trajectory(&out, kind);
        let (answer, _) = kept["messages"]
            .as_array()
            .expect("messages")
            .split_last()
            .expect("an answer");
        assert_eq!(answer["content"], format!("kept {kind}"), "{kind}");
        let summary = std::fs::read_to_string(out.join("summary.md")).expect("summary");
        assert!(
            summary.contains("| tasks with outputs not written | 0 |"),
            "{kind}: {summary}"
        );
        assert!(
            !out.join(".work").exists(),
            "{kind}: the work folder is gone"
        );
    }
    // A trajectory the folder cannot take: the result still lands, and the summary and the
    // exit code say what was not written.
    env.mock
        .script_for_prompt("[task blocked]", vec![MockReply::text(&["answered"])]);
    let out = dir.path().join("out-blocked");
    let taken = out.join("trajectories/blocked.json");
    std::fs::create_dir_all(taken.join("in-the-way")).expect("a folder in the way");
    let task = json!({"id": "blocked", "prompt": "[task blocked] go", "workspace": workspace});
    let (out, code, said) = run_one(&env, dir.path(), "blocked", task).await;
    assert_eq!(code, Some(3), "{said}");
    assert!(said.contains("could not be written"), "{said}");
    let result = &results(&out)["blocked"];
    assert_eq!(result["verdict"], "done", "{result}");
    assert!(
        result["unwritten"][0]
            .as_str()
            .is_some_and(|why| why.starts_with("trajectory:")),
        "{result}"
    );
    let summary = std::fs::read_to_string(out.join("summary.md")).expect("summary");
    assert!(
        summary.contains("| tasks with outputs not written | 1 |")
            && summary.contains("## Outputs not written")
            && summary.contains("| blocked | trajectory:"),
        "{summary}"
    );
}

#[tokio::test]
async fn sigterm_marks_the_running_tasks_interrupted_and_resume_runs_them_again() {
    let env = TestEnv::new(vec![]).await;
    let dir = tempfile::tempdir().expect("dir");
    let mut lines = Vec::new();
    for n in 0..2 {
        let marker = format!("[task h{n}]");
        // A turn that streams, then waits; resumed, it answers.
        env.mock.script_for_prompt(
            &marker,
            vec![
                MockReply::Hang {
                    chunks: vec!["working".into()],
                },
                MockReply::text(&["finished ", &n.to_string()]),
            ],
        );
        lines.push(json!({"id": format!("h{n}"), "prompt": format!("{marker} go")}));
    }
    for n in 0..2 {
        let marker = format!("[task q{n}]");
        env.mock
            .script_for_prompt(&marker, vec![MockReply::text(&["queued ", &n.to_string()])]);
        lines.push(json!({"id": format!("q{n}"), "prompt": format!("{marker} go")}));
    }
    let dataset = dir.path().join("tasks.jsonl");
    write_lines(&dataset, &lines);
    let out = dir.path().join("out");
    let args = [
        dataset.to_str().expect("utf-8"),
        "--out",
        out.to_str().expect("utf-8"),
        "--parallel",
        "2",
    ];
    let child = tokio::process::Command::new(talaria_bin())
        .arg("batch")
        .args(args)
        .env_clear()
        .envs(env.env())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("batch");
    // Both hanging tasks are streaming; the two others wait for a slot.
    let deadline = tokio::time::Instant::now() + WAIT;
    while env
        .mock
        .requests()
        .iter()
        .filter(|r| r.body["messages"].to_string().contains("[task h"))
        .count()
        < 2
    {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the tasks did not start"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let pid = child.id().expect("pid");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(i32::try_from(pid).expect("pid")),
        nix::sys::signal::Signal::SIGTERM,
    )
    .expect("terminated");
    let ended = tokio::time::timeout(WAIT, child.wait_with_output())
        .await
        .expect("the batch ends on SIGTERM")
        .expect("waited");
    let said = String::from_utf8_lossy(&ended.stderr).to_string();
    assert_eq!(ended.status.code(), Some(1), "{said}");
    assert!(said.contains("--resume"), "{said}");
    let marked = results(&out);
    assert_eq!(
        marked.keys().cloned().collect::<HashSet<_>>(),
        HashSet::from(["h0".to_string(), "h1".to_string()]),
        "the running tasks are marked, the waiting ones not started: {said}"
    );
    for result in marked.values() {
        assert_eq!(result["verdict"], "interrupted", "{result}");
        // The session's record says where the turn stopped.
        let session = result["session_id"].as_str().expect("session");
        let store =
            talaria_store::SqliteStore::open(&env.home.path().join("talaria").join("state.db"))
                .expect("store");
        let (_, transcript) =
            talaria_store::SessionStore::load(&store, session).expect("the task's session");
        assert!(
            transcript
                .entries()
                .iter()
                .any(|e| matches!(e.body, talaria_record::EntryBody::Interrupted { .. })),
            "{session} is not marked interrupted"
        );
    }
    let summary = std::fs::read_to_string(out.join("summary.md")).expect("summary");
    assert!(
        summary.contains("| interrupted (run again with --resume) | 2 |"),
        "{summary}"
    );
    // Resumed, the interrupted tasks and the waiting ones run; the finished none again.
    let mut resumed = args.to_vec();
    resumed.push("--resume");
    let (code, said) = batch_run(&env, &resumed).await;
    assert_eq!(code, Some(0), "{said}");
    let text = std::fs::read_to_string(out.join("results.jsonl")).expect("results");
    let mut last: HashMap<String, Value> = HashMap::new();
    for line in text.lines() {
        let result: Value = serde_json::from_str(line).expect("a whole line");
        last.insert(result["id"].as_str().expect("id").to_string(), result);
    }
    assert_eq!(last.len(), 4);
    for (id, result) in &last {
        assert_eq!(result["verdict"], "done", "{id}: {result}");
    }
}

/// An answer with usage (so a `usage_update` carries its limits) and these rate-limit headers.
fn limited_answer(text: &str, remaining: u64, reset: &str) -> MockReply {
    let answer = MockReply::Text {
        chunks: vec![text.into()],
        reasoning: Vec::new(),
        delay_ms: 0,
        usage: Some(talaria_harness::MockUsage {
            prompt_tokens: 500,
            completion_tokens: 3,
            cached_tokens: 0,
        }),
        finish_reason: None,
    };
    let remaining = remaining.to_string();
    answer.with_headers(&[
        ("x-ratelimit-limit-requests", "60"),
        ("x-ratelimit-remaining-requests", &remaining),
        ("x-ratelimit-reset-requests", reset),
    ])
}

#[tokio::test]
async fn a_batch_slows_down_before_a_rate_limit_and_reruns_a_refused_task_after_the_reset() {
    let env = TestEnv::new(vec![]).await;
    // The agent waits at most a second for a `Retry-After`: a refusal asking for two ends the
    // turn at once, and the batch takes it over.
    env.write_config("retry_after_cap_secs = 1\nretry_base_ms = 20\nretry_cap_ms = 200\n");
    let dir = tempfile::tempdir().expect("dir");
    // First: one request left in the window, which resets in two seconds.
    env.mock
        .script_for_prompt("[task p0]", vec![limited_answer("first", 1, "2s")]);
    // Second: refused (the window spent, wait two seconds), then answered.
    let refused = MockReply::Error {
        status: 429,
        body: json!({"error": {"message": "Rate limit reached for requests"}}).to_string(),
        headers: vec![
            ("retry-after".into(), "2".into()),
            ("x-ratelimit-limit-requests".into(), "60".into()),
            ("x-ratelimit-remaining-requests".into(), "0".into()),
            ("x-ratelimit-reset-requests".into(), "2s".into()),
        ],
    };
    env.mock.script_for_prompt(
        "[task p1]",
        vec![refused, limited_answer("second", 58, "1s")],
    );
    env.mock
        .script_for_prompt("[task p2]", vec![limited_answer("third", 57, "1s")]);
    let lines: Vec<Value> = (0..3)
        .map(|n| json!({"id": format!("p{n}"), "prompt": format!("[task p{n}] go")}))
        .collect();
    let dataset = dir.path().join("tasks.jsonl");
    write_lines(&dataset, &lines);
    let out = dir.path().join("out");
    let (code, said) = batch_run(
        &env,
        &[
            dataset.to_str().expect("utf-8"),
            "--out",
            out.to_str().expect("utf-8"),
            "--parallel",
            "1",
        ],
    )
    .await;
    assert_eq!(code, Some(0), "{said}");
    let by_id = results(&out);
    for id in ["p0", "p1", "p2"] {
        assert_eq!(by_id[id]["verdict"], "done", "none fails: {}", by_id[id]);
    }
    let asked = |marker: &str| -> Vec<std::time::Instant> {
        env.mock
            .requests()
            .into_iter()
            .filter(|r| r.body["messages"].to_string().contains(marker))
            .filter_map(|r| r.received_at)
            .collect()
    };
    let (p0, p1) = (asked("[task p0]"), asked("[task p1]"));
    assert_eq!(
        (p0.len(), p1.len()),
        (1, 2),
        "the refused task ran again once"
    );
    // The second task waited for the first's nearly spent window to reset…
    let paced = p1[0] - p0[0];
    assert!(
        paced >= Duration::from_millis(1800),
        "started after {paced:?}"
    );
    // …and, refused, ran again only after the refusal's reset.
    let rerun = p1[1] - p1[0];
    assert!(
        rerun >= Duration::from_millis(1800),
        "ran again after {rerun:?}"
    );
    assert!(
        said.contains("waiting") && said.contains("rate limits to reset"),
        "{said}"
    );
}
