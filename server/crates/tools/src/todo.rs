//! `todo {todos, merge?}`: the model's task list for the session; every change is reported as a
//! plan so the editor can show it.

use std::sync::LazyLock;

use futures_util::future::BoxFuture;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::tool::{
    ApprovalNeed, CallDescription, Concurrency, Effects, TodoItem, Tool, ToolContext,
    ToolDefinition, ToolEffect, ToolKind, ToolOutcome, parse_args,
};

/// The `todo` tool.
#[derive(Debug)]
pub struct Todo;

const STATUSES: [&str; 4] = ["pending", "in_progress", "completed", "cancelled"];

static DEFINITION: LazyLock<ToolDefinition> = LazyLock::new(|| ToolDefinition {
    name: "todo".into(),
    toolset: "todo".into(),
    description: "Keep a task list for multi-step work. Pass the whole list in `todos` \
        (each {id, content, status: pending|in_progress|completed|cancelled}); with merge=true, \
        items are updated by id and new ones appended. Call with no todos to read the list. \
        Keep exactly one item in_progress while working."
        .into(),
    parameters: json!({
        "type": "object",
        "properties": {
            "todos": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        "id": {"type": "string"},
                        "content": {"type": "string"},
                        "status": {"type": "string", "enum": STATUSES}
                    },
                    "required": ["id"]
                }
            },
            "merge": {"type": "boolean", "description": "Update by id instead of replacing the list."}
        }
    }),
    kind: ToolKind::Think,
    approval: ApprovalNeed::ReadOnly,
    concurrency: Concurrency::Exclusive,
    max_result_chars: None,
    effects: Effects::NOTHING,
});

#[derive(Debug, Deserialize)]
struct Update {
    id: String,
    content: Option<String>,
    status: Option<String>,
}

#[derive(Debug, Deserialize)]
struct Args {
    todos: Option<Vec<Update>>,
    #[serde(default)]
    merge: bool,
}

fn render(items: &[TodoItem]) -> String {
    if items.is_empty() {
        return "The task list is empty.".into();
    }
    items
        .iter()
        .map(|item| {
            let mark = match item.status.as_str() {
                "completed" => "[x]",
                "in_progress" => "[>]",
                "cancelled" => "[-]",
                _ => "[ ]",
            };
            format!("{mark} {}. {}", item.id, item.content)
        })
        .collect::<Vec<_>>()
        .join("\n")
}

impl Tool for Todo {
    fn definition(&self) -> &ToolDefinition {
        &DEFINITION
    }

    fn describe(&self, _args: &Value, _ctx: &ToolContext) -> CallDescription {
        CallDescription {
            title: "Update the task list".into(),
            ..CallDescription::default()
        }
    }

    fn call<'a>(&'a self, args: Value, ctx: &'a ToolContext) -> BoxFuture<'a, ToolOutcome> {
        Box::pin(async move {
            let args: Args = match parse_args(&DEFINITION.name, args) {
                Ok(args) => args,
                Err(failed) => return failed,
            };
            let mut list = talaria_util::lock(&ctx.state.todos);
            if let Some(updates) = args.todos {
                if !args.merge {
                    list.clear();
                }
                for update in updates {
                    match list.iter_mut().find(|item| item.id == update.id) {
                        Some(item) => {
                            if let Some(content) = update.content {
                                item.content = content;
                            }
                            if let Some(status) = update.status {
                                item.status = status;
                            }
                        }
                        None => {
                            let Some(content) = update.content else {
                                return ToolOutcome::failed(format!(
                                    "New todo item {:?} needs `content`.",
                                    update.id
                                ));
                            };
                            list.push(TodoItem {
                                id: update.id,
                                content,
                                status: update.status.unwrap_or_else(|| "pending".into()),
                            });
                        }
                    }
                }
            }
            let items = list.clone();
            drop(list);
            ToolOutcome::completed(render(&items)).with_effect(ToolEffect::Plan(items))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio_util::sync::CancellationToken;

    #[tokio::test]
    async fn replace_merge_and_plan_effect() {
        let ctx = ToolContext::local(
            std::env::temp_dir(),
            CancellationToken::new(),
            Default::default(),
        );
        Todo.call(json!({"todos": [{"id": "1", "content": "read", "status": "in_progress"}, {"id": "2", "content": "write"}]}), &ctx).await;
        let merged = Todo.call(json!({"merge": true, "todos": [{"id": "1", "status": "completed"}, {"id": "3", "content": "test"}]}), &ctx).await;
        assert_eq!(merged.content, "[x] 1. read\n[ ] 2. write\n[ ] 3. test");
        assert!(matches!(&merged.effects[0], ToolEffect::Plan(items) if items.len() == 3));
        let bad = Todo
            .call(json!({"merge": true, "todos": [{"id": "9"}]}), &ctx)
            .await;
        assert!(bad.content.contains("needs `content`"));
    }
}
