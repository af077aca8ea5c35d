//! Second names of hidden places, closed by kind: a key or a folder inside a credential store
//! bind-mounted at another path; store folders and files that are links into `~/dotfiles`
//! (absolute and relative), read through a second mount of the home; a mount of the home made
//! while a command runs; a `[sandbox] writable` entry a command swapped for a link before the
//! next session; another program's System V shared memory. Run with and without the
//! namespaces layer. Mounting needs root: CI runs as root and drops the agent to another
//! user.

use serde_json::json;
use talaria_harness::MockReply;

use crate::support::*;

/// A home like a real one: stores, some of them links into `~/dotfiles`, each holding
/// `SECRET-<name>`.
fn dotfiles_home(home: &std::path::Path) {
    let write = |path: &str, text: &str| {
        let path = home.join(path);
        std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        std::fs::write(path, text).expect("write");
    };
    write(".ssh/id_ed25519", "SECRET-ssh-key\n");
    write(".aws/sso/cache/token.json", "SECRET-aws-sso\n");
    write(".aws/credentials", "SECRET-aws\n");
    write("dotfiles/kube/config", "SECRET-kube\n");
    write("dotfiles/docker/config.json", "SECRET-docker\n");
    write("dotfiles/netrc", "machine x password SECRET-netrc\n");
    write(".git-credentials", "https://dev:SECRET-git@github.com\n");
    write("dotfiles/README", "my dotfiles\n");
    // GNU stow makes relative links, most other managers absolute ones.
    std::os::unix::fs::symlink(home.join("dotfiles/kube"), home.join(".kube")).expect("link");
    std::os::unix::fs::symlink("dotfiles/docker", home.join(".docker")).expect("link");
    std::os::unix::fs::symlink(home.join("dotfiles/netrc"), home.join(".netrc")).expect("link");
}

/// A command script that reads each path and then a plain file, printing what it got.
fn reader(paths: &[std::path::PathBuf]) -> String {
    let mut script = String::new();
    for path in paths {
        script.push_str(&format!("cat '{}' 2>&1\n", path.display()));
    }
    script.push_str("echo read-done\n");
    script
}

#[tokio::test]
async fn every_second_name_the_mount_table_gives_a_hidden_store_is_hidden() {
    if !sandbox_enforced() || !running_as_root() {
        return;
    }
    let mut env = TestEnv::new(vec![
        MockReply::tool_call("r1", "terminal", json!({"command": "sh read.sh"})),
        MockReply::text(&["done"]),
    ])
    .await;
    env.write_config("mode = \"yolo\"\n");
    let home = env.home.path().to_path_buf();
    dotfiles_home(&home);
    let aliases = tempfile::tempdir().expect("aliases");
    let at = aliases.path().to_path_buf();
    std::fs::write(at.join("key"), "").expect("mount point");
    for folder in ["sso", "home2"] {
        std::fs::create_dir(at.join(folder)).expect("mount point");
    }
    env.unprivileged(&[&at]);
    let mounts = [
        // A key inside a store, a folder inside a store, the whole home.
        BindMount::new(&home.join(".ssh/id_ed25519"), &at.join("key")),
        BindMount::new(&home.join(".aws/sso"), &at.join("sso")),
        BindMount::new(&home, &at.join("home2")),
    ];
    assert!(mounts.iter().all(Option::is_some), "mount --bind");
    let second = at.join("home2");
    let script = reader(&[
        at.join("key"),
        at.join("sso/cache/token.json"),
        second.join("dotfiles/kube/config"),
        second.join(".kube/config"),
        second.join("dotfiles/docker/config.json"),
        second.join(".docker/config.json"),
        second.join("dotfiles/netrc"),
        second.join(".git-credentials"),
        second.join("talaria/config.toml"),
        home.join("dotfiles/kube/config"),
        second.join("dotfiles/README"),
    ]);
    std::fs::write(env.workspace.path().join("read.sh"), script).expect("script");
    let (mut agent, session) = env.session().await;
    let response = prompt_unasked(&mut agent, &session).await;
    assert_eq!(stop_reason(&response), "end_turn", "{response}");
    let output = tool_results(&env.mock, 1).pop().unwrap_or_default();
    assert!(output.contains("read-done"), "{output}");
    assert!(
        output.contains("my dotfiles"),
        "the rest of the second mount stays readable: {output}"
    );
    assert!(!output.contains("SECRET-"), "{output}");
    assert!(!output.contains("mode = "), "Talaria's settings: {output}");
    drop(mounts);
}

