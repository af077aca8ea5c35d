//! Token accounting: a tiktoken encoding chosen per model family, counts cached per record
//! entry (a new turn costs only its new entries), tool schemas counted once per change,
//! images at a fixed estimate, and a per-model correction from provider-reported prompt
//! tokens.
//!
//! The BPE tables cost 25 MB (cl100k) to 50 MB (o200k) of memory once loaded, so a session
//! counts with a coarse, deliberately high estimate (3 bytes a token) while it is far below
//! its compaction threshold, and switches to the exact encoding ([`TokenAccounting::use_exact`])
//! once the estimate reaches [`EXACT_FROM`] of the threshold: every compaction decision is
//! made on exact counts.

use std::collections::HashMap;

use talaria_record::{Entry, EntryBody, EntryId, Transcript, UserPart};
use tiktoken_rs::CoreBPE;

/// Tokens counted for an image, whatever its size.
pub const IMAGE_TOKENS: u32 = 1_600;
/// Framing tokens per message (role, separators).
const MESSAGE_OVERHEAD: u32 = 4;
/// Framing tokens per tool call (id, name field, wrapping).
const CALL_OVERHEAD: u32 = 8;
/// The share of the compaction threshold from which counts are exact.
pub const EXACT_FROM: f64 = 0.4;

/// A tiktoken encoding.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Encoding {
    /// `cl100k_base`: the default for unknown and local models.
    Cl100k,
    /// `o200k_base`: current OpenAI models (GPT-4o, GPT-4.1, GPT-5, o-series).
    O200k,
}

impl Encoding {
    /// The encoding for a model name: o200k for current OpenAI families, else cl100k.
    pub fn for_model(model: &str) -> Self {
        let name = model
            .rsplit('/')
            .next()
            .unwrap_or(model)
            .to_ascii_lowercase();
        let o200k = [
            "gpt-4o",
            "gpt-4.1",
            "gpt-4.5",
            "gpt-5",
            "chatgpt-4o",
            "codex-",
        ]
        .iter()
        .any(|prefix| name.starts_with(prefix))
            || ["o1", "o3", "o4"]
                .iter()
                .any(|family| name == *family || name.starts_with(&format!("{family}-")));
        if o200k { Self::O200k } else { Self::Cl100k }
    }

    /// Parses a configured name (`cl100k`, `cl100k_base`, `o200k`, `o200k_base`).
    pub fn parse(name: &str) -> Option<Self> {
        match name.trim().to_ascii_lowercase().as_str() {
            "cl100k" | "cl100k_base" => Some(Self::Cl100k),
            "o200k" | "o200k_base" => Some(Self::O200k),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Self::Cl100k => "cl100k_base",
            Self::O200k => "o200k_base",
        }
    }

    /// The shared BPE (loaded on first use: tens of milliseconds; call off async threads).
    pub fn bpe(self) -> &'static CoreBPE {
        match self {
            Self::Cl100k => tiktoken_rs::cl100k_base_singleton(),
            Self::O200k => tiktoken_rs::o200k_base_singleton(),
        }
    }
}

/// What a count is based on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Counting {
    /// The coarse estimate (3 bytes a token: high for code and prose alike).
    Estimate,
    /// The model family's tiktoken encoding.
    Exact(Encoding),
}

impl Counting {
    /// Tokens of a text.
    pub fn count(self, text: &str) -> u32 {
        let tokens = match self {
            Self::Estimate => text.len().div_ceil(3),
            Self::Exact(encoding) => encoding.bpe().encode_ordinary(text).len(),
        };
        u32::try_from(tokens).unwrap_or(u32::MAX)
    }
}

/// A cheap fingerprint of what the model sees of an entry: its compacted flag and the byte
/// lengths of its parts. In-place rewrites change it (and callers also [`TokenAccounting::forget`]).
fn fingerprint(entry: &Entry) -> u64 {
    let mut print = u64::from(entry.compacted);
    let mut add = |n: usize| print = print.wrapping_mul(1_000_003).wrapping_add(n as u64 + 1);
    match &entry.body {
        EntryBody::System { text, environment } => {
            add(text.len());
            add(environment.as_ref().map_or(0, String::len));
        }
        EntryBody::Nudge { text } => add(text.len()),
        EntryBody::Summary { text, first, last } => {
            add(text.len());
            add(*first as usize);
            add(*last as usize);
        }
        EntryBody::User { model_view, .. } => model_view.iter().for_each(|part| match part {
            UserPart::Text { text } => add(text.len()),
            UserPart::Image { data, .. } => add(data.len() ^ 0x5555),
        }),
        EntryBody::Assistant(assistant) => {
            add(assistant.text.len());
            add(assistant.reasoning.as_ref().map_or(0, |r| r.text.len()));
            for call in &assistant.tool_calls {
                add(call.name.len() + call.arguments.len());
            }
        }
        EntryBody::ToolResult(result) => {
            add(result.model_text.len());
            result.images.iter().for_each(|_| add(0x5555));
        }
        EntryBody::Interrupted { reason } => add(reason.len()),
        _ => {}
    }
    print
}

