//! The sandbox's doors Landlock cannot see, closed, over stdio against the real kernel (the
//! agent runs as an unprivileged user when the tests run as root): the terminal, processes
//! that outlive their command, other processes, UNIX sockets, metadata outside the
//! workspace, shared `/dev/shm`, keys made after the session started, and hard links to
//! keys. The suite runs twice in CI: with namespaces (the default) and with
//! `TALARIA_SANDBOX_NAMESPACES=off`; each test asserts what the active layers promise.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use talaria_harness::{AgentProcess, MockReply, WireFraming, binary::talaria_bin};

use crate::support::*;

/// Whether this run expects the namespaces layer (CI runs the suite once without it).
pub(crate) fn namespaces_expected() -> bool {
    !matches!(
        std::env::var("TALARIA_SANDBOX_NAMESPACES")
            .unwrap_or_default()
            .to_ascii_lowercase()
            .as_str(),
        "off" | "0" | "false" | "no"
    )
}

/// Answers the client's side: a command the parser cannot analyse asks even in yolo, and is
/// allowed once (the sandbox is what these tests are about).
fn allow_commands() -> impl FnMut(&str, &Value) -> Result<Option<Value>, (i64, String)> {
    |method, params| match method {
        "session/request_permission" => Ok(Some(
            json!({"outcome": {"outcome": "selected", "optionId": "allow_once"}}),
        )),
        _ => panic!("the agent asked the client for {method}: {params}"),
    }
}

/// Runs one prompt to its end; returns the response.
pub(crate) async fn run_turn(agent: &mut AgentProcess, session: &str) -> Value {
    let id = agent
        .start_request("session/prompt", text_prompt(session, "go"))
        .await
        .expect("prompt");
    agent
        .drive(id, WAIT, allow_commands())
        .await
        .expect("response")
}

/// A sandboxed env in yolo (what the parser lets through still meets the kernel).
pub(crate) async fn yolo_env(script: Vec<MockReply>, extra_config: &str) -> TestEnv {
    let env = TestEnv::new(script).await;
    env.write_config(&format!("mode = \"yolo\"\n{extra_config}"));
    env
}

// ---------------------------------------------------------------------------------------
// Processes that outlive their command.

/// A loop that touches `beat-<name>` in the workspace every 100 ms, tagged with `tag` so it
/// can be found in `/proc`.
fn heartbeat(workspace: &Path, tag: &str, name: &str) -> String {
    format!(
        "while :; do touch {}/beat-{name}; sleep 0.1; done # {tag}",
        workspace.display()
    )
}

/// Ways a command detaches a process from itself, each running a heartbeat.
fn detachers(workspace: &Path, tag: &str) -> Vec<(&'static str, String)> {
    let beat = |name| heartbeat(workspace, tag, name);
    vec![
        ("setsid", format!("setsid -f sh -c '{}'", beat("setsid"))),
        (
            "new-group",
            format!(
                "perl -e 'setpgrp(0,0); exec \"sh\", \"-c\", $ARGV[0]' '{}' &",
                beat("new-group")
            ),
        ),
        (
            "double-fork",
            format!(
                "perl -MPOSIX -e 'exit if fork; POSIX::setsid(); exit if fork; exec \"sh\", \"-c\", $ARGV[0]' '{}'",
                beat("double-fork")
            ),
        ),
        (
            "disown",
            format!("set -m; sh -c '{}' & disown", beat("disown")),
        ),
        (
            "grandchild",
            format!("(sh -c '{}' &) &", beat("grandchild")),
        ),
        (
            "nohup",
            format!("nohup sh -c '{}' >/dev/null 2>&1 &", beat("nohup")),
        ),
    ]
}

/// One command that starts every detacher, then `then`.
fn detaching_command(workspace: &Path, tag: &str, then: &str) -> String {
    let starts: Vec<String> = detachers(workspace, tag)
        .into_iter()
        .map(|(_, start)| {
            let end = if start.ends_with('&') { "" } else { ";" };
            format!("{{ {start}{end} }} 2>/dev/null")
        })
        .collect();
    format!("{}\n{then}", starts.join("\n"))
}

