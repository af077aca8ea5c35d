//! A rewind and a checkpoint against every link a command can plant, on a home like a real
//! user's (`~/.ssh` with keys and `authorized_keys`, Talaria's settings): a sandboxed command
//! plants a name where `/rewind files` writes (the old fixed temporary name, every name
//! this process could pick, a dangling link, a pipe, the file itself), swaps a folder the
//! agent wrote into for a link to `~/.ssh` (absolute, relative, a folder higher up, a file
//! the rewind removes, with `force`), or makes the walk meet links and a pipe. Nothing
//! outside the workspace is written, removed or read into the checkpoints; what could be put
//! back is.

use std::path::{Path, PathBuf};

use serde_json::{Value, json};
use talaria_harness::{AgentProcess, MockReply};

use crate::support::*;

const CONFIG_MARKER: &str = "# the user's own settings 5521";
const AUTHORIZED: &str = "ssh-ed25519 AAAA-the-users-own-key user@laptop\n";
const PRIVATE_KEY: &str = "-----BEGIN OPENSSH PRIVATE KEY----- KEY-BYTES-7781\n";
/// What a file the agent changed held before: a configuration an attacker wants in place of
/// Talaria's.
const EVIL_CONFIG: &str = "mode = \"yolo\"\n[sandbox]\nmode = \"off\"\n# PLANTED-4242\n";

/// A home like a real user's, and the workspace seeded with `seed`.
struct Home {
    env: TestEnv,
    ssh: PathBuf,
    config: PathBuf,
    config_text: String,
}

fn home_with(seed: &[(&str, &str)], script: Vec<MockReply>) -> impl Future<Output = Home> {
    let seed: Vec<(String, String)> = seed
        .iter()
        .map(|(p, t)| (p.to_string(), t.to_string()))
        .collect();
    async move {
        let env = TestEnv::new(script).await;
        let home = env.home.path();
        let ssh = home.join(".ssh");
        std::fs::create_dir_all(&ssh).expect("ssh");
        std::fs::write(ssh.join("authorized_keys"), AUTHORIZED).expect("keys");
        std::fs::write(ssh.join("id_ed25519"), PRIVATE_KEY).expect("key");
        let config_text = format!("mode = \"yolo\"\n{CONFIG_MARKER}\n");
        env.write_config(&config_text);
        let config = home.join("talaria/config.toml");
        for (path, text) in &seed {
            let file = env.workspace.path().join(path);
            std::fs::create_dir_all(file.parent().expect("parent")).expect("mkdir");
            std::fs::write(&file, text).expect("seed");
        }
        Home {
            env,
            ssh,
            config,
            config_text,
        }
    }
}

impl Home {
    /// Nothing outside the workspace changed: the keys, `authorized_keys`, Talaria's settings,
    /// and no new name in `~/.ssh` or Talaria's home.
    fn untouched(&self) {
        assert_eq!(
            std::fs::read_to_string(self.ssh.join("authorized_keys")).expect("authorized_keys"),
            AUTHORIZED,
            "~/.ssh/authorized_keys"
        );
        assert_eq!(
            std::fs::read_to_string(self.ssh.join("id_ed25519")).expect("key"),
            PRIVATE_KEY
        );
        assert_eq!(
            std::fs::read_to_string(&self.config).expect("config"),
            self.config_text,
            "Talaria's settings"
        );
        let mut in_ssh: Vec<_> = std::fs::read_dir(&self.ssh)
            .expect("ssh")
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        in_ssh.sort();
        assert_eq!(
            in_ssh,
            ["authorized_keys", "id_ed25519"],
            "nothing new in ~/.ssh"
        );
        let talaria = self.env.home.path().join("talaria");
        let planted: Vec<_> = std::fs::read_dir(&talaria)
            .expect("talaria")
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".toml") && n != "config.toml")
            .collect();
        assert!(
            planted.is_empty(),
            "nothing new in Talaria's home: {planted:?}"
        );
    }

    /// No content of a key ever reached the checkpoints.
    fn key_never_kept(&self) {
        let blobs = self.env.home.path().join("talaria/checkpoints");
        let mut stack = vec![blobs];
        while let Some(dir) = stack.pop() {
            for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
                let path = entry.path();
                if path.is_dir() {
                    stack.push(path);
                } else if let Ok(bytes) = std::fs::read(&path) {
                    let text = String::from_utf8_lossy(&bytes);
                    assert!(
                        !text.contains("KEY-BYTES-7781"),
                        "a key in {}",
                        path.display()
                    );
                    assert!(!text.contains("the-users-own-key"), "{}", path.display());
                }
            }
        }
    }

    fn ws(&self) -> &Path {
        self.env.workspace.path()
    }

    /// The script the planting command runs.
    fn plant(&self, text: &str) {
        std::fs::write(self.ws().join("plant.sh"), text).expect("plant.sh");
    }
}

