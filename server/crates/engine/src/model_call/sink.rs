//! Where a model call's output goes: the chat (a foreground turn) or nowhere visible (a side
//! task collects it silently and keeps its notices for its caller).

use std::collections::HashSet;
use std::time::{Duration, Instant};

use talaria_provider::Usage;
use talaria_tools::Registry;
use tokio::sync::mpsc;

use crate::events::{CompactionView, EngineEvent, LimitsView, NoticeLevel};

/// Receives what a model call produces, as it arrives.
pub(crate) trait CallSink: Send {
    /// A piece of the answer.
    async fn text(&mut self, delta: String);
    /// A piece of the model's reasoning.
    async fn thought(&mut self, delta: String);
    /// The model began a tool call; its arguments are still streaming.
    async fn tool_call_started(&mut self, id: String, name: String);
    /// The token counts of one call, and the context use and session cost after it.
    async fn usage(&mut self, usage: &Usage, context_used: u64, window: u64, cost: Option<f64>);
    /// The provider's rate limits, as a call's answer stated them.
    async fn rate_limits(&mut self, _limits: LimitsView) {}
    /// A recovery step or failure the user should know about.
    async fn notice(&mut self, level: NoticeLevel, message: String);
    /// A new attempt at the answer begins (the first, a retry, a restart).
    async fn attempt_started(&mut self) {}
    /// Whether the user has seen any of the current attempt's answer.
    fn displayed(&self) -> bool {
        true
    }
    /// Whether the sink holds back text it wants to show progress for (it then hears
    /// [`CallSink::tick`] while the stream is open).
    fn holding(&self) -> bool {
        false
    }
    /// Time passes while the stream is open and the sink is holding (four times a second,
    /// deltas or not).
    async fn tick(&mut self) {}
    /// Whether `call` names a tool this caller runs, with arguments that pass its schema
    /// (a call that arrived whole before its stream failed is kept only then).
    fn runnable(&self, _call: &talaria_provider::ToolCallRequest) -> bool {
        false
    }
    /// A context compaction's progress.
    async fn compaction(&mut self, update: CompactionView);
}

/// The foreground turn: everything goes to the chat as engine events. A tool call gets its
/// card (and its session-unique id) as soon as the model starts it.
pub(crate) struct ChatSink<'a> {
    pub events: &'a mpsc::Sender<EngineEvent>,
    pub session_id: &'a str,
    pub registry: &'a Registry,
    pub used_ids: &'a mut HashSet<String>,
    /// Calls announced during this model call: (model id, session-unique id).
    pub announced: Vec<(String, String)>,
    /// Warnings and errors shown during the call, for the record.
    pub notices: Vec<(NoticeLevel, String)>,
    /// Holds back answer text that may be a tool call written as text (when tools are
    /// offered) until the turn has decided.
    pub hold: Option<TextHold>,
}

/// The answer of the current attempt, and how much of it the chat has seen; while text is
/// held back, when the chat was last shown progress.
#[derive(Debug, Default)]
pub(crate) struct TextHold {
    offered: Vec<String>,
    text: String,
    shown: usize,
    resume: usize,
    /// Since when the chat has seen nothing of this answer (the attempt's start, or the
    /// last text shown).
    quiet_since: Option<Instant>,
    last_progress: Option<Instant>,
    /// The held call's tool was named in the progress shown.
    named: bool,
}

/// Held-back text is first told of after this long…
const FIRST_PROGRESS: Duration = Duration::from_millis(1250);
/// …and then this often (with the stream's ticks, a mark at least every 2 s).
const PROGRESS_EVERY: Duration = Duration::from_millis(1500);

impl TextHold {
    /// Holds for calls of these tools, for an attempt that starts now.
    pub fn new(offered: Vec<String>) -> Self {
        Self {
            offered,
            quiet_since: Some(Instant::now()),
            ..Self::default()
        }
    }

    /// Adds a delta; returns what can be shown now.
    fn push(&mut self, delta: &str, now: Instant) -> Option<String> {
        self.text.push_str(delta);
        let showable = crate::text_calls::showable(&self.text, self.resume, &self.offered);
        self.resume = showable.resume;
        let released = (showable.upto > self.shown).then(|| {
            let shown = self.text[self.shown..showable.upto].to_string();
            self.shown = showable.upto;
            shown
        });
        if released.is_some() {
            self.quiet_since = Some(now);
            self.last_progress = None;
            self.named = false;
        }
        released
    }

