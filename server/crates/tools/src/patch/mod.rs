//! `patch`: `{path, old_string, new_string, replace_all?}` for one replacement, or
//! `{mode: "patch", patch}` for a multi-file patch. Every edit reports a diff. A multi-file
//! patch is checked completely before any file is written.

use crate::error::ToolError;

pub mod replace;
pub mod v4a;

use std::path::PathBuf;
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
use crate::write_file::current_text;

/// The `patch` tool.
#[derive(Debug)]
pub struct Patch;

static DEFINITION: LazyLock<ToolDefinition> = LazyLock::new(|| ToolDefinition {
    name: "patch".into(),
    toolset: "file".into(),
    description: "Edit files. Replace mode (default): replace `old_string` with `new_string` in \
        `path`; old_string must match exactly one place (include surrounding lines) unless \
        replace_all is true; whitespace and indentation differences are tolerated. Patch mode \
        (mode=\"patch\"): apply a multi-file patch in the format `*** Begin Patch` / \
        `*** Add File: p` (+lines) / `*** Update File: p` (optional `*** Move to: q`, hunks \
        starting with `@@` holding ' ' context, '-' removed and '+' added lines) / \
        `*** Delete File: p` / `*** End Patch`."
        .into(),
    parameters: json!({
        "type": "object",
        "properties": {
            "mode": {"type": "string", "enum": ["replace", "patch"], "description": "replace (default) or patch."},
            "path": {"type": "string", "description": "File to edit (replace mode)."},
            "old_string": {"type": "string", "description": "Exact text to replace (replace mode)."},
            "new_string": {"type": "string", "description": "Replacement text (replace mode)."},
            "replace_all": {"type": "boolean", "description": "Replace every occurrence (replace mode)."},
            "patch": {"type": "string", "description": "The multi-file patch (patch mode)."}
        }
    }),
    kind: ToolKind::Edit,
    approval: ApprovalNeed::Edits,
    concurrency: Concurrency::PathScoped,
    max_result_chars: None,
    effects: Effects::writes(&["path"]),
});

#[derive(Debug, Deserialize)]
struct Args {
    mode: Option<String>,
    path: Option<String>,
    old_string: Option<String>,
    new_string: Option<String>,
    #[serde(default)]
    replace_all: bool,
    patch: Option<String>,
}

impl Args {
    fn is_multi_file(&self) -> bool {
        self.mode.as_deref() == Some("patch") || (self.patch.is_some() && self.old_string.is_none())
    }
}

/// One planned file change.
#[derive(Debug)]
struct Change {
    path: PathBuf,
    old: Option<String>,
    /// `None` deletes the file.
    new: Option<String>,
    /// The file to remove after writing `path` (a move).
    moved_from: Option<PathBuf>,
    note: String,
}

impl Tool for Patch {
    fn definition(&self) -> &ToolDefinition {
        &DEFINITION
    }

