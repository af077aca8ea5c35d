//! An agent's command line: `command` as configured, or its registry id (`registry`)
//! resolved offline to what is installed — the program on PATH (the registry's binary, an
//! npm or PyPI package's program), else `npx -y PACKAGE` or `uvx PACKAGE` when that launcher
//! is on PATH (it fetches the package itself when it starts). Nothing is downloaded here.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use talaria_engine::AgentEntry;

use super::registry::{Listed, Package, lookup, platform};

/// How an agent starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Launch {
    pub program: PathBuf,
    pub args: Vec<String>,
    pub env: BTreeMap<String, String>,
    /// For a registry id: what it resolved to and from where, as `talaria agents` shows it.
    pub how: Option<String>,
}

/// Why an agent has no command line.
#[derive(Debug, thiserror::Error)]
pub(crate) enum LaunchError {
    #[error(transparent)]
    Lookup(#[from] super::registry::LookupError),
    #[error(
        "the ACP registry's {id:?} is not installed: {missing}; or set `command` in [agents.{name}]"
    )]
    NotInstalled {
        id: String,
        name: String,
        missing: Missing,
    },
    #[error("looking for the agent's program stopped: {0}")]
    Stopped(String),
    #[error("the agent's program cannot be started: {0}")]
    NotFound(String),
}

/// What to install for a registry entry nothing of which is installed.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub(crate) struct Missing(String);

/// `entry`'s command line; for a registry id, the error says what to install or set. Reads
/// the registry copy and PATH: call it off the runtime thread.
pub(super) fn launch_of(entry: &AgentEntry, cwd: Option<&Path>) -> Result<Launch, LaunchError> {
    let path = fixed_path(entry, cwd);
    let mut launch = registry_launch(entry, &path)?;
    // A bare name is found on the fixed entries only, and the agent runs with those.
    let program = launch.program.to_string_lossy().into_owned();
    launch.program = talaria_util::search_path::program_on(&program, &path)
        .map_err(|e| LaunchError::NotFound(e.to_string()))?;
    launch
        .env
        .insert("PATH".into(), path.to_string_lossy().into_owned());
    Ok(launch)
}

/// The `PATH` an agent is found on and runs with (its `env`'s, else Talaria's): only the
/// entries naming a fixed folder — none relative, none inside the folder Talaria runs in or
/// the session's (`talaria_util::search_path`).
fn fixed_path(entry: &AgentEntry, cwd: Option<&Path>) -> OsString {
    let given = entry
        .env
        .get("PATH")
        .map(OsString::from)
        .or_else(|| std::env::var_os("PATH"))
        .unwrap_or_default();
    let here = std::env::current_dir().unwrap_or_default();
    let working: Vec<&Path> = [Some(here.as_path()), cwd].into_iter().flatten().collect();
    talaria_util::search_path::fixed_entries(&given, &working)
}

/// `entry`'s command line as configured, or its registry id resolved on `path`.
fn registry_launch(entry: &AgentEntry, path: &OsString) -> Result<Launch, LaunchError> {
    let id = match &entry.registry {
        Some(id) if entry.command.is_empty() => id,
        _ => {
            return Ok(Launch {
                program: entry.command.clone().into(),
                args: entry.args.clone(),
                env: entry.env.clone(),
                how: None,
            });
        }
    };
    let listed = lookup(id, entry.registry_file.as_deref())?;
    let mut launch = resolve(&listed, path).map_err(|missing| LaunchError::NotInstalled {
        id: id.clone(),
        name: entry.name.clone(),
        missing,
    })?;
    launch.args.extend(entry.args.iter().cloned());
    launch.env.extend(entry.env.clone());
    Ok(launch)
}

/// `listed`'s installed program on `path` (binary first, then a package's program), else a
/// launcher that fetches the package; else what to install.
fn resolve(listed: &Listed, path: &OsString) -> Result<Launch, Missing> {
    let version = listed.version.as_deref().unwrap_or("unpinned");
    let binary = listed.distribution.binary.get(&platform());
    if let Some(target) = binary
        && let Some(found) = find(path, &[target.cmd.as_str()])
    {
        let how = format!(
            "{} on PATH (the registry's binary, {version})",
            shown(&found)
        );
        return Ok(launched(found, &target.args, &target.env, how));
    }
    for (package, kind) in packages(listed) {
        let mut names: Vec<&str> = package.cmd.iter().map(String::as_str).collect();
        names.extend(listed.bins.iter().map(String::as_str));
        names.push(base_name(&package.package));
        if let Some(found) = find(path, &names) {
            let how = format!("{} on PATH ({kind} {})", shown(&found), package.package);
            return Ok(launched(found, &package.args, &package.env, how));
        }
    }
    if let Some(npx) = &listed.distribution.npx
        && let Some(found) = find(path, &["npx"])
    {
        let mut args = vec!["-y".to_string()];
        match &npx.cmd {
            Some(cmd) => args.extend([format!("--package={}", npx.package), cmd.clone()]),
            None => args.push(npx.package.clone()),
        }
        args.extend(npx.args.iter().cloned());
        let how = format!(
            "npx (npm {} is not installed: npx fetches it when it starts)",
            npx.package
        );
        return Ok(launched(found, &args, &npx.env, how));
    }
    if let Some(uvx) = &listed.distribution.uvx
        && let Some(found) = find(path, &["uvx"])
    {
        let mut args = Vec::new();
        match &uvx.cmd {
            Some(cmd) => args.extend(["--from".to_string(), uvx.package.clone(), cmd.clone()]),
            None => args.push(uvx.package.clone()),
        }
        args.extend(uvx.args.iter().cloned());
        let how = format!(
            "uvx (PyPI {} is not installed: uvx fetches it when it starts)",
            uvx.package
        );
        return Ok(launched(found, &args, &uvx.env, how));
    }
    Err(Missing(what_to_install(listed)))
}

