//! `read_file {path, offset?, limit?}`: a text file with line numbers, paginated.

use std::sync::LazyLock;

use futures_util::future::BoxFuture;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::fs::FileError;
use crate::tool::{
    ApprovalNeed, CallDescription, Concurrency, Effects, Tool, ToolContext, ToolDefinition,
    ToolKind, ToolLocation, ToolOutcome, parse_args,
};

/// Lines returned when the model gives no limit.
pub const DEFAULT_LIMIT: usize = 500;
/// The most lines one call returns.
pub const MAX_LIMIT: usize = 2000;
/// Longer lines are cut, with a marker.
pub const MAX_LINE_CHARS: usize = 2000;
/// A page stops early once it holds this many characters, or what the call's result may take
/// (`ToolContext::result_chars`: what the context window leaves), whichever is less.
pub const MAX_PAGE_CHARS: usize = 100_000;

/// The `read_file` tool.
#[derive(Debug)]
pub struct ReadFile;

static DEFINITION: LazyLock<ToolDefinition> = LazyLock::new(|| ToolDefinition {
    name: "read_file".into(),
    toolset: "file".into(),
    description: "Read a text file with line numbers. Use this instead of cat/head/tail. \
        Paginate large files with offset (1-based first line) and limit (number of lines, \
        default 500, at most 2000). Relative paths resolve against the working directory."
        .into(),
    parameters: json!({
        "type": "object",
        "properties": {
            "path": {"type": "string", "description": "File to read (absolute, or relative to the working directory)."},
            "offset": {"type": "integer", "minimum": 0, "description": "First line to read, 1-based (default 1; 0 also reads from the start)."},
            "limit": {"type": "integer", "minimum": 1, "maximum": MAX_LIMIT, "description": "Number of lines to read (default 500)."}
        },
        "required": ["path"]
    }),
    kind: ToolKind::Read,
    approval: ApprovalNeed::ReadOnly,
    concurrency: Concurrency::ReadOnly,
    // Pages are sized to the room the call has, so the result budget rarely has to step in.
    max_result_chars: None,
    effects: Effects::reads(&["path"]),
});

#[derive(Debug, Deserialize)]
struct Args {
    path: String,
    #[serde(default, deserialize_with = "lenient_usize")]
    offset: Option<usize>,
    #[serde(default, deserialize_with = "lenient_usize")]
    limit: Option<usize>,
}

/// Accepts `5`, `"5"` and `null` (models often quote numbers).
fn lenient_usize<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<usize>, D::Error> {
    match Value::deserialize(d)? {
        Value::Null => Ok(None),
        Value::Number(n) => n.as_u64().map(|n| Some(n as usize)).ok_or_else(|| {
            serde::de::Error::custom(format!("expected a positive integer, got {n}"))
        }),
        Value::String(s) => s.trim().parse::<usize>().map(Some).map_err(|_| {
            serde::de::Error::custom(format!("expected a positive integer, got {s:?}"))
        }),
        other => Err(serde::de::Error::custom(format!(
            "expected a positive integer, got {other}"
        ))),
    }
}

impl Tool for ReadFile {
    fn definition(&self) -> &ToolDefinition {
        &DEFINITION
    }

    fn describe(&self, args: &Value, ctx: &ToolContext) -> CallDescription {
        let path = args.get("path").and_then(Value::as_str).unwrap_or("");
        let line = args
            .get("offset")
            .and_then(Value::as_u64)
            .and_then(|n| u32::try_from(n).ok());
        let resolved = ctx.resolve(path);
        CallDescription {
            title: format!("Read {path}"),
            locations: vec![ToolLocation {
                path: resolved.clone(),
                line,
            }],
            reads: with_real_path(&resolved),
            paths: vec![resolved],
            ..CallDescription::default()
        }
    }

    fn call<'a>(&'a self, args: Value, ctx: &'a ToolContext) -> BoxFuture<'a, ToolOutcome> {
        Box::pin(async move {
            let args: Args = match parse_args(&DEFINITION.name, args) {
                Ok(args) => args,
                Err(failed) => return failed,
            };
            read(args, ctx).await
        })
    }
}

/// The path and, when it is a symlink (or under one), where it really points: a link in the
/// project to a key is a read of the key.
pub(crate) fn with_real_path(path: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut paths = vec![path.to_path_buf()];
    if let Ok(real) = std::fs::canonicalize(path)
        && real != path
    {
        paths.push(real);
    }
    paths
}

