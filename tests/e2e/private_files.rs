//! What Talaria writes is this user's alone: `TALARIA_HOME` (every session's transcript,
//! prompts, file contents and command output live under it) is created 0700, the store and
//! its journals 0600, cassettes 0600 in a 0700 folder; an existing home open to other users
//! is tightened when the agent starts (one log line), and `talaria doctor` names one it
//! could not tighten.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use talaria_harness::MockReply;

use crate::support::*;

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path)
        .map(|m| m.permissions().mode() & 0o777)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Every file under `dir` whose mode lets other users read it, with its mode.
fn open_files(dir: &Path) -> Vec<String> {
    let mut open = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        let Ok(meta) = std::fs::symlink_metadata(&path) else {
            continue;
        };
        if meta.is_dir() {
            open.extend(open_files(&path));
        } else if meta.is_file() && meta.permissions().mode() & 0o077 != 0 {
            open.push(format!(
                "{} {:o}",
                path.display(),
                meta.permissions().mode() & 0o777
            ));
        }
    }
    open
}

/// Runs one answered turn, then ends the agent cleanly.
async fn one_turn(env: &TestEnv) -> String {
    let (mut agent, session) = env.session().await;
    let (response, _) = prompt(&mut agent, &session, "hello").await;
    assert_eq!(stop_reason(&response), "end_turn", "{response}");
    agent.close_stdin();
    agent.wait_exit(WAIT).await.expect("exits");
    agent.stderr()
}

fn talaria_home(env: &TestEnv) -> std::path::PathBuf {
    env.home.path().join("talaria")
}

fn assert_store_private(home: &Path) {
    assert_eq!(mode(home), 0o700, "{}", home.display());
    for name in ["state.db", "state.db-wal", "state.db-shm"] {
        let path = home.join(name);
        if path.exists() {
            assert_eq!(mode(&path), 0o600, "{}", path.display());
        }
    }
    assert!(home.join("state.db").exists(), "the turn was stored");
}

#[tokio::test]
async fn a_fresh_home_and_its_store_are_private() {
    let env = TestEnv::new(vec![MockReply::text(&["hi"])]).await;
    one_turn(&env).await;
    let home = talaria_home(&env);
    assert_store_private(&home);
    assert_eq!(open_files(&home), Vec::<String>::new());
}

#[tokio::test]
async fn a_home_left_open_by_an_older_version_is_tightened_with_one_log_line() {
    let env = TestEnv::new(vec![MockReply::text(&["hi"])]).await;
    let home = talaria_home(&env);
    std::fs::create_dir_all(&home).expect("home");
    std::fs::set_permissions(&home, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let stderr = one_turn(&env).await;
    assert_store_private(&home);
    let lines: Vec<&str> = stderr
        .lines()
        .filter(|line| line.contains("open to other users"))
        .collect();
    assert_eq!(lines.len(), 1, "{stderr}");
    assert!(lines[0].contains("755"), "{}", lines[0]);
}

#[tokio::test]
async fn an_open_store_from_an_older_version_is_tightened_with_its_journals() {
    // The first run makes the store; it is then opened to others as an older version left it.
    let env = TestEnv::new(vec![MockReply::text(&["hi"]), MockReply::text(&["again"])]).await;
    one_turn(&env).await;
    let home = talaria_home(&env);
    for name in ["state.db", "state.db-wal", "state.db-shm"] {
        let path = home.join(name);
        if path.exists() {
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).expect("chmod");
        }
    }
    std::fs::set_permissions(&home, std::fs::Permissions::from_mode(0o775)).expect("chmod");
    one_turn(&env).await;
    assert_store_private(&home);
}

#[tokio::test]
async fn a_home_that_is_a_link_makes_the_folder_it_leads_to_private() {
    let env = TestEnv::new(vec![MockReply::text(&["hi"])]).await;
    let real = env.home.path().join("dotfiles-talaria");
    std::fs::create_dir_all(&real).expect("real home");
    std::fs::set_permissions(&real, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    std::os::unix::fs::symlink(&real, talaria_home(&env)).expect("link");
    one_turn(&env).await;
    assert_store_private(&real);
}

#[tokio::test]
async fn cassettes_are_private_in_a_private_folder() {
    let mut env = TestEnv::new(vec![MockReply::text(&["hi"])]).await;
    let cassettes = env.workspace.path().join("tapes");
    env.args = vec!["--record".into(), cassettes.display().to_string()];
    one_turn(&env).await;
    assert_eq!(mode(&cassettes), 0o700);
    let tapes: Vec<_> = std::fs::read_dir(&cassettes)
        .expect("cassettes")
        .flatten()
        .map(|e| e.path())
        .collect();
    assert!(!tapes.is_empty(), "a cassette was recorded");
    for tape in tapes {
        assert_eq!(mode(&tape), 0o600, "{}", tape.display());
    }
}

#[tokio::test]
async fn doctor_makes_an_open_home_private_as_the_agent_does() {
    let env = TestEnv::new(Vec::new()).await;
    env.write_config("");
    let home = talaria_home(&env);
    std::fs::set_permissions(&home, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let (_, report) = doctor(&env, &[]).await;
    assert!(!report.contains("can be read by other users"), "{report}");
    assert_eq!(mode(&home), 0o700);
}

#[tokio::test]
async fn doctor_names_a_home_it_cannot_make_private() {
    if !running_as_root() {
        return;
    }
    // The home belongs to root and is open; the agent's user cannot change its mode.
    let mut env = TestEnv::new(Vec::new()).await;
    env.write_config("");
    env.unprivileged(&[]);
    let home = talaria_home(&env);
    let _ = std::os::unix::fs::chown(&home, Some(0), Some(0));
    std::fs::set_permissions(&home, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let (passed, report) = doctor_as_user(&env, None).await;
    assert!(!passed, "{report}");
    assert!(
        report.contains("can be read by other users") && report.contains("chmod 700"),
        "{report}"
    );
}