    /// What to tell the chat about text held back, when it is due: once the chat has seen
    /// nothing for [`FIRST_PROGRESS`], that the model is writing a call (naming the tool once
    /// it shows), then a mark every [`PROGRESS_EVERY`].
    fn progress(&mut self, now: Instant) -> Option<String> {
        if self.shown >= self.text.len() {
            return None;
        }
        let due = match self.last_progress {
            None => self
                .quiet_since
                .is_none_or(|quiet| now.duration_since(quiet) >= FIRST_PROGRESS),
            Some(last) => now.duration_since(last) >= PROGRESS_EVERY,
        };
        if !due {
            return None;
        }
        let first = self.last_progress.is_none();
        self.last_progress = Some(now);
        let held = &self.text[self.shown..];
        let tool = (!self.named)
            .then(|| {
                self.offered
                    .iter()
                    .find(|name| crate::text_calls::names_tool(held, name))
            })
            .flatten();
        self.named |= tool.is_some();
        Some(match (first, tool) {
            (true, Some(tool)) => format!("The model is writing a `{tool}` call…"),
            (true, None) => "The model is writing what may be a tool call…".to_string(),
            (false, Some(tool)) => format!(" (`{tool}`)"),
            (false, None) => " ·".to_string(),
        })
    }

    /// How much of the streamed answer the chat has seen.
    pub fn shown(&self) -> usize {
        self.shown
    }
}

/// Makes a tool-call id unique within the session (models sometimes repeat ids).
pub(crate) fn unique_id(used: &mut HashSet<String>, id: &str) -> String {
    let base = if id.is_empty() { "call" } else { id };
    let mut candidate = base.to_string();
    let mut n = 1;
    while !used.insert(candidate.clone()) {
        n += 1;
        candidate = format!("{base}-{n}");
    }
    candidate
}

impl CallSink for ChatSink<'_> {
    async fn text(&mut self, delta: String) {
        let now = Instant::now();
        let shown = match &mut self.hold {
            Some(hold) => hold.push(&delta, now),
            None => Some(delta),
        };
        if let Some(shown) = shown {
            let _ = self.events.send(EngineEvent::AgentText(shown)).await;
        }
        if self.holding() {
            self.tick().await;
        }
    }

    fn holding(&self) -> bool {
        self.hold
            .as_ref()
            .is_some_and(|hold| hold.shown < hold.text.len())
    }

    async fn tick(&mut self) {
        let progress = self
            .hold
            .as_mut()
            .and_then(|hold| hold.progress(Instant::now()));
        if let Some(progress) = progress {
            let _ = self.events.send(EngineEvent::AgentThought(progress)).await;
        }
    }

    fn displayed(&self) -> bool {
        self.hold.as_ref().is_none_or(|hold| hold.shown > 0)
    }

    fn runnable(&self, call: &talaria_provider::ToolCallRequest) -> bool {
        self.registry
            .parse_args(&call.name, &call.arguments)
            .is_ok()
    }

    async fn attempt_started(&mut self) {
        if let Some(hold) = &mut self.hold {
            *hold = TextHold::new(std::mem::take(&mut hold.offered));
        }
    }

    async fn thought(&mut self, delta: String) {
        let _ = self.events.send(EngineEvent::AgentThought(delta)).await;
    }

    async fn tool_call_started(&mut self, id: String, name: String) {
        if self.announced.iter().any(|(model_id, _)| *model_id == id) {
            return;
        }
        let unique = unique_id(self.used_ids, &id);
        let kind = self
            .registry
            .definition(&name)
            .map_or(talaria_tools::ToolKind::Other, |d| d.kind);
        self.announced.push((id, unique.clone()));
        let _ = self
            .events
            .send(EngineEvent::ToolCallStarted {
                id: unique,
                name,
                kind,
            })
            .await;
    }

    async fn usage(&mut self, _usage: &Usage, context_used: u64, window: u64, cost: Option<f64>) {
        let _ = self
            .events
            .send(EngineEvent::Usage {
                used: context_used,
                size: window,
                cost,
            })
            .await;
    }

    async fn rate_limits(&mut self, limits: LimitsView) {
        let _ = self.events.send(EngineEvent::RateLimits(limits)).await;
    }

    async fn notice(&mut self, level: NoticeLevel, message: String) {
        tracing::info!(session = %self.session_id, ?level, "{message}");
        if level != NoticeLevel::Info {
            self.notices.push((level, message.clone()));
        }
        let _ = self
            .events
            .send(EngineEvent::Notice { level, message })
            .await;
    }

    async fn compaction(&mut self, update: CompactionView) {
        tracing::info!(session = %self.session_id, id = %update.id, status = ?update.status, "compaction");
        let _ = self.events.send(EngineEvent::Compaction(update)).await;
    }
}

