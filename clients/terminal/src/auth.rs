//! A session the agent cannot start until the user authenticates (ACP's `auth_required`,
//! `-32000`): told in a short line — what is missing, in the agent's first words, and the
//! command of its terminal authentication method (`talaria setup`) — instead of the text
//! written for editors. The error's message and data are read defensively: whatever their
//! shape, the line says something true.

use std::path::Path;

use serde_json::Value;

/// ACP's code for "authentication required".
const AUTH_REQUIRED: i64 = -32000;

/// The most of the agent's own words the line keeps.
const REASON_CHARS: usize = 90;

/// Whether `error` (a JSON-RPC error object) asks the user to authenticate.
pub fn is_auth_required(error: &Value) -> bool {
    error["code"].as_i64() == Some(AUTH_REQUIRED)
        || error["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("Authentication required"))
}

/// What is missing, in the agent's first words: the message's first clause after
/// "Authentication required:", cut short.
fn reason(error: &Value) -> Option<String> {
    let message = error["message"].as_str()?;
    let rest = message
        .strip_prefix("Authentication required")
        .map(|rest| rest.trim_start_matches([':', ' ']))
        .unwrap_or(message);
    let clause = rest
        .split([':', ';', '.', '\n'])
        .next()
        .unwrap_or_default()
        .trim();
    if clause.is_empty() {
        return None;
    }
    let mut shown: String = clause.chars().take(REASON_CHARS).collect();
    if shown.len() < clause.len() {
        shown.push('…');
    }
    Some(shown)
}

/// The command a user types for the agent's terminal method (`talaria setup`), from the
/// methods `initialize` offered (those the error names, when it names any).
fn terminal_command(error: &Value, initialized: &Value, agent: &str) -> Option<String> {
    let named: Vec<&str> = error["data"]["authMethods"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|m| m.as_str().or_else(|| m["id"].as_str()))
        .collect();
    let method = initialized["authMethods"]
        .as_array()?
        .iter()
        .filter(|m| named.is_empty() || m["id"].as_str().is_some_and(|id| named.contains(&id)))
        .find(|m| m["type"] == "terminal")?;
    let args: Vec<&str> = method["args"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    Some(
        std::iter::once(agent)
            .chain(args)
            .collect::<Vec<_>>()
            .join(" "),
    )
}

/// The names of the ways the agent offers to authenticate, for an agent with no terminal
/// method.
fn method_names(initialized: &Value) -> Vec<String> {
    initialized["authMethods"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|m| m["name"].as_str().or_else(|| m["id"].as_str()))
        .map(str::to_string)
        .collect()
}

/// How the user calls `agent`: its name when that is what `PATH` finds, else its path.
pub fn as_typed(agent: &Path, path: Option<&std::ffi::OsStr>) -> String {
    let Some(name) = agent.file_name() else {
        return agent.display().to_string();
    };
    let found = path
        .map(std::env::split_paths)
        .into_iter()
        .flatten()
        .map(|dir| dir.join(name))
        .find(|candidate| candidate.is_file());
    match found {
        Some(found) if found == agent || agent.components().count() == 1 => {
            name.to_string_lossy().into_owned()
        }
        _ => agent.display().to_string(),
    }
}

/// The short text for an `auth_required` answer to `session/new`.
pub fn short_text(error: &Value, initialized: &Value, agent: &str) -> String {
    let missing = match reason(error) {
        Some(reason) => format!("no model is set up yet ({reason})"),
        None => "no model is set up yet".to_string(),
    };
    let todo = match terminal_command(error, initialized, agent) {
        Some(command) => format!(
            "Run `{command}` in a terminal to choose a provider, model and key, then start \
             talaria-chat again."
        ),
        None => {
            let names = method_names(initialized);
            if names.is_empty() {
                "Set up the agent's credentials as its documentation says.".to_string()
            } else {
                format!("The agent authenticates by: {}.", names.join("; "))
            }
        }
    };
    format!("{missing}.\n{todo}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn talaria_methods() -> Value {
        json!({"authMethods": [
            {"id": "talaria-config", "name": "API key from environment or config"},
            {"type": "terminal", "id": "talaria-setup", "name": "Set up in a terminal", "args": ["setup"]},
        ]})
    }

    #[test]
    fn talarias_long_text_becomes_two_short_lines() {
        let error = json!({"code": -32000, "message": "Authentication required: no API key for \
            the openai provider: set OPENAI_API_KEY in the agent's environment, or api_key \
            under [openai] in /home/u/.talaria/config.toml (an empty key is allowed). Editors \
            and SDK clients may not pass your shell's environment; authenticate with …"});
        assert!(is_auth_required(&error));
        assert_eq!(
            short_text(&error, &talaria_methods(), "talaria"),
            "no model is set up yet (no API key for the openai provider).\nRun `talaria setup` \
             in a terminal to choose a provider, model and key, then start talaria-chat again."
        );
    }

    #[test]
    fn any_shape_of_error_still_gives_a_true_line() {
        let bare =
            json!({"code": -32000, "message": "", "data": {"authMethods": ["talaria-setup"]}});
        assert_eq!(
            short_text(&bare, &talaria_methods(), "/opt/t/talaria"),
            "no model is set up yet.\nRun `/opt/t/talaria setup` in a terminal to choose a \
             provider, model and key, then start talaria-chat again."
        );
        let other_agent = json!({"code": -32000, "message": "Authentication required"});
        let offered = json!({"authMethods": [{"id": "login", "name": "Log in with the CLI"}]});
        assert_eq!(
            short_text(&other_agent, &offered, "other"),
            "no model is set up yet.\nThe agent authenticates by: Log in with the CLI."
        );
        assert!(!is_auth_required(
            &json!({"code": -32602, "message": "bad"})
        ));
        assert!(!is_auth_required(&json!("not an object")));
    }

    #[test]
    fn the_agent_is_named_as_the_user_types_it() {
        let dir = tempfile::tempdir().expect("dir");
        let agent = dir.path().join("talaria");
        std::fs::write(&agent, "").expect("write");
        let path = dir.path().as_os_str();
        assert_eq!(as_typed(&agent, Some(path)), "talaria");
        assert_eq!(
            as_typed(&agent, Some(std::ffi::OsStr::new("/nowhere"))),
            agent.display().to_string()
        );
        assert_eq!(as_typed(Path::new("talaria"), None), "talaria");
    }
}
