//! A server's prompts as slash commands, `/mcp:<server>:<prompt> arguments`: the command's
//! name and input hint, its arguments read from the rest of the line, a form for the
//! required ones still missing, and the fetched messages as parts of the user's prompt.

use rmcp::model::{Prompt, PromptArgument};
use serde_json::{Map, Value, json};

/// What every prompt command's name starts with (the engine's slash table parses it back:
/// `MCP_PROMPT_PREFIX`).
pub const PREFIX: &str = "mcp:";

/// One prompt, as a slash command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PromptCommand {
    /// `mcp:<server>:<prompt>`.
    pub name: String,
    pub description: String,
    /// The arguments, for the command's input hint (`None`: it takes none).
    pub hint: Option<String>,
}

impl PromptCommand {
    pub fn of(server: &str, prompt: &Prompt) -> Self {
        let arguments = prompt.arguments.as_deref().unwrap_or_default();
        let hint = (!arguments.is_empty()).then(|| {
            arguments
                .iter()
                .map(|a| {
                    if a.required.unwrap_or(false) {
                        a.name.clone()
                    } else {
                        format!("[{}]", a.name)
                    }
                })
                .collect::<Vec<_>>()
                .join(" ")
        });
        Self {
            name: format!("{PREFIX}{server}:{}", prompt.name),
            description: prompt
                .description
                .clone()
                .or_else(|| prompt.title.clone())
                .unwrap_or_else(|| format!("The MCP server {server}'s prompt {}", prompt.name)),
            hint,
        }
    }
}

/// The words of a line; double or single quotes keep spaces in one word.
fn words(line: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut current = String::new();
    let (mut quote, mut started) = (None, false);
    for c in line.chars() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), c) => current.push(c),
            (None, '"' | '\'') => {
                quote = Some(c);
                started = true;
            }
            (None, c) if c.is_whitespace() => {
                if started || !current.is_empty() {
                    words.push(std::mem::take(&mut current));
                }
                started = false;
            }
            (None, c) => {
                current.push(c);
                started = true;
            }
        }
    }
    if started || !current.is_empty() {
        words.push(current);
    }
    words
}

/// The arguments the rest of the line gives: `name=value` words by name, the other words in
/// the declared order (the last declared argument takes all the words left).
pub fn parse_arguments(declared: &[PromptArgument], line: &str) -> Map<String, Value> {
    let mut given = Map::new();
    let mut positional = Vec::new();
    for word in words(line) {
        match word.split_once('=') {
            Some((name, value)) if declared.iter().any(|a| a.name == name) => {
                given.insert(name.to_string(), Value::String(value.to_string()));
            }
            _ => positional.push(word),
        }
    }
    let open: Vec<&PromptArgument> = declared
        .iter()
        .filter(|a| !given.contains_key(&a.name))
        .collect();
    let mut positional = positional.into_iter();
    for (index, argument) in open.iter().enumerate() {
        let value = if index + 1 == open.len() {
            positional.by_ref().collect::<Vec<_>>().join(" ")
        } else {
            positional.next().unwrap_or_default()
        };
        if !value.is_empty() {
            given.insert(argument.name.clone(), Value::String(value));
        }
    }
    given
}

/// The required arguments `given` lacks.
pub fn missing<'a>(
    declared: &'a [PromptArgument],
    given: &Map<String, Value>,
) -> Vec<&'a PromptArgument> {
    declared
        .iter()
        .filter(|a| a.required.unwrap_or(false) && !given.contains_key(&a.name))
        .collect()
}

/// The form that asks for `missing` arguments (an elicitation schema: strings, all required).
pub fn form_schema(missing: &[&PromptArgument]) -> Value {
    let properties: Map<String, Value> = missing
        .iter()
        .map(|a| {
            let mut property = json!({"type": "string", "title": a.title.clone().unwrap_or_else(|| a.name.clone())});
            if let Some(description) = &a.description {
                property["description"] = Value::String(description.clone());
            }
            (a.name.clone(), property)
        })
        .collect();
    json!({
        "type": "object",
        "properties": properties,
        "required": missing.iter().map(|a| a.name.clone()).collect::<Vec<_>>(),
    })
}

