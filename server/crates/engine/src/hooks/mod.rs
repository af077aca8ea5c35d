//! Hooks with Claude Code's contract: the user's own commands around a session's events
//! (`SessionStart`, `UserPromptSubmit`, `PreToolUse`, `PostToolUse`, `PostToolUseFailure`,
//! `Stop`, `SubagentStop`, `PreCompact`, `SessionEnd`, `Notification`), declared in `config.toml` as
//! `[[hooks.PreToolUse]] matcher = "terminal|write_file"`, `command`, `timeout_s` — and, once
//! its folder is trusted, in a project's `.talaria/config.toml`. Each gets the event as JSON
//! on stdin and answers with its exit code (0 goes on, 2 blocks with stderr as the reason,
//! anything else is an error that blocks nothing) and, on exit 0, optionally JSON on stdout
//! (`hookSpecificOutput.permissionDecision`, `updatedInput`, `additionalContext`, `decision`,
//! `systemMessage`). A matcher is a regular expression on the whole tool name, Talaria's or
//! Claude Code's for it ([`claude_names`]), so existing matchers work unchanged. A hook
//! runs inside the session's sandbox when it is a project's, asks for it (`sandbox = true`),
//! or its folder is not trusted (`Hook.confined`); a guard that cannot decide (never ran,
//! timed out, failed confined) fails closed where its event can block.

mod answer;
mod run;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

pub use answer::{Decision, HookAnswer};
pub use run::{HookRun, run_hook};

/// The longest a hook may run unless it says otherwise (Claude Code's default).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);

/// The events a hook can be declared for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum HookEvent {
    SessionStart,
    UserPromptSubmit,
    PreToolUse,
    /// A call that ran and succeeded.
    PostToolUse,
    /// A call that ran and failed (or was cut off).
    PostToolUseFailure,
    Stop,
    SubagentStop,
    PreCompact,
    SessionEnd,
    Notification,
}

impl HookEvent {
    pub const ALL: [HookEvent; 10] = [
        Self::SessionStart,
        Self::UserPromptSubmit,
        Self::PreToolUse,
        Self::PostToolUse,
        Self::PostToolUseFailure,
        Self::Stop,
        Self::SubagentStop,
        Self::PreCompact,
        Self::SessionEnd,
        Self::Notification,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::SessionStart => "SessionStart",
            Self::UserPromptSubmit => "UserPromptSubmit",
            Self::PreToolUse => "PreToolUse",
            Self::PostToolUse => "PostToolUse",
            Self::PostToolUseFailure => "PostToolUseFailure",
            Self::Stop => "Stop",
            Self::SubagentStop => "SubagentStop",
            Self::PreCompact => "PreCompact",
            Self::SessionEnd => "SessionEnd",
            Self::Notification => "Notification",
        }
    }

    pub fn named(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|e| e.as_str() == name)
    }

    /// Whether a matcher means anything for the event: tools' names, or a `SessionStart`'s
    /// `source` (`startup`, `resume`).
    fn has_matcher(self) -> bool {
        matches!(
            self,
            Self::PreToolUse | Self::PostToolUse | Self::PostToolUseFailure | Self::SessionStart
        )
    }

    /// What an event without a tool is matched on, from its payload.
    fn subject(self, payload: &serde_json::Value) -> Option<&str> {
        match self {
            Self::SessionStart => payload["source"].as_str(),
            _ => None,
        }
    }
}

/// Claude Code's names for a Talaria tool (what its hooks' matchers and scripts expect).
pub fn claude_names(tool: &str) -> &'static [&'static str] {
    match tool {
        "terminal" => &["Bash"],
        "patch" => &["Edit", "MultiEdit"],
        "write_file" => &["Write"],
        "read_file" => &["Read"],
        "search_files" => &["Grep", "Glob"],
        "delegate_task" => &["Task"],
        "todo" => &["TodoWrite"],
        _ => &[],
    }
}

