//! What the model is told when a call it wrote as text was not run: arguments that do not
//! fit, a tool it does not have (with the tools it has and the one for the job), calls beyond
//! the first.

/// What the model is told about a call it wrote as text whose arguments do not fit.
pub(crate) fn misfit_instruction(tool: &str, why: &str) -> String {
    format!(
        "Your `{tool}` call was not run: {why}. Call `{tool}` again with arguments that fit its \
         schema."
    )
}

/// What the model is told about a call it wrote as text that cannot be read even leniently.
pub(crate) fn unreadable_instruction(tool: &str, why: &str) -> String {
    format!(
        "Your `{tool}` call could not be read ({why}), so it was not run. Write it again as \
         one JSON object in a ```json fence: {{\"name\": \"{tool}\", \"arguments\": {{…}}}}, \
         with double-quoted strings, \\n for line breaks inside them, and no trailing commas."
    )
}

/// Jobs a missing tool's name may point at, with the words that suggest them and the offered
/// tools that do them (first the usual one).
const JOBS: &[(&str, &[&str], &[&str])] = &[
    (
        "edit or create a file",
        &[
            "add",
            "edit",
            "insert",
            "modify",
            "update",
            "replace",
            "change",
            "append",
            "fix",
            "create",
            "write",
            "save",
            "implement",
            "refactor",
            "rename",
            "patch",
            "apply",
        ],
        &["patch", "write_file"],
    ),
    (
        "read a file",
        &["read", "open", "cat", "view", "show", "load", "file", "get"],
        &["read_file"],
    ),
    (
        "run a command",
        &[
            "run", "exec", "execute", "shell", "bash", "command", "test", "pytest", "cargo", "npm",
            "python", "build", "compile", "install", "make",
        ],
        &["terminal"],
    ),
    (
        "find files or text",
        &["search", "grep", "find", "list", "ls", "glob", "locate"],
        &["search_files"],
    ),
];

/// The words of a tool name (`run_tests`, `grepFiles`, `open-file`), lower case.
fn words_of(name: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut previous_lower = false;
    for c in name.chars() {
        let boundary = !c.is_ascii_alphanumeric() || (c.is_ascii_uppercase() && previous_lower);
        if boundary && !word.is_empty() {
            words.push(std::mem::take(&mut word));
        }
        if c.is_ascii_alphanumeric() {
            word.push(c.to_ascii_lowercase());
        }
        previous_lower = c.is_ascii_lowercase();
    }
    if !word.is_empty() {
        words.push(word);
    }
    words
}

/// The job a missing tool's name points at, and the offered tools that do it. A name that
/// says nothing is taken as editing (what small models invent tools for most).
fn job_for<'a>(tool: &str, offered: &'a [String]) -> Option<(&'static str, Vec<&'a str>)> {
    let words = words_of(tool);
    let matches = |(_, signs, _): &&(&str, &[&str], &[&str])| {
        words.iter().any(|w| signs.contains(&w.as_str()))
    };
    let (job, _, tools) = JOBS.iter().find(matches).or_else(|| JOBS.first())?;
    let doers: Vec<&str> = tools
        .iter()
        .filter_map(|t| offered.iter().find(|o| o.as_str() == *t))
        .map(String::as_str)
        .collect();
    (!doers.is_empty()).then_some((job, doers))
}

/// What the model is told when it called a tool that is not offered: nothing ran, the tools
/// it has, and the one that does what it seems to want.
pub(crate) fn unknown_tool_instruction(tool: &str, offered: &[String]) -> String {
    let names: Vec<String> = offered.iter().map(|n| format!("`{n}`")).collect();
    let mut text = format!(
        "There is no `{tool}` tool, so nothing was run. The tools you can call are: {}.",
        names.join(", ")
    );
    if let Some((job, doers)) = job_for(tool, offered) {
        let doers: Vec<String> = doers.iter().map(|d| format!("`{d}`")).collect();
        text.push_str(&format!(" To {job}, call {}.", doers.join(" or ")));
    }
    text.push_str(" Call one of your tools now, or answer in plain text if none is needed.");
    text
}

/// What the model reads after the result of the one call that ran, when its answer wrote
/// more.
pub(crate) fn unrun_note(unrun: &[String]) -> String {
    let names: Vec<String> = unrun.iter().map(|n| format!("`{n}`")).collect();
    format!(
        "\n\n[Only the first call in your answer was run. The others ({}) were not run; make \
         them again, one at a time, if they are still needed.]",
        names.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn offered() -> Vec<String> {
        [
            "read_file",
            "write_file",
            "patch",
            "search_files",
            "terminal",
            "todo",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect()
    }

    #[test]
    fn a_missing_tool_is_answered_with_the_tools_there_are_and_the_one_for_the_job() {
        let offered = offered();
        let told = unknown_tool_instruction("add", &offered);
        assert!(told.contains("no `add` tool"), "{told}");
        assert!(told.contains("`read_file`, `write_file`"), "{told}");
        assert!(told.contains("To edit or create a file, call `patch` or `write_file`."));
        for (tool, job) in [
            ("run_tests", "run a command, call `terminal`"),
            ("grepFiles", "find files or text, call `search_files`"),
            ("open-file", "read a file, call `read_file`"),
            ("frobnicate", "edit or create a file"),
        ] {
            let told = unknown_tool_instruction(tool, &offered);
            assert!(told.contains(job), "{tool}: {told}");
        }
        // Only offered tools are named for the job.
        let few: Vec<String> = vec!["read_file".into()];
        let told = unknown_tool_instruction("add", &few);
        assert!(!told.contains("To edit"), "{told}");
    }
}