/// The model's turns: an answer, the agent's `writes`, then the command that plants — from
/// a script in the workspace, as an attacker would put it (the command line names nothing).
fn script(writes: &[(&str, &str)], _plant: &str) -> Vec<MockReply> {
    let calls: Vec<(String, &str, Value)> = writes
        .iter()
        .enumerate()
        .map(|(i, (path, content))| {
            (
                format!("w{i}"),
                "write_file",
                json!({"path": path, "content": content}),
            )
        })
        .collect();
    let borrowed: Vec<(&str, &str, Value)> = calls
        .iter()
        .map(|(id, tool, args)| (id.as_str(), *tool, args.clone()))
        .collect();
    vec![
        MockReply::text(&["first answer"]),
        batch(&borrowed),
        MockReply::text(&["edited"]),
        MockReply::tool_call("plant", "terminal", json!({"command": "sh plant.sh"})),
        MockReply::text(&["planted"]),
    ]
}

/// Plays the three turns, lets `before_rewind` plant more from outside, then `/rewind 2
/// files` (with `force`); returns the agent and what the rewind told.
async fn rewind_after(
    home: &mut Home,
    force: bool,
    before_rewind: impl FnOnce(&Home, &AgentProcess),
) -> (AgentProcess, String) {
    home.env.unprivileged(&[]);
    let (mut agent, session) = home.env.session().await;
    for text in ["look around", "change things", "plant"] {
        let (answer, _) = prompt(&mut agent, &session, text).await;
        assert_eq!(stop_reason(&answer), "end_turn", "{answer}");
    }
    let planted = tool_results(&home.env.mock, 4);
    assert!(
        planted.last().is_some_and(|r| !r.contains("refused")),
        "the planting command ran: {planted:?}"
    );
    before_rewind(home, &agent);
    let command = if force {
        "/rewind 2 files force"
    } else {
        "/rewind 2 files"
    };
    let (answer, updates) = prompt(&mut agent, &session, command).await;
    assert_eq!(stop_reason(&answer), "end_turn", "{answer}");
    let told = chunks(&updates, "agent_message_chunk").join("");
    (agent, told)
}

/// The rewind's reply says what the user sees: the turns that left.
fn says_two_turns(told: &str) {
    assert!(told.contains("2 turns left the conversation"), "{told}");
}

fn leftovers(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .expect("dir")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains(".talaria-tmp-") || n.contains(".talaria-restore"))
        .collect()
}

/// The old fixed temporary name, as a link to Talaria's settings.
#[tokio::test]
async fn a_planted_restore_name_never_leads_the_rewind_into_talarias_settings() {
    if !sandbox_enforced() {
        return;
    }
    let mut home = home_with(&[("a.txt", EVIL_CONFIG)], Vec::new()).await;
    let config = home.config.display().to_string();
    let (writes, plant) = (
        &[("a.txt", "the agent's version\n")],
        &format!("ln -s '{config}' .a.txt.talaria-restore && ls -la"),
    );
    home.plant(plant);
    for reply in script(writes, plant) {
        home.env.mock.push(reply);
    }
    let (_agent, told) = rewind_after(&mut home, false, |_, _| {}).await;
    home.untouched();
    says_two_turns(&told);
    assert_eq!(
        std::fs::read_to_string(home.ws().join("a.txt")).expect("a"),
        EVIL_CONFIG,
        "the file itself is put back: {told}"
    );
    assert!(told.contains("1 file put back: "), "{told}");
    assert!(
        !home.ws().join(".a.txt.talaria-restore").exists(),
        "the planted name is swept"
    );
    assert!(leftovers(home.ws()).is_empty());
}