/// Claude Code's names for one call: what a `process` call types into a running command
/// (`write`) is a command like `terminal`'s, so a `Bash` guard sees it too; any other call
/// has its tool's names.
pub fn claude_names_of_call(tool: &str, input: &serde_json::Value) -> &'static [&'static str] {
    if tool == "process" && typed_command(input).is_some() {
        return &["Bash"];
    }
    claude_names(tool)
}

/// The text a `process` `write` types into a running command.
pub fn typed_command(input: &serde_json::Value) -> Option<&str> {
    (input.get("action").and_then(serde_json::Value::as_str) == Some("write"))
        .then(|| input.get("data").and_then(serde_json::Value::as_str))
        .flatten()
}

/// Where a hook was declared.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HookOrigin {
    /// The user's `config.toml`.
    User,
    /// A trusted project's `.talaria/config.toml`.
    Project(PathBuf),
}

/// One declared hook.
#[derive(Debug, Clone)]
pub struct Hook {
    pub event: HookEvent,
    /// The matcher as written (empty or `*`: every tool).
    pub matcher: String,
    matcher_regex: Option<regex::Regex>,
    pub command: String,
    pub timeout: Duration,
    pub origin: HookOrigin,
    /// Runs inside the session's sandbox: a project's hooks always; the user's when the entry
    /// says `sandbox = true`, and every one of them in a folder that is not trusted (what a
    /// hook runs there — a formatter's configuration, a script under `$CLAUDE_PROJECT_DIR` —
    /// may be the folder's own code).
    pub confined: bool,
}

impl PartialEq for Hook {
    fn eq(&self, other: &Self) -> bool {
        (
            self.event,
            &self.matcher,
            &self.command,
            self.timeout,
            &self.origin,
        ) == (
            other.event,
            &other.matcher,
            &other.command,
            other.timeout,
            &other.origin,
        ) && self.confined == other.confined
    }
}

impl Hook {
    /// Whether the hook is for `tool` (or a `SessionStart`'s source; events without a
    /// matcher match always).
    pub fn matches(&self, tool: Option<&str>) -> bool {
        self.matches_names(tool.map(|tool| (tool, claude_names(tool))))
    }

    /// Whether it matches a call of `tool` known to Claude Code by `names` (or a
    /// `SessionStart`'s source, with no names).
    fn matches_names(&self, call: Option<(&str, &[&str])>) -> bool {
        let (Some(regex), Some((tool, names)), true) =
            (&self.matcher_regex, call, self.event.has_matcher())
        else {
            return true;
        };
        regex.is_match(tool) || names.iter().any(|name| regex.is_match(name))
    }

    /// The hook as a card or a notice names it.
    pub fn shown(&self) -> String {
        let command = talaria_util::head(&self.command, 60)
            .map(|(head, _)| format!("{head}…"))
            .unwrap_or_else(|| self.command.clone());
        match (&self.origin, self.confined) {
            (HookOrigin::User, false) => format!("{} hook `{command}`", self.event.as_str()),
            (HookOrigin::User, true) => {
                format!("{} hook `{command}` (in the sandbox)", self.event.as_str())
            }
            (HookOrigin::Project(_), _) => {
                format!("{} hook `{command}` (project)", self.event.as_str())
            }
        }
    }
}

/// A declaration that cannot be used.
#[derive(Debug, thiserror::Error)]
#[error("hooks.{key}: {why}")]
pub struct HookConfigError {
    pub key: String,
    pub why: String,
}

/// A session's hooks: the user's first, then a trusted project's.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Hooks {
    pub hooks: Vec<Hook>,
}

