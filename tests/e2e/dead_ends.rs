//! Tool results that point forward instead of into a dead end: `patch` text not found comes
//! back with the closest lines, a search that finds nothing tries the other kind, a missing
//! command names what is installed, an empty final answer or a how-to is sent back, and a
//! turn that edited files and ran nothing is asked to run the project's check.

use serde_json::{Value, json};
use talaria_harness::MockReply;

use crate::support::*;

/// Runs one prompt against `script` in yolo mode with `files` in the workspace; the mock's
/// requests' last user messages and tool results, and the client's updates.
async fn play(
    files: &[(&str, &str)],
    config: &str,
    script: Vec<MockReply>,
) -> (TestEnv, Vec<Value>, String) {
    let env = TestEnv::new(script).await;
    env.write_config(&format!("mode = \"yolo\"\n{config}"));
    for (path, text) in files {
        let path = env.workspace.path().join(path);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).expect("mkdir");
        }
        std::fs::write(path, text).expect("file");
    }
    let (mut agent, session) = env.session().await;
    let (response, updates) = prompt(&mut agent, &session, "Do the task.").await;
    let stop = stop_reason(&response).to_string();
    (env, updates, stop)
}

#[tokio::test]
async fn patch_text_not_found_comes_back_with_the_closest_lines() {
    let long: String = (1..=120).map(|n| format!("setting_{n} = {n}\n")).collect();
    let variants: Vec<(&str, String, &str, &str)> = vec![
        (
            "short.py",
            "def add(a, b):\n    return a + b\n".into(),
            "def sum(a, b):",
            "    1| def add(a, b):",
        ),
        (
            "short.py",
            "x = 1\ny = 2\n".into(),
            "x = 10",
            "    2| y = 2",
        ),
        (
            "long.py",
            long.clone(),
            "setting_77 = 700",
            "   77| setting_77 = 77",
        ),
        (
            "long.py",
            long.clone(),
            "setting_5 = five\nsetting_6 = six",
            "    5| setting_5 = 5",
        ),
        (
            "long.py",
            long,
            "setting_119 = nineteen",
            "  119| setting_119 = 119",
        ),
    ];
    for (file, text, old, expected) in variants {
        let (env, _, stop) = play(
            &[(file, text.as_str())],
            "",
            vec![
                MockReply::tool_call(
                    "p",
                    "patch",
                    json!({"path": file, "old_string": old, "new_string": "changed = 1"}),
                ),
                MockReply::text(&["I could not make the change."]),
            ],
        )
        .await;
        assert_eq!(stop, "end_turn");
        let results = tool_results(&env.mock, 1);
        assert!(results[0].contains("was not found"), "{results:?}");
        assert!(results[0].contains(expected), "{old}: {}", results[0]);
    }
}

#[tokio::test]
async fn a_search_that_finds_nothing_tries_the_other_kind() {
    let files = [
        ("config/app.toml", "request_timeout = 30\nretries = 4\n"),
        ("src/server.py", "MAX_UPLOAD_MB = 25\n"),
        ("docs/guide.md", "See the upload limit.\n"),
    ];
    let variants = [
        (
            json!({"pattern": "*request_timeout*", "target": "files"}),
            "config/app.toml:1:request_timeout = 30",
        ),
        (
            json!({"pattern": "retries", "target": "files"}),
            "config/app.toml:2:retries = 4",
        ),
        (
            json!({"pattern": "*MAX_UPLOAD*", "target": "files"}),
            "src/server.py:1:MAX_UPLOAD_MB",
        ),
        (json!({"pattern": "guide.md"}), "docs/guide.md"),
        (
            json!({"pattern": "server.py", "target": "content"}),
            "src/server.py",
        ),
    ];
    for (args, expected) in variants {
        let (env, _, stop) = play(
            &files,
            "",
            vec![
                MockReply::tool_call("s", "search_files", args.clone()),
                MockReply::text(&["Found it."]),
            ],
        )
        .await;
        assert_eq!(stop, "end_turn");
        let results = tool_results(&env.mock, 1);
        assert!(results[0].contains(expected), "{args}: {}", results[0]);
        assert!(
            results[0].contains("search)"),
            "{args}: says which search: {}",
            results[0]
        );
    }
}