    fn describe(&self, args: &Value, ctx: &ToolContext) -> CallDescription {
        let Ok(parsed) = serde_json::from_value::<Args>(args.clone()) else {
            return CallDescription {
                title: "Patch".into(),
                ..CallDescription::default()
            };
        };
        let mut paths = Vec::new();
        if parsed.is_multi_file() {
            if let Some(Ok(ops)) = parsed.patch.as_deref().map(v4a::parse) {
                for op in ops {
                    match op {
                        v4a::FileOp::Add { path, .. } | v4a::FileOp::Delete { path } => {
                            paths.push(ctx.resolve(&path))
                        }
                        v4a::FileOp::Update { path, move_to, .. } => {
                            paths.push(ctx.resolve(&path));
                            if let Some(to) = move_to {
                                paths.push(ctx.resolve(&to));
                            }
                        }
                    }
                }
            }
        } else if let Some(path) = &parsed.path {
            paths.push(ctx.resolve(path));
        }
        let title = match paths.as_slice() {
            [one] => format!("Edit {}", shown(one, ctx)),
            [] => "Patch".to_string(),
            many => format!("Patch {} files", many.len()),
        };
        CallDescription::writing(title, paths)
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
            match plan(&args, ctx).await {
                Ok(changes) => changes.into_iter().map(effect_of).collect(),
                Err(_) => Vec::new(),
            }
        })
    }

    fn check<'a>(
        &'a self,
        args: &'a Value,
        ctx: &'a ToolContext,
    ) -> BoxFuture<'a, Option<ToolOutcome>> {
        Box::pin(async move {
            let args: Args = match parse_args(&DEFINITION.name, args.clone()) {
                Ok(args) => args,
                Err(failed) => return Some(failed),
            };
            plan(&args, ctx).await.err().map(ToolOutcome::failed)
        })
    }

    fn call<'a>(&'a self, args: Value, ctx: &'a ToolContext) -> BoxFuture<'a, ToolOutcome> {
        Box::pin(async move {
            let args: Args = match parse_args(&DEFINITION.name, args) {
                Ok(args) => args,
                Err(failed) => return failed,
            };
            let changes = match plan(&args, ctx).await {
                Ok(changes) => changes,
                Err(why) => return ToolOutcome::failed(why),
            };
            let mut report = Vec::new();
            let mut outcome_effects = Vec::new();
            let mut locations = Vec::new();
            for change in changes {
                if let Err(why) = commit(&change, ctx).await {
                    report.push(why.to_string());
                    return ToolOutcome::failed(format!(
                        "{}\n(changes listed before this line were applied)",
                        report.join("\n")
                    ));
                }
                let label = shown(&change.path, ctx);
                let old = change.old.clone().unwrap_or_default();
                let new = change.new.clone().unwrap_or_default();
                report.push(format!("{}{}", change.note, diff_block(&label, &old, &new)));
                locations.push(ToolLocation {
                    path: change.path.clone(),
                    line: None,
                });
                outcome_effects.push(effect_of(change));
            }
            let mut outcome = ToolOutcome::completed(report.join("\n")).with_locations(locations);
            outcome.effects = outcome_effects;
            outcome
        })
    }
}

fn shown(path: &std::path::Path, ctx: &ToolContext) -> String {
    path.strip_prefix(&ctx.cwd)
        .unwrap_or(path)
        .display()
        .to_string()
}

fn diff_block(label: &str, old: &str, new: &str) -> String {
    let diff = diff::unified(label, old, new);
    if diff.is_empty() {
        String::new()
    } else {
        format!("\n{diff}")
    }
}

fn effect_of(change: Change) -> ToolEffect {
    ToolEffect::Diff {
        path: change.path,
        old_text: change.old,
        new_text: change.new.unwrap_or_default(),
    }
}

async fn read_existing(ctx: &ToolContext, path: &std::path::Path) -> Result<String, ToolError> {
    ctx.refuse_linked_credential(path).await?;
    match ctx.files.read_text(path).await {
        Ok(text) => Ok(text),
        Err(FileError::NotFound(_)) => Err(ToolError::Rejected(format!(
            "{} does not exist; create it with write_file",
            path.display()
        ))),
        Err(e) => Err(ToolError::file("read", path)(e)),
    }
}

/// Computes every change without writing anything.
async fn plan(args: &Args, ctx: &ToolContext) -> Result<Vec<Change>, ToolError> {
    if args.is_multi_file() {
        let patch = args
            .patch
            .as_deref()
            .ok_or_else(|| ToolError::args("patch mode needs the `patch` text"))?;
        let ops = v4a::parse(patch).map_err(|e| ToolError::args(format!("Invalid patch: {e}")))?;
        let mut changes = Vec::new();
        for op in ops {
            changes.push(plan_file_op(op, ctx).await?);
        }
        return Ok(changes);
    }
    plan_replace(args, ctx).await
}