/// The heartbeat files that exist.
fn beats(workspace: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(workspace)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("beat-"))
        })
        .collect()
}

/// Waits until at least `count` heartbeats have started.
async fn heartbeats_started(workspace: &Path, count: usize) {
    let started = Instant::now();
    while beats(workspace).len() < count && started.elapsed() < WAIT {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        beats(workspace).len() >= count,
        "only {:?} started",
        beats(workspace)
    );
}

/// Asserts that within a second nothing tagged is left and no heartbeat moves.
async fn nothing_survives(workspace: &Path, tag: &str, when: &str) {
    let started = Instant::now();
    while !tagged_processes(tag).is_empty() && started.elapsed() < Duration::from_secs(1) {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        tagged_processes(tag).is_empty(),
        "{when}: still running: {:#?}",
        tagged_processes(tag)
    );
    let stamp = |p: &PathBuf| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    let before: Vec<_> = beats(workspace).iter().map(stamp).collect();
    tokio::time::sleep(Duration::from_millis(400)).await;
    let after: Vec<_> = beats(workspace).iter().map(stamp).collect();
    assert_eq!(before, after, "{when}: a heartbeat is still beating");
}

/// How many detachers must really have started their loop: with namespaces all of them;
/// without, the filters refuse new sessions and groups, so those that need one fail.
fn detachers_that_start() -> usize {
    if namespaces_expected() { 6 } else { 4 }
}

#[tokio::test]
async fn nothing_a_foreground_call_starts_outlives_it_or_holds_its_result() {
    if !sandbox_enforced() {
        return;
    }
    let tag = format!("doors-fg-{}", std::process::id());
    let mut env = yolo_env(Vec::new(), "").await;
    let command = detaching_command(env.workspace.path(), &tag, "sleep 0.6; echo started-all");
    env.mock.push(MockReply::tool_call(
        "f1",
        "terminal",
        json!({"command": command, "timeout": 20}),
    ));
    env.mock.push(MockReply::tool_call(
        "f2",
        "terminal",
        json!({"command": "setsid -f sleep 30; (sleep 30 &); sleep 30 > /dev/null & echo quick", "timeout": 3}),
    ));
    env.mock.push(MockReply::text(&["done"]));
    env.unprivileged(&[]);
    let (mut agent, session) = env.session().await;
    let started = Instant::now();
    run_turn(&mut agent, &session).await;
    let took = started.elapsed();
    let results = tool_results(&env.mock, 2);
    assert!(results[0].contains("started-all"), "{}", results[0]);
    assert!(
        results[0].contains("left running") && results[0].contains("ended with it"),
        "the model is told what was ended: {}",
        results[0]
    );
    assert!(results[1].contains("quick"), "{}", results[1]);
    assert!(
        !results[1].contains("Timed out"),
        "a detached child held the call: {}",
        results[1]
    );
    assert!(took < Duration::from_secs(8), "the turn took {took:?}");
    assert!(
        beats(env.workspace.path()).len() >= detachers_that_start(),
        "{:?}",
        beats(env.workspace.path())
    );
    nothing_survives(env.workspace.path(), &tag, "after the call").await;
}

/// A background process running every detacher, and the agent with its session.
async fn background_detachers(tag: &str, after: Vec<MockReply>) -> (TestEnv, AgentProcess, String) {
    let mut env = yolo_env(Vec::new(), "").await;
    let command = detaching_command(env.workspace.path(), tag, "sleep 300");
    env.mock.push(MockReply::tool_call(
        "b1",
        "terminal",
        json!({"command": command, "background": true}),
    ));
    env.mock.push(MockReply::text(&["started"]));
    for reply in after {
        env.mock.push(reply);
    }
    env.unprivileged(&[]);
    let (mut agent, session) = env.session().await;
    run_turn(&mut agent, &session).await;
    heartbeats_started(env.workspace.path(), detachers_that_start()).await;
    (env, agent, session)
}

