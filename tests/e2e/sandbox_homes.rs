//! The sandbox on homes like real users': credential stores that several rules name (a
//! `~/.netrc` is a home's token file and a key at its top), named again in the settings or
//! reached through a link, must be hidden without making any command fail; a low hard
//! process limit (containers, CI runners) bounds commands instead of failing them; and
//! `talaria doctor` checks the sandbox under the user's own home, so it says what commands
//! will meet. Run with and without the namespaces layer (CI runs the `sandbox` suites twice).

use serde_json::json;
use talaria_harness::{AgentProcess, MockReply, WireFraming, binary::talaria_bin};

use crate::support::*;

/// The credential stores whose presence made every command fail.
const STORES: [&str; 4] = [".netrc", ".pgpass", ".git-credentials", ".vault-token"];
const SECRET: &str = "HOME-STORE-SECRET-6110";

/// The commands every configuration must run: a plain one, a write in the workspace, a pipe
/// with a subshell, a listing of the home, and a read of each store (refused).
fn everyday_commands() -> MockReply {
    let mut calls = vec![
        ("c1", "terminal", json!({"command": "echo plain-$((6*7))"})),
        (
            "c2",
            "terminal",
            json!({"command": "echo made > inside.txt && cat inside.txt"}),
        ),
        (
            "c3",
            "terminal",
            json!({"command": "(printf 'a\\nb\\n' | wc -l) && ls -a ~ >/dev/null && echo listed"}),
        ),
    ];
    let reads: Vec<(String, serde_json::Value)> = STORES
        .iter()
        .enumerate()
        .map(|(i, store)| {
            (
                format!("r{i}"),
                // A glob, as a script would: the parser cannot name the file, the sandbox
                // must hide it.
                json!({"command": format!("cat ~/{}* 2>&1; echo read-done", glob_of(store))}),
            )
        })
        .collect();
    calls.extend(
        reads
            .iter()
            .map(|(id, args)| (id.as_str(), "terminal", args.clone())),
    );
    batch(&calls)
}

/// `.netrc` → `.[n]etrc`: the same file, by a pattern.
fn glob_of(store: &str) -> String {
    let (dot, rest) = store.split_at(1);
    let mut chars = rest.chars();
    let first = chars.next().unwrap_or('x');
    format!("{dot}[{first}]{}", chars.as_str())
}

/// How the stores after the first are made.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Made {
    /// Each a file of its own.
    Apart,
    /// Symbolic links to the first.
    Linked,
    /// Hard links to the first: one file, several places.
    HardLinked,
}

/// Runs the everyday commands with `stores` present in the home (made as `made` says), with
/// `config`; asserts each runs and no store leaks.
async fn commands_run_with(stores: &[&str], config: &str, made: Made) {
    let mut env = TestEnv::new(vec![everyday_commands(), MockReply::text(&["done"])]).await;
    let home = env.home.path().to_path_buf();
    for (i, store) in stores.iter().enumerate() {
        let path = home.join(store);
        if made == Made::Linked && i > 0 {
            std::os::unix::fs::symlink(home.join(stores[0]), &path).expect("link");
        } else if made == Made::HardLinked && i > 0 {
            std::fs::hard_link(home.join(stores[0]), &path).expect("hard link");
        } else {
            std::fs::write(&path, format!("machine example.org password {SECRET}\n"))
                .expect("store");
        }
    }
    env.write_config(&format!("mode = \"yolo\"\n{config}"));
    env.unprivileged(&[]);
    let (mut agent, session) = env.session().await;
    let response = prompt_unasked(&mut agent, &session).await;
    assert_eq!(stop_reason(&response), "end_turn", "{response}");
    let results = tool_results(&env.mock, 1);
    assert_eq!(results.len(), 3 + STORES.len(), "{results:#?}");
    let context = format!("stores {stores:?}, config {config:?}");
    assert!(results[0].contains("plain-42"), "{context}: {}", results[0]);
    assert!(results[1].contains("made"), "{context}: {}", results[1]);
    assert!(results[2].contains("listed"), "{context}: {}", results[2]);
    for result in &results {
        assert!(
            !result.contains("did not run") && !result.contains("Device or resource busy"),
            "{context}: a command failed to start: {result}"
        );
        assert!(
            !result.contains(SECRET),
            "{context}: a store leaked: {result}"
        );
    }
    for result in &results[3..] {
        assert!(result.contains("read-done"), "{context}: {result}");
    }
    assert!(
        env.workspace.path().join("inside.txt").exists(),
        "{context}"
    );
}

