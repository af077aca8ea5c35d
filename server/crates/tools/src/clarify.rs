//! `clarify {question, choices?}`: asks the user a question through the client (a form the
//! client shows) and returns the answer; a declined or cancelled question is reported as
//! such. Offered only when the client can show such forms.

use std::sync::{Arc, LazyLock};

use futures_util::future::BoxFuture;
use serde::Deserialize;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::tool::{
    ApprovalNeed, CallDescription, Concurrency, Tool, ToolContext, ToolDefinition, ToolKind,
    ToolOutcome, parse_args,
};

/// How the user answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum QuestionAnswer {
    Answered(String),
    /// The user chose not to answer.
    Declined,
    /// The user dismissed the question (or the turn was cancelled).
    Cancelled,
}

/// Asks the user questions (through the client).
pub trait UserQuestions: Send + Sync {
    fn ask<'a>(
        &'a self,
        question: &'a str,
        choices: &'a [String],
        cancel: &'a CancellationToken,
    ) -> BoxFuture<'a, Result<QuestionAnswer, String>>;
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
            match questions
                .ask(&args.question, &args.choices, &ctx.cancel)
                .await
            {
                Ok(QuestionAnswer::Answered(answer)) => {
                    ToolOutcome::completed(format!("The user answered: {answer}"))
                }
                Ok(QuestionAnswer::Declined) => ToolOutcome::completed(
                    "The user declined to answer. Continue without it, or explain what you need.",
                ),
                Ok(QuestionAnswer::Cancelled) => {
                    ToolOutcome::failed("The user dismissed the question without answering.")
                }
                Err(why) => ToolOutcome::failed(format!("The question could not be asked: {why}")),
            }
        })
    }
}