#[tokio::test]
async fn process_kill_ends_everything_the_background_command_started() {
    if !sandbox_enforced() {
        return;
    }
    let tag = format!("doors-kill-{}", std::process::id());
    let (env, mut agent, session) = background_detachers(
        &tag,
        vec![
            MockReply::tool_call("k1", "process", json!({"action": "kill", "id": "proc_1"})),
            MockReply::text(&["killed"]),
        ],
    )
    .await;
    run_turn(&mut agent, &session).await;
    nothing_survives(env.workspace.path(), &tag, "after process kill").await;
}

#[tokio::test]
async fn session_close_ends_everything_its_commands_started() {
    if !sandbox_enforced() {
        return;
    }
    let tag = format!("doors-close-{}", std::process::id());
    let (env, mut agent, session) = background_detachers(&tag, Vec::new()).await;
    agent
        .call("session/close", json!({"sessionId": session}))
        .await
        .expect("close");
    nothing_survives(env.workspace.path(), &tag, "after session/close").await;
}

#[tokio::test]
async fn the_agents_exit_or_death_ends_everything_its_commands_started() {
    if !sandbox_enforced() {
        return;
    }
    for kill in [false, true] {
        let tag = format!("doors-exit-{kill}-{}", std::process::id());
        let (env, mut agent, _session) = background_detachers(&tag, Vec::new()).await;
        if kill {
            kill_now(&agent);
        } else {
            agent.close_stdin();
        }
        agent.wait_exit(WAIT).await.expect("agent exits");
        let how = if kill {
            "kill -9 of the agent"
        } else {
            "the agent's exit"
        };
        nothing_survives(env.workspace.path(), &tag, how).await;
    }
}

#[tokio::test]
async fn cancel_ends_everything_the_running_command_started() {
    if !sandbox_enforced() {
        return;
    }
    let tag = format!("doors-cancel-{}", std::process::id());
    let mut env = yolo_env(Vec::new(), "").await;
    let command = detaching_command(env.workspace.path(), &tag, "sleep 300");
    env.mock.push(MockReply::tool_call(
        "c1",
        "terminal",
        json!({"command": command, "timeout": 600}),
    ));
    env.unprivileged(&[]);
    let (mut agent, session) = env.session().await;
    let id = agent
        .start_request("session/prompt", text_prompt(&session, "go"))
        .await
        .expect("prompt");
    heartbeats_started(env.workspace.path(), detachers_that_start()).await;
    agent
        .notify("session/cancel", json!({"sessionId": session}))
        .await
        .expect("cancel");
    let response = agent
        .drive(id, WAIT, allow_commands())
        .await
        .expect("response");
    assert_eq!(stop_reason(&response), "cancelled", "{response}");
    nothing_survives(env.workspace.path(), &tag, "after session/cancel").await;
}

#[tokio::test]
async fn a_fork_bomb_ends_as_a_failed_call_and_the_agent_stays_responsive() {
    if !sandbox_enforced() {
        return;
    }
    let mut env = yolo_env(
        vec![
            MockReply::tool_call(
                "fb",
                "terminal",
                json!({"command": "printf 'b() { b | b & }; b' > bomb.sh; bash bomb.sh; sleep 3", "timeout": 60}),
            ),
            MockReply::text(&["survived"]),
            MockReply::tool_call("after", "terminal", json!({"command": "echo still-here"})),
            MockReply::text(&["done"]),
        ],
        "[sandbox]\nmax_processes = 48\n",
    )
    .await;
    env.unprivileged(&[]);
    let (mut agent, session) = env.session().await;
    run_turn(&mut agent, &session).await;
    let result = &tool_results(&env.mock, 1)[0];
    assert!(
        result.contains("process limit") && result.contains("max_processes = 48"),
        "{result}"
    );
    assert!(result.contains("Exit code: 1"), "a failed call: {result}");
    let started = Instant::now();
    run_turn(&mut agent, &session).await;
    assert!(started.elapsed() < Duration::from_secs(10));
    let last = tool_results(&env.mock, 3)
        .last()
        .cloned()
        .unwrap_or_default();
    assert!(last.contains("still-here"), "{last}");
}

// ---------------------------------------------------------------------------------------
// Other processes, the terminal, sockets.