#[tokio::test]
async fn a_command_that_is_not_found_names_what_is_installed() {
    let python3 = std::env::var("PATH")
        .unwrap_or_default()
        .split(':')
        .any(|dir| std::path::Path::new(dir).join("python3").exists());
    let variants: Vec<(&str, Option<&str>)> = vec![
        ("pytest -q", python3.then_some("`python3 -m pytest`")),
        ("py.test", python3.then_some("`python3 -m unittest`")),
        ("nosetests", python3.then_some("`python3 -m unittest`")),
        (
            "pyhton3 --version",
            python3.then_some("Did you mean `python3`"),
        ),
        ("zzqx-not-a-tool --help", Some("Look for another way")),
    ];
    for (command, expected) in variants {
        let (env, _, stop) = play(
            &[],
            "",
            vec![
                MockReply::tool_call("t", "terminal", json!({"command": command})),
                MockReply::text(&["It is not installed."]),
            ],
        )
        .await;
        assert_eq!(stop, "end_turn");
        let result = &tool_results(&env.mock, 1)[0];
        assert!(result.contains("Exit code: 127"), "{command}: {result}");
        assert!(
            result.contains("is not installed here"),
            "{command}: {result}"
        );
        if let Some(expected) = expected {
            assert!(result.contains(expected), "{command}: {result}");
        }
    }
}

#[tokio::test]
async fn an_empty_final_answer_after_tool_calls_is_sent_back_once() {
    for empty in ["", " ", "\n\n", "  \n  ", "\t"] {
        let (env, _, stop) = play(
            &[("notes.txt", "hello\n")],
            "",
            vec![
                MockReply::tool_call("r", "read_file", json!({"path": "notes.txt"})),
                MockReply::text(&[empty]),
                MockReply::text(&["notes.txt says hello."]),
            ],
        )
        .await;
        assert_eq!(stop, "end_turn");
        let requests = env.mock.requests();
        assert_eq!(requests.len(), 3, "{empty:?}");
        assert!(last_user(&requests[2].body).contains("Your answer was empty"));
    }
}

#[tokio::test]
async fn a_how_to_is_recognised_by_its_shape_and_sent_back() {
    let how_tos = [
        "1. Open `calc.py`.\n2. Add a function `mul(a, b)`.\n3. Run the tests with `python3 -m unittest`.",
        "To do this:\n- **Create** a file named test_calc.py\n- **Write** a test for add\n- **Run** pytest in your terminal",
        "Step 1: Navigate to the src folder\nStep 2: Edit calc.py\nStep 3: Save and run it",
        "Use your favorite text editor to change the port to 8080.",
        "1) Locate the config file in your project\n2) Change `timeout` to 30\n3) Restart the server",
    ];
    for how_to in how_tos {
        let (env, _, stop) = play(
            &[],
            "verify_after_edits = false\n",
            vec![MockReply::text(&[how_to]), MockReply::text(&["Done."])],
        )
        .await;
        assert_eq!(stop, "end_turn");
        let requests = env.mock.requests();
        assert_eq!(requests.len(), 2, "{how_to}");
        assert!(
            last_user(&requests[1].body).contains("do it yourself with your tools"),
            "{how_to}"
        );
    }
}

#[tokio::test]
async fn a_turn_that_edited_files_and_ran_nothing_is_asked_to_run_the_check() {
    let edit = |path: &str| {
        MockReply::tool_call(
            "w",
            "write_file",
            json!({"path": path, "content": "def plus(a, b):\n    return a + b\n"}),
        )
    };
    // (files, config, the edit and what follows, the check asked for or none)
    type Variant<'a> = (
        Vec<(&'a str, &'a str)>,
        &'a str,
        Vec<MockReply>,
        Option<&'a str>,
    );
    let variants: Vec<Variant> = vec![
        (
            vec![("test_calc.py", "import calc\n")],
            "",
            vec![edit("calc.py"), MockReply::text(&["Renamed."])],
            Some("python3 -m pytest"),
        ),
        (
            vec![("Cargo.toml", "[package]\nname = \"x\"\n")],
            "",
            vec![edit("src/lib.py"), MockReply::text(&["Renamed."])],
            Some("cargo test"),
        ),
        (
            vec![],
            "",
            vec![edit("tool.py"), MockReply::text(&["Written."])],
            Some("python3 tool.py"),
        ),
        (
            vec![("test_calc.py", "import calc\n")],
            "",
            vec![
                edit("calc.py"),
                MockReply::tool_call("t", "terminal", json!({"command": "true"})),
                MockReply::text(&["Renamed and checked."]),
            ],
            None,
        ),
        (
            vec![("test_calc.py", "import calc\n")],
            "verify_after_edits = false\n",
            vec![edit("calc.py"), MockReply::text(&["Renamed."])],
            None,
        ),
    ];
    for (files, config, mut script, check) in variants {
        if check.is_some() {
            script.push(MockReply::text(&["Checked: it works."]));
        }
        let steps = script.len();
        let (env, updates, stop) = play(&files, config, script).await;
        assert_eq!(stop, "end_turn", "{check:?}");
        let requests = env.mock.requests();
        assert_eq!(requests.len(), steps, "{check:?}");
        if let Some(check) = check {
            let asked = last_user(&requests[steps - 1].body);
            assert!(
                asked.contains(check) && asked.contains("ran nothing"),
                "{asked}"
            );
            assert!(
                updates
                    .iter()
                    .any(|u| u.to_string().contains("without checking them")),
                "the user is told"
            );
        }
    }
}
