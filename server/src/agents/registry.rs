//! ACP registry entries (`[agents.<name>] registry = "ID"`): looked up in the user's copy of
//! the registry (`agents_registry`: its `registry.json`, or one `agent.json`), else in a small
//! built-in table of well-known agents as the public registry lists them. Talaria never
//! fetches the registry; a copy is the user's to keep.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Deserialize;

/// One agent as the registry lists it: what Talaria starts it from.
#[derive(Debug, Clone, Default, Deserialize)]
pub(super) struct Listed {
    pub id: String,
    #[serde(default)]
    pub version: Option<String>,
    #[serde(default)]
    pub repository: Option<String>,
    #[serde(default)]
    pub website: Option<String>,
    #[serde(default)]
    pub distribution: Distribution,
    /// Names an npm package's program is installed under beyond the package's own (npm's
    /// `bin`, which the registry does not list); known for built-in entries only.
    #[serde(skip)]
    pub bins: Vec<String>,
}

/// How the registry distributes it (at least one of them).
#[derive(Debug, Clone, Default, Deserialize)]
pub(super) struct Distribution {
    /// Archives by platform (`linux-x86_64`, `darwin-aarch64`, …).
    #[serde(default)]
    pub binary: BTreeMap<String, BinaryTarget>,
    #[serde(default)]
    pub npx: Option<Package>,
    #[serde(default)]
    pub uvx: Option<Package>,
}

/// One platform's archive and the program in it.
#[derive(Debug, Clone, Default, Deserialize)]
pub(super) struct BinaryTarget {
    #[serde(default)]
    pub archive: String,
    pub cmd: String,
    #[serde(default)]
    pub args: Vec<String>,
    #[serde(default)]
    pub env: BTreeMap<String, String>,
}

/// An npm or PyPI package (its version pinned in `package` by the registry: `@x.y.z`,
/// `==x.y.z`).
#[derive(Debug, Clone, Default, Deserialize)]
pub(super) struct Package {
    pub package: String,
    #[serde(default)]
    pub cmd: Option<String>,
    #[serde(default)]
    pub args: Vec<String>,
    #[serde(default)]
    pub env: BTreeMap<String, String>,
}

/// Why an id has no entry.
#[derive(Debug, thiserror::Error)]
pub(crate) enum LookupError {
    #[error("cannot read the registry copy {path} (agents_registry): {why}")]
    Unreadable { path: String, why: String },
    #[error(
        "{id:?} is not an ACP registry id Talaria knows (built in: {known}); point \
         `agents_registry` at a copy of the registry's registry.json that lists it, or set \
         `command`"
    )]
    Unknown { id: String, known: String },
}

/// A registry copy: the whole registry (`{"agents": […]}`) or one agent's `agent.json`.
#[derive(Deserialize)]
#[serde(untagged)]
enum Copy {
    Registry { agents: Vec<Listed> },
    One(Box<Listed>),
}

/// `id`'s entry: from the copy at `file` when it lists it, else built in. Reads the file:
/// call it off the runtime thread.
pub(super) fn lookup(id: &str, file: Option<&Path>) -> Result<Listed, LookupError> {
    if let Some(path) = file {
        let unreadable = |why: String| LookupError::Unreadable {
            path: path.display().to_string(),
            why,
        };
        let text = std::fs::read_to_string(path).map_err(|e| unreadable(e.to_string()))?;
        let copy: Copy = serde_json::from_str(&text).map_err(|e| unreadable(e.to_string()))?;
        let listed = match copy {
            Copy::Registry { agents } => agents.into_iter().find(|a| a.id == id),
            Copy::One(one) => Some(*one).filter(|a| a.id == id),
        };
        if let Some(mut listed) = listed {
            listed.bins = built_in(id).map(|b| b.bins).unwrap_or_default();
            return Ok(listed);
        }
    }
    built_in(id).ok_or_else(|| LookupError::Unknown {
        id: id.to_string(),
        known: BUILT_IN.iter().map(|b| b.id).collect::<Vec<_>>().join(", "),
    })
}

/// A built-in entry: an id of the public registry with its package or binary, unpinned.
struct Known {
    id: &'static str,
    repository: &'static str,
    npm: Option<&'static str>,
    /// The program's names: npm's `bin` for a package, the archive's `cmd` for a binary.
    bins: &'static [&'static str],
    args: &'static [&'static str],
    env: &'static [(&'static str, &'static str)],
}

