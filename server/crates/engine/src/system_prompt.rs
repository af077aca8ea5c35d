//! The system prompt: identity, environment, and the project's own instructions.

use std::path::Path;

/// Project instruction files read from the working directory, in order.
pub const PROJECT_FILES: [&str; 2] = ["AGENTS.md", "CLAUDE.md"];
/// The most bytes taken from one instruction file.
pub const MAX_PROJECT_FILE_BYTES: usize = 32 * 1024;

const IDENTITY: &str = "You are Talaria, an AI coding agent working inside the user's editor. \
You help with software engineering tasks: reading and changing code, running commands, and \
explaining what you find. Use the tools you are given to inspect the project instead of \
guessing; read files before you describe or change them, and run commands (tests, builds) \
with the terminal tool rather than guessing their output. Be concise, show your reasoning \
through actions, and finish the job you were asked to do. When a tool fails, read the error \
and adjust rather than repeating the same call.";

/// Builds the system prompt for a session (reads the project's instruction files: call it off
/// the runtime thread).
pub fn build(cwd: &Path, model: &str, today: &str) -> String {
    let mut prompt = build_without_files(cwd, model, today);
    for name in PROJECT_FILES {
        if let Some(text) = read_capped(&cwd.join(name)) {
            prompt.push_str(&format!(
                "\n# Project instructions from {name}\n\n{}\n",
                text.trim_end()
            ));
        }
    }
    prompt
}

/// The system prompt without the project's instruction files (no I/O).
fn build_without_files(cwd: &Path, model: &str, today: &str) -> String {
    let mut prompt = String::with_capacity(4096);
    prompt.push_str(IDENTITY);
    prompt.push_str("\n\n# Environment\n");
    prompt.push_str(&format!("- Working directory: {}\n", cwd.display()));
    prompt.push_str(&format!("- Date: {today}\n"));
    prompt.push_str(&format!(
        "- Operating system: {} ({})\n",
        std::env::consts::OS,
        std::env::consts::ARCH
    ));
    prompt.push_str(&format!("- Model: {model}\n"));
    prompt
}

/// The prompt with its model line changed (no file is read again).
pub fn with_model(prompt: &str, old_model: &str, new_model: &str) -> String {
    prompt.replacen(
        &format!("- Model: {old_model}\n"),
        &format!("- Model: {new_model}\n"),
        1,
    )
}

fn read_capped(path: &Path) -> Option<String> {
    let bytes = std::fs::read(path).ok()?;
    let mut text =
        String::from_utf8_lossy(&bytes[..bytes.len().min(MAX_PROJECT_FILE_BYTES)]).into_owned();
    if bytes.len() > MAX_PROJECT_FILE_BYTES {
        text.push_str("\n[... truncated ...]");
    }
    Some(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn includes_environment_and_project_files() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join("AGENTS.md"), "Always run cargo fmt.").expect("write");
        let prompt = build(dir.path(), "m1", "2026-11-29");
        assert!(prompt.contains(&dir.path().display().to_string()));
        assert!(prompt.contains("2026-11-29"));
        assert!(prompt.contains("m1"));
        assert!(prompt.contains(std::env::consts::OS));
        assert!(prompt.contains("# Project instructions from AGENTS.md\n\nAlways run cargo fmt."));
        assert!(!prompt.contains("CLAUDE.md"));
        let switched = with_model(&prompt, "m1", "m2");
        assert!(switched.contains("- Model: m2\n") && !switched.contains("- Model: m1"));
    }
}
