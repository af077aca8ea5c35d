//! A rewind with `restoreFiles` whose marker neither commits nor spools (the store is held
//! and the spool refuses, as on a full disk) puts no file back: after a kill the record would
//! not say the files went back (issue 62, F4). The files are reported not put back, with why.

use std::path::Path;
use std::time::Duration;

use serde_json::json;
use talaria_harness::MockReply;

use crate::support::*;

const FILES: usize = 3;

fn fingerprint(text: &str) -> String {
    use sha2::Digest;
    let digest = sha2::Sha256::digest(text.as_bytes());
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    format!("sha256:{hex}")
}

fn contents(dir: &Path) -> Vec<String> {
    (0..FILES)
        .map(|i| std::fs::read_to_string(dir.join(format!("f{i}"))).unwrap_or_default())
        .collect()
}

fn leftovers(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .map(|listing| {
            listing
                .filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().to_string())
                .filter(|name| name.contains("talaria-restore"))
                .collect()
        })
        .unwrap_or_default()
}

#[tokio::test]
async fn a_rewind_whose_marker_cannot_be_saved_puts_no_file_back() {
    let mut env = TestEnv::new(vec![
        MockReply::text(&["first answer"]),
        MockReply::tool_call(
            "t",
            "terminal",
            json!({"command": "for f in f*; do echo changed > \"$f\"; done"}),
        ),
        MockReply::text(&["changed"]),
    ])
    .await;
    env.write_config("mode = \"yolo\"\n");
    let dir = env.workspace.path().to_path_buf();
    for i in 0..FILES {
        std::fs::write(dir.join(format!("f{i}")), format!("before {i}\n")).expect("seed");
    }
    env.extra_env
        .push(("FAILPOINTS".into(), "spool::write::before=return".into()));
    env.unprivileged(&[]);
    let (mut agent, session) = env.session().await;
    let (first, first_updates) = prompt(&mut agent, &session, "look around").await;
    assert_eq!(stop_reason(&first), "end_turn");
    let answer_id = first_updates
        .iter()
        .rev()
        .find_map(|u| u["messageId"].as_str())
        .expect("answer id")
        .to_string();
    let (second, _) = prompt(&mut agent, &session, "change all").await;
    let user_id = second["result"]["_meta"]["userMessageId"]
        .as_str()
        .expect("user id")
        .to_string();
    let changed = vec!["changed\n".to_string(); FILES];
    assert_eq!(contents(&dir), changed);
    let store = env.home.path().join("talaria").join("state.db");
    let holder = hold_write_lock(&store, Duration::from_secs(6));
    let params = json!({
        "sessionId": session,
        "beforeMessage": {"messageId": user_id, "messageFingerprint": fingerprint("change all")},
        "resumeAtMessage": {"messageId": answer_id, "messageFingerprint": fingerprint("first answer")},
        "restoreFiles": true,
    });
    let answer = agent
        .request("_session/rewind", params)
        .await
        .expect("the rewind is answered");
    assert_eq!(
        contents(&dir),
        changed,
        "files were put back though the rewind's marker is in memory only: {answer}"
    );
    let failed = answer["result"]["files"]["failed"].to_string();
    assert!(
        failed.contains("could not be saved"),
        "the files are not reported not put back, with why: {answer}"
    );
    kill_now(&agent);
    let _ = agent.wait_exit(WAIT).await;
    holder.join().expect("the lock holder");
    // The record has no rewind; the workspace agrees with it.
    let mut again = initialized(&env).await;
    again
        .call("session/load", load_params(&env, &session))
        .await
        .expect("loads");
    again.close_stdin();
    let _ = again.wait_exit(WAIT).await;
    assert_eq!(contents(&dir), changed);
    assert!(leftovers(&dir).is_empty(), "{:?}", leftovers(&dir));
}
