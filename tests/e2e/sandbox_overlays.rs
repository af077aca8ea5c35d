//! Overlay mounts as second names of hidden places: an overlay whose lower layer is the home,
//! one whose upper layer is a credential store, one showing a store folder whole, a layer
//! list whose second layer is the home (with a space in the first one's name), and a bind
//! mount of an overlay; read by a command and by the file tools (`search_files`,
//! `read_file`), through a `~/.config/gh` link into `~/dotfiles` among others. And an
//! overlay of the home made while a command runs. Run with and without the namespaces
//! layer. Mounting an overlay the agent's user sees needs root (CI runs as root and drops
//! the agent to another user); elsewhere these tests fail saying so.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Value, json};
use talaria_harness::MockReply;

use crate::support::*;

/// An overlay mount, taken off when dropped.
struct Overlay {
    point: PathBuf,
}

impl Overlay {
    /// Mounts the overlay of `lower` (top first) and `upper` at `point`; `work` is its work
    /// folder. Panics with the reason when it cannot be made.
    fn new(lower: &[&Path], upper: &Path, work: &Path, point: &Path) -> Overlay {
        let lower: Vec<String> = lower
            .iter()
            .map(|layer| layer.display().to_string().replace(':', "\\:"))
            .collect();
        let options = format!(
            "lowerdir={},upperdir={},workdir={}",
            lower.join(":"),
            upper.display(),
            work.display()
        );
        let made = std::process::Command::new("mount")
            .args(["-t", "overlay", "-o", &options, "overlay"])
            .arg(point)
            .output()
            .expect("mount (util-linux) runs");
        assert!(
            made.status.success(),
            "an overlay cannot be mounted here ({options}): {}",
            String::from_utf8_lossy(&made.stderr)
        );
        Overlay {
            point: point.to_path_buf(),
        }
    }
}

impl Drop for Overlay {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(&self.point)
            .status();
    }
}

/// Fails the test, saying why, where overlays for another user cannot be made.
fn needs_root() {
    assert!(
        running_as_root(),
        "these tests mount overlays the agent's user sees, which needs root (CI runs them as \
         root); an overlay in a user namespace of the test's own would not be in the agent's \
         mount table"
    );
}

/// A home like a real one: stores holding `SECRET-<name>`, GitHub CLI's folder a relative
/// link into `~/dotfiles`, kube's an absolute one, and a plain file.
fn stores_home(home: &Path) {
    let write = |path: &str, text: &str| {
        let path = home.join(path);
        std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        std::fs::write(path, text).expect("write");
    };
    write(
        ".aws/credentials",
        "[default]\naws_secret_access_key = SECRET-aws\n",
    );
    write(".ssh/id_ed25519", "SECRET-ssh-key\n");
    write(
        "dotfiles/gh/hosts.yml",
        "github.com:\n  oauth_token: SECRET-gh\n",
    );
    write("dotfiles/kube/config", "SECRET-kube\n");
    write(".git-credentials", "https://dev:SECRET-git@github.com\n");
    write("README.txt", "plain home file\n");
    std::fs::create_dir_all(home.join(".config")).expect("config");
    std::os::unix::fs::symlink("../dotfiles/gh", home.join(".config/gh")).expect("link");
    std::os::unix::fs::symlink(home.join("dotfiles/kube"), home.join(".kube")).expect("link");
}

/// Folders for an overlay's upper and work layers, under `at`.
fn layers_for(at: &Path, name: &str) -> (PathBuf, PathBuf) {
    let (upper, work) = (
        at.join(format!("{name}-up")),
        at.join(format!("{name}-work")),
    );
    for folder in [&upper, &work] {
        std::fs::create_dir_all(folder).expect("layer");
    }
    (upper, work)
}

/// Lets every tool call the agent asks about go ahead, so what stops a read is the sandbox's
/// decision of what is hidden, not the user.
fn answer_yes() -> impl FnMut(&str, &Value) -> Result<Option<Value>, (i64, String)> {
    |method, params| match method {
        "session/request_permission" => Ok(Some(
            json!({"outcome": {"outcome": "selected", "optionId": "allow_once"}}),
        )),
        _ => panic!("the agent asked the client for {method}: {params}"),
    }
}