#[tokio::test]
async fn commands_cannot_change_the_agents_limits_priority_or_affinity() {
    if !sandbox_enforced() {
        return;
    }
    let mut env = yolo_env(vec![], "").await;
    env.unprivileged(&[]);
    let mut agent = env.spawn().await;
    let pid = agent.pid().expect("pid");
    let tries = [
        format!("prlimit --pid {pid} --nofile=4:4 && echo CHANGED"),
        format!("prlimit --pid {pid} --core=unlimited && echo CHANGED"),
        format!("renice -n 19 -p {pid} && echo CHANGED"),
        format!("taskset -p 1 {pid} && echo CHANGED"),
        format!("ionice -c 3 -p {pid} && echo CHANGED"),
        "renice -n 19 -u $(id -u) && echo CHANGED".to_string(),
        format!("kill -STOP {pid} && echo CHANGED"),
        // The command's supervisor (its parent): never signalled alone.
        "kill -STOP $PPID && echo CHANGED".to_string(),
        "kill -KILL $PPID && echo CHANGED".to_string(),
        "/usr/bin/python3 -c 'import os; os.kill(os.getppid(), 9)' && echo CHANGED".to_string(),
        format!("cat /proc/{pid}/environ && echo CHANGED"),
    ];
    let mut script: Vec<MockReply> = tries
        .iter()
        .enumerate()
        .map(|(i, command)| {
            MockReply::tool_call(&format!("o{i}"), "terminal", json!({ "command": command }))
        })
        .collect();
    script.push(MockReply::text(&["done"]));
    for reply in script {
        env.mock.push(reply);
    }
    let session = agent
        .start_session(env.workspace.path())
        .await
        .expect("session");
    let limits_before = std::fs::read_to_string(format!("/proc/{pid}/limits")).unwrap_or_default();
    run_turn(&mut agent, &session).await;
    let results: Vec<String> = (1..=tries.len())
        .map(|i| {
            tool_results(&env.mock, i)
                .last()
                .cloned()
                .unwrap_or_default()
        })
        .collect();
    for (command, result) in tries.iter().zip(&results) {
        assert!(!result.contains("CHANGED"), "{command}: {result}");
    }
    let limits_after = std::fs::read_to_string(format!("/proc/{pid}/limits")).unwrap_or_default();
    assert_eq!(limits_before, limits_after, "the agent's limits changed");
    // The agent is not dumpable and dumps no core.
    assert!(
        limits_after
            .lines()
            .any(|l| l.starts_with("Max core file size") && l.contains(" 0 ")),
        "{limits_after}"
    );
}

/// The wrapper that starts the agent in a new session with `slave` as its controlling
/// terminal (stdin and stdout stay the harness's pipes), as a terminal would.
const WITH_TERMINAL: &str = "import os, sys\npid = os.fork()\nif pid:\n    _, status = os.waitpid(pid, 0)\n    sys.exit(os.waitstatus_to_exitcode(status))\nos.setsid()\nfd = os.open(sys.argv[1], os.O_RDWR)\nos.execv(sys.argv[2], sys.argv[2:])\n";