async fn read(args: Args, ctx: &ToolContext) -> ToolOutcome {
    if args.path.trim().is_empty() {
        return ToolOutcome::failed("read_file needs a non-empty `path`.");
    }
    let path = ctx.resolve(&args.path);
    let location = ToolLocation {
        path: path.clone(),
        line: args.offset.and_then(|n| u32::try_from(n.max(1)).ok()),
    };
    if let Err(why) = ctx.refuse_linked_credential(&path).await {
        return ToolOutcome::failed(why.to_string());
    }
    let text = match ctx.files.read_text(&path).await {
        Ok(text) => text,
        Err(FileError::IsDirectory(_)) => {
            return ToolOutcome::failed(format!(
                "{} is a directory, not a file. Use search_files with target \"files\" to list it.",
                path.display()
            ));
        }
        Err(FileError::NotFound(missing)) => {
            let (cwd, places) = (ctx.cwd.clone(), ctx.shell.places());
            let suggestions =
                tokio::task::spawn_blocking(move || same_name_files(&cwd, &missing, 3, places))
                    .await
                    .unwrap_or_default();
            let mut message = format!("File not found: {}.", path.display());
            if !suggestions.is_empty() {
                message.push_str(&format!(
                    " Files with that name in the workspace: {}.",
                    suggestions.join(", ")
                ));
            }
            return ToolOutcome::failed(message);
        }
        Err(e) => return ToolOutcome::failed(capitalize(&e.to_string())),
    };
    let offset = args.offset.unwrap_or(1).max(1);
    let limit = args.limit.unwrap_or(DEFAULT_LIMIT).clamp(1, MAX_LIMIT);
    // Room for the page, less the footer telling how to continue.
    let page_chars = ctx.result_chars.map_or(MAX_PAGE_CHARS, |room| {
        room.saturating_sub(120).clamp(400, MAX_PAGE_CHARS)
    });
    ToolOutcome::completed(render(&text, offset, limit, page_chars)).with_locations(vec![location])
}

/// Directories never searched for a missing file's namesakes.
const SKIPPED_DIRS: [&str; 5] = ["node_modules", "target", ".git", "dist", "build"];
/// How many directory entries the namesake search looks at, at most.
const SEARCH_BUDGET: usize = 2_000;

/// Up to `most` workspace-relative paths of files named like `missing` (breadth first, a
/// bounded number of entries, hidden and build folders skipped, no link followed and nothing
/// the sandbox hides listed): a model that guessed a path learns where the file is.
fn same_name_files(
    cwd: &std::path::Path,
    missing: &std::path::Path,
    most: usize,
    places: std::sync::Arc<dyn talaria_files::Places>,
) -> Vec<String> {
    let Some(name) = missing.file_name() else {
        return Vec::new();
    };
    let Ok(root) = talaria_files::Root::open(cwd, places) else {
        return Vec::new();
    };
    let mut found = Vec::new();
    let mut queue = std::collections::VecDeque::from([std::path::PathBuf::new()]);
    let mut seen = 0;
    while let Some(relative) = queue.pop_front() {
        let Ok(entries) = root.dir(&relative).and_then(|dir| dir.entries()) else {
            continue;
        };
        for (entry_name, kind) in entries {
            seen += 1;
            if seen > SEARCH_BUDGET || found.len() >= most {
                return found;
            }
            let hidden = entry_name.to_string_lossy().starts_with('.');
            match kind {
                talaria_files::Kind::Directory => {
                    let skipped = SKIPPED_DIRS.iter().any(|d| entry_name == *d);
                    if !hidden && !skipped {
                        queue.push_back(relative.join(&entry_name));
                    }
                }
                _ if entry_name == name => {
                    found.push(relative.join(&entry_name).display().to_string());
                }
                _ => {}
            }
        }
    }
    found
}

fn capitalize(text: &str) -> String {
    let mut chars = text.chars();
    match chars.next() {
        Some(first) => first.to_uppercase().chain(chars).collect(),
        None => String::new(),
    }
}

