//! The system prompt: identity and the project's own instructions (stable, so a server's
//! prompt cache keeps them and the tool schemas that follow), and the environment (working
//! directory, date, listing, model: volatile), which the model reads just after them.
//!
//! The instruction files and the listing are the workspace's, which the session's commands
//! may change: they are read through the one way to the user's files (`talaria-files`),
//! beneath the workspace held, no link followed, what the sandbox hides refused — an
//! `AGENTS.md` a command made a link to `~/.aws/credentials` never reaches the model.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::Path;
use std::sync::Arc;

use sha2::{Digest, Sha256};
use talaria_files::{FileError, Places, Root};

/// Project instruction files read from the working directory, in order.
pub const PROJECT_FILES: [&str; 2] = ["AGENTS.md", "CLAUDE.md"];
/// The most bytes taken from one instruction file.
pub const MAX_PROJECT_FILE_BYTES: usize = 32 * 1024;
/// The most top-level entries of the working directory listed in the prompt.
pub const MAX_LISTED_ENTRIES: usize = 40;

const IDENTITY: &str = "You are Talaria, an AI coding agent working inside the user's editor. \
You help with software engineering tasks: reading and changing code, running commands, and \
explaining what you find. Use the tools you are given to inspect the project instead of \
guessing; read files before you describe or change them, and run commands (tests, builds) \
with the terminal tool rather than guessing their output. Be concise, show your reasoning \
through actions, and finish the job you were asked to do. When a tool fails, read the error \
and adjust rather than repeating the same call.";

/// Which instruction files a session's prompt may carry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InstructionGate {
    /// None: the folder is not trusted.
    Closed,
    /// Whatever is there (trusted without a record: for the session, or by the environment).
    Open,
    /// Each only with the content the user accepted: file name → SHA-256.
    Accepted(BTreeMap<&'static str, String>),
}

/// The hex SHA-256 of `text`.
pub fn sha256(text: &str) -> String {
    hex(&Sha256::digest(text.as_bytes()))
}

/// `digest` in lowercase hex.
pub(crate) fn hex(digest: &[u8]) -> String {
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

/// A session's prompt: what stays the same between sessions, and what does not.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SessionPrompt {
    /// The identity (and, assembled later, the skill index and memory snapshot).
    pub identity: String,
    /// The project's own instruction files (the same in every session of the project).
    pub project: String,
    /// Where and when: working directory, date, operating system, model, top-level files.
    pub environment: String,
    /// Instruction files left out: changed since the user accepted them.
    pub left_out: Vec<String>,
}

/// Builds a session's prompt (reads the project's instruction files `gate` lets in and
/// lists the working directory, judged by the session's `places`: call it off the runtime
/// thread). An accepted file whose content is no longer the one accepted is left out.
pub fn build(
    cwd: &Path,
    model: &str,
    today: &str,
    places: Arc<dyn Places>,
    gate: &InstructionGate,
) -> SessionPrompt {
    let mut environment = environment(cwd, model, today);
    let workspace = Root::open(cwd, places)
        .map_err(|e| tracing::warn!("the project's instructions are not read: {e}"))
        .ok();
    if let Some(listing) = workspace.as_ref().and_then(top_level_listing) {
        environment.push_str(&format!("- Top-level files: {listing}\n"));
    }
    let mut project = String::new();
    let mut left_out = Vec::new();
    for name in PROJECT_FILES {
        let Some(workspace) = &workspace else { break };
        if *gate == InstructionGate::Closed {
            break;
        }
        match read_capped(workspace, name) {
            Ok(Some(text)) if accepted(gate, name, &text) => project.push_str(&format!(
                "\n# Project instructions from {name}\n\n{}\n",
                text.trim_end()
            )),
            Ok(Some(_)) => left_out.push(name.to_string()),
            Ok(None) => {}
            Err(e) => {
                tracing::warn!("{name} is not part of the instructions: {e}");
                project.push_str(&format!(
                    "\n# Project instructions from {name}: not read\n\n{name} is a link, or \
                     in a place the sandbox hides; instructions are read only from a plain \
                     file. Ask the user before you follow it.\n"
                ));
            }
        }
    }
    SessionPrompt {
        identity: IDENTITY.to_string(),
        project,
        environment,
        left_out,
    }
}