/// Every temporary name this process could pick, each a link (to the settings, or dangling
/// to a new file in Talaria's home), planted from outside with the agent's own pid.
#[tokio::test]
async fn every_temporary_name_the_agent_could_pick_planted_as_a_link_is_never_written_through() {
    if !sandbox_enforced() {
        return;
    }
    let mut home = home_with(
        &[("a.txt", EVIL_CONFIG)],
        script(&[("a.txt", "the agent's version\n")], "true"),
    )
    .await;
    let (_agent, told) = rewind_after(&mut home, false, |home, agent| {
        let pid = agent.pid().expect("pid");
        let talaria = home.env.home.path().join("talaria");
        for n in 0..400 {
            let target = if n % 2 == 0 {
                home.config.clone()
            } else {
                talaria.join(format!("planted-{n}.toml"))
            };
            let name = home.ws().join(format!(".a.txt.talaria-tmp-{pid}-{n}"));
            std::os::unix::fs::symlink(target, name).expect("plant");
        }
    })
    .await;
    home.untouched();
    says_two_turns(&told);
    // Either a name past the planted ones was found or the write failed: never through one.
    let now = std::fs::read_to_string(home.ws().join("a.txt")).expect("a");
    assert!(
        now == EVIL_CONFIG || told.contains("not put back"),
        "{now:?} {told}"
    );
    assert!(
        leftovers(home.ws()).is_empty(),
        "the planted names are swept"
    );
}

/// The file itself replaced by a link to the settings, and a pipe at the old temporary name:
/// the link's name is left (it is not as the agent left the file), the pipe never waited on.
#[tokio::test]
async fn a_file_swapped_for_a_link_and_a_pipe_at_the_temporary_name_change_nothing_outside() {
    if !sandbox_enforced() {
        return;
    }
    let mut home = home_with(
        &[("a.txt", EVIL_CONFIG), ("b.txt", "b before\n")],
        Vec::new(),
    )
    .await;
    let config = home.config.display().to_string();
    let (writes, plant) = (
        &[("a.txt", "the agent's a\n"), ("b.txt", "the agent's b\n")],
        &format!("rm a.txt && ln -s '{config}' a.txt && mkfifo .b.txt.talaria-restore"),
    );
    home.plant(plant);
    for reply in script(writes, plant) {
        home.env.mock.push(reply);
    }
    let (_agent, told) = rewind_after(&mut home, false, |_, _| {}).await;
    home.untouched();
    says_two_turns(&told);
    assert!(told.contains("left as they are"), "{told}");
    assert!(
        home.ws().join("a.txt").is_symlink(),
        "the link is left: {told}"
    );
    assert_eq!(
        std::fs::read_to_string(home.ws().join("b.txt")).expect("b"),
        "b before\n"
    );
}

/// The same with `force`: the link's own name is replaced by the file, its target untouched.
#[tokio::test]
async fn a_forced_rewind_replaces_a_planted_link_by_name_and_never_writes_through_it() {
    if !sandbox_enforced() {
        return;
    }
    let mut home = home_with(&[("a.txt", EVIL_CONFIG)], Vec::new()).await;
    let config = home.config.display().to_string();
    let (writes, plant) = (
        &[("a.txt", "the agent's a\n")],
        &format!("rm a.txt && ln -s '{config}' a.txt"),
    );
    home.plant(plant);
    for reply in script(writes, plant) {
        home.env.mock.push(reply);
    }
    let (_agent, told) = rewind_after(&mut home, true, |_, _| {}).await;
    home.untouched();
    says_two_turns(&told);
    assert!(!home.ws().join("a.txt").is_symlink(), "{told}");
    assert_eq!(
        std::fs::read_to_string(home.ws().join("a.txt")).expect("a"),
        EVIL_CONFIG
    );
}

/// The folders the agent wrote into, swapped for links to `~/.ssh` (absolute, relative, a
/// folder two levels up) and a file the rewind would remove: the rewind writes and removes
/// nothing there, with or without `force`.
#[tokio::test]
async fn folders_swapped_for_links_to_the_ssh_folder_never_receive_or_lose_authorized_keys() {
    if !sandbox_enforced() {
        return;
    }
    for force in [true, false] {
        let mut home = home_with(
            &[
                ("deploy/authorized_keys", "ssh-ed25519 ATTACKER-KEY\n"),
                ("rel/authorized_keys", "ssh-ed25519 ATTACKER-KEY\n"),
                ("up/.ssh/authorized_keys", "ssh-ed25519 ATTACKER-KEY\n"),
            ],
            Vec::new(),
        )
        .await;
        let ssh = home.ssh.display().to_string();
        let home_dir = home.env.home.path().display().to_string();
        let relative = pathdiff(home.ws(), &home.ssh);
        let plant = format!(
            "mv deploy deploy.orig && ln -s '{ssh}' deploy && \
             mv rel rel.orig && ln -s '{relative}' rel && \
             mv up up.orig && ln -s '{home_dir}' up && \
             mv gone gone.orig && ln -s '{ssh}' gone && ls -la"
        );
        home.plant(&plant);
        let writes = [
            ("deploy/authorized_keys", "agent's key\n"),
            ("rel/authorized_keys", "agent's key\n"),
            ("up/.ssh/authorized_keys", "agent's key\n"),
            // Created by the agent: a rewind removes it.
            ("gone/authorized_keys", "agent's new file\n"),
        ];
        for reply in script(&writes, &plant) {
            home.env.mock.push(reply);
        }
        let (_agent, told) = rewind_after(&mut home, force, |_, _| {}).await;
        home.untouched();
        says_two_turns(&told);
        // What the cut command moved aside goes; what sits behind a link now is told, and
        // left (a link is not as the agent left the folder; with `force`, a link on the way
        // is never followed).
        let put_back = told
            .lines()
            .find(|l| l.contains("put back: "))
            .unwrap_or_default();
        for name in ["deploy", "rel", "up/.ssh", "gone"] {
            let behind_link = format!("/{name}/authorized_keys");
            assert!(told.contains(&behind_link), "{name} is told about: {told}");
            assert!(!put_back.contains(&behind_link), "{name}: {told}");
        }
        for name in ["deploy", "rel", "up", "gone"] {
            assert!(
                home.ws().join(name).is_symlink(),
                "{name}: the link is left"
            );
        }
    }
}