#[tokio::test]
async fn a_mount_of_the_home_made_while_a_command_runs_shows_it_nothing() {
    if !sandbox_enforced() || !running_as_root() {
        return;
    }
    let aliases = tempfile::tempdir().expect("aliases");
    let second = aliases.path().join("home3");
    std::fs::create_dir(&second).expect("mount point");
    let poll = format!(
        "touch started; for i in $(seq 40); do cat {0}/.git-credentials {0}/.ssh/id_ed25519 \
         {0}/dotfiles/kube/config 2>/dev/null; sleep 0.2; done; echo polled",
        second.display()
    );
    std::fs::write(aliases.path().join("poll.sh"), &poll).expect("script");
    let mut env = TestEnv::new(vec![
        MockReply::tool_call(
            "p1",
            "terminal",
            json!({"command": format!("sh {}/poll.sh", aliases.path().display())}),
        ),
        MockReply::text(&["done"]),
    ])
    .await;
    env.write_config("mode = \"yolo\"\n");
    let home = env.home.path().to_path_buf();
    dotfiles_home(&home);
    env.unprivileged(&[aliases.path()]);
    let (mut agent, session) = env.session().await;
    let mounted = std::sync::Arc::new(std::sync::Mutex::new(None));
    let mounting = {
        let (home, second, mounted) = (home.clone(), second.clone(), mounted.clone());
        once_started(env.workspace.path().join("started"), move || {
            *mounted.lock().expect("mounted") = BindMount::new(&home, &second);
        })
    };
    let response = prompt_unasked(&mut agent, &session).await;
    mounting.join().expect("mounting");
    assert!(mounted.lock().expect("mounted").is_some(), "mount --bind");
    assert_eq!(stop_reason(&response), "end_turn", "{response}");
    let output = tool_results(&env.mock, 1).pop().unwrap_or_default();
    assert!(!output.contains("SECRET-"), "{output}");
    if namespaces_off() {
        // The machine's mount table: the command is ended when the mount appears.
        assert!(
            output.contains("a mount made while the command ran shows a hidden place"),
            "{output}"
        );
        assert!(!output.contains("polled"), "{output}");
    } else {
        // A mount table of its own: the mount never reaches it.
        assert!(output.contains("polled"), "{output}");
    }
}

/// Whether the suites run without the namespaces layer (CI's second pass).
fn namespaces_off() -> bool {
    std::env::var("TALARIA_SANDBOX_NAMESPACES").as_deref() == Ok("off")
}