#[tokio::test]
async fn commands_have_no_controlling_terminal_and_see_no_other_terminals() {
    if !sandbox_enforced() {
        return;
    }
    let pty = nix::pty::openpty(None, None).expect("openpty");
    let slave_path = std::fs::read_link(format!("/proc/self/fd/{}", {
        use std::os::fd::AsRawFd;
        pty.slave.as_raw_fd()
    }))
    .expect("slave path");
    let push = "import fcntl, termios, os\ntry:\n fd = os.open('/dev/tty', os.O_RDWR)\n for c in b'touch /tmp/pushed\\n': fcntl.ioctl(fd, termios.TIOCSTI, bytes([c]))\n print('PUSHED')\nexcept OSError as e: print('refused', e.errno)";
    let other = format!(
        "printf 'typed-into-another\\n' > {0} && echo WROTE-OTHER; ( exec 3<{0} ) && echo OPENED-OTHER; ls /dev/pts",
        slave_path.display()
    );
    let mut env = yolo_env(
        vec![
            batch(&[
                (
                    "t1",
                    "terminal",
                    json!({"command": format!("/usr/bin/python3 -c \"{push}\"")}),
                ),
                ("t2", "terminal", json!({"command": other})),
                (
                    "t3",
                    "terminal",
                    json!({"command": "perl -e 'require \"sys/ioctl.ph\"; open(my $t, \"+<\", \"/dev/tty\") or die \"refused: $!\\n\"; ioctl($t, 0x5412, \"x\") or die \"refused: $!\\n\"; print \"PUSHED\\n\"'"}),
                ),
                (
                    "t4",
                    "terminal",
                    json!({"command": format!("(sleep 0.5; /usr/bin/python3 -c \"{push}\" > late-push.txt) & echo started")}),
                ),
                (
                    "t5",
                    "terminal",
                    json!({"command": "exec 3<>/dev/ptmx && ls /dev/pts | wc -l && echo own-ptmx"}),
                ),
            ]),
            MockReply::text(&["done"]),
        ],
        "",
    )
    .await;
    env.unprivileged(&[]);
    if let Some(user) = env.user {
        give_to(&slave_path, user);
    }
    let mut agent = AgentProcess::spawn_as(
        Path::new("/usr/bin/python3"),
        &[
            "-c",
            WITH_TERMINAL,
            &slave_path.display().to_string(),
            &talaria_bin().display().to_string(),
            "acp",
        ],
        &env.env(),
        WireFraming::NewlineDelimited,
        env.user,
    )
    .await
    .expect("agent under a terminal");
    let session = agent
        .start_session(env.workspace.path())
        .await
        .expect("session");
    run_turn(&mut agent, &session).await;
    let results = tool_results(&env.mock, 1);
    assert!(!results[0].contains("PUSHED"), "{}", results[0]);
    assert!(results[0].contains("refused"), "{}", results[0]);
    assert!(
        !results[1].contains("WROTE-OTHER") && !results[1].contains("OPENED-OTHER"),
        "{}",
        results[1]
    );
    assert!(
        !results[2].contains("PUSHED") && results[2].contains("refused"),
        "perl: {}",
        results[2]
    );
    // A background job of a call that already returned: ended with it, never pushes.
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let late =
        std::fs::read_to_string(env.workspace.path().join("late-push.txt")).unwrap_or_default();
    assert!(!late.contains("PUSHED"), "{late}");
    if namespaces_expected() {
        // Its own terminals, in a terminal space of its own: one (the one it just opened).
        assert!(results[4].contains("own-ptmx"), "{}", results[4]);
    }
    // Nothing was pushed into the terminal's input.
    use std::io::Read;
    let mut master = std::fs::File::from(pty.master);
    nix::fcntl::fcntl(
        &master,
        nix::fcntl::FcntlArg::F_SETFL(nix::fcntl::OFlag::O_NONBLOCK),
    )
    .expect("nonblock");
    let mut seen = [0u8; 256];
    let echoed = master.read(&mut seen).unwrap_or(0);
    assert!(
        !String::from_utf8_lossy(&seen[..echoed]).contains("touch"),
        "input was pushed into the terminal"
    );
}

/// `ssh-agent` on `socket`, as the agent's user; killed when dropped.
struct SshAgent(std::process::Child);

impl SshAgent {
    fn start(socket: &Path, user: Option<(u32, u32)>) -> SshAgent {
        use std::os::unix::process::CommandExt;
        let mut command = std::process::Command::new("ssh-agent");
        command.args(["-D", "-a"]).arg(socket);
        if let Some((uid, gid)) = user {
            command.uid(uid).gid(gid);
        }
        let child = command
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("ssh-agent (openssh-client) is installed");
        let started = Instant::now();
        while !socket.exists() && started.elapsed() < Duration::from_secs(5) {
            std::thread::sleep(Duration::from_millis(20));
        }
        SshAgent(child)
    }
}