fn launched(
    program: PathBuf,
    args: &[String],
    env: &BTreeMap<String, String>,
    how: String,
) -> Launch {
    Launch {
        program,
        args: args.to_vec(),
        env: env.clone(),
        how: Some(how),
    }
}

fn packages(listed: &Listed) -> Vec<(&Package, &'static str)> {
    let npx = listed.distribution.npx.iter().map(|p| (p, "npm"));
    let uvx = listed.distribution.uvx.iter().map(|p| (p, "PyPI"));
    npx.chain(uvx).collect()
}

/// What a user installs for `listed`, for each way the registry distributes it.
fn what_to_install(listed: &Listed) -> String {
    let mut ways = Vec::new();
    if let Some(npx) = &listed.distribution.npx {
        ways.push(format!(
            "`npm install -g {}` (or Node.js, for npx)",
            npx.package
        ));
    }
    if let Some(uvx) = &listed.distribution.uvx {
        ways.push(format!(
            "`uv tool install {}` (or uv, for uvx)",
            uvx.package
        ));
    }
    match listed.distribution.binary.get(&platform()) {
        Some(target) => {
            let from = if target.archive.is_empty() {
                listed.repository.clone().or(listed.website.clone())
            } else {
                Some(target.archive.clone())
            };
            ways.push(format!(
                "`{}` on PATH{}",
                base_name(&target.cmd),
                from.map(|f| format!(" (from {f})")).unwrap_or_default()
            ));
        }
        None if !listed.distribution.binary.is_empty() => {
            ways.push(format!("(its binaries are not built for {})", platform()));
        }
        None => {}
    }
    if ways.is_empty() {
        return "the registry lists no way to install it".to_string();
    }
    format!("install {}", ways.join(", or "))
}

/// A program's file name: `./bin/codex-acp` → `codex-acp`; `@scope/pkg@1.2.3` → `pkg`;
/// `pkg==1.2` → `pkg`.
fn base_name(name: &str) -> &str {
    let unscoped = name.strip_prefix('@').map_or(name, |rest| {
        rest.split_once('/').map_or(rest, |(_, after)| after)
    });
    let unversioned = unscoped
        .split(['@', '=', '<', '>', '~', '!', '['])
        .next()
        .unwrap_or(unscoped);
    unversioned.rsplit('/').next().unwrap_or(unversioned)
}

/// The first of `names` that is an executable file in a folder of `path` (names only: a
/// name with a folder in it is taken by its file name).
fn find(path: &OsString, names: &[&str]) -> Option<PathBuf> {
    let names: Vec<&str> = names
        .iter()
        .map(|n| base_name(n))
        .filter(|n| !n.is_empty() && *n != "." && *n != "..")
        .collect();
    for name in names {
        for dir in std::env::split_paths(path).filter(|d| d.is_absolute()) {
            let candidate = dir.join(name);
            if executable(&candidate) {
                return Some(candidate);
            }
        }
    }
    None
}