/// Renders lines `offset..offset+limit` with right-aligned 1-based numbers, at most about
/// `max_chars` characters (at least one line), plus a footer telling the model how to continue.
pub fn render(text: &str, offset: usize, limit: usize, max_chars: usize) -> String {
    let total = text.lines().count();
    if total == 0 {
        return "(empty file)".to_string();
    }
    if offset > total {
        return format!("(offset {offset} is past the end: the file has {total} lines)");
    }
    let mut out = String::with_capacity(text.len().min(limit * 80));
    let mut last = offset - 1;
    let max_line = MAX_LINE_CHARS.min(max_chars);
    for (index, line) in text.lines().enumerate().skip(offset - 1).take(limit) {
        let line = line.strip_suffix('\r').unwrap_or(line);
        let shown = line.chars().count().min(max_line) + 8;
        if last >= offset && out.len() + shown > max_chars {
            break;
        }
        last = index + 1;
        out.push_str(&format!("{:>6}|", index + 1));
        if line.chars().count() > max_line {
            out.extend(line.chars().take(max_line));
            out.push_str(" …[line truncated]");
        } else {
            out.push_str(line);
        }
        out.push('\n');
    }
    if last < total {
        out.push_str(&format!(
            "\n(showing lines {offset}-{last} of {total}; call read_file with offset={} to continue)",
            last + 1
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tool::ToolStatus;
    use tokio_util::sync::CancellationToken;

    fn ctx(dir: &std::path::Path) -> ToolContext {
        ToolContext::local(
            dir.to_path_buf(),
            CancellationToken::new(),
            Default::default(),
        )
    }

    async fn run(dir: &std::path::Path, args: Value) -> ToolOutcome {
        ReadFile.call(args, &ctx(dir)).await
    }

    #[test]
    fn renders_numbered_pages_with_a_continuation_hint() {
        let text = "a\nb\nc\nd\n";
        assert_eq!(
            render(text, 1, 10, MAX_PAGE_CHARS),
            "     1|a\n     2|b\n     3|c\n     4|d\n"
        );
        let page = render(text, 2, 2, MAX_PAGE_CHARS);
        assert!(page.starts_with("     2|b\n     3|c\n"), "{page}");
        assert!(page.contains("offset=4"), "{page}");
        assert!(render(text, 9, 2, MAX_PAGE_CHARS).contains("past the end"));
        assert_eq!(render("", 1, 5, MAX_PAGE_CHARS), "(empty file)");
        let wide = format!("{}\n", "y".repeat(1500)).repeat(200);
        let page = render(&wide, 1, 200, MAX_PAGE_CHARS);
        assert!(
            page.len() < MAX_PAGE_CHARS + 4000,
            "page bounded: {}",
            page.len()
        );
        assert!(
            page.contains("call read_file with offset="),
            "continuation offered"
        );
    }

    #[test]
    fn a_page_fits_the_room_the_window_leaves() {
        let text = format!("{}\n", "z".repeat(70)).repeat(400);
        for room in [500, 2_000, 8_000] {
            let page = render(&text, 1, 500, room);
            let body = page.split("\n\n(showing").next().unwrap_or_default();
            assert!(body.len() <= room, "{room}: {}", body.len());
            assert!(page.contains("call read_file with offset="), "{room}");
        }
        // One very long line still shows, cut to the room.
        let page = render(&"w".repeat(5_000), 1, 1, 600);
        assert!(
            page.len() < 700 && page.contains("line truncated"),
            "{}",
            page.len()
        );
    }

    #[tokio::test]
    async fn reads_relative_paths_and_accepts_quoted_numbers() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join("f.txt"), "one\ntwo\nthree\n").expect("write");
        let out = run(
            dir.path(),
            json!({"path": "f.txt", "offset": "2", "limit": 1}),
        )
        .await;
        assert_eq!(out.status, ToolStatus::Completed);
        assert!(out.content.starts_with("     2|two\n"), "{}", out.content);
        assert_eq!(out.locations[0].path, dir.path().join("f.txt"));
    }

    #[tokio::test]
    async fn offset_zero_is_read_as_the_first_line() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join("f.txt"), "one\ntwo\n").expect("write");
        let out = run(
            dir.path(),
            json!({"path": "f.txt", "offset": 0, "limit": 500}),
        )
        .await;
        assert_eq!(out.status, ToolStatus::Completed, "{}", out.content);
        assert!(out.content.starts_with("     1|one\n"), "{}", out.content);
        assert_eq!(out.locations[0].line, Some(1));
    }

    #[tokio::test]
    async fn a_guessed_path_is_answered_with_where_files_of_that_name_are() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join("main.py"), "print(1)\n").expect("write");
        std::fs::create_dir_all(dir.path().join("node_modules/x")).expect("dir");
        std::fs::write(dir.path().join("node_modules/x/main.py"), "").expect("write");
        let out = run(dir.path(), json!({"path": "src/main.py"})).await;
        assert_eq!(out.status, ToolStatus::Failed);
        assert!(
            out.content
                .ends_with("Files with that name in the workspace: main.py."),
            "{}",
            out.content
        );
        let none = run(dir.path(), json!({"path": "nothing.rs"})).await;
        assert!(
            !none.content.contains("Files with that name"),
            "{}",
            none.content
        );
    }

    #[tokio::test]
    async fn failures_say_what_is_wrong() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join("bin"), [0u8, 1, 2, 3]).expect("write");
        let missing = run(dir.path(), json!({"path": "nope.txt"})).await;
        assert!(missing.content.contains("File not found"));
        let binary = run(dir.path(), json!({"path": "bin"})).await;
        assert!(binary.content.contains("binary"));
        let directory = run(dir.path(), json!({"path": "."})).await;
        assert!(directory.content.contains("directory"));
        let no_path = run(dir.path(), json!({"offset": 3})).await;
        assert_eq!(no_path.status, ToolStatus::Failed);
        assert!(no_path.content.contains("path"), "{}", no_path.content);
        let bad_offset = run(dir.path(), json!({"path": "bin", "offset": "x"})).await;
        assert!(bad_offset.content.contains("positive integer"));
    }
}
