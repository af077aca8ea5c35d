//! Hidden by path, for a command's whole life: while a sandboxed command polls the hidden
//! places of a home like a real one, programs outside replace them the way real ones do —
//! `git credential-store` through its lock file and a rename (an existing store, and one
//! made while the command runs), Codex and Claude Code refreshing their tokens by a rename,
//! a key written into `~/.ssh`, `~/.aws` replaced whole, a key dropped at the top of the
//! home, a `[sandbox] hidden` file replaced — and not one byte of the old or the new
//! secrets reaches the command. Run with and without the namespaces layer (CI runs the
//! `sandbox` suites twice).

use serde_json::json;
use talaria_harness::MockReply;

use crate::support::*;

/// The places polled, as the command names them (in its script), each with the secret it
/// holds at the start, if any.
const PLACES: [(&str, Option<&str>); 8] = [
    ("~/.git-credentials", Some("ORIGINAL-SECRET-1")),
    ("~/.codex/auth.json", Some("ORIGINAL-SECRET-2")),
    ("~/.claude/.credentials.json", Some("ORIGINAL-SECRET-3")),
    ("~/.ssh/id_new", None),
    ("~/.aws/credentials", Some("ORIGINAL-SECRET-5")),
    ("~/deploy.pem", None),
    ("~/private.txt", Some("ORIGINAL-SECRET-7")),
    ("~/.config/git/credentials", None),
];

/// The test's home and the user the agent runs as (usable off the test's task).
#[derive(Clone)]
struct Home {
    path: std::path::PathBuf,
    user: Option<(u32, u32)>,
}

impl Home {
    fn of(env: &TestEnv) -> Home {
        Home {
            path: env.home.path().to_path_buf(),
            user: env.user,
        }
    }

    /// A program run as the agent's user with `HOME` set to this home.
    fn run_as_user(&self, program: &str) -> std::process::Command {
        use std::os::unix::process::CommandExt;
        let mut command = std::process::Command::new(program);
        command.env("HOME", &self.path);
        if let Some((uid, gid)) = self.user {
            command.uid(uid).gid(gid);
        }
        command
    }
}

/// `git credential-store --file FILE store` with `password`, as a credential helper does
/// (a lock file beside the store, then a rename over it).
fn git_store(home: &Home, file: &std::path::Path, password: &str) {
    use std::io::Write;
    let mut git = home
        .run_as_user("git")
        .args(["credential-store", "--file"])
        .arg(file)
        .arg("store")
        .stdin(std::process::Stdio::piped())
        .spawn()
        .expect("git credential-store");
    let request = format!("protocol=https\nhost=github.com\nusername=dev\npassword={password}\n\n");
    git.stdin
        .take()
        .expect("stdin")
        .write_all(request.as_bytes())
        .expect("write");
    assert!(git.wait().expect("git").success(), "git credential-store");
}

/// Writes `text` to a new file beside `path` and renames it over `path`, as token refreshers
/// do.
fn replace_by_rename(path: &std::path::Path, text: &str) {
    let staged = path.with_extension("refreshing");
    std::fs::write(&staged, text).expect("staged");
    std::fs::rename(&staged, path).expect("rename");
}

/// The home the command starts with: stores written as their programs write them.
fn real_home(env: &TestEnv) {
    let home = env.home.path();
    for folder in [".codex", ".claude", ".ssh", ".aws", ".config/git"] {
        std::fs::create_dir_all(home.join(folder)).expect("mkdir");
    }
    std::fs::write(
        home.join(".codex/auth.json"),
        "{\"tokens\":{\"access\":\"ORIGINAL-SECRET-2\"}}\n",
    )
    .expect("codex");
    std::fs::write(
        home.join(".claude/.credentials.json"),
        "{\"claudeAiOauth\":{\"accessToken\":\"ORIGINAL-SECRET-3\"}}\n",
    )
    .expect("claude");
    std::fs::write(home.join(".ssh/id_ed25519"), "KEY\n").expect("key");
    std::fs::write(
        home.join(".aws/credentials"),
        "[default]\naws_secret_access_key = ORIGINAL-SECRET-5\n",
    )
    .expect("aws");
    std::fs::write(home.join("private.txt"), "ORIGINAL-SECRET-7\n").expect("private");
    std::fs::write(home.join("notes.txt"), "plain notes\n").expect("notes");
}