/// One part of a fetched prompt, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PromptPart {
    Text(String),
    Image { mime_type: String, data: String },
}

/// The parts of a `prompts/get` result's messages: the user's as they are, the assistant's
/// marked as such (the model reads them as the prompt's example answers).
pub fn message_parts(result: &Value) -> Vec<PromptPart> {
    let mut parts = Vec::new();
    for message in result["messages"].as_array().into_iter().flatten() {
        let assistant = message["role"] == "assistant";
        let content = &message["content"];
        let text = match content["type"].as_str().unwrap_or("") {
            "text" => content["text"].as_str().unwrap_or("").to_string(),
            "image" => {
                parts.push(PromptPart::Image {
                    mime_type: content["mimeType"].as_str().unwrap_or("").to_string(),
                    data: content["data"].as_str().unwrap_or("").to_string(),
                });
                continue;
            }
            "resource" => {
                let resource = &content["resource"];
                let uri = resource["uri"].as_str().unwrap_or("?");
                match resource["text"].as_str() {
                    Some(text) => format!("<context ref=\"{uri}\">\n{text}\n</context>"),
                    None => format!("[resource {uri} (binary, not shown)]"),
                }
            }
            "resource_link" => format!(
                "[Referenced: {}]({})",
                content["name"].as_str().unwrap_or(""),
                content["uri"].as_str().unwrap_or("?")
            ),
            other => format!("[{other} content]"),
        };
        parts.push(PromptPart::Text(if assistant {
            format!("[assistant] {text}")
        } else {
            text
        }));
    }
    parts
}

#[cfg(test)]
mod tests {
    use super::*;

    fn argument(name: &str, required: bool) -> PromptArgument {
        let mut argument = PromptArgument::new(name);
        argument.required = Some(required);
        argument
    }

    #[test]
    fn arguments_come_by_name_or_in_order_and_the_last_takes_the_rest() {
        let declared = [argument("city", true), argument("state", false)];
        let given = parse_arguments(&declared, "state=CA \"San Francisco\"");
        assert_eq!(given["city"], "San Francisco");
        assert_eq!(given["state"], "CA");
        let given = parse_arguments(&declared, "Paris Ile de France");
        assert_eq!(given["city"], "Paris");
        assert_eq!(given["state"], "Ile de France");
        let none = parse_arguments(&declared, "");
        assert_eq!(missing(&declared, &none).len(), 1);
        let schema = form_schema(&missing(&declared, &none));
        assert_eq!(schema["required"], json!(["city"]));
    }

    #[test]
    fn command_names_and_hints_name_the_server_and_the_arguments() {
        let mut prompt = Prompt::new("args-prompt", Some("Weather"), None);
        prompt.arguments = Some(vec![argument("city", true), argument("state", false)]);
        let command = PromptCommand::of("everything", &prompt);
        assert_eq!(command.name, "mcp:everything:args-prompt");
        assert_eq!(command.hint.as_deref(), Some("city [state]"));
    }

    #[test]
    fn messages_become_parts_in_order() {
        let parts = message_parts(&json!({"messages": [
            {"role": "user", "content": {"type": "text", "text": "What's the weather?"}},
            {"role": "assistant", "content": {"type": "text", "text": "Sunny."}},
            {"role": "user", "content": {"type": "image", "mimeType": "image/png", "data": "AA"}},
            {"role": "user", "content": {"type": "resource", "resource": {"uri": "demo://x", "text": "body"}}}
        ]}));
        assert_eq!(
            parts,
            [
                PromptPart::Text("What's the weather?".into()),
                PromptPart::Text("[assistant] Sunny.".into()),
                PromptPart::Image {
                    mime_type: "image/png".into(),
                    data: "AA".into()
                },
                PromptPart::Text("<context ref=\"demo://x\">\nbody\n</context>".into()),
            ]
        );
    }
}