#[tokio::test]
async fn every_overlay_that_shows_a_hidden_store_hides_it_there() {
    if !sandbox_enforced() {
        return;
    }
    needs_root();
    let mut env = TestEnv::new(Vec::new()).await;
    env.write_config("mode = \"yolo\"\n");
    let home = env.home.path().to_path_buf();
    stores_home(&home);
    // On the home's file system: an upper layer and its work folder must share one.
    let mounts_dir = tempfile::tempdir_in(home.parent().expect("tmp")).expect("mounts");
    let at = mounts_dir.path().to_path_buf();
    let base = at.join("base layer");
    std::fs::create_dir_all(&base).expect("base");
    std::fs::write(base.join("from-base.txt"), "base file\n").expect("base file");
    for point in ["ovl", "upper", "sshview", "multi", "again"] {
        std::fs::create_dir(at.join(point)).expect("mount point");
    }
    env.unprivileged(&[&at]);
    let (up1, w1) = layers_for(&at, "ovl");
    let w2 = at.join("upper-work");
    std::fs::create_dir(&w2).expect("work folder");
    let (up3, w3) = layers_for(&at, "sshview");
    let (up4, w4) = layers_for(&at, "multi");
    let overlays = [
        // The home as the lower layer; a store folder as the upper layer; a store folder
        // shown whole; the home as the second of two lower layers.
        Overlay::new(&[home.as_path()], &up1, &w1, &at.join("ovl")),
        Overlay::new(
            &[base.as_path()],
            &home.join(".aws"),
            &w2,
            &at.join("upper"),
        ),
        Overlay::new(
            &[home.join(".ssh").as_path()],
            &up3,
            &w3,
            &at.join("sshview"),
        ),
        Overlay::new(
            &[base.as_path(), home.as_path()],
            &up4,
            &w4,
            &at.join("multi"),
        ),
    ];
    let again = BindMount::new(&at.join("ovl"), &at.join("again")).expect("mount --bind");
    let (ovl, multi) = (at.join("ovl"), at.join("multi"));
    let mut script = String::new();
    for path in [
        ovl.join(".aws/credentials"),
        ovl.join(".ssh/id_ed25519"),
        ovl.join(".config/gh/hosts.yml"),
        ovl.join("dotfiles/gh/hosts.yml"),
        ovl.join(".kube/config"),
        ovl.join(".git-credentials"),
        at.join("upper/credentials"),
        at.join("sshview/id_ed25519"),
        multi.join(".aws/credentials"),
        multi.join(".config/gh/hosts.yml"),
        at.join("again/.aws/credentials"),
        at.join("again/.git-credentials"),
    ] {
        script.push_str(&format!("cat '{}' 2>&1\n", path.display()));
    }
    script.push_str(&format!(
        "grep -r SECRET '{}' '{}' 2>&1 | head -20\ncat '{}' '{}' '{}'\necho read-done\n",
        ovl.display(),
        multi.display(),
        ovl.join("README.txt").display(),
        multi.join("from-base.txt").display(),
        multi.join("README.txt").display(),
    ));
    std::fs::write(env.workspace.path().join("read.sh"), script).expect("script");
    env.mock.push(MockReply::tool_call(
        "r1",
        "terminal",
        json!({"command": "sh read.sh"}),
    ));
    let folders = [&ovl, &multi, &at.join("again"), &at.join("upper")];
    let mut calls: Vec<(String, &str, Value)> = folders
        .iter()
        .enumerate()
        .map(|(i, folder)| {
            (
                format!("s{i}"),
                "search_files",
                json!({"pattern": "SECRET", "path": folder}),
            )
        })
        .collect();
    for (i, file) in [
        ovl.join(".aws/credentials"),
        ovl.join(".config/gh/hosts.yml"),
        multi.join(".git-credentials"),
        at.join("sshview/id_ed25519"),
    ]
    .iter()
    .enumerate()
    {
        calls.push((format!("f{i}"), "read_file", json!({"path": file})));
    }
    let borrowed: Vec<(&str, &str, Value)> = calls
        .iter()
        .map(|(id, tool, args)| (id.as_str(), *tool, args.clone()))
        .collect();
    env.mock.push(batch(&borrowed));
    env.mock.push(MockReply::text(&["done"]));
    let mut agent = initialized(&env).await;
    let session = agent
        .start_session(env.workspace.path())
        .await
        .expect("session");
    let id = agent
        .start_request("session/prompt", text_prompt(&session, "look"))
        .await
        .expect("prompt");
    let response = agent
        .drive(id, Duration::from_secs(90), answer_yes())
        .await
        .expect("response");
    assert_eq!(stop_reason(&response), "end_turn", "{response}");
    let output = tool_results(&env.mock, 1).pop().unwrap_or_default();
    assert!(output.contains("read-done"), "{output}");
    for plain in ["plain home file", "base file"] {
        assert!(
            output.contains(plain),
            "the rest of the overlays stays readable ({plain}): {output}"
        );
    }
    let sent = everything_sent(&env.mock);
    let seen = serde_json::to_string(&agent.transcript).unwrap_or_default();
    assert!(
        !sent.contains("SECRET-"),
        "{}",
        tool_results(&env.mock, 2).join("\n---\n")
    );
    assert!(!seen.contains("SECRET-"), "a secret reached the client");
    let results = tool_results(&env.mock, 2);
    assert_eq!(results.len(), 1 + 8, "{results:#?}");
    // Each search finds nothing of the stores (or refuses a store shown whole); each read
    // says why it was refused.
    for result in &results[1..] {
        assert!(
            result.contains("No matches") || result.contains("hid"),
            "{results:#?}"
        );
    }
    for result in &results[5..] {
        assert!(result.contains("hid"), "read_file names why: {results:#?}");
    }
    drop(again);
    drop(overlays);
}