/// Tokens the model reads for one entry as it stands (0 for markers and compacted entries;
/// a summary counts where it is rendered).
pub fn entry_tokens(entry: &Entry, counting: Counting) -> u32 {
    if entry.compacted {
        return 0;
    }
    let text = |s: &str| counting.count(s);
    let body = match &entry.body {
        EntryBody::System {
            text: t,
            environment,
        } => text(t) + environment.as_deref().map_or(0, text),
        EntryBody::Nudge { text: t } => text(t),
        EntryBody::Summary { text: t, .. } => text(t),
        EntryBody::User { model_view, .. } => model_view
            .iter()
            .map(|part| match part {
                UserPart::Text { text: t } => text(t),
                UserPart::Image { .. } => IMAGE_TOKENS,
            })
            .sum(),
        EntryBody::Assistant(assistant) => {
            let calls: u32 = assistant
                .tool_calls
                .iter()
                .map(|c| text(&c.name) + text(&c.arguments) + CALL_OVERHEAD)
                .sum();
            text(&assistant.text)
                + assistant.reasoning.as_ref().map_or(0, |r| text(&r.text))
                + calls
        }
        EntryBody::ToolResult(result) => {
            let images = u32::try_from(result.images.len()).unwrap_or(u32::MAX);
            text(&result.model_text).saturating_add(images.saturating_mul(IMAGE_TOKENS))
        }
        EntryBody::Interrupted { reason } => text(reason) + 8,
        EntryBody::Notice { .. }
        | EntryBody::ModeChanged { .. }
        | EntryBody::ModelChanged { .. }
        | EntryBody::Plan { .. }
        | EntryBody::Rewound { .. }
        | EntryBody::FilesRestored { .. }
        | EntryBody::SteerWaiting { .. } => return 0,
    };
    body.saturating_add(MESSAGE_OVERHEAD)
}

/// A session's token accounting.
#[derive(Debug, Clone)]
pub struct TokenAccounting {
    encoding: Encoding,
    counting: Counting,
    entries: HashMap<EntryId, (u64, u32)>,
    tools: Option<(u64, u32)>,
    /// Provider-reported prompt tokens ÷ counted tokens, per model.
    ratios: HashMap<String, f64>,
}

impl TokenAccounting {
    /// Accounting for a model family's encoding, starting with the coarse estimate.
    pub fn new(encoding: Encoding) -> Self {
        Self {
            encoding,
            counting: Counting::Estimate,
            entries: HashMap::new(),
            tools: None,
            ratios: HashMap::new(),
        }
    }

    pub fn encoding(&self) -> Encoding {
        self.encoding
    }

    pub fn counting(&self) -> Counting {
        self.counting
    }

    pub fn is_exact(&self) -> bool {
        matches!(self.counting, Counting::Exact(_))
    }

    /// Switches to exact counts (the caller loads the BPE first, off the async threads).
    pub fn use_exact(&mut self) {
        if !self.is_exact() {
            self.counting = Counting::Exact(self.encoding);
            self.entries.clear();
            self.tools = None;
        }
    }

    /// Changes the encoding (a model switch to another family).
    pub fn set_encoding(&mut self, encoding: Encoding) {
        if encoding != self.encoding {
            self.encoding = encoding;
            if self.is_exact() {
                self.counting = Counting::Exact(encoding);
            }
            self.entries.clear();
            self.tools = None;
        }
    }

    /// Drops cached counts of rewritten entries.
    pub fn forget(&mut self, ids: &[EntryId]) {
        for id in ids {
            self.entries.remove(id);
        }
    }

    /// Tokens of one entry, from the cache when it has not changed.
    pub fn entry(&mut self, entry: &Entry) -> u32 {
        let print = fingerprint(entry);
        if let Some((cached_print, tokens)) = self.entries.get(&entry.id)
            && *cached_print == print
        {
            return *tokens;
        }
        let tokens = entry_tokens(entry, self.counting);
        self.entries.insert(entry.id, (print, tokens));
        tokens
    }

    /// Tokens of what the model sees of the record.
    pub fn transcript(&mut self, transcript: &Transcript) -> u64 {
        transcript
            .entries()
            .iter()
            .map(|entry| u64::from(self.entry(entry)))
            .sum()
    }

    /// Tokens of the tool schemas (their JSON), counted again only when it changes.
    pub fn tools(&mut self, schemas_json: &str) -> u32 {
        let print = schemas_json.len() as u64;
        if let Some((cached_print, tokens)) = self.tools
            && cached_print == print
        {
            return tokens;
        }
        let tokens = self.counting.count(schemas_json);
        self.tools = Some((print, tokens));
        tokens
    }