impl Hooks {
    /// The hooks declared under `[hooks]` (a TOML table: event name → array of tables).
    pub fn from_toml(table: &toml::Table, origin: HookOrigin) -> Result<Self, HookConfigError> {
        let mut hooks = Vec::new();
        for (name, entries) in table {
            let event = HookEvent::named(name).ok_or_else(|| HookConfigError {
                key: name.clone(),
                why: format!(
                    "unknown event; expected one of {}",
                    HookEvent::ALL.map(HookEvent::as_str).join(", ")
                ),
            })?;
            let entries = entries.as_array().ok_or_else(|| HookConfigError {
                key: name.clone(),
                why: "expected an array of tables ([[hooks.EVENT]])".into(),
            })?;
            for (index, entry) in entries.iter().enumerate() {
                let key = format!("{name}[{index}]");
                hooks.extend(entry_hooks(event, entry, &key, &origin)?);
            }
        }
        Ok(Self { hooks })
    }

    /// The same hooks, each run inside the session's sandbox (a folder that is not trusted).
    pub fn confined(mut self) -> Self {
        for hook in &mut self.hooks {
            hook.confined = true;
        }
        self
    }

    /// These hooks, then `more`.
    pub fn and(mut self, more: Hooks) -> Self {
        self.hooks.extend(more.hooks);
        self
    }

    /// The hooks for `event` (and `tool`), in order.
    pub fn for_event<'a>(
        &'a self,
        event: HookEvent,
        tool: Option<&'a str>,
    ) -> impl Iterator<Item = &'a Hook> + 'a {
        self.hooks
            .iter()
            .filter(move |hook| hook.event == event && hook.matches(tool))
    }

    /// The hooks of a tool event that match one call (its input may name it otherwise:
    /// [`claude_names_of_call`]).
    pub fn for_call<'a>(
        &'a self,
        event: HookEvent,
        tool: &'a str,
        input: &serde_json::Value,
    ) -> impl Iterator<Item = &'a Hook> + 'a {
        let names = claude_names_of_call(tool, input);
        self.hooks
            .iter()
            .filter(move |hook| hook.event == event && hook.matches_names(Some((tool, names))))
    }

    pub fn is_empty(&self) -> bool {
        self.hooks.is_empty()
    }
}

/// The keys an `[[hooks.EVENT]]` entry may hold, and one of Claude Code's inner `hooks`
/// (`statusMessage`, text Claude Code shows while the hook runs, changes nothing here).
const ENTRY_KEYS: &[&str] = &[
    "matcher",
    "command",
    "timeout_s",
    "timeout",
    "sandbox",
    "hooks",
    "type",
    "statusMessage",
];
const COMMAND_KEYS: &[&str] = &[
    "type",
    "command",
    "timeout_s",
    "timeout",
    "sandbox",
    "statusMessage",
];

/// What is wrong with a key the entry does not know, if it has one (a misspelled `sandbox`
/// would run the hook outside the sandbox unwarned), naming the key it likely meant.
fn unknown_key(table: &toml::Table, known: &[&str]) -> Option<String> {
    let unknown = table.keys().find(|key| !known.contains(&key.as_str()))?;
    Some(match talaria_util::closest(unknown, known) {
        Some(meant) => format!("unknown key {unknown:?} (did you mean {meant:?}?)"),
        None => format!("unknown key {unknown:?}; a hook knows {}", known.join(", ")),
    })
}

/// A hook's `timeout_s` (or Claude Code's `timeout`), the default when it has none; the
/// complaint about one that is not a positive number of seconds.
fn timeout_of(table: &toml::Table) -> Result<Duration, &'static str> {
    let Some(value) = table.get("timeout_s").or_else(|| table.get("timeout")) else {
        return Ok(DEFAULT_TIMEOUT);
    };
    match value
        .as_integer()
        .or_else(|| value.as_float().map(|f| f as i64))
    {
        Some(secs) if secs > 0 => Ok(Duration::from_secs(secs as u64)),
        _ => Err("timeout_s must be a positive number of seconds"),
    }
}

