//! `write_file {path, content}`: writes a whole file, creating parent directories; reports a diff.

use std::sync::LazyLock;

use futures_util::future::BoxFuture;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::diff;
use crate::fs::FileError;
use crate::tool::{
    ApprovalNeed, CallDescription, Concurrency, Effects, Tool, ToolContext, ToolDefinition,
    ToolEffect, ToolKind, ToolLocation, ToolOutcome, parse_args,
};

/// The `write_file` tool.
#[derive(Debug)]
pub struct WriteFile;

static DEFINITION: LazyLock<ToolDefinition> = LazyLock::new(|| ToolDefinition {
    name: "write_file".into(),
    toolset: "file".into(),
    description: "Write a whole file (creating it and its parent directories if needed), \
        replacing any existing content. Prefer `patch` for small changes to existing files."
        .into(),
    parameters: json!({
        "type": "object",
        "properties": {
            "path": {"type": "string", "description": "File to write (absolute, or relative to the working directory)."},
            "content": {"type": "string", "description": "The complete new content of the file."}
        },
        "required": ["path", "content"]
    }),
    kind: ToolKind::Edit,
    approval: ApprovalNeed::Edits,
    concurrency: Concurrency::PathScoped,
    max_result_chars: None,
    effects: Effects::writes(&["path"]),
});

#[derive(Debug, Deserialize)]
struct Args {
    path: String,
    content: String,
}

/// The current text of a file, or `None` if it does not exist yet.
pub(crate) async fn current_text(
    ctx: &ToolContext,
    path: &std::path::Path,
) -> Result<Option<String>, FileError> {
    match ctx.files.read_text(path).await {
        Ok(text) => Ok(Some(text)),
        Err(FileError::NotFound(_)) => Ok(None),
        Err(e) => Err(e),
    }
}

impl Tool for WriteFile {
    fn definition(&self) -> &ToolDefinition {
        &DEFINITION
    }

    fn describe(&self, args: &Value, ctx: &ToolContext) -> CallDescription {
        let path = args.get("path").and_then(Value::as_str).unwrap_or("");
        CallDescription::writing(format!("Write {path}"), vec![ctx.resolve(path)])
    }

    fn preview<'a>(
        &'a self,
        args: &'a Value,
        ctx: &'a ToolContext,
    ) -> BoxFuture<'a, Vec<ToolEffect>> {
        Box::pin(async move {
            let Ok(args) = serde_json::from_value::<Args>(args.clone()) else {
                return Vec::new();
            };
            let path = ctx.resolve(&args.path);
            match current_text(ctx, &path).await {
                Ok(old_text) => vec![ToolEffect::Diff {
                    path,
                    old_text,
                    new_text: args.content,
                }],
                Err(_) => Vec::new(),
            }
        })
    }

    fn changes_nothing<'a>(&'a self, args: &'a Value, ctx: &'a ToolContext) -> BoxFuture<'a, bool> {
        Box::pin(async move {
            let Ok(args) = serde_json::from_value::<Args>(args.clone()) else {
                return false;
            };
            let path = ctx.resolve(&args.path);
            matches!(current_text(ctx, &path).await, Ok(Some(text)) if text == args.content)
        })
    }

    fn call<'a>(&'a self, args: Value, ctx: &'a ToolContext) -> BoxFuture<'a, ToolOutcome> {
        Box::pin(async move {
            let args: Args = match parse_args(&DEFINITION.name, args) {
                Ok(args) => args,
                Err(failed) => return failed,
            };
            if args.path.trim().is_empty() {
                return ToolOutcome::failed("write_file needs a non-empty `path`.");
            }
            let path = ctx.resolve(&args.path);
            if let Err(why) = ctx.refuse_linked_credential(&path).await {
                return ToolOutcome::failed(why.to_string());
            }
            let old = match current_text(ctx, &path).await {
                Ok(old) => old,
                Err(FileError::Binary { .. }) => None,
                Err(e) => {
                    return ToolOutcome::failed(format!("Cannot write {}: {e}", path.display()));
                }
            };
            // The same content again is no write at all (the file keeps its times).
            let unchanged = old.as_deref() == Some(args.content.as_str());
            if !unchanged && let Err(e) = ctx.files.write_text(&path, &args.content).await {
                return ToolOutcome::failed(format!("Cannot write {}: {e}", path.display()));
            }
            let shown = path.display().to_string();
            let lines = args.content.lines().count();
            let summary = match &old {
                None => format!("Created {shown} ({lines} lines)."),
                Some(old) if *old == args.content => {
                    format!("{shown} already had this content; nothing changed.")
                }
                Some(old) => {
                    let (added, removed) = diff::line_counts(old, &args.content);
                    format!(
                        "Wrote {shown} ({lines} lines, +{added} -{removed}).\n\n{}",
                        diff::unified(&shown, old, &args.content)
                    )
                }
            };
            ToolOutcome::completed(summary)
                .with_locations(vec![ToolLocation {
                    path: path.clone(),
                    line: None,
                }])
                .with_effect(ToolEffect::Diff {
                    path,
                    old_text: old,
                    new_text: args.content,
                })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tool::ToolStatus;
    use tokio_util::sync::CancellationToken;

    #[tokio::test]
    async fn creates_parents_and_reports_a_diff() {
        let dir = tempfile::tempdir().expect("tempdir");
        let ctx = ToolContext::local(
            dir.path().to_path_buf(),
            CancellationToken::new(),
            Default::default(),
        );
        let created = WriteFile
            .call(json!({"path": "a/b/c.txt", "content": "one\n"}), &ctx)
            .await;
        assert_eq!(created.status, ToolStatus::Completed);
        assert!(
            created.content.starts_with("Created"),
            "{}",
            created.content
        );
        assert_eq!(
            std::fs::read_to_string(dir.path().join("a/b/c.txt")).expect("read"),
            "one\n"
        );
        assert!(matches!(
            &created.effects[0],
            ToolEffect::Diff { old_text: None, .. }
        ));
        let changed = WriteFile
            .call(json!({"path": "a/b/c.txt", "content": "two\n"}), &ctx)
            .await;
        assert!(
            changed.content.contains("-one\n+two"),
            "{}",
            changed.content
        );
        assert!(
            matches!(&changed.effects[0], ToolEffect::Diff { old_text: Some(o), new_text, .. } if o == "one\n" && new_text == "two\n")
        );
    }
}