#[tokio::test]
async fn every_command_runs_with_each_credential_store_in_the_home() {
    if !sandbox_enforced() {
        return;
    }
    for store in STORES {
        commands_run_with(&[store], "", Made::Apart).await;
    }
}

#[tokio::test]
async fn every_command_runs_with_all_the_credential_stores_at_once() {
    if !sandbox_enforced() {
        return;
    }
    commands_run_with(&STORES, "", Made::Apart).await;
}

#[tokio::test]
async fn a_store_also_named_in_the_settings_is_hidden_once() {
    if !sandbox_enforced() {
        return;
    }
    // A third rule for the same file, and one for a folder holding another store.
    commands_run_with(
        &STORES,
        "[sandbox]\nhidden = [\"~/.netrc\", \"~/.pgpass\", \"~/.netrc\"]\n",
        Made::Apart,
    )
    .await;
}

#[tokio::test]
async fn stores_that_are_links_to_one_file_are_hidden_once() {
    if !sandbox_enforced() {
        return;
    }
    // ~/.pgpass, ~/.git-credentials and ~/.vault-token all lead to ~/.netrc: one file, four
    // rules, two of them by its name.
    commands_run_with(&STORES, "", Made::Linked).await;
}

#[tokio::test]
async fn stores_that_are_hard_links_to_one_file_are_each_hidden() {
    if !sandbox_enforced() {
        return;
    }
    // One file at four places: each place is masked (a mask by inode would leave three).
    commands_run_with(&STORES, "", Made::HardLinked).await;
}

#[tokio::test]
async fn a_key_at_the_top_of_the_home_beside_the_stores_keeps_commands_running() {
    if !sandbox_enforced() {
        return;
    }
    // Keys matched by name at the top of the home (`deploy.pem`, `id_ed25519`) are hidden
    // by the same pass as the stores, some named by two rules.
    commands_run_with(
        &[".netrc", "id_ed25519", "deploy.pem", ".pgpass"],
        "",
        Made::Apart,
    )
    .await;
}

/// The agent started under a hard process limit of `hard` (set with `prlimit`).
async fn agent_under_process_limit(env: &TestEnv, hard: u32) -> AgentProcess {
    let limit = format!("--nproc={hard}:{hard}");
    let bin = talaria_bin();
    let args = [
        limit.as_str(),
        "--",
        bin.to_str().expect("utf-8 path"),
        "acp",
    ];
    AgentProcess::spawn_as(
        std::path::Path::new("/usr/bin/prlimit"),
        &args,
        &env.env(),
        WireFraming::NewlineDelimited,
        env.user,
    )
    .await
    .expect("agent spawns under prlimit")
}

#[tokio::test]
async fn a_low_hard_process_limit_bounds_commands_instead_of_failing_them() {
    if !sandbox_enforced() || !std::path::Path::new("/usr/bin/prlimit").exists() {
        return;
    }
    let mut env = TestEnv::new(vec![
        batch(&[
            ("p1", "terminal", json!({"command": "echo under-the-limit"})),
            (
                "p2",
                "terminal",
                json!({"command": "for i in 1 2 3; do (echo child-$i) & done; wait"}),
            ),
        ]),
        MockReply::text(&["done"]),
    ])
    .await;
    env.write_config("mode = \"yolo\"\n");
    env.unprivileged(&[]);
    // Below [sandbox] max_processes (512) and below what the machine runs plus 512.
    let mut agent = agent_under_process_limit(&env, 300).await;
    let session = agent
        .start_session(env.workspace.path())
        .await
        .expect("session");
    let response = prompt_unasked(&mut agent, &session).await;
    assert_eq!(stop_reason(&response), "end_turn", "{response}");
    let results = tool_results(&env.mock, 1);
    assert!(results[0].contains("under-the-limit"), "{}", results[0]);
    for i in 1..=3 {
        assert!(results[1].contains(&format!("child-{i}")), "{}", results[1]);
    }
}