/// The hooks of one `[[hooks.EVENT]]` entry: `command` (with `matcher`, `timeout_s`), or
/// Claude Code's shape, `hooks = [{type = "command", command, timeout}]` under a `matcher`.
fn entry_hooks(
    event: HookEvent,
    entry: &toml::Value,
    key: &str,
    origin: &HookOrigin,
) -> Result<Vec<Hook>, HookConfigError> {
    let error = |why: &str| HookConfigError {
        key: key.to_string(),
        why: why.to_string(),
    };
    let table = entry.as_table().ok_or_else(|| error("expected a table"))?;
    if let Some(why) = unknown_key(table, ENTRY_KEYS) {
        return Err(error(&why));
    }
    let matcher = match table.get("matcher") {
        None => String::new(),
        Some(value) => value
            .as_str()
            .ok_or_else(|| error("matcher must be a string"))?
            .to_string(),
    };
    let matcher_regex = compiled(&matcher).map_err(|e| {
        error(&format!(
            "matcher {matcher:?} is not a regular expression: {e}"
        ))
    })?;
    let commands: Vec<&toml::Table> = match table.get("hooks") {
        Some(inner) => inner
            .as_array()
            .ok_or_else(|| error("hooks must be an array of tables"))?
            .iter()
            .map(|h| {
                h.as_table()
                    .ok_or_else(|| error("hooks must be an array of tables"))
            })
            .collect::<Result<_, _>>()?,
        None => vec![table],
    };
    let mut hooks = Vec::new();
    for command_table in commands {
        if let Some(kind) = command_table.get("type").and_then(toml::Value::as_str)
            && kind != "command"
        {
            return Err(error(&format!(
                "type {kind:?} is not supported (only \"command\")"
            )));
        }
        if !std::ptr::eq(command_table, table)
            && let Some(why) = unknown_key(command_table, COMMAND_KEYS)
        {
            return Err(error(&why));
        }
        let command = command_table
            .get("command")
            .and_then(toml::Value::as_str)
            .filter(|c| !c.trim().is_empty())
            .ok_or_else(|| error("command (a non-empty string) is required"))?;
        let timeout = timeout_of(command_table).map_err(&error)?;
        let sandbox = match command_table
            .get("sandbox")
            .or_else(|| table.get("sandbox"))
        {
            None => false,
            Some(value) => value
                .as_bool()
                .ok_or_else(|| error("sandbox must be true or false"))?,
        };
        hooks.push(Hook {
            event,
            matcher: matcher.clone(),
            matcher_regex: matcher_regex.clone(),
            command: command.to_string(),
            timeout,
            confined: sandbox || matches!(origin, HookOrigin::Project(_)),
            origin: origin.clone(),
        });
    }
    Ok(hooks)
}

/// A matcher as a whole-name regular expression; `None` matches everything.
fn compiled(matcher: &str) -> Result<Option<regex::Regex>, regex::Error> {
    let matcher = matcher.trim();
    if matcher.is_empty() || matcher == "*" {
        return Ok(None);
    }
    regex::Regex::new(&format!("^(?:{matcher})$")).map(Some)
}

/// The user's hooks, from `config.toml`'s `[hooks]` (none without one).
pub fn user_hooks(table: Option<&toml::Table>) -> Result<Arc<Hooks>, HookConfigError> {
    Ok(Arc::new(match table {
        Some(table) => Hooks::from_toml(table, HookOrigin::User)?,
        None => Hooks::default(),
    }))
}

/// What the hooks of an event without a tool said.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct EventOutcome {
    /// What they add to the conversation (`additionalContext`, or plain stdout where
    /// Claude Code takes it as context).
    pub context: Vec<String>,
    /// The first block's reason (exit 2, `decision: "block"`, `continue: false`).
    pub blocked: Option<String>,
    /// What to tell the user: their `systemMessage`s and their failures.
    pub notices: Vec<String>,
}