    /// The counted size of a request: record plus tool schemas (before correction).
    pub fn counted(&mut self, transcript: &Transcript, schemas_json: &str) -> u64 {
        self.transcript(transcript) + u64::from(self.tools(schemas_json))
    }

    /// The estimated prompt tokens of a request for `model`: counted, corrected by what the
    /// provider reported for earlier requests.
    pub fn request(&mut self, transcript: &Transcript, schemas_json: &str, model: &str) -> u64 {
        let counted = self.counted(transcript, schemas_json);
        self.correct(counted, model)
    }

    /// Applies the model's correction ratio to a count.
    pub fn correct(&self, counted: u64, model: &str) -> u64 {
        let ratio = self.ratios.get(model).copied().unwrap_or(1.0);
        (counted as f64 * ratio).round() as u64
    }

    /// Learns from a provider's report: `reported` prompt tokens for a request counted as
    /// `counted`. Reports far off (cached prefixes reported apart, other framing) are bounded.
    pub fn observe(&mut self, model: &str, counted: u64, reported: u64) {
        if counted < 16 || reported == 0 {
            return;
        }
        let sample = (reported as f64 / counted as f64).clamp(0.25, 4.0);
        let ratio = self.ratios.entry(model.to_string()).or_insert(sample);
        *ratio = 0.5 * *ratio + 0.5 * sample;
    }

    /// The correction ratio in use for a model (1.0 until a provider reported).
    pub fn ratio(&self, model: &str) -> f64 {
        self.ratios.get(model).copied().unwrap_or(1.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use talaria_record::testing::{assistant, result, user};

    #[test]
    fn encodings_follow_the_model_family() {
        assert_eq!(Encoding::for_model("gpt-4o-mini"), Encoding::O200k);
        assert_eq!(Encoding::for_model("openai/gpt-5"), Encoding::O200k);
        assert_eq!(Encoding::for_model("o3-mini"), Encoding::O200k);
        assert_eq!(Encoding::for_model("gpt-4-turbo"), Encoding::Cl100k);
        assert_eq!(Encoding::for_model("qwen2.5-coder"), Encoding::Cl100k);
        assert_eq!(Encoding::for_model("claude-sonnet-4"), Encoding::Cl100k);
        assert_eq!(Encoding::parse("o200k_base"), Some(Encoding::O200k));
        assert_eq!(Encoding::parse("p50k"), None);
    }

    #[test]
    fn exact_counts_match_tiktoken_and_are_cached_per_entry() {
        let mut transcript = Transcript::with_system("You are helpful.");
        transcript.push(user("hello world"));
        let mut accounting = TokenAccounting::new(Encoding::Cl100k);
        accounting.use_exact();
        let first = accounting.transcript(&transcript);
        // "You are helpful." = 4 tokens, "hello world" = 2, plus 4 framing each.
        assert_eq!(first, 4 + 4 + 2 + 4);
        transcript.push(assistant("", &[("c1", "read_file", r#"{"path":"a"}"#)]));
        transcript.push(result("c1", "read_file", "line one"));
        let second = accounting.transcript(&transcript);
        assert!(second > first);
        assert_eq!(accounting.entries.len(), 4, "one cache slot per entry");
        // A rewrite changes the fingerprint, so the entry is counted again.
        if let EntryBody::ToolResult(r) = &mut transcript.entries_mut()[3].body {
            r.model_text = "x".into();
        }
        assert!(accounting.transcript(&transcript) < second);
    }

    #[test]
    fn the_estimate_is_high_and_images_are_fixed() {
        let text = "fn main() { println!(\"hello\"); }\n".repeat(50);
        let exact = Counting::Exact(Encoding::Cl100k).count(&text);
        let estimate = Counting::Estimate.count(&text);
        assert!(estimate >= exact, "{estimate} < {exact}");
        let mut transcript = Transcript::new();
        transcript.push(EntryBody::User {
            input: Vec::new(),
            model_view: vec![UserPart::Image {
                mime_type: "image/png".into(),
                data: "A".repeat(100_000),
            }],
        });
        let mut accounting = TokenAccounting::new(Encoding::Cl100k);
        assert_eq!(
            accounting.transcript(&transcript),
            u64::from(IMAGE_TOKENS + MESSAGE_OVERHEAD)
        );
    }

    #[test]
    fn provider_reports_correct_the_count_per_model() {
        let mut accounting = TokenAccounting::new(Encoding::Cl100k);
        accounting.observe("m", 1000, 1200);
        assert!((accounting.ratio("m") - 1.2).abs() < 1e-9);
        assert_eq!(accounting.correct(1000, "m"), 1200);
        assert_eq!(accounting.correct(1000, "other"), 1000);
        accounting.observe("m", 1000, 100_000);
        assert!(accounting.ratio("m") <= 4.0, "bounded");
    }
}