impl Drop for SshAgent {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test]
async fn the_users_ssh_agent_is_out_of_reach_unless_listed() {
    if !sandbox_enforced() {
        return;
    }
    for listed in [false, true] {
        let sockets = tempfile::tempdir().expect("socket dir");
        let socket = sockets.path().join("agent.sock");
        let check = format!(
            "ssh-add -L; echo exit=$?; SSH_AUTH_SOCK={0} ssh-add -L; echo exit=$?; \
             found=$(find {1} -type s 2>/dev/null | head -n1); echo found=$found; \
             SSH_AUTH_SOCK=$found ssh-add -D; echo exit=$?; echo $SSH_AUTH_SOCK",
            socket.display(),
            sockets.path().display()
        );
        let config = if listed {
            format!("[sandbox]\nunix_sockets = [\"{}\"]\n", socket.display())
        } else {
            String::new()
        };
        let mut env = yolo_env(
            vec![
                MockReply::tool_call("s1", "terminal", json!({ "command": check })),
                MockReply::text(&["done"]),
            ],
            &config,
        )
        .await;
        env.extra_env
            .push(("SSH_AUTH_SOCK".into(), socket.display().to_string()));
        env.unprivileged(&[sockets.path()]);
        let _ssh_agent = SshAgent::start(&socket, env.user);
        let (mut agent, session) = env.session().await;
        run_turn(&mut agent, &session).await;
        let result = &tool_results(&env.mock, 1)[0];
        // "The agent has no identities." means it connected.
        let connected = result.matches("has no identities").count()
            + result.matches("All identities removed").count();
        if listed && namespaces_expected() {
            assert!(connected >= 2, "listed: reachable: {result}");
            assert!(
                result.contains(&socket.display().to_string()),
                "kept: {result}"
            );
        } else {
            assert_eq!(connected, 0, "listed = {listed}: {result}");
        }
        if !listed {
            assert!(
                !result
                    .lines()
                    .last()
                    .unwrap_or_default()
                    .contains("agent.sock"),
                "SSH_AUTH_SOCK is removed: {result}"
            );
        }
    }
}

// ---------------------------------------------------------------------------------------
// Metadata, shared places, late keys, hard links.

#[tokio::test]
async fn metadata_outside_the_workspace_and_dev_shm_follow_the_layers() {
    if !sandbox_enforced() {
        return;
    }
    let outside = tempfile::tempdir().expect("outside");
    std::fs::write(outside.path().join("file.txt"), "x").expect("file");
    let shm_name = format!("talaria-doors-{}", std::process::id());
    let o = outside.path().display();
    let tries = format!(
        "chmod 0777 {o} && echo CHMOD-RAN; touch -d 2000-01-01 {o}/file.txt && echo TOUCH-RAN; \
         chmod 0600 {o}/file.txt && echo CHMOD-FILE-RAN; \
         chown $(id -u):$(id -g) {o}/file.txt && echo CHOWN-RAN; \
         /usr/bin/python3 -c 'import os; os.utime(\"{o}/file.txt\", (0, 0))' && echo UTIME-RAN; \
         echo secret > /dev/shm/{shm_name} && echo SHM-WROTE; chmod 0755 $PWD && echo OWN-RAN"
    );
    let mut env = yolo_env(
        vec![
            MockReply::tool_call("m1", "terminal", json!({ "command": tries })),
            MockReply::text(&["done"]),
        ],
        "",
    )
    .await;
    env.unprivileged(&[outside.path()]);
    let mode_before = std::fs::metadata(outside.path()).map(|m| {
        use std::os::unix::fs::PermissionsExt;
        m.permissions().mode()
    });
    let (mut agent, session) = env.session().await;
    run_turn(&mut agent, &session).await;
    let result = &tool_results(&env.mock, 1)[0];
    let shared_shm = Path::new("/dev/shm").join(&shm_name);
    assert!(
        result.contains("OWN-RAN"),
        "the workspace's own metadata: {result}"
    );
    if namespaces_expected() {
        for ran in [
            "CHMOD-RAN",
            "TOUCH-RAN",
            "CHMOD-FILE-RAN",
            "CHOWN-RAN",
            "UTIME-RAN",
        ] {
            assert!(!result.contains(ran), "{ran}: {result}");
        }
        assert!(result.contains("Read-only file system"), "{result}");
        let mode_after = std::fs::metadata(outside.path()).map(|m| {
            use std::os::unix::fs::PermissionsExt;
            m.permissions().mode()
        });
        assert_eq!(mode_before.ok(), mode_after.ok());
        assert!(
            result.contains("SHM-WROTE"),
            "a private /dev/shm works: {result}"
        );
        assert!(!shared_shm.exists(), "/dev/shm is private");
    } else {
        // Without namespaces these are the documented gaps; the notice says so.
        assert!(result.contains("CHMOD-RAN"), "{result}");
        let _ = std::fs::remove_file(&shared_shm);
        let notices: String = agent.transcript.iter().map(Value::to_string).collect();
        assert!(
            notices.contains("metadata outside the writable places"),
            "the first notice names what is not covered"
        );
    }
}