#[tokio::test]
async fn doctor_checks_the_sandbox_on_the_users_own_home() {
    if !sandbox_enforced() {
        return;
    }
    let mut env = TestEnv::new(Vec::new()).await;
    for store in STORES {
        std::fs::write(env.home.path().join(store), SECRET).expect("store");
    }
    env.write_config("");
    env.unprivileged(&[]);
    let (_, report) = doctor_as_user(&env, None).await;
    let sandbox_line = report
        .lines()
        // The line whose label is the sandbox (the environment line may name its variable).
        .find(|line| line.split_whitespace().nth(1) == Some("sandbox"))
        .unwrap_or_default()
        .to_string();
    assert!(
        sandbox_line.contains("active"),
        "the sandbox check runs a command under the home's stores: {report}"
    );
    assert!(!report.contains(SECRET), "{report}");
}

#[tokio::test]
async fn doctor_names_a_hard_process_limit_below_the_setting() {
    if !sandbox_enforced() || !std::path::Path::new("/usr/bin/prlimit").exists() {
        return;
    }
    let mut env = TestEnv::new(Vec::new()).await;
    env.write_config("[sandbox]\nmax_processes = 512\n");
    env.unprivileged(&[]);
    let (_, report) = doctor_as_user(&env, Some(300)).await;
    assert!(
        report.contains("hard process limit (300"),
        "doctor names the lower hard limit: {report}"
    );
    assert!(
        report
            .lines()
            .any(|line| line.contains("sandbox") && line.contains("active")),
        "and the sandbox still works under it: {report}"
    );
}

#[tokio::test]
async fn the_home_bind_mounted_at_a_second_path_hides_the_same_stores_there() {
    if !sandbox_enforced() || !running_as_root() {
        // Mounting needs root (CI runs as root and drops the agent to another user).
        return;
    }
    let alias_dir = tempfile::tempdir().expect("alias");
    let reads: Vec<(String, serde_json::Value)> = [".[n]etrc", ".[s]sh/id_*", ".[a]ws/cred*"]
        .iter()
        .enumerate()
        .map(|(i, file)| {
            // Globs, as a script would write them: the sandbox, not the parser, must hide them.
            (
                format!("a{i}"),
                json!({"command": format!("cat {}/{file} 2>&1; echo read-done", alias_dir.path().display())}),
            )
        })
        .collect();
    let calls: Vec<(&str, &str, serde_json::Value)> = reads
        .iter()
        .map(|(id, args)| (id.as_str(), "terminal", args.clone()))
        .collect();
    let mut env = TestEnv::new(vec![batch(&calls), MockReply::text(&["done"])]).await;
    let home = env.home.path().to_path_buf();
    std::fs::write(
        home.join(".netrc"),
        format!("machine x password {SECRET}\n"),
    )
    .expect("netrc");
    for (folder, file) in [(".ssh", "id_ed25519"), (".aws", "credentials")] {
        std::fs::create_dir_all(home.join(folder)).expect("folder");
        std::fs::write(home.join(folder).join(file), SECRET).expect("secret");
    }
    env.write_config("mode = \"yolo\"\n");
    env.unprivileged(&[]);
    let Some(_mount) = BindMount::new(&home, alias_dir.path()) else {
        eprintln!("mount --bind is not allowed here: skipped");
        return;
    };
    let (mut agent, session) = env.session().await;
    let response = prompt_unasked(&mut agent, &session).await;
    assert_eq!(stop_reason(&response), "end_turn", "{response}");
    let results = tool_results(&env.mock, 1);
    assert_eq!(results.len(), 3, "{results:#?}");
    for result in &results {
        assert!(result.contains("read-done"), "the command ran: {result}");
        assert!(
            !result.contains(SECRET),
            "read through the second path: {result}"
        );
    }
}