/// `a` relative to `from`, as `ln -s` takes it.
fn pathdiff(from: &Path, to: &Path) -> String {
    let up = from.components().count() - 1;
    format!(
        "{}{}",
        "../".repeat(up),
        to.strip_prefix("/").expect("absolute").display()
    )
}

/// The walk of a command's checkpoint meets a folder swapped for a link to `~/.ssh`, a file
/// swapped for a link to the key, and a pipe: no key reaches the checkpoints, and the rewind
/// puts the workspace back without touching `~/.ssh`.
#[tokio::test]
async fn checkpoint_walks_never_follow_links_a_command_planted() {
    if !sandbox_enforced() {
        return;
    }
    let mut home = home_with(
        &[("sub/notes.txt", "notes\n"), ("data.txt", "data\n")],
        Vec::new(),
    )
    .await;
    let ssh = home.ssh.display().to_string();
    let walk_command = format!(
        "mv sub sub.orig && ln -s '{ssh}' sub && rm data.txt && \
         ln -s '{ssh}/id_ed25519' data.txt && mkfifo pipe && ln -s '{ssh}' keys"
    );
    home.env.mock.push(MockReply::text(&["first answer"]));
    std::fs::write(home.ws().join("walk.sh"), walk_command).expect("walk.sh");
    std::fs::write(
        home.ws().join("append.sh"),
        "echo more >> keys/authorized_keys; ls",
    )
    .expect("append.sh");
    home.env.mock.push(MockReply::tool_call(
        "t",
        "terminal",
        json!({"command": "sh walk.sh"}),
    ));
    home.env.mock.push(MockReply::text(&["walked"]));
    home.env.mock.push(MockReply::tool_call(
        "t2",
        "terminal",
        json!({"command": "sh append.sh"}),
    ));
    home.env.mock.push(MockReply::text(&["again"]));
    home.env.unprivileged(&[]);
    let (mut agent, session) = home.env.session().await;
    for text in ["look around", "swap things", "append through the link"] {
        let (answer, _) = prompt(&mut agent, &session, text).await;
        assert_eq!(stop_reason(&answer), "end_turn", "{answer}");
    }
    home.key_never_kept();
    let (answer, updates) = prompt(&mut agent, &session, "/rewind 2 files").await;
    assert_eq!(stop_reason(&answer), "end_turn", "{answer}");
    let told = chunks(&updates, "agent_message_chunk").join("");
    home.untouched();
    home.key_never_kept();
    // The names the command made links are left as links, told, never followed.
    for name in ["data.txt", "sub/notes.txt"] {
        let shown = home.ws().join(name).display().to_string();
        assert!(told.contains(&shown), "{name}: {told}");
    }
    assert!(home.ws().join("data.txt").is_symlink(), "{told}");
    assert!(home.ws().join("sub").is_symlink(), "{told}");
}

fn fingerprint(text: &str) -> String {
    use sha2::Digest;
    let digest = sha2::Sha256::digest(text.as_bytes());
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    format!("sha256:{hex}")
}

/// How many of the `n` files are back to what they held before.
fn back(dir: &Path, n: usize) -> usize {
    (0..n)
        .filter(|i| {
            std::fs::read_to_string(dir.join(format!("f{i:03}"))).ok()
                == Some(format!("before {i}\n"))
        })
        .count()
}