#[tokio::test]
async fn a_key_made_after_the_session_started_is_hidden_too() {
    if !sandbox_enforced() {
        return;
    }
    const LATE: &str = "LATE-KEY-TEXT-5531";
    let mut env = yolo_env(
        vec![
            batch(&[
                (
                    "l1",
                    "terminal",
                    json!({"command": "cat ~/id_ed25519 ~/deploy.pem; ls ~"}),
                ),
                ("l2", "terminal", json!({"command": "cat ~/.netrc"})),
            ]),
            MockReply::text(&["done"]),
        ],
        "",
    )
    .await;
    env.unprivileged(&[]);
    let (mut agent, session) = env.session().await;
    // Made after the session started, by the agent's user.
    for name in ["id_ed25519", "deploy.pem", ".netrc"] {
        let path = env.home.path().join(name);
        std::fs::write(&path, LATE).expect("late key");
        if let Some(user) = env.user {
            give_to(&path, user);
        }
    }
    run_turn(&mut agent, &session).await;
    assert!(
        !everything_sent(&env.mock).contains(LATE),
        "a key made after the session started reached the model"
    );
}

#[tokio::test]
async fn a_hard_link_to_a_key_is_refused_by_every_file_tool() {
    if !sandbox_enforced() {
        return;
    }
    const KEY: &str = "HARD-LINKED-KEY-8812";
    let mut env = yolo_env(
        vec![
            batch(&[
                ("h1", "read_file", json!({"path": "notes.txt"})),
                ("h2", "search_files", json!({"pattern": "HARD-LINKED"})),
                (
                    "h3",
                    "patch",
                    json!({"path": "notes.txt", "old_string": "KEY", "new_string": "KEY2"}),
                ),
                (
                    "h4",
                    "write_file",
                    json!({"path": "notes.txt", "content": "replaced"}),
                ),
                ("h5", "read_file", json!({"path": "sub/config-copy.toml"})),
            ]),
            MockReply::text(&["done"]),
        ],
        "",
    )
    .await;
    let ssh = env.home.path().join(".ssh");
    std::fs::create_dir_all(&ssh).expect("ssh");
    std::fs::write(ssh.join("id_ed25519"), KEY).expect("key");
    std::fs::hard_link(
        ssh.join("id_ed25519"),
        env.workspace.path().join("notes.txt"),
    )
    .expect("hard link");
    std::fs::create_dir_all(env.workspace.path().join("sub")).expect("sub");
    std::fs::hard_link(
        env.home.path().join("talaria/config.toml"),
        env.workspace.path().join("sub/config-copy.toml"),
    )
    .expect("hard link to the config");
    env.unprivileged(&[]);
    let (mut agent, session) = env.session().await;
    run_turn(&mut agent, &session).await;
    assert!(
        !everything_sent(&env.mock).contains(KEY),
        "the key reached the model"
    );
    let results = tool_results(&env.mock, 1);
    for (i, result) in results.iter().enumerate() {
        if i == 1 {
            continue; // the search shows no match from it
        }
        assert!(result.contains("hard link"), "{i}: {result}");
    }
    assert_eq!(
        std::fs::read_to_string(ssh.join("id_ed25519")).expect("key"),
        KEY,
        "the key was not changed through the link"
    );
}