/// The change one file section of a multi-file patch makes.
async fn plan_file_op(op: v4a::FileOp, ctx: &ToolContext) -> Result<Change, ToolError> {
    match op {
        v4a::FileOp::Add { path, content } => {
            let path = ctx.resolve(&path);
            let old = current_text(ctx, &path)
                .await
                .map_err(ToolError::file("read", &path))?;
            if old.is_some() {
                return Err(ToolError::Rejected(format!(
                    "{} already exists; use an Update File section",
                    path.display()
                )));
            }
            Ok(Change {
                path,
                old: None,
                new: Some(content),
                moved_from: None,
                note: "Added".into(),
            })
        }
        v4a::FileOp::Delete { path } => {
            let path = ctx.resolve(&path);
            let old = read_existing(ctx, &path).await?;
            Ok(Change {
                path,
                old: Some(old),
                new: None,
                moved_from: None,
                note: "Deleted".into(),
            })
        }
        v4a::FileOp::Update {
            path,
            move_to,
            hunks,
        } => {
            let from = ctx.resolve(&path);
            let old = read_existing(ctx, &from).await?;
            let new = v4a::apply(&old, &hunks).map_err(|e| {
                ToolError::Rejected(format!("Cannot update {}: {e}", from.display()))
            })?;
            Ok(match move_to {
                Some(to) => Change {
                    path: ctx.resolve(&to),
                    old: None,
                    new: Some(new),
                    note: format!("Moved {} to", shown(&from, ctx)),
                    moved_from: Some(from),
                },
                None => Change {
                    path: from,
                    old: Some(old),
                    new: Some(new),
                    moved_from: None,
                    note: "Updated".into(),
                },
            })
        }
    }
}

/// The change of replace mode: `old_string` → `new_string` in one file.
async fn plan_replace(args: &Args, ctx: &ToolContext) -> Result<Vec<Change>, ToolError> {
    let path = args
        .path
        .as_deref()
        .filter(|p| !p.trim().is_empty())
        .ok_or_else(|| {
            ToolError::args(
                "replace mode needs `path`, `old_string` and `new_string` (or use mode=\"patch\" with `patch`)",
            )
        })?;
    let old_string = args
        .old_string
        .as_deref()
        .ok_or_else(|| ToolError::args("replace mode needs `old_string`"))?;
    let new_string = args
        .new_string
        .as_deref()
        .ok_or_else(|| ToolError::args("replace mode needs `new_string`"))?;
    let path = ctx.resolve(path);
    let old = read_existing(ctx, &path).await?;
    let (new, count, strategy) =
        replace::replace(&old, old_string, new_string, args.replace_all)
            .map_err(|e| ToolError::Rejected(format!("Cannot edit {}: {e}.", path.display())))?;
    let how = match strategy {
        replace::Strategy::Exact => "",
        replace::Strategy::WhitespaceTolerant => " (matched ignoring whitespace and indentation)",
    };
    let note = format!(
        "Replaced {count} occurrence{} in{how}",
        if count == 1 { "" } else { "s" }
    );
    Ok(vec![Change {
        path,
        old: Some(old),
        new: Some(new),
        moved_from: None,
        note,
    }])
}

/// Removes a file through the one way to the user's files, judged as the file tools judge.
async fn remove(ctx: &ToolContext, path: &std::path::Path) -> Result<(), crate::fs::FileError> {
    ctx.files.may_change_disk(path)?;
    let rules = crate::fs::LinkRules {
        sensitive: ctx.sensitive.clone(),
        places: ctx.shell.places(),
    };
    let path = path.to_path_buf();
    tokio::task::spawn_blocking(move || crate::fs::pinned::remove_file(&rules, &path))
        .await
        .unwrap_or_else(|e| {
            Err(crate::fs::FileError::Other(format!(
                "the removal failed: {e}"
            )))
        })
}