/// What programs outside do while the command runs: each secret replaced, made or added.
fn replace_everything(owner: &Home) {
    let home = owner.path.as_path();
    git_store(owner, &home.join(".git-credentials"), "REPLACED-SECRET-1");
    replace_by_rename(
        &home.join(".codex/auth.json"),
        "{\"tokens\":{\"access\":\"REPLACED-SECRET-2\"}}\n",
    );
    replace_by_rename(
        &home.join(".claude/.credentials.json"),
        "{\"claudeAiOauth\":{\"accessToken\":\"REPLACED-SECRET-3\"}}\n",
    );
    std::fs::write(home.join(".ssh/id_new"), "REPLACED-SECRET-4\n").expect("new key");
    std::fs::rename(home.join(".aws"), home.join(".aws.old")).expect("mv .aws");
    std::fs::create_dir(home.join(".aws")).expect("mkdir .aws");
    std::fs::write(
        home.join(".aws/credentials"),
        "[default]\naws_secret_access_key = REPLACED-SECRET-5\n",
    )
    .expect("aws");
    std::fs::write(home.join("deploy.pem"), "REPLACED-SECRET-6\n").expect("pem");
    replace_by_rename(&home.join("private.txt"), "REPLACED-SECRET-7\n");
    git_store(
        owner,
        &home.join(".config/git/credentials"),
        "REPLACED-SECRET-8",
    );
    if let Some(user) = owner.user {
        give_to(home, user);
    }
}

/// The command's script: marks that it runs, then reads every place until 20 rounds after
/// the test says all is replaced (at most 20 s), into `reads.txt`.
fn poll_script() -> String {
    let reads: Vec<String> = PLACES
        .iter()
        .map(|(place, _)| format!("cat {} 2>/dev/null", place.replace('~', "\"$HOME\"")))
        .collect();
    format!(
        "touch started\nn=0; after=0\nwhile [ $after -lt 20 ] && [ $n -lt 400 ]; do\n  {}\n  \
         [ -e replaced ] && after=$((after+1))\n  n=$((n+1)); sleep 0.05\ndone > reads.txt\n\
         cat \"$HOME/notes.txt\"\necho \"polled $n after $after\"\n",
        reads.join("; ")
    )
}

#[tokio::test]
async fn secrets_replaced_made_or_added_while_a_command_polls_them_stay_hidden() {
    if !sandbox_enforced() {
        return;
    }
    let mut env = TestEnv::new(vec![
        MockReply::tool_call("p1", "terminal", json!({"command": "sh poll.sh"})),
        MockReply::text(&["done"]),
    ])
    .await;
    env.write_config("mode = \"yolo\"\n[sandbox]\nhidden = [\"~/private.txt\"]\n");
    real_home(&env);
    let ws = env.workspace.path().to_path_buf();
    std::fs::write(ws.join("poll.sh"), poll_script()).expect("script");
    env.unprivileged(&[]);
    let home = Home::of(&env);
    git_store(
        &home,
        &home.path.join(".git-credentials"),
        "ORIGINAL-SECRET-1",
    );
    let (mut agent, session) = env.session().await;
    let replacing = {
        let (home, ws) = (home.clone(), ws.clone());
        once_started(ws.join("started"), move || {
            replace_everything(&home);
            std::fs::write(ws.join("replaced"), "").expect("marker");
        })
    };
    let response = prompt_unasked(&mut agent, &session).await;
    replacing.join().expect("replacing");
    assert_eq!(stop_reason(&response), "end_turn", "{response}");
    let result = tool_results(&env.mock, 1).pop().unwrap_or_default();
    assert!(
        result.contains("after 20"),
        "the polling outlived the replacing: {result}"
    );
    assert!(result.contains("plain notes"), "{result}");
    let reads = std::fs::read_to_string(ws.join("reads.txt")).expect("reads");
    for n in 1..=8 {
        for kind in ["ORIGINAL", "REPLACED"] {
            let secret = format!("{kind}-SECRET-{n}");
            assert!(
                !reads.contains(&secret),
                "{secret} ({}) reached the command",
                PLACES[n - 1].0
            );
        }
    }
    // The replacements happened, as real programs do them.
    let home = env.home.path();
    for (place, secret) in [
        (".git-credentials", "REPLACED-SECRET-1"),
        (".codex/auth.json", "REPLACED-SECRET-2"),
        (".aws/credentials", "REPLACED-SECRET-5"),
        (".config/git/credentials", "REPLACED-SECRET-8"),
    ] {
        let text = std::fs::read_to_string(home.join(place)).expect("store");
        assert!(text.contains(secret), "{place}: {text}");
    }
    assert!(!everything_sent(&env.mock).contains("-SECRET-"));
}