#[tokio::test]
async fn doctor_and_the_session_say_which_layers_are_active() {
    if !sandbox_enforced() {
        return;
    }
    let mut env = yolo_env(vec![], "").await;
    env.unprivileged(&[]);
    let (ok, report) = doctor(&env, &[]).await;
    let _ = ok;
    if namespaces_expected() {
        assert!(
            report.contains("inside user, mount and PID namespaces"),
            "{report}"
        );
    } else {
        assert!(report.contains("without namespaces"), "{report}");
        assert!(report.contains("not covered here"), "{report}");
    }
}

/// A UNIX socket server at `path` (or an abstract name) that greets every client; it lives
/// as long as the test.
pub(crate) fn greeter(listener: std::os::unix::net::UnixListener) {
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            use std::io::Write;
            let mut stream = stream;
            let _ = stream.write_all(b"HELLO-FROM-OUTSIDE\n");
        }
    });
}

#[tokio::test]
async fn other_unix_sockets_are_out_of_reach_and_the_workspaces_own_work() {
    if !sandbox_enforced() {
        return;
    }
    use std::os::linux::net::SocketAddrExt;
    use std::os::unix::fs::PermissionsExt;
    let outside = tempfile::tempdir().expect("outside");
    let socket = outside.path().join("service.sock");
    greeter(std::os::unix::net::UnixListener::bind(&socket).expect("bind"));
    let abstract_name = format!("talaria-doors-{}", std::process::id());
    let address = std::os::unix::net::SocketAddr::from_abstract_name(abstract_name.as_bytes())
        .expect("abstract");
    greeter(std::os::unix::net::UnixListener::bind_addr(&address).expect("bind abstract"));
    let mut env = yolo_env(Vec::new(), "").await;
    let inside = env.workspace.path().join("inside.sock");
    greeter(std::os::unix::net::UnixListener::bind(&inside).expect("bind inside"));
    for path in [&socket, &inside] {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o777)).expect("chmod");
    }
    let connect = |target: &str| {
        format!(
            "/usr/bin/python3 -c \"import socket; s = socket.socket(socket.AF_UNIX); s.connect({target}); print(s.recv(64).decode().strip())\" 2>&1 | tail -n1"
        )
    };
    let tries = [
        connect(&format!("'{}'", socket.display())),
        connect(&format!("'\\0{abstract_name}'")),
        format!("curl -s --unix-socket {} http://x/ 2>&1; echo curl=$?", socket.display()),
        format!("cat {0} 2>&1; ls -l {0}", socket.display()),
        connect(&format!("'{}'", inside.display())),
        // A server of the command's own in the workspace, and a client of it.
        "/usr/bin/python3 -c \"import socket, os\ns = socket.socket(socket.AF_UNIX); s.bind('own.sock'); s.listen(1)\nc = socket.socket(socket.AF_UNIX); c.connect('own.sock'); a, _ = s.accept(); a.send(b'OWN-SERVER'); print(c.recv(16).decode())\" 2>&1 | tail -n1".to_string(),
    ];
    for (i, command) in tries.iter().enumerate() {
        env.mock.push(MockReply::tool_call(
            &format!("u{i}"),
            "terminal",
            json!({ "command": command }),
        ));
    }
    env.mock.push(MockReply::text(&["done"]));
    env.unprivileged(&[outside.path()]);
    let (mut agent, session) = env.session().await;
    run_turn(&mut agent, &session).await;
    let results: Vec<String> = (1..=tries.len())
        .map(|i| {
            tool_results(&env.mock, i)
                .last()
                .cloned()
                .unwrap_or_default()
        })
        .collect();
    for (command, result) in tries.iter().zip(&results).take(4) {
        assert!(
            !result.contains("HELLO-FROM-OUTSIDE"),
            "reached from {command}: {result}"
        );
    }
    if namespaces_expected() {
        assert!(
            results[4].contains("HELLO-FROM-OUTSIDE"),
            "a socket in the workspace: {}",
            results[4]
        );
        assert!(
            results[5].contains("OWN-SERVER"),
            "its own server: {}",
            results[5]
        );
    } else {
        // Without namespaces no UNIX socket at all (the notice says so).
        assert!(!results[4].contains("HELLO-FROM-OUTSIDE"), "{}", results[4]);
        assert!(!results[5].contains("OWN-SERVER"), "{}", results[5]);
    }
}
