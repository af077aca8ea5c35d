//! `talaria agents`: each configured agent, whether it starts (`initialize` answered), its
//! version and what it can do, and whether its work stays inside Talaria's walls.

use std::sync::Arc;
use std::time::Duration;

use futures_util::FutureExt;
use futures_util::future::BoxFuture;
use talaria_conductor::{ChildAgent, ChildHost, HostFuture, Timings};
use talaria_engine::AgentEntry;
use talaria_protocol::{acp, errors};

/// A host for a probe: it serves nothing (a probe only initializes).
struct ProbeHost;

fn not_served<T>() -> HostFuture<'static, T> {
    async {
        Err(errors::method_not_found(
            "anything (talaria agents only probes)",
        ))
    }
    .boxed()
}

impl ChildHost for ProbeHost {
    fn update<'a>(&'a self, _update: acp::SessionNotification) -> BoxFuture<'a, ()> {
        async {}.boxed()
    }
    fn read_text_file<'a>(
        &'a self,
        _: acp::ReadTextFileRequest,
    ) -> HostFuture<'a, acp::ReadTextFileResponse> {
        not_served()
    }
    fn write_text_file<'a>(
        &'a self,
        _: acp::WriteTextFileRequest,
    ) -> HostFuture<'a, acp::WriteTextFileResponse> {
        not_served()
    }
    fn request_permission<'a>(
        &'a self,
        _: acp::RequestPermissionRequest,
    ) -> HostFuture<'a, acp::RequestPermissionResponse> {
        not_served()
    }
    fn create_terminal<'a>(
        &'a self,
        _: acp::CreateTerminalRequest,
    ) -> HostFuture<'a, acp::CreateTerminalResponse> {
        not_served()
    }
    fn terminal_output<'a>(
        &'a self,
        _: acp::TerminalOutputRequest,
    ) -> HostFuture<'a, acp::TerminalOutputResponse> {
        not_served()
    }
    fn wait_for_terminal_exit<'a>(
        &'a self,
        _: acp::WaitForTerminalExitRequest,
    ) -> HostFuture<'a, acp::WaitForTerminalExitResponse> {
        not_served()
    }
    fn kill_terminal<'a>(
        &'a self,
        _: acp::KillTerminalRequest,
    ) -> HostFuture<'a, acp::KillTerminalResponse> {
        not_served()
    }
    fn release_terminal<'a>(
        &'a self,
        _: acp::ReleaseTerminalRequest,
    ) -> HostFuture<'a, acp::ReleaseTerminalResponse> {
        not_served()
    }
    fn capabilities(&self) -> acp::ClientCapabilities {
        acp::ClientCapabilities::new()
            .fs(acp::FileSystemCapabilities::new()
                .read_text_file(true)
                .write_text_file(true))
            .terminal(true)
    }
}

/// What one agent's probe found, as lines.
async fn probe(entry: &AgentEntry, cwd: &std::path::Path) -> Vec<String> {
    let resolved = super::command_of(entry, Some(cwd)).await;
    let mut lines = vec![match (&resolved, &entry.registry) {
        (Ok((command, how)), Some(id)) if entry.command.is_empty() => format!(
            "{}: registry {id} → {} {}\n  resolved: {}",
            entry.name,
            command.program.display(),
            command.args.join(" "),
            how.as_deref().unwrap_or("as configured")
        ),
        (Err(_), Some(id)) => format!("{}: registry {id}", entry.name),
        _ => format!("{}: {} {}", entry.name, entry.command, entry.args.join(" ")),
    }];
    let walls = if entry.tools.as_deref() == Some("acp") {
        "  tools: declared to ask Talaria for its files and terminals (those follow Talaria's rules, sandbox and checkpoints); its own process runs with your rights, outside the sandbox"
    } else {
        "  tools: its own, outside Talaria's walls (only as safe as its own sandbox; its process runs with your rights)"
    };
    let timings = Timings {
        start: Duration::from_secs(30),
        ..Timings::default()
    };
    let command = match resolved {
        Ok((command, _)) => command,
        Err(why) => {
            lines.push(format!(
                "  starts: no — {}",
                printable_lines(&why.to_string())
            ));
            lines.push(walls.to_string());
            return lines;
        }
    };
    match ChildAgent::start(&command, cwd, Arc::new(ProbeHost), timings).await {
        Ok(child) => {
            let info = child.info();
            let version = info
                .implementation
                .as_ref()
                .map_or("(no version given)".to_string(), |i| {
                    format!("{} {}", printable(&i.name), printable(&i.version))
                });
            lines.push(format!(
                "  starts: yes — {version}, protocol {}",
                serde_json::to_string(&info.protocol_version).unwrap_or_default()
            ));
            let caps = &info.capabilities;
            lines.push(format!(
                "  can: load sessions {}, images {}, MCP over HTTP {}",
                yes(caps.load_session),
                yes(caps.prompt_capabilities.image),
                yes(caps.mcp_capabilities.http)
            ));
            if !info.auth_methods.is_empty() {
                let methods: Vec<String> = info
                    .auth_methods
                    .iter()
                    .map(|m| printable(&m.id().0))
                    .collect();
                lines.push(format!("  sign-in methods: {}", methods.join(", ")));
            }
            child.stop().await;
        }
        Err(error) => lines.push(format!(
            "  starts: no — {}",
            printable_lines(&error.to_string())
        )),
    }
    lines.push(walls.to_string());
    lines
}

/// What an agent says of itself, without control characters (a name cannot draw lines of
/// its own into the listing) and cut to one short line.
fn printable(text: &str) -> String {
    text.chars().filter(|c| !c.is_control()).take(80).collect()
}

/// A message of several lines as one printable line.
fn printable_lines(text: &str) -> String {
    text.lines()
        .map(|line| line.chars().filter(|c| !c.is_control()).collect::<String>())
        .collect::<Vec<_>>()
        .join(" / ")
}

fn yes(flag: bool) -> &'static str {
    if flag { "yes" } else { "no" }
}

/// Prints every configured agent's probe; fails when one does not start.
pub async fn list_agents(
    out: &mut dyn std::io::Write,
    entries: &[AgentEntry],
    cwd: &std::path::Path,
) -> bool {
    if entries.is_empty() {
        let _ = writeln!(
            out,
            "No agents are configured. Add one to config.toml, by its ACP registry id or its command, e.g.:\n\n[agents.claude]\nregistry = \"claude-acp\"\n\n[agents.mine]\ncommand = \"npx\"\nargs = [\"-y\", \"@agentclientprotocol/claude-agent-acp\"]"
        );
        return true;
    }
    let mut all_start = true;
    for entry in entries {
        let lines = probe(entry, cwd).await;
        all_start &= lines.iter().any(|l| l.starts_with("  starts: yes"));
        let _ = writeln!(out, "{}", lines.join("\n"));
    }
    all_start
}