/// Two sessions, one after the other: in the first a command swaps `swapped` (a folder the
/// session may write, or one above a writable entry) for a link to a folder outside; in the
/// second a command writes `entry/planted`. Nothing lands outside.
async fn swapped_before_the_next_session(writable: &[&str], swapped: &str, entry: &str) {
    let outside = tempfile::tempdir().expect("outside");
    let target = outside.path().join(
        entry
            .strip_prefix(swapped)
            .unwrap_or("")
            .trim_start_matches('/'),
    );
    std::fs::create_dir_all(&target).expect("target");
    let config = format!(
        "mode = \"yolo\"\n[sandbox]\nwritable = [{}]\n",
        writable
            .iter()
            .map(|w| format!("\"{w}\""))
            .collect::<Vec<_>>()
            .join(", ")
    );
    let swap = format!(
        "mv {swapped} {swapped}.moved 2>&1; ln -s {} {swapped} 2>&1; ls -ld {swapped}; echo swap-done",
        outside.path().display()
    );
    let mut env = TestEnv::new(vec![
        MockReply::tool_call("s1", "terminal", json!({"command": swap})),
        MockReply::text(&["first"]),
        MockReply::tool_call(
            "s2",
            "terminal",
            json!({"command": format!("echo planted > {entry}/planted; echo wrote-$?")}),
        ),
        MockReply::text(&["second"]),
    ])
    .await;
    env.write_config(&config);
    for w in writable.iter().filter(|w| **w != "later") {
        std::fs::create_dir_all(env.workspace.path().join(w)).expect("entry");
    }
    env.unprivileged(&[outside.path()]);
    for turn in 0..2 {
        let (mut agent, session) = env.session().await;
        let response = prompt_unasked(&mut agent, &session).await;
        assert_eq!(
            stop_reason(&response),
            "end_turn",
            "turn {turn}: {response}"
        );
        drop(agent);
    }
    let swap_result = tool_results(&env.mock, 1).pop().unwrap_or_default();
    let write_result = tool_results(&env.mock, 3).pop().unwrap_or_default();
    assert!(
        !target.join("planted").exists(),
        "{entry}: the link's target became the next session's writable root \
         (swap: {swap_result}; write: {write_result})"
    );
    if namespaces_off() {
        assert!(
            swap_result.contains("->"),
            "the swap itself succeeds: {swap_result}"
        );
    }
}

#[tokio::test]
async fn a_writable_entry_swapped_for_a_link_is_not_the_next_sessions_writable_root() {
    if !sandbox_enforced() {
        return;
    }
    // The entry itself; its folder above; two folders above; an entry inside another
    // writable entry; an entry Talaria made because it did not exist yet.
    swapped_before_the_next_session(&["out"], "out", "out").await;
    swapped_before_the_next_session(&["build/cache"], "build", "build/cache").await;
    swapped_before_the_next_session(&["a/b/c"], "a", "a/b/c").await;
    swapped_before_the_next_session(&["data", "data/sub"], "data/sub", "data/sub").await;
    swapped_before_the_next_session(&["later"], "later", "later").await;
}

#[tokio::test]
async fn a_writable_entry_that_is_a_link_when_listed_stays_granted() {
    if !sandbox_enforced() {
        return;
    }
    // A cache kept on another disk through a link the user made: granted where it leads, in
    // every session.
    let elsewhere = tempfile::tempdir().expect("elsewhere");
    let mut env = TestEnv::new(vec![
        MockReply::tool_call(
            "w1",
            "terminal",
            json!({"command": "echo one > cache/one; echo wrote-$?"}),
        ),
        MockReply::text(&["first"]),
        MockReply::tool_call(
            "w2",
            "terminal",
            json!({"command": "echo two > cache/two; echo wrote-$?"}),
        ),
        MockReply::text(&["second"]),
    ])
    .await;
    env.write_config("mode = \"yolo\"\n[sandbox]\nwritable = [\"cache\"]\n");
    std::os::unix::fs::symlink(elsewhere.path(), env.workspace.path().join("cache")).expect("link");
    env.unprivileged(&[elsewhere.path()]);
    for _ in 0..2 {
        let (mut agent, session) = env.session().await;
        let response = prompt_unasked(&mut agent, &session).await;
        assert_eq!(stop_reason(&response), "end_turn", "{response}");
    }
    assert!(elsewhere.path().join("one").exists());
    assert!(elsewhere.path().join("two").exists());
}

/// Another program's System V segment, made as the agent's user: its id, holding `text`.
const SHM_TOOL: &str = r#"
import ctypes, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.shmat.restype = ctypes.c_void_p
def attach(sid):
    p = libc.shmat(sid, None, 0)
    return None if p in (None, ctypes.c_void_p(-1).value) else p
class Message(ctypes.Structure):
    _fields_ = [("kind", ctypes.c_long), ("text", ctypes.c_char * 32)]