#[tokio::test]
async fn a_key_written_into_the_home_while_a_command_runs_stays_hidden_from_it() {
    if !sandbox_enforced() {
        return;
    }
    // The command says it runs, then reads what it can for four seconds; the token file and
    // a key appear at the top of the home meanwhile (a `vault login`, a download).
    let poll = "touch started; for i in $(seq 40); do cat ~/.[v]ault-token ~/deploy.p?m 2>/dev/null; \
                sleep 0.1; done; echo polled";
    let mut env = TestEnv::new(vec![
        MockReply::tool_call("p1", "terminal", json!({"command": poll, "timeout": 30})),
        MockReply::text(&["done"]),
    ])
    .await;
    let home = env.home.path().to_path_buf();
    let started = env.workspace.path().join("started");
    env.write_config("mode = \"yolo\"\n");
    env.unprivileged(&[]);
    let writer = {
        let home = home.clone();
        once_started(started.clone(), move || {
            for name in [".vault-token", "deploy.pem"] {
                std::fs::write(home.join(name), SECRET).expect("secret");
                if running_as_root() {
                    give_to(&home.join(name), NOBODY);
                }
            }
        })
    };
    let (mut agent, session) = env.session().await;
    let response = prompt_unasked(&mut agent, &session).await;
    writer.join().expect("writer");
    assert_eq!(stop_reason(&response), "end_turn", "{response}");
    assert!(started.exists(), "the command ran");
    assert!(home.join(".vault-token").exists());
    let result = tool_results(&env.mock, 1).pop().unwrap_or_default();
    assert!(result.contains("polled"), "{result}");
    assert!(
        !result.contains(SECRET),
        "a key written meanwhile was read: {result}"
    );
}

/// A trusted project's hook on a home like a user's: it runs inside the session's sandbox
/// (its output reaches the prompt) while every credential store of the home stays hidden
/// from it and it cannot write outside the workspace; the user's own hook beside it runs as
/// the user's command, as before.
#[tokio::test]
async fn a_trusted_projects_hook_runs_sandboxed_among_the_users_credentials() {
    if !sandbox_enforced() {
        return;
    }
    let mut env = TestEnv::new(vec![MockReply::text(&["hi"])]).await;
    let home = env.home.path().to_path_buf();
    for store in STORES {
        std::fs::write(
            home.join(store),
            format!("machine example.org password {SECRET}\n"),
        )
        .expect("store");
    }
    std::fs::create_dir_all(home.join(".aws")).expect("aws");
    std::fs::write(home.join(".aws/credentials"), format!("key = {SECRET}\n")).expect("aws");
    let project = env.workspace.path().join(".talaria");
    std::fs::create_dir_all(&project).expect("project");
    std::fs::write(
        project.join("config.toml"),
        "[[hooks.SessionStart]]\ncommand = \"echo PROJECT-HOOK-RAN; \
         cat ~/.netrc ~/.pgpass ~/.git-credentials ~/.vault-token ~/.aws/credentials 2>&1; \
         echo planted > ~/planted.txt 2>&1; echo made > inside.txt; echo listed-$(ls -a ~ | wc -l)\"\n",
    )
    .expect("project hook");
    env.write_config("[[hooks.SessionStart]]\ncommand = \"echo USER-HOOK-RAN\"\n");
    env.trust_workspace();
    env.unprivileged(&[]);
    let (mut agent, session) = env.session().await;
    let (response, _) = prompt(&mut agent, &session, "hello").await;
    assert_eq!(stop_reason(&response), "end_turn", "{response}");
    let system = env.mock.requests()[0].body["messages"][0]["content"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(system.contains("PROJECT-HOOK-RAN"), "{system}");
    assert!(system.contains("USER-HOOK-RAN"), "{system}");
    assert!(
        system.contains("listed-"),
        "the hook failed part way: {system}"
    );
    assert!(!system.contains(SECRET), "a store leaked to a project hook");
    assert!(
        !home.join("planted.txt").exists(),
        "a project hook wrote outside the workspace"
    );
    assert!(env.workspace.path().join("inside.txt").exists());
    assert_clean_stdout(&agent);
}
