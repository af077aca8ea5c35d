//! The sandbox's view is fixed when Talaria decides it: writable places are resolved when the
//! session starts, so a command that swaps one (or one that did not exist yet) for a link to
//! somewhere else does not make that somewhere writable for the next command.

use serde_json::json;
use talaria_harness::MockReply;

use crate::support::*;

/// Swaps `entry` (a writable place) for a link to `outside`, then writes through it.
async fn swapped_entry_stays_unwritable(entry: &str, make_entry_first: bool) {
    let outside = tempfile::tempdir().expect("outside");
    let mut env = TestEnv::new(Vec::new()).await;
    if make_entry_first {
        std::fs::create_dir_all(env.workspace.path().join(entry)).expect("entry");
    }
    // The top folder of the entry is moved away and a link put in its place, leading to a
    // folder of the same shape outside (with namespaces, an entry that is itself a mount
    // cannot be moved: the swap then fails, which is as safe).
    let top = entry.split('/').next().unwrap_or(entry);
    let below = entry
        .strip_prefix(top)
        .unwrap_or("")
        .trim_start_matches('/');
    let target_dir = outside.path().join(below);
    std::fs::create_dir_all(&target_dir).expect("outside shape");
    let swap = format!(
        "(mv {top} {top}.moved 2>/dev/null || rmdir {top} 2>/dev/null) && ln -s {} {top} && \
         echo swapped; echo done-$?",
        outside.path().display()
    );
    for reply in [
        MockReply::tool_call("s1", "terminal", json!({"command": swap})),
        MockReply::tool_call(
            "s2",
            "terminal",
            json!({"command": format!("echo planted > {entry}/planted; echo wrote-$?")}),
        ),
        MockReply::text(&["done"]),
    ] {
        env.mock.push(reply);
    }
    env.write_config(&format!(
        "mode = \"yolo\"\n[sandbox]\nwritable = [\"{entry}\"]\n"
    ));
    // The outside folder is the user's own: only the sandbox stands in the way.
    env.unprivileged(&[outside.path()]);
    let (mut agent, session) = env.session().await;
    let response = prompt_unasked(&mut agent, &session).await;
    assert_eq!(stop_reason(&response), "end_turn", "{response}");
    let results = tool_results(&env.mock, 2);
    assert!(results[0].contains("done-"), "{}", results[0]);
    assert!(
        !target_dir.join("planted").exists(),
        "{entry}: the link's target became writable (swap: {}): {}",
        results[0],
        results[1]
    );
    let swapped = results[0].contains("swapped");
    assert!(
        swapped || std::env::var("TALARIA_SANDBOX_NAMESPACES").as_deref() != Ok("off"),
        "without namespaces the swap itself succeeds: {}",
        results[0]
    );
}

#[tokio::test]
async fn a_writable_entry_swapped_for_a_link_does_not_move_the_writable_place() {
    if !sandbox_enforced() {
        return;
    }
    swapped_entry_stays_unwritable("out", true).await;
}

#[tokio::test]
async fn a_writable_entry_that_did_not_exist_yet_is_made_and_cannot_be_redirected() {
    if !sandbox_enforced() {
        return;
    }
    swapped_entry_stays_unwritable("later", false).await;
}

#[tokio::test]
async fn a_nested_writable_entry_whose_parent_is_swapped_stays_put() {
    if !sandbox_enforced() {
        return;
    }
    // The parent of the entry is swapped: the entry now resolves through a link.
    swapped_entry_stays_unwritable("build/cache", true).await;
}