if sys.argv[1] == "make":
    key = int(sys.argv[2])
    sid = libc.shmget(key, 4096, 0o1000 | 0o600)
    ctypes.memmove(attach(sid), sys.argv[3].encode(), len(sys.argv[3]))
    qid = libc.msgget(key + 1, 0o1000 | 0o600)
    libc.msgsnd(qid, ctypes.byref(Message(1, b"QUEUE-SECRET-4242")), 32, 0)
    semid = libc.semget(key + 2, 1, 0o1000 | 0o600)
    print(sid, qid, semid)
else:
    key, sid, qid, semid = (int(a) for a in sys.argv[2:6])
    found = libc.shmget(key, 0, 0)
    print("by key", found, ctypes.get_errno())
    for target in {sid, found}:
        if target >= 0:
            p = attach(target)
            print("attach", target, ctypes.string_at(p, 20) if p else "refused %d" % ctypes.get_errno())
    for q in {qid, libc.msgget(key + 1, 0)}:
        m = Message()
        got = libc.msgrcv(q, ctypes.byref(m), 32, 0, 0o4000) if q >= 0 else -1
        print("queue", q, m.text if got >= 0 else "refused %d" % ctypes.get_errno())
    for s in {semid, libc.semget(key + 2, 0, 0)}:
        # GETVAL: a value, or refused.
        value = libc.semctl(s, 0, 12) if s >= 0 else -1
        print("semaphores", s, "SEM-READ" if value >= 0 else "refused %d" % ctypes.get_errno())
    own = libc.shmget(0, 4096, 0o1000 | 0o600)
    p = attach(own)
    ctypes.memmove(p, b"own-segment-works", 17)
    print(ctypes.string_at(p, 17).decode(), libc.shmctl(own, 0, None))
    oq = libc.msgget(0, 0o1000 | 0o600)
    libc.msgsnd(oq, ctypes.byref(Message(1, b"own-queue-works")), 32, 0)
    m = Message()
    libc.msgrcv(oq, ctypes.byref(m), 32, 0, 0)
    print(m.text.decode(), libc.msgctl(oq, 0, None))
"#;

#[tokio::test]
async fn another_programs_system_v_shared_memory_is_out_of_reach() {
    if !sandbox_enforced() {
        return;
    }
    let key = 0x7a00 + (std::process::id() % 0xff) as i32;
    let mut env = TestEnv::new(Vec::new()).await;
    env.write_config("mode = \"yolo\"\n");
    std::fs::write(env.workspace.path().join("shm.py"), SHM_TOOL).expect("tool");
    env.unprivileged(&[]);
    // The other program runs as the same user, outside any sandbox.
    let mut make = std::process::Command::new("/usr/bin/python3");
    make.arg(env.workspace.path().join("shm.py")).args([
        "make",
        &key.to_string(),
        "SHM-SECRET-4242",
    ]);
    if let Some((uid, gid)) = env.user {
        use std::os::unix::process::CommandExt;
        make.uid(uid).gid(gid);
    }
    let made = make.output().expect("python3");
    let ids = String::from_utf8_lossy(&made.stdout).trim().to_string();
    assert!(
        made.status.success() && ids.split(' ').count() == 3,
        "{made:?}"
    );
    env.mock.push(MockReply::tool_call(
        "m1",
        "terminal",
        json!({"command": format!("/usr/bin/python3 shm.py steal {key} {ids}")}),
    ));
    env.mock.push(MockReply::text(&["done"]));
    let (mut agent, session) = env.session().await;
    let response = prompt_unasked(&mut agent, &session).await;
    for (flag, offset) in [("-M", 0), ("-Q", 1), ("-S", 2)] {
        let _ = std::process::Command::new("ipcrm")
            .args([flag, &(key + offset).to_string()])
            .status();
    }
    assert_eq!(stop_reason(&response), "end_turn", "{response}");
    let output = tool_results(&env.mock, 1).pop().unwrap_or_default();
    assert!(!output.contains("SHM-SECRET"), "{output}");
    assert!(!output.contains("QUEUE-SECRET"), "{output}");
    assert!(
        !output.contains("SEM-READ"),
        "another program's semaphores: {output}"
    );
    assert!(output.contains("own-segment-works 0"), "{output}");
    assert!(output.contains("own-queue-works 0"), "{output}");
}