/// A rewind putting back 300 files is killed (`kill -9`, or the failpoint after the 50th
/// file in a failpoints build) part-way; the next process's load finishes it (every file
/// back, no temporary name left), and the retried rewind says so.
#[tokio::test]
async fn a_rewind_with_files_cut_by_a_kill_is_finished_by_the_next_load() {
    const FILES: usize = 300;
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
    for i in 0..FILES {
        std::fs::write(
            env.workspace.path().join(format!("f{i:03}")),
            format!("before {i}\n"),
        )
        .expect("seed");
    }
    env.extra_env
        .push(("TALARIA_CRASH_AT".into(), "rewind::file::after#50".into()));
    env.unprivileged(&[]);
    let dir = env.workspace.path().to_path_buf();
    let (mut agent, session) = env.session().await;
    let (first, first_updates) = prompt(&mut agent, &session, "look around").await;
    let answer_id = first_updates
        .iter()
        .rev()
        .find_map(|u| u["messageId"].as_str())
        .expect("answer id")
        .to_string();
    assert_eq!(stop_reason(&first), "end_turn");
    let (second, _) = prompt(&mut agent, &session, "change all").await;
    let user_id = second["result"]["_meta"]["userMessageId"]
        .as_str()
        .expect("user id")
        .to_string();
    assert_eq!(back(&dir, FILES), 0, "the command changed every file");
    let params = json!({
        "sessionId": session,
        "beforeMessage": {"messageId": user_id, "messageFingerprint": fingerprint("change all")},
        "resumeAtMessage": {"messageId": answer_id, "messageFingerprint": fingerprint("first answer")},
        "restoreFiles": true,
    });
    agent
        .start_request("_session/rewind", params.clone())
        .await
        .expect("sends");
    // Killed part-way: by the failpoint, or here once some files are back.
    let deadline = std::time::Instant::now() + WAIT;
    let at_kill = loop {
        if agent
            .wait_exit(std::time::Duration::from_millis(1))
            .await
            .is_ok()
        {
            break back(&dir, FILES);
        }
        let now = back(&dir, FILES);
        if now >= 10 || std::time::Instant::now() > deadline {
            kill_now(&agent);
            break now;
        }
    };
    let _ = agent.wait_exit(WAIT).await;
    eprintln!("{at_kill} of {FILES} files were back at the kill");
    env.extra_env.clear();
    let mut agent = initialized(&env).await;
    agent
        .call("session/load", load_params(&env, &session))
        .await
        .expect("load");
    // The retry is served once the load finished what the rewind left.
    let retried = agent
        .call("_session/rewind", params)
        .await
        .expect("retried");
    assert_eq!(retried["rewound"], true, "{retried}");
    assert_eq!(back(&dir, FILES), FILES, "every file is back");
    assert!(
        leftovers(&dir).is_empty(),
        "no temporary name left: {:?}",
        leftovers(&dir)
    );
}

/// A hard link to the user's key that already sits in the workspace (a dotfiles tool left
/// it): a command removes it and `/rewind files force` runs. Neither the command's walk nor
/// the rewind ever keeps or puts back the key's content: a second name of a hidden file is
/// hidden too.
#[tokio::test]
async fn a_hard_link_to_a_key_in_the_workspace_is_never_kept_nor_put_back() {
    if !sandbox_enforced() {
        return;
    }
    let mut home = home_with(&[("a.txt", "before\n")], Vec::new()).await;
    let linked = home.ws().join("sub/deeper/hl-key");
    std::fs::create_dir_all(linked.parent().expect("parent")).expect("sub");
    std::fs::hard_link(home.ssh.join("id_ed25519"), &linked).expect("a hard link");
    let (writes, plant) = (
        &[("a.txt", "the agent's version\n")],
        "rm sub/deeper/hl-key && ls -la sub/deeper",
    );
    home.plant(plant);
    for reply in script(writes, plant) {
        home.env.mock.push(reply);
    }
    let (_agent, told) = rewind_after(&mut home, true, |_, _| {}).await;
    home.untouched();
    home.key_never_kept();
    says_two_turns(&told);
    if let Ok(text) = std::fs::read_to_string(&linked) {
        assert!(
            !text.contains("KEY-BYTES-7781"),
            "the key was put back: {told}"
        );
    }
    assert_eq!(
        std::fs::read_to_string(home.ws().join("a.txt")).expect("a"),
        "before\n",
        "the agent's own edit is put back: {told}"
    );
}