async fn commit(change: &Change, ctx: &ToolContext) -> Result<(), ToolError> {
    match &change.new {
        Some(text) => ctx
            .files
            .write_text(&change.path, text)
            .await
            .map_err(ToolError::file("write", &change.path))?,
        None => remove(ctx, &change.path)
            .await
            .map_err(ToolError::file("delete", &change.path))?,
    }
    if let Some(from) = &change.moved_from {
        remove(ctx, from).await.map_err(|e| {
            ToolError::Rejected(format!(
                "Wrote {} but cannot remove {}: {e}",
                change.path.display(),
                from.display()
            ))
        })?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tool::ToolStatus;
    use tokio_util::sync::CancellationToken;

    fn setup() -> (tempfile::TempDir, ToolContext) {
        let dir = tempfile::tempdir().expect("tempdir");
        let ctx = ToolContext::local(
            dir.path().to_path_buf(),
            CancellationToken::new(),
            Default::default(),
        );
        (dir, ctx)
    }

    #[tokio::test]
    async fn replace_mode_edits_and_refuses_ambiguity() {
        let (dir, ctx) = setup();
        std::fs::write(dir.path().join("f.rs"), "let a = 1;\nlet b = 1;\n").expect("write");
        let ambiguous = Patch
            .call(
                json!({"path": "f.rs", "old_string": "= 1", "new_string": "= 2"}),
                &ctx,
            )
            .await;
        assert_eq!(ambiguous.status, ToolStatus::Failed);
        assert!(
            ambiguous.content.contains("matches 2 places"),
            "{}",
            ambiguous.content
        );
        let done = Patch
            .call(
                json!({"path": "f.rs", "old_string": "let b = 1;", "new_string": "let b = 3;"}),
                &ctx,
            )
            .await;
        assert_eq!(done.status, ToolStatus::Completed, "{}", done.content);
        assert!(
            done.content.contains("-let b = 1;\n+let b = 3;"),
            "{}",
            done.content
        );
        assert_eq!(
            std::fs::read_to_string(dir.path().join("f.rs")).expect("read"),
            "let a = 1;\nlet b = 3;\n"
        );
        let missing = Patch
            .call(
                json!({"path": "nope.rs", "old_string": "a", "new_string": "b"}),
                &ctx,
            )
            .await;
        assert!(missing.content.contains("does not exist"));
    }

    /// Local files that refuse every change to disk but a write (as the engine's do once the
    /// editor whose buffers a turn worked on has left).
    struct NoRemoval(crate::fs::LocalFiles);

    impl crate::fs::FileAccess for NoRemoval {
        fn read_text<'a>(
            &'a self,
            path: &'a std::path::Path,
        ) -> futures_util::future::BoxFuture<'a, Result<String, crate::fs::FileError>> {
            self.0.read_text(path)
        }

        fn write_text<'a>(
            &'a self,
            path: &'a std::path::Path,
            text: &'a str,
        ) -> futures_util::future::BoxFuture<'a, Result<(), crate::fs::FileError>> {
            self.0.write_text(path, text)
        }

        fn may_change_disk(&self, path: &std::path::Path) -> Result<(), crate::fs::FileError> {
            Err(crate::fs::FileError::Other(format!(
                "not removed: {}",
                path.display()
            )))
        }
    }

    #[tokio::test]
    async fn a_delete_asks_the_files_whether_the_disk_may_change() {
        let (dir, mut ctx) = setup();
        ctx.files = std::sync::Arc::new(NoRemoval(crate::fs::LocalFiles::default()));
        std::fs::write(dir.path().join("b.txt"), "bye\n").expect("write");
        let delete = "*** Begin Patch\n*** Delete File: b.txt\n*** End Patch";
        let refused = Patch
            .call(json!({"mode": "patch", "patch": delete}), &ctx)
            .await;
        assert_eq!(refused.status, ToolStatus::Failed, "{}", refused.content);
        assert!(
            refused.content.contains("not removed"),
            "{}",
            refused.content
        );
        assert!(dir.path().join("b.txt").exists());
    }

    #[tokio::test]
    async fn multi_file_patches_add_update_move_and_delete_or_change_nothing() {
        let (dir, ctx) = setup();
        std::fs::write(dir.path().join("a.txt"), "one\ntwo\n").expect("write");
        std::fs::write(dir.path().join("b.txt"), "bye\n").expect("write");
        let bad = "*** Begin Patch\n*** Add File: c.txt\n+new\n*** Update File: a.txt\n@@\n-zzz\n+yyy\n*** End Patch";
        let failed = Patch
            .call(json!({"mode": "patch", "patch": bad}), &ctx)
            .await;
        assert_eq!(failed.status, ToolStatus::Failed);
        assert!(
            !dir.path().join("c.txt").exists(),
            "nothing written when any part fails"
        );
        let good = "*** Begin Patch\n*** Add File: c.txt\n+new\n*** Update File: a.txt\n*** Move to: moved/a.txt\n@@\n one\n-two\n+TWO\n*** Delete File: b.txt\n*** End Patch";
        let done = Patch
            .call(json!({"mode": "patch", "patch": good}), &ctx)
            .await;
        assert_eq!(done.status, ToolStatus::Completed, "{}", done.content);
        assert_eq!(
            std::fs::read_to_string(dir.path().join("c.txt")).expect("c"),
            "new\n"
        );
        assert_eq!(
            std::fs::read_to_string(dir.path().join("moved/a.txt")).expect("moved"),
            "one\nTWO\n"
        );
        assert!(!dir.path().join("a.txt").exists() && !dir.path().join("b.txt").exists());
        assert_eq!(done.effects.len(), 3);
    }
}

