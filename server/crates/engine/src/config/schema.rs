//! `config.toml` as it is written: the serde types of the file (every table and key this
//! version knows) and the parser that collects the keys it does not.

use serde::Deserialize;

use super::{HashMap, PathBuf, Price};
/// Another ACP agent `delegate_task` may hand a task to (`[agents.<name>]`).
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
pub struct AgentEntry {
    #[serde(skip)]
    pub name: String,
    /// Its program (an ACP agent on stdio).
    pub command: String,
    #[serde(default)]
    pub args: Vec<String>,
    /// Added to the environment it starts with.
    #[serde(default)]
    pub env: std::collections::BTreeMap<String, String>,
    /// `acp` when it does its file and command work through its client (Talaria) only; else
    /// it is taken to run its own tools, outside Talaria's walls.
    pub tools: Option<String>,
    pub enabled: Option<bool>,
    /// Silence in a turn, while nothing waits on Talaria, before it is stopped as hung.
    pub idle_timeout_secs: Option<u64>,
}

#[derive(Debug, Default, Deserialize)]
pub(super) struct FileEndpoint {
    pub(super) base_url: Option<String>,
    pub(super) api_key: Option<String>,
    pub(super) api_keys: Option<Vec<String>>,
}

#[derive(Debug, Deserialize)]
pub(super) struct FileFallback {
    pub(super) provider: String,
    pub(super) model: String,
    pub(super) base_url: Option<String>,
    pub(super) api_key_env: Option<String>,
}

#[derive(Debug, Deserialize)]
pub(super) struct FileAuxiliary {
    pub(super) provider: Option<String>,
    pub(super) model: Option<String>,
    pub(super) base_url: Option<String>,
    pub(super) api_key_env: Option<String>,
    pub(super) timeout_secs: Option<u64>,
}

#[derive(Debug, Default, Deserialize)]
pub(super) struct FileCompression {
    pub(super) enabled: Option<bool>,
    pub(super) threshold: Option<f64>,
    pub(super) large_threshold: Option<f64>,
    pub(super) tail_ratio: Option<f64>,
    pub(super) head_entries: Option<usize>,
}

#[derive(Debug, Default, Deserialize)]
pub(super) struct FileLearning {
    pub(super) skill_review_after: Option<u32>,
    pub(super) memory_review_after: Option<u32>,
    pub(super) stage_reviews: Option<bool>,
    pub(super) max_review_calls: Option<u32>,
    pub(super) on_local_servers: Option<bool>,
}

