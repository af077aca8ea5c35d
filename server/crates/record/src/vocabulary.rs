//! What a tool is and does, in the one set of words both the tools that declare it and the
//! record that keeps it with each result use: [`ToolKind`] and [`Effects`]. A leaf: it
//! imports nothing of the record. The serialized form is the record's (stored sessions load).

use std::borrow::Cow;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;

/// What kind of action a tool performs; editors use it to pick an icon, the record keeps it
/// with the result (`display.kind`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum ToolKind {
    Read,
    Edit,
    Delete,
    Move,
    Search,
    Execute,
    Think,
    Fetch,
    #[default]
    Other,
}

/// The names of a call's arguments: a tool's declaration (static), or a record's (read back).
#[derive(Debug, Clone)]
pub enum ArgNames {
    Declared(&'static [&'static str]),
    Read(Vec<String>),
}

impl ArgNames {
    /// The names, in order.
    pub fn iter(&self) -> impl Iterator<Item = &str> + '_ {
        let (declared, read): (&[&str], &[String]) = match self {
            ArgNames::Declared(names) => (names, &[]),
            ArgNames::Read(names) => (&[], names),
        };
        declared
            .iter()
            .copied()
            .chain(read.iter().map(String::as_str))
    }

    pub fn is_empty(&self) -> bool {
        match self {
            ArgNames::Declared(names) => names.is_empty(),
            ArgNames::Read(names) => names.is_empty(),
        }
    }
}

impl Default for ArgNames {
    fn default() -> Self {
        ArgNames::Declared(&[])
    }
}

impl PartialEq for ArgNames {
    fn eq(&self, other: &Self) -> bool {
        self.iter().eq(other.iter())
    }
}

impl Eq for ArgNames {}

impl From<Vec<String>> for ArgNames {
    fn from(names: Vec<String>) -> Self {
        ArgNames::Read(names)
    }
}

impl Serialize for ArgNames {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(self.iter())
    }
}

impl<'de> Deserialize<'de> for ArgNames {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Vec::<String>::deserialize(deserializer).map(ArgNames::Read)
    }
}

/// What running a tool does to the user's world, as the tool declares it, and as the record
/// keeps it with each result. Everything that must know what a call did — the verify nudge,
/// compaction's accounts, the advice for a model that invented a tool, plan mode — reads
/// this, never the tool's name, so a new tool (an MCP tool included) is seen by all of them.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Effects {
    /// Reads files, searches or lists them.
    #[serde(default, skip_serializing_if = "is_false")]
    pub reads: bool,
    /// Changes, creates or deletes the user's files.
    #[serde(default, skip_serializing_if = "is_false")]
    pub writes: bool,
    /// Runs commands or controls running processes.
    #[serde(default, skip_serializing_if = "is_false")]
    pub runs_commands: bool,
    /// Asks the user something and waits for the answer.
    #[serde(default, skip_serializing_if = "is_false")]
    pub asks_user: bool,
    /// Which arguments name the files it reads or writes, the main one first.
    #[serde(default, skip_serializing_if = "ArgNames::is_empty")]
    pub path_args: ArgNames,
    /// Which argument holds the command it runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command_arg: Option<Cow<'static, str>>,
    /// Whether the tool declared its effects (`false`: nothing is known, so every consumer
    /// assumes the worst it must — it may change anything).
    #[serde(default, skip_serializing_if = "is_false")]
    pub declared: bool,
}

fn is_false(value: &bool) -> bool {
    !*value
}

/// Declared effects (a `const fn` cannot fill fields in from a constant with owned parts).
const fn declared(
    (reads, writes, runs_commands, asks_user): (bool, bool, bool, bool),
    path_args: &'static [&'static str],
    command_arg: Option<&'static str>,
) -> Effects {
    Effects {
        reads,
        writes,
        runs_commands,
        asks_user,
        path_args: ArgNames::Declared(path_args),
        command_arg: match command_arg {
            Some(name) => Some(Cow::Borrowed(name)),
            None => None,
        },
        declared: true,
    }
}

impl Effects {
    /// Changes nothing outside Talaria and reads no files (plans, questions' bookkeeping).
    pub const NOTHING: Effects = declared((false, false, false, false), &[], None);

    /// Undeclared (a tool from outside that says nothing of itself).
    pub const UNKNOWN: Effects = Effects {
        reads: false,
        writes: false,
        runs_commands: false,
        asks_user: false,
        path_args: ArgNames::Declared(&[]),
        command_arg: None,
        declared: false,
    };

    /// Asks the user.
    pub const ASKS: Effects = declared((false, false, false, true), &[], None);

    /// Reads the files named by `path_args`.
    pub const fn reads(path_args: &'static [&'static str]) -> Effects {
        declared((true, false, false, false), path_args, None)
    }

    /// Changes the files named by `path_args`.
    pub const fn writes(path_args: &'static [&'static str]) -> Effects {
        declared((false, true, false, false), path_args, None)
    }

    /// Runs the command in `command_arg` (`None`: controls processes already running).
    pub const fn runs(command_arg: Option<&'static str>) -> Effects {
        declared((false, false, true, false), &[], command_arg)
    }

    /// Whether a call may change the user's world: it writes or runs something, or nobody
    /// knows (undeclared).
    pub const fn may_change_anything(&self) -> bool {
        !self.declared || self.writes || self.runs_commands
    }

    /// What a result recorded before effects were (records of version 3 and older) did, as
    /// far as its display kind tells: edits and reads of `path`, commands in `command`.
    pub fn of_display_kind(kind: ToolKind) -> Effects {
        match kind {
            ToolKind::Read | ToolKind::Search => Effects::reads(&["path"]),
            ToolKind::Edit | ToolKind::Delete | ToolKind::Move => Effects::writes(&["path"]),
            ToolKind::Execute => Effects::runs(Some("command")),
            ToolKind::Think | ToolKind::Fetch | ToolKind::Other => Effects::UNKNOWN,
        }
    }

    /// The main file a call with these `arguments` acted on, when one is named.
    pub fn path<'a>(&self, arguments: &'a Value) -> Option<&'a str> {
        self.path_args
            .iter()
            .find_map(|name| arguments.get(name).and_then(Value::as_str))
    }

    /// The command a call with these `arguments` ran, when one is named.
    pub fn command<'a>(&self, arguments: &'a Value) -> Option<&'a str> {
        let name = self.command_arg.as_deref()?;
        arguments.get(name).and_then(Value::as_str)
    }
}