#[cfg(test)]
mod robustness {
    use proptest::prelude::*;

    use super::{replace, v4a};

    /// Pieces of hostile patches.
    const PIECES: &[&str] = &[
        "*** Begin Patch\n",
        "*** Update File: a\n",
        "*** Add File: b\n",
        "*** Delete File: c\n",
        "*** Move to: d\n",
        "@@\n",
        "@@ fn x\n",
        " ctx\n",
        "-old\n",
        "+new\n",
        "\n",
        "é\n",
        "  \t\n",
        "*** End of File\n",
        "*** End Patch\n",
        "x\n",
    ];

    /// Texts they are applied to.
    const TEXTS: &[&str] = &[
        "",
        "a\n",
        "ctx\nold\n",
        "é\r\nold\r\n",
        "\n\n\n",
        "fn x\n ctx\n-old\n",
    ];

    proptest! {
        #![proptest_config(ProptestConfig { cases: 2_000, ..ProptestConfig::default() })]

        /// Hostile patches never panic, and what succeeds keeps its word: a one-hunk update
        /// that applies leaves every line it adds in the file; a replacement that succeeds
        /// made at least one and the new text is there; only an empty `old` is refused as
        /// empty.
        #[test]
        fn hostile_patches_and_replacements_keep_their_word(
            indices in proptest::collection::vec(0..PIECES.len(), 0..12),
            text in 0..TEXTS.len(),
            all in any::<bool>(),
        ) {
            let patch: String = indices.iter().map(|&i| PIECES[i]).collect();
            let text = TEXTS[text];
            if let Ok(ops) = v4a::parse(&patch) {
                for op in ops {
                    if let v4a::FileOp::Update { hunks, .. } = op
                        && hunks.len() == 1
                        && let Ok(out) = v4a::apply(text, &hunks)
                    {
                        for line in &hunks[0].lines {
                            if let v4a::HunkLine::Add(added) = line {
                                prop_assert!(
                                    out.lines().any(|l| l == added.trim_end_matches('\r')),
                                    "{patch:?} on {text:?} lost {added:?}: {out:?}"
                                );
                            }
                        }
                    }
                }
            }
            match replace::replace(text, &patch, "NEW", all) {
                Ok((out, count, _)) => {
                    prop_assert!(count >= 1);
                    prop_assert!(out.contains("NEW"), "{patch:?} on {text:?}: {out:?}");
                }
                Err(replace::ReplaceError::Empty) => prop_assert!(patch.is_empty()),
                Err(_) => {}
            }
        }
    }
}
