//! The learning loop end to end: skills in the system prompt and as slash commands, the
//! background review at its threshold (after the prompt response, whitelisted, staged, with
//! provenance), `/skills` to accept a proposal, and the frozen memory snapshot.

use serde_json::{Value, json};
use talaria_harness::MockReply;

use crate::support::*;

const REVIEW_MODEL: &str = "review-model";

const SKILL: &str = "---\nname: read-three-files\ndescription: Read a.txt, b.txt and c.txt before answering questions about the project\n---\n# Steps\n1. Read a.txt, b.txt and c.txt with read_file.\n2. Answer from what they say.\n";

fn read(id: &str, path: &str) -> MockReply {
    MockReply::tool_call(id, "read_file", json!({"path": path}))
}

fn system_of(body: &Value) -> String {
    body["messages"][0]["content"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// The review model's requests, once there are `count` of them (or after 30 s).
async fn review_requests(
    mock: &talaria_harness::MockLlm,
    count: usize,
) -> Vec<talaria_harness::RecordedRequest> {
    let reviews = || -> Vec<talaria_harness::RecordedRequest> {
        mock.requests()
            .into_iter()
            .filter(|r| r.body["model"] == REVIEW_MODEL)
            .collect()
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while reviews().len() < count && std::time::Instant::now() < deadline {
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    reviews()
}

async fn wait_for_notice(agent: &mut talaria_harness::AgentProcess, needle: &str) -> String {
    let message = agent
        .wait_for(WAIT, |m| {
            m["params"]["update"]["content"]["text"]
                .as_str()
                .is_some_and(|t| t.contains(needle))
        })
        .await
        .expect("notice");
    message["params"]["update"]["content"]["text"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

#[tokio::test]
async fn a_review_at_its_threshold_proposes_a_skill_that_a_new_session_lists_and_loads() {
    let env = TestEnv::new(vec![
        // Turn 1: two calls with tools — below the threshold of three.
        read("r1", "a.txt"),
        read("r2", "b.txt"),
        MockReply::text(&["Read two files."]),
        // Turn 2: the third — the review starts after this prompt's response.
        read("r3", "c.txt"),
        MockReply::text(&["All three files read."]),
    ])
    .await;
    env.write_config(&format!(
        "[learning]\nskill_review_after = 3\nmemory_review_after = 0\non_local_servers = true\n[auxiliary.review]\nmodel = \"{REVIEW_MODEL}\"\n"
    ));
    for name in ["a.txt", "b.txt", "c.txt"] {
        std::fs::write(
            env.workspace.path().join(name),
            format!("contents of {name}\n"),
        )
        .expect("write");
    }
    env.mock.script_for_model(
        REVIEW_MODEL,
        vec![
            // Outside the whitelist: refused, nothing written.
            MockReply::tool_call(
                "w",
                "write_file",
                json!({"path": "pwned.txt", "content": "x"}),
            ),
            MockReply::tool_call("l", "skills_list", json!({})),
            MockReply::tool_call(
                "s",
                "skill_manage",
                json!({"action": "create", "name": "read-three-files", "content": SKILL}),
            ),
            MockReply::text(&["Saved a skill for reading the three files."]),
        ],
    );
    let (mut agent, session) = env.session().await;
    prompt(&mut agent, &session, "What do the files say?").await;
    assert!(
        env.mock
            .requests()
            .iter()
            .all(|r| r.body["model"] != REVIEW_MODEL),
        "no review below the threshold"
    );
    let (response, _) = prompt(&mut agent, &session, "And the third one?").await;
    assert_eq!(stop_reason(&response), "end_turn", "{response}");
    let notice = wait_for_notice(&mut agent, "proposes").await;
    assert!(
        notice.contains("read-three-files — Read a.txt, b.txt and c.txt"),
        "{notice}"
    );
    let requests = env.mock.requests();
    let reviews: Vec<_> = requests
        .iter()
        .filter(|r| r.body["model"] == REVIEW_MODEL)
        .collect();
    assert_eq!(reviews.len(), 4, "every review step ran once");
    let first_review = reviews[0];
    let last_main = requests
        .iter()
        .rfind(|r| r.body["model"] != REVIEW_MODEL)
        .expect("main");
    assert!(
        first_review.received_at > last_main.received_at,
        "the review starts after the turn"
    );
    // The review reuses the session's system prompt and tool definitions.
    assert_eq!(system_of(&first_review.body), system_of(&last_main.body));
    assert_eq!(first_review.body["tools"], last_main.body["tools"]);
    assert!(last_user(&first_review.body).contains("Background review"));
    // The non-whitelisted call was refused, with no side effect.
    assert!(!env.workspace.path().join("pwned.txt").exists());
    let refused = reviews[1].body["messages"].to_string();
    assert!(refused.contains("may not be used here"), "{refused}");
    // Staged, not live, with provenance.
    let home = env.home.path().join("talaria");
    assert!(!home.join("skills/read-three-files").exists());
    let proposals: Vec<_> = std::fs::read_dir(home.join("proposals"))
        .expect("proposals")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().to_string())
        .collect();
    assert_eq!(proposals.len(), 1, "{proposals:?}");
    let id = proposals[0].clone();
    let provenance = std::fs::read_to_string(
        home.join("proposals")
            .join(&id)
            .join("skill/.provenance.jsonl"),
    )
    .expect("provenance");
    assert!(provenance.contains("\"origin\":\"review\"") && provenance.contains(&session));

    // The user inspects and accepts it.
    let (_, listed) = prompt(&mut agent, &session, "/skills").await;
    assert!(
        chunks(&listed, "agent_message_chunk")
            .concat()
            .contains(&id)
    );
    let (_, shown) = prompt(&mut agent, &session, &format!("/skills show {id}")).await;
    assert!(
        chunks(&shown, "agent_message_chunk")
            .concat()
            .contains("+1. Read a.txt, b.txt and c.txt with read_file."),
        "{shown:?}"
    );
    let (response, accepted) = prompt(&mut agent, &session, &format!("/skills accept {id}")).await;
    assert_eq!(stop_reason(&response), "end_turn");
    assert!(home.join("skills/read-three-files/SKILL.md").is_file());
    let commands = accepted
        .iter()
        .find(|u| u["sessionUpdate"] == "available_commands_update")
        .expect("commands listed again");
    assert!(commands.to_string().contains("\"read-three-files\""));

    // A new session lists the skill in its system prompt and loads it with /read-three-files.
    env.mock.push(MockReply::text(&["Following the skill."]));
    let (mut second, next) = env.session().await;
    let listed = second
        .transcript
        .iter()
        .find(|m| m["params"]["update"]["sessionUpdate"] == "available_commands_update")
        .expect("commands")
        .to_string();
    assert!(listed.contains("\"read-three-files\""), "{listed}");
    let (response, _) = prompt(&mut second, &next, "/read-three-files for the summary").await;
    assert_eq!(stop_reason(&response), "end_turn", "{response}");
    let body = env.mock.requests().last().expect("request").body.clone();
    let body = &body;
    assert!(
        system_of(body).contains("- read-three-files: Read a.txt, b.txt and c.txt"),
        "{}",
        system_of(body)
    );
    let asked = last_user(body);
    assert!(
        asked.contains("1. Read a.txt, b.txt and c.txt with read_file."),
        "{asked}"
    );
    assert!(asked.ends_with("for the summary"), "{asked}");
}

#[tokio::test]
async fn memory_written_in_a_session_reaches_the_next_session_prompt_only() {
    let env = TestEnv::new(vec![
        MockReply::tool_call(
            "m",
            "memory",
            json!({"action": "add", "target": "user", "content": "Prefers answers in French."}),
        ),
        MockReply::text(&["Noted."]),
        MockReply::text(&["Still the same prompt."]),
        MockReply::text(&["Bonjour."]),
    ])
    .await;
    env.write_config(
        "mode = \"yolo\"\n[learning]\nskill_review_after = 0\nmemory_review_after = 0\n",
    );
    let (mut agent, session) = env.session().await;
    prompt(&mut agent, &session, "Remember that I prefer French.").await;
    prompt(&mut agent, &session, "Anything else?").await;
    let requests = env.mock.requests();
    assert!(!system_of(&requests[2].body).contains("Prefers answers in French"));
    assert_eq!(
        system_of(&requests[0].body),
        system_of(&requests[2].body),
        "the session's prompt is frozen"
    );
    let memory = std::fs::read_to_string(env.home.path().join("talaria/memories/USER.md"))
        .expect("memory file");
    assert_eq!(memory, "Prefers answers in French.");
    let (mut second, next) = env.session().await;
    prompt(&mut second, &next, "Hello").await;
    let system = system_of(&env.mock.requests()[3].body);
    assert!(
        system.contains("USER PROFILE (who the user is)")
            && system.contains("Prefers answers in French."),
        "{system}"
    );
}

#[tokio::test]
async fn an_invalid_skill_is_reported_and_never_breaks_start_up() {
    let env = TestEnv::new(vec![MockReply::text(&["ok"])]).await;
    let skills = env.home.path().join("talaria/skills");
    std::fs::create_dir_all(skills.join("broken")).expect("mkdir");
    std::fs::write(skills.join("broken/SKILL.md"), "no front matter").expect("write");
    std::fs::create_dir_all(env.workspace.path().join(".agents/skills/lint")).expect("mkdir");
    std::fs::write(
        env.workspace.path().join(".agents/skills/lint/SKILL.md"),
        "---\nname: lint\ndescription: Run the linters\n---\nRun them.\n",
    )
    .expect("write");
    env.trust_workspace();
    let (mut agent, session) = env.session().await;
    let (response, _) = prompt(&mut agent, &session, "hi").await;
    assert_eq!(stop_reason(&response), "end_turn");
    let system = system_of(&env.mock.requests()[0].body);
    assert!(system.contains("- lint: Run the linters"), "{system}");
    assert!(!system.contains("broken"));
    assert!(
        agent.stderr().contains("invalid skill"),
        "the invalid skill is logged"
    );
}

#[tokio::test]
async fn a_running_review_is_capped_and_stops_on_cancel_and_on_close() {
    let env = TestEnv::new(vec![
        read("r1", "a.txt"),
        MockReply::text(&["done"]),
        read("r2", "a.txt"),
        MockReply::text(&["done again"]),
        read("r3", "a.txt"),
        MockReply::text(&["and again"]),
    ])
    .await;
    env.write_config(&format!(
        "[learning]\nskill_review_after = 1\nmemory_review_after = 0\nmax_review_calls = 2\non_local_servers = true\n[auxiliary.review]\nmodel = \"{REVIEW_MODEL}\"\n"
    ));
    std::fs::write(env.workspace.path().join("a.txt"), "a\n").expect("write");
    env.mock.script_for_model(
        REVIEW_MODEL,
        vec![
            // First review: capped at two model calls although it keeps calling tools.
            MockReply::tool_call("l1", "skills_list", json!({})),
            MockReply::tool_call("l2", "skills_list", json!({})),
            // Second and third reviews: hang until they are stopped.
            MockReply::Hang { chunks: Vec::new() },
            MockReply::Hang { chunks: Vec::new() },
        ],
    );
    let (mut agent, session) = env.session().await;
    prompt(&mut agent, &session, "read a").await;
    let reviews = |r: &[talaria_harness::RecordedRequest]| {
        r.iter().filter(|r| r.body["model"] == REVIEW_MODEL).count()
    };
    assert!(env.mock.wait_until(WAIT, |r| reviews(r) == 2).await);
    // The second review starts after the next turn and hangs; cancel stops it.
    prompt(&mut agent, &session, "read a again").await;
    assert!(
        env.mock.wait_until(WAIT, |r| reviews(r) == 3).await,
        "the second review started"
    );
    agent
        .notify("session/cancel", json!({"sessionId": session}))
        .await
        .expect("cancel");
    assert!(
        env.mock
            .wait_until(WAIT, |r| r
                .iter()
                .filter(|r| r.body["model"] == REVIEW_MODEL)
                .nth(2)
                .is_some_and(|r| r.client_disconnected))
            .await,
        "cancel aborts the review's model call"
    );
    assert_eq!(
        reviews(&env.mock.requests()),
        3,
        "the cap held: two calls, then one"
    );
    // A third review, stopped by closing the session.
    prompt(&mut agent, &session, "read a once more").await;
    assert!(env.mock.wait_until(WAIT, |r| reviews(r) == 4).await);
    let closed = agent
        .request("session/close", json!({"sessionId": session}))
        .await
        .expect("close");
    assert!(closed["result"].is_object(), "{closed}");
    assert!(
        env.mock
            .wait_until(WAIT, |r| r
                .iter()
                .filter(|r| r.body["model"] == REVIEW_MODEL)
                .nth(3)
                .is_some_and(|r| r.client_disconnected))
            .await,
        "closing the session aborts the review's model call"
    );
}

#[tokio::test]
async fn the_reviews_calls_go_through_the_orchestrator() {
    let env = TestEnv::new(vec![read("r1", "a.txt"), MockReply::text(&["Read it."])]).await;
    env.write_config(&format!(
        "[learning]\nskill_review_after = 1\nmemory_review_after = 0\non_local_servers = true\n[auxiliary.review]\nmodel = \"{REVIEW_MODEL}\"\n"
    ));
    std::fs::write(env.workspace.path().join("a.txt"), "contents\n").expect("write");
    // The same failing call three times: the orchestrator's guardrail refuses the third
    // (a review that dispatched directly would run it again).
    let failing = || MockReply::tool_call("v", "skill_view", json!({"name": "no-such-skill"}));
    env.mock.script_for_model(
        REVIEW_MODEL,
        vec![
            failing(),
            failing(),
            failing(),
            MockReply::text(&["Nothing worth saving."]),
        ],
    );
    let (mut agent, session) = env.session().await;
    let (response, updates) = prompt(&mut agent, &session, "What does a.txt say?").await;
    assert_eq!(stop_reason(&response), "end_turn", "{response}");
    let reviews = review_requests(&env.mock, 4).await;
    assert_eq!(reviews.len(), 4, "every review step ran");
    let last = reviews[3].body["messages"].to_string();
    assert!(
        last.contains("already failed twice"),
        "the third identical failure was refused: {last}"
    );
    // Nothing of the review reached the chat.
    let shown = serde_json::to_string(&agent.updates()).unwrap_or_default();
    assert!(!shown.contains("no-such-skill"), "{shown}");
    assert!(!updates.is_empty());
}

#[tokio::test]
async fn a_reviews_oversized_tool_result_is_budgeted_like_a_foreground_one() {
    // The foreground turn views a skill too large for a result's share of the window, and
    // so does the review: both get the same stored-with-a-preview result.
    let view = |id: &str| MockReply::tool_call(id, "skill_view", json!({"name": "huge"}));
    let env = TestEnv::new(vec![view("f"), MockReply::text(&["Viewed it."])]).await;
    env.write_config(&format!(
        "[learning]\nskill_review_after = 1\nmemory_review_after = 0\non_local_servers = true\n[auxiliary.review]\nmodel = \"{REVIEW_MODEL}\"\n"
    ));
    let skill = env.home.path().join("talaria/skills/huge");
    std::fs::create_dir_all(&skill).expect("skill dir");
    let body: String = (0..2500)
        .map(|n| format!("step {n:05} of the long one\n"))
        .collect();
    std::fs::write(
        skill.join("SKILL.md"),
        format!("---\nname: huge\ndescription: A very long skill.\n---\n{body}"),
    )
    .expect("skill");
    env.mock.script_for_model(
        REVIEW_MODEL,
        vec![view("v"), MockReply::text(&["Nothing worth saving."])],
    );
    let (mut agent, session) = env.session().await;
    let (response, _) = prompt(&mut agent, &session, "Show me the huge skill").await;
    assert_eq!(stop_reason(&response), "end_turn", "{response}");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let review_requests = || -> Vec<usize> {
        env.mock
            .requests()
            .iter()
            .enumerate()
            .filter(|(_, r)| r.body["model"] == REVIEW_MODEL)
            .map(|(n, _)| n)
            .collect()
    };
    while review_requests().len() < 2 && std::time::Instant::now() < deadline {
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let reviews = review_requests();
    assert_eq!(reviews.len(), 2, "the review viewed the skill and answered");
    let marker = "Result too large for the context";
    let foreground = tool_results(&env.mock, 1);
    let foreground = foreground.last().expect("the foreground's result");
    assert!(
        foreground.contains(marker),
        "{}",
        &foreground[..200.min(foreground.len())]
    );
    let review = tool_results(&env.mock, reviews[1]);
    let review = review.last().expect("the review's result");
    assert!(
        review.contains(marker),
        "the review's result was not budgeted"
    );
    assert!(review.len() < body.len() / 4, "{} characters", review.len());
    // The whole result is kept where the preview says, for the review as for the turn.
    let stored = review
        .split("stored at ")
        .nth(1)
        .and_then(|rest| rest.split(';').next())
        .expect("a stored path");
    let kept = std::fs::read_to_string(stored).expect("the stored result");
    assert!(kept.contains("step 02499"), "the whole result was stored");
}

#[tokio::test]
async fn a_review_on_a_small_model_runs_the_call_it_wrote_as_text() {
    // The review is a turn like the user's: a call a local model writes as fenced JSON runs
    // there too (a loop of its own would have ended at that text).
    let env = TestEnv::new(vec![read("r1", "a.txt"), MockReply::text(&["Read it."])]).await;
    env.write_config(&format!(
        "[learning]\nskill_review_after = 1\nmemory_review_after = 0\non_local_servers = true\n[auxiliary.review]\nmodel = \"{REVIEW_MODEL}\"\n"
    ));
    std::fs::write(env.workspace.path().join("a.txt"), "contents\n").expect("write");
    env.mock.script_for_model(
        REVIEW_MODEL,
        vec![
            MockReply::text(&[
                "Let me check first.\n",
                "```json\n{\"name\": \"skill_view\", \"arguments\": {\"name\": \"no-such-skill\"}}\n```",
            ]),
            MockReply::text(&["Nothing worth saving."]),
        ],
    );
    let (mut agent, session) = env.session().await;
    let (response, _) = prompt(&mut agent, &session, "What does a.txt say?").await;
    assert_eq!(stop_reason(&response), "end_turn", "{response}");
    let reviews = review_requests(&env.mock, 2).await;
    assert_eq!(reviews.len(), 2, "the review ran the call and asked again");
    let first = reviews[0].body["messages"].as_array().map_or(0, Vec::len);
    let second = &reviews[1].body["messages"];
    assert!(
        second.as_array().map_or(0, Vec::len) >= first + 2,
        "the call and its result follow: {second}"
    );
    let last = second
        .as_array()
        .and_then(|m| m.last())
        .cloned()
        .unwrap_or_default();
    assert!(
        last.to_string().contains("no-such-skill"),
        "the result of the call is the last message: {last}"
    );
    // Nothing of the review reached the chat.
    let shown = serde_json::to_string(&agent.updates()).unwrap_or_default();
    assert!(!shown.contains("no-such-skill"), "{shown}");
}