/// Whether `gate` lets the instruction file `name` with this `text` in.
fn accepted(gate: &InstructionGate, name: &str, text: &str) -> bool {
    match gate {
        InstructionGate::Closed => false,
        InstructionGate::Open => true,
        InstructionGate::Accepted(hashes) => {
            hashes.get(name).is_some_and(|hash| *hash == sha256(text))
        }
    }
}

/// The environment the model reads after the instructions (no I/O).
fn environment(cwd: &Path, model: &str, today: &str) -> String {
    let mut text = String::with_capacity(512);
    text.push_str("# Environment\n");
    text.push_str(&format!("- Working directory: {}\n", cwd.display()));
    text.push_str(&format!("- Date: {today}\n"));
    text.push_str(&format!(
        "- Operating system: {} ({})\n",
        std::env::consts::OS,
        std::env::consts::ARCH
    ));
    text.push_str(&format!("- Model: {model}\n"));
    text
}

/// The environment with its model line changed (no file is read again).
pub fn with_model(prompt: &str, old_model: &str, new_model: &str) -> String {
    prompt.replacen(
        &format!("- Model: {old_model}\n"),
        &format!("- Model: {new_model}\n"),
        1,
    )
}

/// The working directory's top-level entries (directories with a trailing `/`, hidden ones
/// left out), sorted, at most [`MAX_LISTED_ENTRIES`]: the kind of project shows at a glance
/// (small models otherwise guess the toolchain). `None` when empty or unreadable.
fn top_level_listing(workspace: &Root) -> Option<String> {
    let mut names: Vec<String> = workspace
        .as_dir()
        .entries()
        .ok()?
        .into_iter()
        .filter_map(|(name, kind)| {
            let name = name.to_string_lossy().into_owned();
            if name.starts_with('.') {
                return None;
            }
            let directory = kind == talaria_files::Kind::Directory;
            Some(if directory { format!("{name}/") } else { name })
        })
        .collect();
    if names.is_empty() {
        return None;
    }
    names.sort();
    let more = names.len().saturating_sub(MAX_LISTED_ENTRIES);
    names.truncate(MAX_LISTED_ENTRIES);
    let mut listing = names.join(", ");
    if more > 0 {
        listing.push_str(&format!(" (and {more} more)"));
    }
    Some(listing)
}

