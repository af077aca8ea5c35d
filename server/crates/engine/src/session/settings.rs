//! How a session begins: fresh, or from a stored or forked record (the settings and the
//! user's input are the shared vocabulary in `crate::settings`).

use std::sync::Arc;

use talaria_record::Transcript;

use crate::slash::SlashCommands;

/// How a session begins: fresh, or from a stored or forked record.
#[derive(Debug, Default)]
pub struct SessionStart {
    /// The record to continue (its system prompt is kept); `None` starts a new one.
    pub history: Option<Transcript>,
    /// Where the record is saved; `None` runs unsaved.
    pub journal: Option<crate::journal::SessionJournal>,
    /// The session's title, if it has one already.
    pub title: Option<String>,
    /// What `/name` prompts mean; without any they are ordinary prompts.
    pub commands: Option<Arc<dyn SlashCommands>>,
    /// What a local server's window decides, when it had not answered yet: taken before
    /// the first op, in place of the spawned settings' figures.
    pub sizing: Option<crate::window_sizing::PendingSizing>,
    /// Why its record is not saved yet, when it was answered before the store took it (a
    /// fork's copy that waits): told as soon as it starts, and again once it is saved.
    pub unsaved: Option<String>,
}