#[tokio::test]
async fn an_overlay_of_the_home_made_while_a_command_runs_shows_it_nothing() {
    if !sandbox_enforced() {
        return;
    }
    needs_root();
    let mut env = TestEnv::new(Vec::new()).await;
    env.write_config("mode = \"yolo\"\n");
    let home = env.home.path().to_path_buf();
    stores_home(&home);
    let mounts_dir = tempfile::tempdir().expect("mounts");
    let at = mounts_dir.path().to_path_buf();
    let point = at.join("late");
    std::fs::create_dir(&point).expect("mount point");
    let poll = format!(
        "touch started; for i in $(seq 40); do cat {0}/.aws/credentials {0}/.config/gh/hosts.yml \
         {0}/.git-credentials 2>/dev/null; sleep 0.2; done; echo polled",
        point.display()
    );
    std::fs::write(at.join("poll.sh"), &poll).expect("script");
    env.mock.push(MockReply::tool_call(
        "p1",
        "terminal",
        json!({"command": format!("sh {}/poll.sh", at.display())}),
    ));
    env.mock.push(MockReply::text(&["done"]));
    env.unprivileged(&[&at]);
    let (upper, work) = layers_for(&at, "late");
    let (mut agent, session) = env.session().await;
    let mounted = std::sync::Arc::new(std::sync::Mutex::new(None));
    let mounting = {
        let (home, point, mounted) = (home.clone(), point.clone(), mounted.clone());
        once_started(env.workspace.path().join("started"), move || {
            *mounted.lock().expect("mounted") =
                Some(Overlay::new(&[home.as_path()], &upper, &work, &point));
        })
    };
    let response = prompt_unasked(&mut agent, &session).await;
    mounting.join().expect("mounting");
    assert!(
        mounted.lock().expect("mounted").is_some(),
        "mount -t overlay"
    );
    assert_eq!(stop_reason(&response), "end_turn", "{response}");
    let output = tool_results(&env.mock, 1).pop().unwrap_or_default();
    assert!(!output.contains("SECRET-"), "{output}");
    if std::env::var("TALARIA_SANDBOX_NAMESPACES").as_deref() == Ok("off") {
        // The machine's mount table: the command is ended when the overlay appears.
        assert!(
            output.contains("a mount made while the command ran shows a hidden place"),
            "{output}"
        );
        assert!(!output.contains("polled"), "{output}");
    } else {
        // A mount table of its own: the overlay never reaches it.
        assert!(output.contains("polled"), "{output}");
    }
}