/// An MCP server for every session (`[mcp_servers.<name>]`).
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
pub struct McpServerEntry {
    #[serde(skip)]
    pub name: String,
    pub command: Option<String>,
    #[serde(default)]
    pub args: Vec<String>,
    #[serde(default)]
    pub env: std::collections::BTreeMap<String, String>,
    pub url: Option<String>,
    /// `http` (the default) or `sse` for a `url`.
    #[serde(rename = "type")]
    pub transport: Option<String>,
    #[serde(default)]
    pub headers: std::collections::BTreeMap<String, String>,
    pub enabled: Option<bool>,
    pub startup_timeout_secs: Option<u64>,
    pub tool_timeout_secs: Option<u64>,
    /// A client registered beforehand with the server's authorization server (for one that
    /// offers no dynamic registration).
    pub oauth_client_id: Option<String>,
    /// The scopes to ask for at sign-in, instead of those the server names.
    pub oauth_scope: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
pub(super) struct FileDelegation {
    pub(super) max_concurrent: Option<usize>,
}

#[derive(Debug, Default, Deserialize)]
pub(super) struct FileSandbox {
    pub(super) mode: Option<String>,
    pub(super) writable: Option<Vec<String>>,
    pub(super) hidden: Option<Vec<String>>,
    pub(super) network: Option<bool>,
    pub(super) unix_sockets: Option<Vec<String>>,
    pub(super) max_processes: Option<u32>,
    pub(super) namespaces: Option<bool>,
}

#[derive(Debug, Default, Deserialize)]
pub(super) struct FileShellEnvironment {
    pub(super) keep: Option<Vec<String>>,
    pub(super) set: Option<std::collections::BTreeMap<String, String>>,
}

#[derive(Debug, Default, Deserialize)]
pub(super) struct FileStore {
    pub(super) url: Option<String>,
    pub(super) passfile: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
pub(super) struct FileMemory {
    pub(super) memory_chars: Option<usize>,
    pub(super) user_chars: Option<usize>,
}

#[derive(Debug, Default, Deserialize)]
pub(super) struct FileConfig {
    pub(super) provider: Option<String>,
    pub(super) model: Option<String>,
    pub(super) models: Option<Vec<String>>,
    pub(super) context_window: Option<u64>,
    pub(super) max_turn_requests: Option<u32>,
    pub(super) max_output_tokens: Option<u32>,
    pub(super) supports_images: Option<bool>,
    pub(super) mode: Option<String>,
    pub(super) toolsets: Option<Vec<String>>,
    pub(super) ask_for_credential_reads: Option<bool>,
    pub(super) titles: Option<bool>,
    pub(super) nudges: Option<bool>,
    pub(super) verify_after_edits: Option<bool>,
    pub(super) first_byte_timeout_secs: Option<u64>,
    pub(super) still_working_secs: Option<u64>,
    pub(super) connect_timeout_secs: Option<u64>,
    pub(super) stream_idle_timeout_secs: Option<u64>,
    pub(super) max_attempts: Option<u32>,
    pub(super) retry_base_ms: Option<u64>,
    pub(super) retry_cap_ms: Option<u64>,
    pub(super) retry_after_cap_secs: Option<u64>,
    pub(super) key_strategy: Option<String>,
    pub(super) key_cooldown_secs: Option<u64>,
    pub(super) anthropic_max_tokens: Option<u32>,
    pub(super) thinking_budget: Option<u32>,
    pub(super) reasoning_summaries: Option<bool>,
    #[serde(default)]
    pub(super) openai: FileEndpoint,
    #[serde(default)]
    pub(super) anthropic: FileEndpoint,
    #[serde(default)]
    pub(super) fallback: Vec<FileFallback>,
    #[serde(default)]
    pub(super) auxiliary: std::collections::BTreeMap<String, FileAuxiliary>,
    #[serde(default)]
    pub(super) prices: HashMap<String, Price>,
    #[serde(default)]
    pub(super) compression: FileCompression,
    #[serde(default)]
    pub(super) learning: FileLearning,
    #[serde(default)]
    pub(super) memory: FileMemory,
    #[serde(default)]
    pub(super) delegation: FileDelegation,
    #[serde(default)]
    pub(super) mcp_servers: std::collections::BTreeMap<String, McpServerEntry>,
    #[serde(default)]
    pub(super) agents: std::collections::BTreeMap<String, AgentEntry>,
    /// Model name → tiktoken encoding (`cl100k`, `o200k`).
    #[serde(default)]
    pub(super) tokenizers: HashMap<String, String>,
    #[serde(default)]
    pub(super) sandbox: FileSandbox,
    #[serde(default)]
    pub(super) shell_environment: FileShellEnvironment,
    #[serde(default)]
    pub(super) store: FileStore,
    #[serde(default)]
    pub(super) record: FileRecord,
}

/// `[record]`: every session's model calls recorded into `dir` (as `talaria acp --record`).
#[derive(Debug, Default, Deserialize)]
pub(super) struct FileRecord {
    pub(super) dir: Option<PathBuf>,
}

/// Parses `config.toml`, collecting keys this version does not know (they are reported, not
/// fatal, so a file written for a newer version still loads). A known key with a bad value is
/// an error naming the key and its line.
pub(super) fn parse_file(
    text: &str,
    unknown: &mut Vec<String>,
) -> Result<FileConfig, toml::de::Error> {
    let deserializer = toml::Deserializer::parse(text)?;
    serde_ignored::deserialize(deserializer, |path| unknown.push(path.to_string()))
}

impl FileConfig {
    /// A service's table of the file (`[openai]`, `[anthropic]`), taken out; empty when the
    /// file has none. A new service's table is a field above and an arm here.
    pub(super) fn take_service(&mut self, table: &str) -> FileEndpoint {
        match table {
            "openai" => std::mem::take(&mut self.openai),
            "anthropic" => std::mem::take(&mut self.anthropic),
            _ => FileEndpoint::default(),
        }
    }
}