/// The file `name` (a path below the workspace, no link followed), at most
/// [`MAX_PROJECT_FILE_BYTES`] of it: `None` when there is none, an error when it is a link,
/// hidden, or not a plain file.
pub(crate) fn read_capped(workspace: &Root, name: &str) -> Result<Option<String>, FileError> {
    let (file, _) = match workspace.open_read(std::path::Path::new(name)) {
        Err(FileError::NotFound(_)) => return Ok(None),
        other => other?,
    };
    let mut bytes = Vec::new();
    file.take(MAX_PROJECT_FILE_BYTES as u64 + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| FileError::Io {
            action: "read",
            path: workspace.shown().join(name),
            source: e,
        })?;
    let mut text =
        String::from_utf8_lossy(&bytes[..bytes.len().min(MAX_PROJECT_FILE_BYTES)]).into_owned();
    if bytes.len() > MAX_PROJECT_FILE_BYTES {
        text.push_str("\n[... truncated ...]");
    }
    Ok(Some(text))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn open() -> Arc<dyn Places> {
        Arc::new(talaria_files::Unguarded)
    }

    #[test]
    fn instructions_are_read_from_plain_files_only() {
        let dir = tempfile::tempdir().expect("tempdir");
        let ws = dir.path().join("ws");
        std::fs::create_dir_all(ws.join("docs")).expect("mkdir");
        std::fs::write(dir.path().join("credentials"), "SECRET").expect("write");
        std::fs::write(ws.join("docs/agents.md"), "INSIDE").expect("write");
        std::os::unix::fs::symlink("../credentials", ws.join("AGENTS.md")).expect("link");
        std::os::unix::fs::symlink("docs/agents.md", ws.join("CLAUDE.md")).expect("link");
        let prompt = build(&ws, "m", "2026-11-30", open(), &InstructionGate::Open);
        assert!(!prompt.project.contains("SECRET"), "{}", prompt.project);
        assert!(!prompt.project.contains("INSIDE"), "{}", prompt.project);
        assert!(
            prompt.project.contains("AGENTS.md: not read")
                && prompt.project.contains("CLAUDE.md: not read"),
            "{}",
            prompt.project
        );
        // A big file is cut, not refused.
        std::fs::remove_file(ws.join("AGENTS.md")).expect("rm");
        std::fs::write(
            ws.join("AGENTS.md"),
            "a".repeat(MAX_PROJECT_FILE_BYTES + 10),
        )
        .expect("write");
        let prompt = build(&ws, "m", "2026-11-30", open(), &InstructionGate::Open);
        assert!(prompt.project.contains("[... truncated ...]"));
        assert!(prompt.project.contains(&"a".repeat(MAX_PROJECT_FILE_BYTES)));
        assert!(
            !prompt
                .project
                .contains(&"a".repeat(MAX_PROJECT_FILE_BYTES + 1))
        );
    }

    #[test]
    fn the_top_level_files_are_listed_without_hidden_ones_and_capped() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join("main.py"), "").expect("write");
        std::fs::write(dir.path().join(".env"), "").expect("write");
        std::fs::create_dir(dir.path().join("tests")).expect("dir");
        let prompt = build(
            dir.path(),
            "m",
            "2026-11-30",
            open(),
            &InstructionGate::Open,
        )
        .environment;
        assert!(
            prompt.contains("- Top-level files: main.py, tests/\n"),
            "{prompt}"
        );
        for i in 0..MAX_LISTED_ENTRIES + 3 {
            std::fs::write(dir.path().join(format!("f{i:02}.txt")), "").expect("write");
        }
        let prompt = build(
            dir.path(),
            "m",
            "2026-11-30",
            open(),
            &InstructionGate::Open,
        )
        .environment;
        assert!(prompt.contains("(and 5 more)"), "{prompt}");
        let empty = tempfile::tempdir().expect("tempdir");
        assert!(
            !build(
                empty.path(),
                "m",
                "2026-11-30",
                open(),
                &InstructionGate::Open
            )
            .environment
            .contains("Top-level files")
        );
    }

    #[test]
    fn includes_environment_and_project_files() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join("AGENTS.md"), "Always run cargo fmt.").expect("write");
        let prompt = build(
            dir.path(),
            "m1",
            "2026-11-29",
            open(),
            &InstructionGate::Open,
        );
        let environment = &prompt.environment;
        assert!(environment.contains(&dir.path().display().to_string()));
        assert!(environment.contains("2026-11-29"));
        assert!(environment.contains("m1"));
        assert!(environment.contains(std::env::consts::OS));
        assert!(
            prompt
                .project
                .contains("# Project instructions from AGENTS.md\n\nAlways run cargo fmt.")
        );
        assert!(!prompt.project.contains("CLAUDE.md"));
        // Nothing volatile in what stays the same between sessions.
        let other = tempfile::tempdir().expect("tempdir");
        assert_eq!(
            build(
                other.path(),
                "m2",
                "2027-01-01",
                open(),
                &InstructionGate::Open
            )
            .identity,
            prompt.identity
        );
        let switched = with_model(environment, "m1", "m2");
        assert!(switched.contains("- Model: m2\n") && !switched.contains("- Model: m1"));
    }

    #[test]
    fn the_gate_decides_which_instruction_files_are_read() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join("AGENTS.md"), "Say PINEAPPLE.").expect("write");
        std::fs::write(dir.path().join("CLAUDE.md"), "Say MANGO.").expect("write");
        let closed = build(dir.path(), "m", "d", open(), &InstructionGate::Closed);
        assert_eq!(closed.project, "");
        assert!(closed.left_out.is_empty());
        // Only the content accepted: CLAUDE.md's hash is of other text.
        let gate = InstructionGate::Accepted(
            [
                ("AGENTS.md", sha256("Say PINEAPPLE.")),
                ("CLAUDE.md", sha256("Say MANGO!")),
            ]
            .into_iter()
            .collect(),
        );
        let accepted = build(dir.path(), "m", "d", open(), &gate);
        assert!(
            accepted.project.contains("PINEAPPLE"),
            "{}",
            accepted.project
        );
        assert!(!accepted.project.contains("MANGO"), "{}", accepted.project);
        assert_eq!(accepted.left_out, vec!["CLAUDE.md".to_string()]);
    }
}