/// A side task: collects the answer; nothing reaches the chat. Notices are logged and kept.
#[derive(Debug, Default)]
pub(crate) struct SilentSink {
    pub text: String,
    pub notices: Vec<(NoticeLevel, String)>,
    pub compactions: Vec<CompactionView>,
}

impl CallSink for SilentSink {
    async fn text(&mut self, delta: String) {
        self.text.push_str(&delta);
    }

    async fn thought(&mut self, _delta: String) {}

    async fn tool_call_started(&mut self, _id: String, _name: String) {}

    async fn usage(&mut self, _: &Usage, _: u64, _: u64, _: Option<f64>) {}

    async fn notice(&mut self, level: NoticeLevel, message: String) {
        tracing::info!(?level, "side task: {message}");
        self.notices.push((level, message));
    }

    async fn compaction(&mut self, update: CompactionView) {
        tracing::info!(id = %update.id, status = ?update.status, "side task compaction");
        self.compactions.push(update);
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;
    use std::time::{Duration, Instant};

    use super::{TextHold, unique_id};

    fn tools() -> Vec<String> {
        ["read_file", "terminal"].map(String::from).to_vec()
    }

    #[test]
    fn held_back_text_shows_progress_within_two_seconds_and_then_regularly() {
        let start = Instant::now();
        let at = |ms: u64| start + Duration::from_millis(ms);
        let mut hold = TextHold::new(tools());
        hold.quiet_since = Some(start);
        assert_eq!(hold.push("{\"na", at(0)), None);
        assert_eq!(hold.progress(at(1000)), None);
        assert_eq!(hold.progress(at(1200)), None);
        let first = hold.progress(at(1600)).expect("told within 2 s");
        assert!(first.contains("may be a tool call"), "{first}");
        assert_eq!(
            hold.push("me\": \"read_file\", \"arguments\": {", at(1700)),
            None
        );
        assert_eq!(
            hold.progress(at(2500)),
            None,
            "not more often than every 1.5 s"
        );
        assert_eq!(hold.progress(at(3100)).as_deref(), Some(" (`read_file`)"));
        assert_eq!(hold.progress(at(4600)).as_deref(), Some(" ·"));
        assert_eq!(hold.progress(at(5000)), None);
    }

    #[test]
    fn text_that_is_shown_needs_no_progress_and_a_new_hold_starts_over() {
        let start = Instant::now();
        let at = |ms: u64| start + Duration::from_millis(ms);
        let mut hold = TextHold::new(tools());
        hold.quiet_since = Some(start);
        assert_eq!(
            hold.push("Plain words.", at(0)).as_deref(),
            Some("Plain words.")
        );
        assert_eq!(hold.progress(at(5000)), None);
        assert!(
            hold.push("\n```json\n{\"name\": \"terminal\"", at(6000))
                .is_some()
        );
        assert_eq!(
            hold.progress(at(7000)),
            None,
            "quiet only since the line shown"
        );
        let told = hold.progress(at(7300)).expect("told");
        assert_eq!(told, "The model is writing a `terminal` call…");
    }

    #[test]
    fn opening_json_that_is_no_call_is_shown_once_it_is_whole() {
        let mut hold = TextHold::new(tools());
        let now = Instant::now();
        assert_eq!(hold.push("{\"port\": 80", now), None);
        assert_eq!(
            hold.push("} is the setting.", now).as_deref(),
            Some("{\"port\": 80} is the setting.")
        );
    }

    #[test]
    fn a_repeated_or_empty_call_id_is_made_unique_within_the_session() {
        let mut used = HashSet::new();
        assert_eq!(unique_id(&mut used, "call_1"), "call_1");
        assert_eq!(unique_id(&mut used, "call_1"), "call_1-2");
        assert_eq!(unique_id(&mut used, "call_1"), "call_1-3");
        assert_eq!(unique_id(&mut used, ""), "call");
        assert_eq!(unique_id(&mut used, ""), "call-2");
        // A model id that looks like a suffixed one does not collide either.
        assert_eq!(unique_id(&mut used, "call_1-2"), "call_1-2-2");
    }
}
