//! Agents named by their ACP registry id (`[agents.<name>] registry = "ID"`): resolved
//! offline to what is installed — the program on PATH under the name the registry gives it
//! (from the user's copy of the registry, `agents_registry`, or the built-in table), else
//! `npx -y PACKAGE` — and an id that is not installed is a clear error in `talaria agents`
//! and a failed delegation saying what to install, never a crash.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use serde_json::json;
use talaria_harness::binary::{talaria_bin, workspace_bin};

use super::{delegating_to, delegation_result};
use crate::support::*;

/// A home whose PATH is `HOME/bin` and the system's folders only, with `[agents.NAME]`
/// written as `agent` (plus the scripted child's script, playing `prompts`) and `top`
/// before the tables.
async fn home_with(prompts: serde_json::Value, top: &str, agent: &str) -> TestEnv {
    let mut env = TestEnv::new(delegating_to("scripted")).await;
    let bin = env.home.path().join("bin");
    std::fs::create_dir_all(&bin).expect("bin");
    let script = env.home.path().join("child-script.json");
    std::fs::write(&script, json!({ "prompts": prompts }).to_string()).expect("script");
    env.write_config(&format!(
        "{top}\n[learning]\nskill_review_after = 0\nmemory_review_after = 0\n\
         [agents.scripted]\ntools = \"acp\"\n{agent}\n\
         env = {{ TALARIA_CHILD_SCRIPT = \"{}\" }}\n",
        script.display()
    ));
    env.extra_env
        .push(("PATH".into(), format!("{}:/usr/bin:/bin", bin.display())));
    env
}

/// The scripted child installed in `HOME/bin` as `name`.
fn install_child(env: &TestEnv, name: &str) -> PathBuf {
    let path = env.home.path().join("bin").join(name);
    std::os::unix::fs::symlink(workspace_bin("talaria-harness", "talaria-acp-child"), &path)
        .expect("symlink");
    path
}

/// A program `HOME/bin/NAME` running `text` with `sh`.
fn install_script(env: &TestEnv, name: &str, text: &str) {
    let path = env.home.path().join("bin").join(name);
    std::fs::write(&path, format!("#!/bin/sh\n{text}\n")).expect("script");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
}

/// `talaria agents` in `env`: whether all started, and what it printed.
async fn talaria_agents(env: &TestEnv) -> (bool, String) {
    let output = tokio::process::Command::new(talaria_bin())
        .arg("agents")
        .envs(env.env())
        .current_dir(env.workspace.path())
        .output()
        .await
        .expect("runs");
    (
        output.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        ),
    )
}

fn registry_copy(dir: &Path) -> PathBuf {
    let copy = json!({"version": "1.0.0", "extensions": [], "agents": [{
        "id": "scripted-acp", "name": "Scripted", "version": "1.2.3",
        "description": "the harness's scripted ACP agent",
        "distribution": {"npx": {"package": "@example/scripted-acp@1.2.3", "args": ["--acp"]}}
    }]});
    let path = dir.join("registry.json");
    std::fs::write(&path, copy.to_string()).expect("registry");
    path
}

#[tokio::test]
async fn a_registry_id_starts_the_program_installed_under_the_registrys_name() {
    let script = json!([[{"say": "found by its registry id\n"}]]);
    let env = home_with(
        script,
        "agents_registry = \"registry.json\"",
        "registry = \"scripted-acp\"",
    )
    .await;
    registry_copy(&env.home.path().join("talaria"));
    let installed = install_child(&env, "scripted-acp");
    let (agent_started, listing) = talaria_agents(&env).await;
    assert!(agent_started, "{listing}");
    assert!(
        listing.contains(&format!(
            "scripted: registry scripted-acp → {} --acp",
            installed.display()
        )),
        "{listing}"
    );
    assert!(
        listing.contains("on PATH (npm @example/scripted-acp@1.2.3)"),
        "{listing}"
    );
    assert!(listing.contains("starts: yes — acp-child"), "{listing}");
    let (mut agent, session) = env.session().await;
    let (response, _) = prompt(&mut agent, &session, "hand it over").await;
    assert_eq!(stop_reason(&response), "end_turn", "{response}");
    let result = delegation_result(&env);
    assert!(
        result.contains("Report from scripted:\nfound by its registry id"),
        "{result}"
    );
}

#[tokio::test]
async fn a_well_known_id_not_installed_runs_through_npx_with_the_registrys_package() {
    let script = json!([[{"say": "started by npx\n"}]]);
    let env = home_with(script, "", "registry = \"gemini\"").await;
    let child = workspace_bin("talaria-harness", "talaria-acp-child");
    let recorded = env.home.path().join("npx-args");
    install_script(
        &env,
        "npx",
        &format!(
            "printf '%s\\n' \"$@\" > '{}'\nexec '{}'",
            recorded.display(),
            child.display()
        ),
    );
    let (mut agent, session) = env.session().await;
    let (response, _) = prompt(&mut agent, &session, "hand it over").await;
    assert_eq!(stop_reason(&response), "end_turn", "{response}");
    let result = delegation_result(&env);
    assert!(result.contains("started by npx"), "{result}");
    let args = std::fs::read_to_string(&recorded).expect("npx ran");
    assert_eq!(args, "-y\n@google/gemini-cli\n--acp\n");
    let (_, listing) = talaria_agents(&env).await;
    assert!(
        listing.contains("npm @google/gemini-cli is not installed: npx fetches it"),
        "{listing}"
    );
}

#[tokio::test]
async fn an_id_not_installed_or_unknown_says_what_to_install_and_the_turn_goes_on() {
    let env = home_with(json!([]), "", "registry = \"opencode\"").await;
    let config = env.home.path().join("talaria/config.toml");
    let text = std::fs::read_to_string(&config).expect("config");
    std::fs::write(
        &config,
        format!("{text}[agents.other]\nregistry = \"no-such-agent\"\n"),
    )
    .expect("config");
    let (all_started, listing) = talaria_agents(&env).await;
    assert!(!all_started, "{listing}");
    assert!(
        listing.contains("scripted: registry opencode")
            && listing.contains("starts: no — the ACP registry's \"opencode\" is not installed")
            && listing.contains("`opencode` on PATH (from https://github.com/sst/opencode)"),
        "{listing}"
    );
    assert!(
        listing.contains("\"no-such-agent\" is not an ACP registry id Talaria knows")
            && listing.contains("agents_registry"),
        "{listing}"
    );
    let (mut agent, session) = env.session().await;
    let (response, _) = prompt(&mut agent, &session, "hand it over").await;
    assert_eq!(stop_reason(&response), "end_turn", "{response}");
    let result = delegation_result(&env);
    assert!(
        result.contains("scripted failed: the ACP registry's \"opencode\" is not installed")
            && result.contains("set `command` in [agents.scripted]"),
        "{result}"
    );
}
