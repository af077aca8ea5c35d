//! `clarify {question, choices?}`: asks the user a question through the client (a form the
//! client shows) and returns the answer; a declined or cancelled question is reported as
//! such. Offered only when the client can show such forms.

use std::sync::{Arc, LazyLock};

use futures_util::future::BoxFuture;
use serde::Deserialize;
use serde_json::{Value, json};

pub use crate::interfaces::{FormAnswer, UserQuestions};
use crate::tool::{
    ApprovalNeed, CallDescription, Concurrency, Effects, Tool, ToolContext, ToolDefinition,
    ToolKind, ToolOutcome, parse_args,
};

/// The form of one question: a single answer field, a choice when `choices` are given.
pub fn question_schema(choices: &[String]) -> Value {
    let mut answer = json!({"type": "string", "title": "Answer"});
    if !choices.is_empty() {
        answer["enum"] = json!(choices);
    }
    json!({
        "type": "object",
        "properties": {"answer": answer},
        "required": ["answer"]
    })
}

/// The `clarify` tool.
#[derive(Debug)]
pub struct Clarify;

static DEFINITION: LazyLock<ToolDefinition> = LazyLock::new(|| ToolDefinition {
    name: "clarify".into(),
    toolset: "clarify".into(),
    description: "Ask the user a question when a choice or missing fact blocks the task; \
        optionally offer `choices`. Returns the answer."
        .into(),
    parameters: json!({
        "type": "object",
        "properties": {
            "question": {"type": "string"},
            "choices": {"type": "array", "items": {"type": "string"}}
        },
        "required": ["question"]
    }),
    kind: ToolKind::Think,
    approval: ApprovalNeed::ReadOnly,
    concurrency: Concurrency::Exclusive,
    max_result_chars: None,
    effects: Effects::ASKS,
});

#[derive(Debug, Deserialize)]
struct Args {
    question: String,
    #[serde(default)]
    choices: Vec<String>,
}

impl Tool for Clarify {
    fn definition(&self) -> &ToolDefinition {
        &DEFINITION
    }

    fn describe(&self, args: &Value, _ctx: &ToolContext) -> CallDescription {
        CallDescription {
            title: format!("Ask: {}", args["question"].as_str().unwrap_or("a question")),
            read_only: true,
            ..CallDescription::default()
        }
    }

    fn call<'a>(&'a self, args: Value, ctx: &'a ToolContext) -> BoxFuture<'a, ToolOutcome> {
        Box::pin(async move {
            let args: Args = match parse_args("clarify", args) {
                Ok(args) => args,
                Err(outcome) => return outcome,
            };
            let Some(questions) = ctx.questions.as_ref().map(Arc::clone) else {
                return ToolOutcome::failed(
                    "The client cannot show questions; decide yourself or say what you need in your answer.",
                );
            };
            let schema = question_schema(&args.choices);
            match questions
                .ask_form(&args.question, &schema, &ctx.cancel)
                .await
            {
                Ok(FormAnswer::Accepted(content)) => {
                    let answer = match &content["answer"] {
                        Value::String(text) => text.clone(),
                        other => other.to_string(),
                    };
                    ToolOutcome::completed(format!("The user answered: {answer}"))
                }
                Ok(FormAnswer::Declined) => ToolOutcome::completed(
                    "The user declined to answer. Continue without it, or explain what you need.",
                ),
                Ok(FormAnswer::Cancelled) => {
                    ToolOutcome::failed("The user dismissed the question without answering.")
                }
                Err(why) => ToolOutcome::failed(format!("The question could not be asked: {why}")),
            }
        })
    }
}
