//! What the model is told when a call it wrote as text was not run: arguments that do not
//! fit, a tool it does not have (with the tools it has and the one for the job), calls beyond
//! the first.

use talaria_tools::{ToolDefinition, ToolKind};

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

/// A job: its name, the words of a tool name that suggest it, and whether a tool does it.
type Job = (
    &'static str,
    &'static [&'static str],
    fn(&ToolDefinition) -> bool,
);

/// Jobs a missing tool's name may point at: the words that suggest each, and what an offered
/// tool must declare to do it (its effects and kind, never its name).
const JOBS: &[Job] = &[
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
        |tool| tool.effects.writes && !tool.effects.path_args.is_empty(),
    ),
    (
        "read a file",
        &["read", "open", "cat", "view", "show", "load", "file", "get"],
        |tool| {
            tool.effects.reads && tool.kind == ToolKind::Read && !tool.effects.path_args.is_empty()
        },
    ),
    (
        "run a command",
        &[
            "run", "exec", "execute", "shell", "bash", "command", "test", "pytest", "cargo", "npm",
            "python", "build", "compile", "install", "make",
        ],
        |tool| tool.effects.runs_commands && tool.effects.command_arg.is_some(),
    ),
    (
        "find files or text",
        &["search", "grep", "find", "list", "ls", "glob", "locate"],
        |tool| tool.effects.reads && tool.kind == ToolKind::Search,
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
fn job_for<'a>(tool: &str, offered: &[&'a ToolDefinition]) -> Option<(&'static str, Vec<&'a str>)> {
    let words = words_of(tool);
    let matches = |(_, signs, _): &&Job| words.iter().any(|w| signs.contains(&w.as_str()));
    let (job, _, does_it) = JOBS.iter().find(matches).or_else(|| JOBS.first())?;
    let doers: Vec<&str> = offered
        .iter()
        .filter(|definition| does_it(definition))
        .map(|definition| definition.name.as_ref())
        .collect();
    (!doers.is_empty()).then_some((job, doers))
}

/// What the model is told when it called a tool that is not offered: nothing ran, the tools
/// it has, and the one that does what it seems to want.
pub(crate) fn unknown_tool_instruction(tool: &str, offered: &[&ToolDefinition]) -> String {
    let names: Vec<String> = offered.iter().map(|d| format!("`{}`", d.name)).collect();
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

    fn offered() -> Vec<ToolDefinition> {
        // In the registry's order, as the model is offered them.
        let names = [
            "read_file",
            "write_file",
            "patch",
            "search_files",
            "terminal",
            "todo",
        ];
        talaria_tools::builtin_registry()
            .definitions()
            .filter(|definition| names.contains(&definition.name.as_ref()))
            .cloned()
            .collect()
    }

    /// A tool no list here names, declaring what it does.
    fn planted(name: &str, effects: talaria_tools::Effects, kind: ToolKind) -> ToolDefinition {
        let mut definition = offered().remove(0);
        definition.name = name.into();
        definition.effects = effects;
        definition.kind = kind;
        definition
    }

    #[test]
    fn a_new_tool_is_offered_for_the_job_it_declares() {
        let tools = [
            planted(
                "mcp__docs__rewrite",
                talaria_tools::Effects::writes(&["target"]),
                ToolKind::Edit,
            ),
            planted(
                "mcp__ci__shell",
                talaria_tools::Effects::runs(Some("script")),
                ToolKind::Execute,
            ),
        ];
        let offered: Vec<&ToolDefinition> = tools.iter().collect();
        let told = unknown_tool_instruction("edit_file", &offered);
        assert!(told.contains("call `mcp__docs__rewrite`"), "{told}");
        let told = unknown_tool_instruction("run_tests", &offered);
        assert!(told.contains("call `mcp__ci__shell`"), "{told}");
    }

    #[test]
    fn a_missing_tool_is_answered_with_the_tools_there_are_and_the_one_for_the_job() {
        let tools = offered();
        let offered: Vec<&ToolDefinition> = tools.iter().collect();
        let told = unknown_tool_instruction("add", &offered);
        assert!(told.contains("no `add` tool"), "{told}");
        assert!(told.contains("`patch`, `read_file`"), "{told}");
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
        let few: Vec<&ToolDefinition> = offered
            .iter()
            .filter(|d| d.name.as_ref() == "read_file")
            .copied()
            .collect();
        let told = unknown_tool_instruction("add", &few);
        assert!(!told.contains("To edit"), "{told}");
    }
}