/// Well-known agents as the public registry (`agentclientprotocol/registry`) lists them.
const BUILT_IN: &[Known] = &[
    Known {
        id: "claude-acp",
        repository: "https://github.com/agentclientprotocol/claude-agent-acp",
        npm: Some("@agentclientprotocol/claude-agent-acp"),
        bins: &["claude-agent-acp", "claude-code-acp"],
        args: &[],
        env: &[],
    },
    Known {
        id: "codex-acp",
        // The adapter moved to the ACP organisation; the `@zed-industries` package is frozen.
        repository: "https://github.com/agentclientprotocol/codex-acp",
        npm: Some("@agentclientprotocol/codex-acp"),
        bins: &["codex-acp"],
        args: &[],
        env: &[],
    },
    Known {
        id: "gemini",
        repository: "https://github.com/google-gemini/gemini-cli",
        npm: Some("@google/gemini-cli"),
        bins: &["gemini"],
        args: &["--acp"],
        env: &[],
    },
    Known {
        id: "github-copilot",
        repository: "https://github.com/github/copilot-language-server-release",
        npm: Some("@github/copilot-language-server"),
        bins: &["copilot-language-server"],
        args: &["--acp"],
        env: &[],
    },
    Known {
        id: "qwen-code",
        repository: "https://github.com/QwenLM/qwen-code",
        npm: Some("@qwen-code/qwen-code"),
        bins: &["qwen"],
        args: &["--acp", "--experimental-skills"],
        env: &[],
    },
    Known {
        id: "auggie",
        repository: "https://github.com/augmentcode/auggie-zed-extension",
        npm: Some("@augmentcode/auggie"),
        bins: &["auggie"],
        args: &["--acp"],
        env: &[("AUGMENT_DISABLE_AUTO_UPDATE", "1")],
    },
    Known {
        id: "goose",
        repository: "https://github.com/block/goose",
        npm: None,
        bins: &["goose"],
        args: &["acp"],
        env: &[],
    },
    Known {
        id: "opencode",
        repository: "https://github.com/sst/opencode",
        npm: None,
        bins: &["opencode"],
        args: &["acp"],
        env: &[],
    },
    Known {
        id: "kimi",
        repository: "https://github.com/MoonshotAI/kimi-cli",
        npm: None,
        bins: &["kimi"],
        args: &["acp"],
        env: &[],
    },
];

/// The built-in entry of `id`, as the registry would list it (no version: an npm package
/// runs at npm's latest when `npx` starts it).
fn built_in(id: &str) -> Option<Listed> {
    let known = BUILT_IN.iter().find(|k| k.id == id)?;
    let args: Vec<String> = known.args.iter().map(|a| (*a).to_string()).collect();
    let env: BTreeMap<String, String> = known
        .env
        .iter()
        .map(|(k, v)| ((*k).to_string(), (*v).to_string()))
        .collect();
    let mut distribution = Distribution::default();
    match known.npm {
        Some(package) => {
            distribution.npx = Some(Package {
                package: package.to_string(),
                cmd: None,
                args,
                env,
            });
        }
        None => {
            let target = BinaryTarget {
                archive: String::new(),
                cmd: known
                    .bins
                    .first()
                    .map_or_else(String::new, |b| (*b).to_string()),
                args,
                env,
            };
            distribution.binary.insert(platform(), target);
        }
    }
    Some(Listed {
        id: known.id.to_string(),
        version: None,
        repository: Some(known.repository.to_string()),
        website: None,
        distribution,
        bins: known.bins.iter().map(|b| (*b).to_string()).collect(),
    })
}

/// The registry's name of this machine's platform (`linux-x86_64`, `darwin-aarch64`, …).
pub(super) fn platform() -> String {
    let os = match std::env::consts::OS {
        "macos" => "darwin",
        other => other,
    };
    format!("{os}-{}", std::env::consts::ARCH)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_copy_of_the_registry_is_read_first_and_the_built_in_table_after() {
        let dir = tempfile::tempdir().expect("dir");
        let file = dir.path().join("registry.json");
        let copy = r#"{"version": "1.0.0", "agents": [{"id": "gemini", "name": "Gemini",
            "version": "9.9.9", "description": "d",
            "distribution": {"npx": {"package": "@google/gemini-cli@9.9.9", "args": ["--acp"]}}}],
            "extensions": []}"#;
        std::fs::write(&file, copy).expect("write");
        let gemini = lookup("gemini", Some(&file)).expect("listed");
        assert_eq!(gemini.version.as_deref(), Some("9.9.9"));
        assert_eq!(gemini.bins, ["gemini"], "the built-in bin names still help");
        let goose = lookup("goose", Some(&file)).expect("built in");
        assert_eq!(goose.distribution.binary.len(), 1);
        let unknown = lookup("no-such-agent", Some(&file)).expect_err("unknown");
        assert!(unknown.to_string().contains("claude-acp"), "{unknown}");
        std::fs::write(&file, "{not json").expect("write");
        let broken = lookup("gemini", Some(&file)).expect_err("broken");
        assert!(broken.to_string().contains("cannot read"), "{broken}");
    }

    #[test]
    fn one_agents_agent_json_is_a_copy_too() {
        let dir = tempfile::tempdir().expect("dir");
        let file = dir.path().join("agent.json");
        let text = include_str!("../../../clients/registry/agent.json");
        std::fs::write(&file, text).expect("write");
        let talaria = lookup("talaria", Some(&file)).expect("listed");
        assert_eq!(talaria.distribution.binary.len(), 4);
        assert!(talaria.distribution.npx.is_some() && talaria.distribution.uvx.is_some());
    }
}