fn executable(path: &Path) -> bool {
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

fn shown(path: &Path) -> String {
    path.display().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn program(dir: &Path, name: &str) {
        let path = dir.join(name);
        std::fs::write(&path, "#!/bin/sh\n").expect("write");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    }

    fn listed(json: &str) -> Listed {
        serde_json::from_str(json).expect("entry")
    }

    #[test]
    fn names_are_file_names_without_scope_or_version() {
        assert_eq!(base_name("./codex-acp"), "codex-acp");
        assert_eq!(base_name("@zed-industries/codex-acp@0.9.2"), "codex-acp");
        assert_eq!(base_name("talaria-agent==0.2.0"), "talaria-agent");
        assert_eq!(base_name("./talaria-0.2.0-linux-x86_64/talaria"), "talaria");
        assert_eq!(base_name("../.."), "..");
    }

    #[test]
    fn the_installed_program_wins_then_npx_then_uvx_else_what_to_install() {
        let dir = tempfile::tempdir().expect("dir");
        let bin = dir.path().join("bin");
        std::fs::create_dir(&bin).expect("bin");
        let path = OsString::from(format!("relative:{}", bin.display()));
        let entry = listed(
            r#"{"id": "x", "version": "1.0.0", "distribution": {
                "npx": {"package": "@s/x-acp@1.0.0", "args": ["--acp"]},
                "uvx": {"package": "x-acp==1.0.0", "cmd": "x-serve"}}}"#,
        );
        let missing = resolve(&entry, &path)
            .expect_err("nothing installed")
            .to_string();
        assert!(
            missing.contains("npm install -g @s/x-acp@1.0.0") && missing.contains("uv tool"),
            "{missing}"
        );
        program(&bin, "uvx");
        let uvx = resolve(&entry, &path).expect("uvx");
        assert_eq!(uvx.args, ["--from", "x-acp==1.0.0", "x-serve"]);
        program(&bin, "npx");
        let npx = resolve(&entry, &path).expect("npx");
        assert_eq!(npx.program, bin.join("npx"));
        assert_eq!(npx.args, ["-y", "@s/x-acp@1.0.0", "--acp"]);
        program(&bin, "x-acp");
        let installed = resolve(&entry, &path).expect("installed");
        assert_eq!(installed.program, bin.join("x-acp"));
        assert_eq!(installed.args, ["--acp"]);
        std::fs::write(bin.join("plain"), "").expect("not executable");
        assert_eq!(find(&path, &["plain"]), None);
    }

    #[test]
    fn a_binary_on_path_is_found_by_its_cmd_and_its_archive_named_when_missing() {
        let dir = tempfile::tempdir().expect("dir");
        let path = OsString::from(dir.path());
        let text = format!(
            r#"{{"id": "b", "distribution": {{"binary": {{"{}": {{
                "archive": "https://example.org/b.tar.gz", "cmd": "./b-acp", "args": ["acp"]}}}}}}}}"#,
            platform()
        );
        let entry = listed(&text);
        let missing = resolve(&entry, &path).expect_err("missing").to_string();
        assert!(
            missing.contains("`b-acp` on PATH (from https://example.org/b.tar.gz)"),
            "{missing}"
        );
        program(dir.path(), "b-acp");
        let found = resolve(&entry, &path).expect("found");
        assert_eq!(
            (found.program, found.args),
            (dir.path().join("b-acp"), vec!["acp".to_string()])
        );
    }

    #[test]
    fn a_program_planted_in_the_workspace_or_a_relative_path_entry_is_never_started() {
        let workspace = tempfile::tempdir().expect("workspace");
        let planted = workspace.path().join("node_modules/.bin");
        std::fs::create_dir_all(&planted).expect("bin");
        program(&planted, "claude-agent-acp");
        let entry = |command: &str, path: String| AgentEntry {
            name: "c".into(),
            command: command.into(),
            env: [("PATH".to_string(), path)].into(),
            ..AgentEntry::default()
        };
        let inside = entry("claude-agent-acp", planted.display().to_string());
        let refused = launch_of(&inside, Some(workspace.path())).expect_err("planted");
        assert!(refused.to_string().contains("not on PATH"), "{refused}");
        let relative = entry("claude-agent-acp", "node_modules/.bin".into());
        assert!(launch_of(&relative, Some(workspace.path())).is_err());
        // The same program in a fixed folder is found, and the agent runs with that PATH.
        let fixed = tempfile::tempdir().expect("fixed");
        program(fixed.path(), "claude-agent-acp");
        let path = format!("{}:{}:.", planted.display(), fixed.path().display());
        let launch =
            launch_of(&entry("claude-agent-acp", path), Some(workspace.path())).expect("found");
        assert_eq!(launch.program, fixed.path().join("claude-agent-acp"));
        assert_eq!(launch.env["PATH"], fixed.path().display().to_string());
    }

    #[test]
    fn command_wins_and_the_users_args_and_env_follow_the_registrys() {
        let dir = tempfile::tempdir().expect("dir");
        program(dir.path(), "goose");
        let mut entry = AgentEntry {
            name: "g".into(),
            command: String::new(),
            registry: Some("goose".into()),
            args: vec!["--verbose".into()],
            env: [("PATH".to_string(), dir.path().display().to_string())].into(),
            ..AgentEntry::default()
        };
        let launch = launch_of(&entry, None).expect("resolved");
        assert_eq!(launch.program, dir.path().join("goose"));
        assert_eq!(launch.args, ["acp", "--verbose"]);
        entry.command = "/usr/bin/own".into();
        assert_eq!(
            launch_of(&entry, None).expect("own").program,
            Path::new("/usr/bin/own")
        );
        entry.command = String::new();
        entry.registry = Some("opencode".into());
        let missing = launch_of(&entry, None)
            .expect_err("not installed")
            .to_string();
        assert!(
            missing.contains("\"opencode\" is not installed")
                && missing.contains("`opencode` on PATH")
                && missing.contains("set `command` in [agents.g]"),
            "{missing}"
        );
    }
}
