//! A permission question as the agent asked it: its own wording (a title that is already a
//! question, like a plan's "Implement this plan?", is asked as it is) and its own options,
//! each on a key — `y`, `a`, `n`, `N` for the first option of each of ACP's four kinds (as
//! `--approve` names them), digits for any more — and Enter for the safe answer (the first
//! "reject once", else cancel).

use serde_json::{Value, json};

/// One option of the question, on its key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Choice {
    pub key: char,
    pub option_id: String,
    pub name: String,
}

/// A question waiting for the user.
#[derive(Debug, Clone)]
pub struct Question {
    /// The JSON-RPC id of the agent's request.
    pub request: Value,
    pub choices: Vec<Choice>,
    /// The option Enter picks, if any (else Enter cancels).
    pub default: Option<usize>,
}

/// The key ACP's option kinds go on first.
fn kind_key(kind: &str) -> Option<char> {
    match kind {
        "allow_once" => Some('y'),
        "allow_always" => Some('a'),
        "reject_once" => Some('n'),
        "reject_always" => Some('N'),
        _ => None,
    }
}

/// The words a piped line may answer with, for each kind's key.
fn word_key(word: &str) -> Option<char> {
    match word {
        "yes" => Some('y'),
        "always" => Some('a'),
        "no" => Some('n'),
        "never" => Some('N'),
        _ => None,
    }
}

impl Question {
    /// The question for the agent's `session/request_permission` params.
    pub fn new(request: Value, params: &Value) -> Question {
        let mut choices: Vec<Choice> = Vec::new();
        let mut default = None;
        let mut digits = ('1'..='9')
            .chain('a'..='z')
            .filter(|c| !"yanN".contains(*c));
        for option in params["options"].as_array().into_iter().flatten() {
            let Some(option_id) = option["optionId"].as_str() else {
                continue;
            };
            let kind = option["kind"].as_str().unwrap_or_default();
            let key = kind_key(kind)
                .filter(|key| choices.iter().all(|c| c.key != *key))
                .or_else(|| digits.next());
            let Some(key) = key else { continue };
            if default.is_none() && kind == "reject_once" {
                default = Some(choices.len());
            }
            choices.push(Choice {
                key,
                option_id: option_id.to_string(),
                name: option["name"].as_str().unwrap_or(option_id).to_string(),
            });
        }
        Question {
            request,
            choices,
            default,
        }
    }

    /// The keys that answer it (Enter aside).
    pub fn keys(&self) -> Vec<char> {
        self.choices.iter().map(|c| c.key).collect()
    }

    /// The question's line: `? TITLE [y] Allow once, …, [n] Reject (Enter)`.
    pub fn text(&self, title: &str) -> String {
        let asked = if title.trim_end().ends_with('?') {
            title.trim_end().to_string()
        } else {
            format!("Allow {title}?")
        };
        let choices: Vec<String> = self
            .choices
            .iter()
            .enumerate()
            .map(|(index, choice)| {
                let enter = if self.default == Some(index) {
                    " (Enter)"
                } else {
                    ""
                };
                format!("[{}] {}{enter}", choice.key, choice.name)
            })
            .collect();
        let enter = if self.default.is_none() {
            ", Enter: cancel"
        } else {
            ""
        };
        format!("? {asked} {}{enter}: ", choices.join(", "))
    }

    /// What to ask again when a line answered nothing.
    pub fn again(&self) -> String {
        let keys: Vec<String> = self.keys().iter().map(char::to_string).collect();
        format!("please answer {} or Enter: ", keys.join(", "))
    }

    /// The choice a typed line (a key, or `yes`/`always`/`no`/`never`) or a key press
    /// names; `Some(None)` for Enter with no safe option (cancel), `None` for no answer.
    pub fn pick(&self, typed: &str) -> Option<Option<&Choice>> {
        let typed = typed.trim();
        if typed.is_empty() {
            return Some(self.default.and_then(|i| self.choices.get(i)));
        }
        let mut chars = typed.chars();
        let key = match (chars.next(), chars.next()) {
            (Some(key), None) => Some(key),
            _ => word_key(typed),
        }?;
        self.choices.iter().find(|c| c.key == key).map(Some)
    }
}

/// The answer to a question: the option chosen, or cancelled.
pub fn answer(choice: Option<&Choice>) -> Value {
    match choice {
        Some(choice) => json!({"outcome": {"outcome": "selected", "optionId": choice.option_id}}),
        None => json!({"outcome": {"outcome": "cancelled"}}),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options(list: &[(&str, &str, &str)]) -> Value {
        let options: Vec<Value> = list
            .iter()
            .map(|(id, name, kind)| json!({"optionId": id, "name": name, "kind": kind}))
            .collect();
        json!({ "options": options })
    }

    #[test]
    fn a_plans_question_is_asked_in_its_own_words_with_its_three_choices() {
        let question = Question::new(
            json!(7),
            &options(&[
                (
                    "implement_ask",
                    "Implement (ask before edits and commands)",
                    "allow_once",
                ),
                (
                    "implement_accept_edits",
                    "Implement (accept edits)",
                    "allow_always",
                ),
                ("keep_planning", "Keep planning", "reject_once"),
            ]),
        );
        assert_eq!(
            question.text("Implement this plan?"),
            "? Implement this plan? [y] Implement (ask before edits and commands), \
             [a] Implement (accept edits), [n] Keep planning (Enter): "
        );
        assert_eq!(
            question.pick("a").map(|c| c.map(|c| c.option_id.as_str())),
            Some(Some("implement_accept_edits"))
        );
        assert_eq!(
            question.pick("").map(|c| c.map(|c| c.option_id.as_str())),
            Some(Some("keep_planning"))
        );
        assert_eq!(question.pick("N"), None, "no such choice");
    }

    #[test]
    fn options_of_one_kind_past_the_first_go_on_digits_and_enter_without_a_reject_cancels() {
        let question = Question::new(
            json!(1),
            &options(&[
                ("allow_once", "Allow once", "allow_once"),
                (
                    "run_unsandboxed_once",
                    "Run once outside the sandbox",
                    "allow_once",
                ),
                ("allow_always", "Always allow", "allow_always"),
            ]),
        );
        assert_eq!(question.keys(), ['y', '1', 'a']);
        assert_eq!(
            question.text("Run make"),
            "? Allow Run make? [y] Allow once, [1] Run once outside the sandbox, \
             [a] Always allow, Enter: cancel: "
        );
        assert_eq!(question.pick(""), Some(None));
        assert_eq!(
            question
                .pick("always")
                .map(|c| c.map(|c| c.option_id.as_str())),
            Some(Some("allow_always"))
        );
        assert_eq!(
            answer(question.pick("1").flatten()),
            json!({"outcome": {"outcome": "selected", "optionId": "run_unsandboxed_once"}})
        );
    }
}