/// Runs the hooks of `event` in order, each reading `payload` (to which the common fields
/// are added); stops at the first that blocks.
pub async fn run_event(
    hooks: &Hooks,
    event: HookEvent,
    mut payload: serde_json::Value,
    session_id: &str,
    cwd: &Path,
    shell: &talaria_tools::Shell,
) -> EventOutcome {
    let mut outcome = EventOutcome::default();
    let plain_context = matches!(event, HookEvent::SessionStart | HookEvent::UserPromptSubmit);
    payload["session_id"] = serde_json::json!(session_id);
    payload["transcript_path"] = serde_json::json!("");
    payload["cwd"] = serde_json::json!(cwd);
    payload["hook_event_name"] = serde_json::json!(event.as_str());
    let subject = event.subject(&payload).map(str::to_string);
    for hook in hooks.for_event(event, subject.as_deref()) {
        let run = run_hook(hook, &payload, cwd, shell).await;
        let answer = HookAnswer::of(&run, plain_context);
        outcome.notices.extend(answer.system_message.clone());
        if let Some(error) = &answer.error {
            outcome
                .notices
                .push(format!("The {} failed: {error}", hook.shown()));
            // A prompt guard that could not decide holds the prompt back (fail closed): it
            // never ran, timed out, or failed in the sandbox (which may be what broke it).
            if event == HookEvent::UserPromptSubmit
                && (hook.confined || run.never_ran() || run.timed_out)
            {
                outcome.blocked = Some(format!(
                    "{} could not decide on the prompt, so it was held back: {error}",
                    hook.shown()
                ));
                break;
            }
        }
        outcome.context.extend(answer.context.clone());
        if let Some(reason) = answer.blocked.or(answer.stop) {
            outcome.blocked = Some(format!("{}: {reason}", hook.shown()));
            break;
        }
    }
    outcome
}

/// Where a session's hooks run: its hooks, id, folder and shell.
#[derive(Clone, Copy)]
pub struct HookScope<'a> {
    pub hooks: &'a Hooks,
    pub session_id: &'a str,
    pub cwd: &'a Path,
    pub shell: &'a talaria_tools::Shell,
}

impl HookScope<'_> {
    /// Runs `event`'s hooks (none declared: nothing runs) and tells the user what they said
    /// for them (messages, failures, a block) through `events`.
    pub async fn run(
        &self,
        event: HookEvent,
        payload: serde_json::Value,
        events: &tokio::sync::mpsc::Sender<crate::events::EngineEvent>,
    ) -> EventOutcome {
        let subject = event.subject(&payload);
        if self.hooks.for_event(event, subject).next().is_none() {
            return EventOutcome::default();
        }
        let outcome = run_event(
            self.hooks,
            event,
            payload,
            self.session_id,
            self.cwd,
            self.shell,
        )
        .await;
        for message in outcome.notices.iter().chain(&outcome.blocked) {
            let _ = events
                .send(crate::events::EngineEvent::Notice {
                    level: crate::events::NoticeLevel::Warning,
                    message: message.clone(),
                })
                .await;
        }
        outcome
    }
}

/// The hooks of a trusted project: `[hooks]` of its `.talaria/config.toml`, from the text the
/// folder's trust accepted (`path` names it in errors and on cards).
pub fn project_hooks(text: &str, path: &Path) -> Result<Hooks, HookConfigError> {
    let error = |why: String| HookConfigError {
        key: format!("(in {})", path.display()),
        why,
    };
    let table: toml::Table = text
        .parse()
        .map_err(|e: toml::de::Error| error(e.to_string()))?;
    match table.get("hooks") {
        None => Ok(Hooks::default()),
        Some(toml::Value::Table(hooks)) => {
            Hooks::from_toml(hooks, HookOrigin::Project(path.to_path_buf()))
        }
        Some(_) => Err(error("[hooks] must be a table".into())),
    }
}

#[cfg(test)]
mod tests;
