//! `search_files {pattern, target, path?, file_glob?, limit?, offset?, context?}`: regex search
//! of file contents, or glob search of file names, in process and gitignore-aware (the
//! `ignore` and `grep` crates that ripgrep is built from). Runs on the blocking pool.

use crate::error::ToolError;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, LazyLock, Mutex};

use talaria_util::lock;

use futures_util::future::BoxFuture;
use grep_regex::RegexMatcherBuilder;
use grep_searcher::{
    BinaryDetection, Searcher, SearcherBuilder, Sink, SinkContext, SinkContextKind, SinkMatch,
};
use ignore::{WalkBuilder, WalkState};
use serde::Deserialize;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::sensitive::{PathSecrecy, SensitivePaths};
use crate::tool::{
    ApprovalNeed, CallDescription, Concurrency, Effects, Tool, ToolContext, ToolDefinition,
    ToolKind, ToolLocation, ToolOutcome, parse_args,
};
use talaria_files::Access;

/// Results per call unless the model asks for another limit.
pub const DEFAULT_LIMIT: usize = 50;
/// The most results per call.
pub const MAX_LIMIT: usize = 1000;
/// Output lines kept while searching (more are counted, not stored).
const MAX_STORED_LINES: usize = 20_000;
/// Matched lines longer than this are cut.
const MAX_LINE_CHARS: usize = 500;

/// The `search_files` tool.
#[derive(Debug)]
pub struct SearchFiles;

static DEFINITION: LazyLock<ToolDefinition> = LazyLock::new(|| ToolDefinition {
    name: "search_files".into(),
    toolset: "file".into(),
    description: "Search the project. target=\"content\" (default): regex search of file \
        contents (ripgrep syntax; smart case), results as path:line:text. target=\"files\": \
        find files whose path matches a glob (e.g. \"*.rs\", \"src/**/test_*\"). Respects \
        .gitignore and skips hidden files. Narrow with path and file_glob; page with offset."
        .into(),
    parameters: json!({
        "type": "object",
        "properties": {
            "pattern": {"type": "string", "description": "Regex (content) or glob (files)."},
            "target": {"type": "string", "enum": ["content", "files"], "description": "What to search (default content)."},
            "path": {"type": "string", "description": "Directory or file to search (default: the working directory)."},
            "file_glob": {"type": "string", "description": "Only search files matching this glob (content search)."},
            "limit": {"type": "integer", "minimum": 1, "maximum": MAX_LIMIT, "description": "Most results to return (default 50)."},
            "offset": {"type": "integer", "minimum": 0, "description": "Results to skip (for paging)."},
            "context": {"type": "integer", "minimum": 0, "maximum": 10, "description": "Lines of context around each match."}
        },
        "required": ["pattern"]
    }),
    kind: ToolKind::Search,
    approval: ApprovalNeed::ReadOnly,
    concurrency: Concurrency::ReadOnly,
    max_result_chars: None,
    effects: Effects::reads(&["path"]),
});

#[derive(Debug, Deserialize)]
struct Args {
    pattern: String,
    target: Option<String>,
    path: Option<String>,
    file_glob: Option<String>,
    limit: Option<usize>,
    offset: Option<usize>,
    context: Option<usize>,
}

impl Tool for SearchFiles {
    fn definition(&self) -> &ToolDefinition {
        &DEFINITION
    }

    fn describe(&self, args: &Value, ctx: &ToolContext) -> CallDescription {
        let pattern = args.get("pattern").and_then(Value::as_str).unwrap_or("");
        let path = args.get("path").and_then(Value::as_str).unwrap_or(".");
        let root = ctx.resolve(path);
        let what = if args.get("target").and_then(Value::as_str) == Some("files") {
            "files"
        } else {
            "content"
        };
        CallDescription {
            title: format!("Search {what} for `{pattern}` in {path}"),
            locations: vec![ToolLocation {
                path: root.clone(),
                line: None,
            }],
            reads: crate::read_file::with_real_path(&root),
            paths: vec![root],
            ..CallDescription::default()
        }
    }

    fn call<'a>(&'a self, args: Value, ctx: &'a ToolContext) -> BoxFuture<'a, ToolOutcome> {
        Box::pin(async move {
            let args: Args = match parse_args(&DEFINITION.name, args) {
                Ok(args) => args,
                Err(failed) => return failed,
            };
            let root = ctx.resolve(args.path.as_deref().unwrap_or("."));
            let cancel = ctx.cancel.clone();
            let cwd = ctx.cwd.clone();
            let secrets = SecretFilter::new(ctx.sensitive.clone(), &root);
            let rules = crate::fs::LinkRules {
                sensitive: ctx.sensitive.clone(),
                places: ctx.shell.places(),
            };
            let result = tokio::task::spawn_blocking(move || {
                let scope = Scope::open(&rules, &root, cwd)?;
                let found = run(&args, &scope, &cancel, &secrets);
                found.map(|text| secrets.annotate(text))
            })
            .await;
            match result {
                Ok(Ok(text)) => ToolOutcome::completed(text),
                Ok(Err(why)) => ToolOutcome::failed(why),
                Err(e) => ToolOutcome::failed(format!("search failed: {e}")),
            }
        })
    }
}

/// Keeps files that may hold secrets out of a search, unless the search was aimed at them
/// (and so approved as a read of them).
struct SecretFilter {
    paths: Arc<SensitivePaths>,
    /// The secrecy the search root was approved at.
    allowed: PathSecrecy,
    skipped: AtomicUsize,
}

impl SecretFilter {
    fn new(paths: Arc<SensitivePaths>, root: &Path) -> Self {
        let allowed = paths.worst(
            crate::read_file::with_real_path(root)
                .iter()
                .map(PathBuf::as_path),
        );
        Self {
            paths,
            allowed,
            skipped: AtomicUsize::new(0),
        }
    }

    /// Whether the walk may look at `path`; counts the ones it may not.
    fn admits(&self, path: &Path) -> bool {
        let admitted = self.paths.classify(path) <= self.allowed;
        if !admitted {
            self.skipped.fetch_add(1, Ordering::Relaxed);
        }
        admitted
    }

    /// Whether the matches found in `path` may be shown: a file with more than one hard link
    /// may be a credential under another name, so it counts as secret, and one whose device
    /// and inode are a credential's is never shown (checked only for files that matched, to
    /// keep the walk as fast as ripgrep's).
    fn admits_matches(&self, file: &std::fs::File) -> bool {
        use std::os::unix::fs::MetadataExt;
        let metadata = file.metadata().ok();
        let linked = metadata.as_ref().is_some_and(|m| m.nlink() > 1);
        // A hard link to a credential is one, whatever its name: never shown.
        let credential = linked
            && metadata
                .as_ref()
                .is_some_and(|m| self.paths.is_linked_credential(m));
        let admitted = !credential && (!linked || PathSecrecy::Secret <= self.allowed);
        if !admitted {
            self.skipped.fetch_add(1, Ordering::Relaxed);
        }
        admitted
    }

    fn annotate(&self, mut text: String) -> String {
        let skipped = self.skipped.load(Ordering::Relaxed);
        if skipped > 0 {
            text.push_str(&format!(
                "\n({skipped} files that may hold secrets or credentials were not searched; read one by its path if it is really needed: the user will be asked)"
            ));
        }
        text
    }
}

fn run(
    args: &Args,
    scope: &Scope,
    cancel: &CancellationToken,
    secrets: &SecretFilter,
) -> Result<String, ToolError> {
    let limit = args.limit.unwrap_or(DEFAULT_LIMIT).clamp(1, MAX_LIMIT);
    // Clamped so the page arithmetic cannot overflow, whatever the model sends.
    let offset = args.offset.unwrap_or(0).min(u32::MAX as usize);
    let (text, found) = match args.target.as_deref().unwrap_or("content") {
        "files" => find_files(&args.pattern, scope, limit, offset, cancel, secrets)?,
        "content" => search_content(args, scope, limit, offset, cancel, secrets)?,
        other => {
            return Err(ToolError::args(format!(
                "target must be \"content\" or \"files\", got {other:?}"
            )));
        }
    };
    if found > 0 || offset > 0 {
        return Ok(text);
    }
    // The second walk skips the same secret files: they are counted once.
    let skipped_first = secrets.skipped.load(Ordering::Relaxed);
    let other = the_other_search(args, scope, limit, cancel, secrets)?;
    let skipped_second = secrets.skipped.load(Ordering::Relaxed) - skipped_first;
    secrets
        .skipped
        .store(skipped_first.max(skipped_second), Ordering::Relaxed);
    Ok(other.unwrap_or(text))
}

/// After a search that found nothing, the other kind with the same words: a file-name
/// search becomes a search of contents for its words (a setting is often inside a file,
/// not its name), a content search for a name becomes a file-name search. `None` when the
/// other search finds nothing either (or the pattern has no plain word to search for).
fn the_other_search(
    args: &Args,
    scope: &Scope,
    limit: usize,
    cancel: &CancellationToken,
    secrets: &SecretFilter,
) -> Result<Option<String>, ToolError> {
    let word: String = args
        .pattern
        .chars()
        .filter(|c| {
            !matches!(
                c,
                '*' | '?' | '[' | ']' | '{' | '}' | '^' | '$' | '\\' | '(' | ')' | '|' | '+'
            )
        })
        .collect();
    let word = word.trim_matches(['.', '/', ' ']);
    if word.chars().filter(|c| c.is_alphanumeric()).count() < 3 {
        return Ok(None);
    }
    if args.target.as_deref() == Some("files") {
        let literal = Args {
            pattern: literal_regex(word),
            target: None,
            path: None,
            file_glob: None,
            limit: None,
            offset: None,
            context: None,
        };
        let (text, found) = search_content(&literal, scope, limit, 0, cancel, secrets)?;
        return Ok((found > 0).then(|| {
            format!(
                "No file name matches {:?}. Files whose contents mention `{word}` (a content search):\n{text}",
                args.pattern
            )
        }));
    }
    let glob = format!("*{word}*");
    let (text, found) = find_files(&glob, scope, limit, 0, cancel, secrets)?;
    Ok((found > 0).then(|| {
        format!(
            "No file contents match {:?}. Files whose names hold `{word}` (a file-name search):\n{text}",
            args.pattern
        )
    }))
}

/// `text` as a regex that matches it literally.
fn literal_regex(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if "\\.+*?()|[]{}^$".contains(c) {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

fn walker(scope: &Scope, glob: Option<&str>) -> Result<WalkBuilder, ToolError> {
    let root = scope.real.as_path();
    let mut builder = WalkBuilder::new(root);
    builder
        .hidden(true)
        .require_git(false)
        .git_ignore(true)
        .parents(true);
    // What the sandbox hides is not walked (a `[sandbox] hidden` folder in the workspace).
    let places = scope.held.places();
    builder.filter_entry(move |entry| places.access(entry.path()) != Access::Hidden);
    builder.threads(
        std::thread::available_parallelism()
            .map_or(2, |n| n.get())
            .min(8),
    );
    if let Some(glob) = glob {
        let mut overrides = ignore::overrides::OverrideBuilder::new(root);
        overrides
            .add(glob)
            .map_err(|e| ToolError::args(format!("invalid file_glob {glob:?}: {e}")))?;
        builder.overrides(
            overrides
                .build()
                .map_err(|e| ToolError::args(format!("invalid file_glob {glob:?}: {e}")))?,
        );
    }
    Ok(builder)
}

/// Walks the files under `root` in parallel (gitignore-aware, hidden skipped, `glob` applied),
/// calling `visit` for each regular file; stops early when `cancel` fires. `make_visitor` is
/// called once per walker thread so each can keep its own state (e.g. a searcher).
fn walk_files<F, V>(
    scope: &Scope,
    glob: Option<&str>,
    cancel: &CancellationToken,
    secrets: &SecretFilter,
    make_visitor: F,
) -> Result<(), ToolError>
where
    F: Fn() -> V + Sync,
    V: FnMut(&Path) + Send,
{
    walker(scope, glob)?.build_parallel().run(|| {
        let mut visit = make_visitor();
        Box::new(move |entry| {
            if cancel.is_cancelled() {
                return WalkState::Quit;
            }
            if let Ok(entry) = entry
                && entry.file_type().is_some_and(|t| t.is_file())
                && secrets.admits(entry.path())
            {
                visit(entry.path());
            }
            WalkState::Continue
        })
    });
    Ok(())
}

/// Where a search looks: its root as the model named it, where that led when the search
/// began (judged as the file tools judge, `fs::pinned`), and that folder held: the walk goes
/// down the resolved root, every file it finds is opened below the held folder (no link
/// followed, nothing above it reached), and every name shown is checked there again.
struct Scope {
    named: PathBuf,
    real: PathBuf,
    held: talaria_files::Root,
    cwd: PathBuf,
}

impl Scope {
    fn open(rules: &crate::fs::LinkRules, root: &Path, cwd: PathBuf) -> Result<Self, ToolError> {
        let failed = |e: crate::fs::FileError| {
            ToolError::Rejected(match e {
                crate::fs::FileError::NotFound(_) => format!("{} does not exist.", root.display()),
                other => format!("Cannot search {}: {other}", root.display()),
            })
        };
        let real = crate::fs::pinned::judge(rules, root, false).map_err(failed)?;
        let base = if real.is_dir() {
            real.clone()
        } else {
            real.parent()
                .map_or_else(|| real.clone(), Path::to_path_buf)
        };
        let held = crate::fs::pinned::open_search_root(rules, &base).map_err(failed)?;
        Ok(Self {
            named: root.to_path_buf(),
            real,
            held,
            cwd,
        })
    }

    /// Opens a file the walk found.
    fn open_found(&self, path: &Path) -> Option<std::fs::File> {
        let relative = self.held.relative(path)?;
        self.held.open_read(relative).ok().map(|(file, _)| file)
    }

    /// Whether a file the walk found is still a file below the root, reached with no link.
    fn still_a_file(&self, path: &Path) -> bool {
        self.held
            .relative(path)
            .is_some_and(|relative| matches!(self.held.stat(relative), Ok(Some(s)) if s.is_file()))
    }

    /// A found path as the model reads it: below the root it named, relative to the working
    /// directory.
    fn label(&self, path: &Path) -> String {
        let named = match path.strip_prefix(&self.real) {
            Ok(rest) if !rest.as_os_str().is_empty() => self.named.join(rest),
            Ok(_) => self.named.clone(),
            Err(_) => path.to_path_buf(),
        };
        named
            .strip_prefix(&self.cwd)
            .unwrap_or(&named)
            .display()
            .to_string()
    }
}

fn footer(shown: usize, offset: usize, total: usize, noun: &str) -> String {
    if total == 0 {
        return format!("No {noun} found.");
    }
    if offset + shown < total {
        format!(
            "\n(showing {noun} {}-{} of {total}; use offset={} for more, or narrow the search)",
            offset + 1,
            offset + shown,
            offset + shown
        )
    } else {
        format!("\n({total} {noun})")
    }
}

fn find_files(
    pattern: &str,
    scope: &Scope,
    limit: usize,
    offset: usize,
    cancel: &CancellationToken,
    secrets: &SecretFilter,
) -> Result<(String, usize), ToolError> {
    let glob = globset::GlobBuilder::new(pattern)
        .literal_separator(false)
        .build()
        .map_err(|e| ToolError::args(format!("invalid glob {pattern:?}: {e}")))?
        .compile_matcher();
    let by_name = !pattern.contains('/');
    let found = Mutex::new(Vec::new());
    let root = scope.real.as_path();
    walk_files(scope, None, cancel, secrets, || {
        let glob = glob.clone();
        let found = &found;
        move |path: &Path| {
            let candidate = if by_name {
                path.file_name().map(PathBuf::from).unwrap_or_default()
            } else {
                path.strip_prefix(root).unwrap_or(path).to_path_buf()
            };
            if glob.is_match(&candidate) {
                lock(found).push(path.to_path_buf());
            }
        }
    })?;
    if cancel.is_cancelled() {
        return Err(ToolError::Cancelled("search"));
    }
    let mut found = talaria_util::into_inner(found);
    found.sort();
    let total = found.len();
    // A name is shown only if it is still a file below the root, reached with no link: a
    // folder swapped for a link while the walk listed it shows nothing of where it leads.
    let page: Vec<String> = found
        .iter()
        .skip(offset)
        .take(limit)
        .filter(|p| scope.still_a_file(p))
        .map(|p| scope.label(p))
        .collect();
    let text = format!(
        "{}{}",
        page.join("\n"),
        footer(page.len(), offset, total, "files")
    );
    Ok((text, total))
}

/// One file's output lines, each marked true when it is a match.
type FileLines = (PathBuf, Vec<(bool, String)>);

/// Collects one file's matches (and context lines) as output lines.
struct FileSink<'a> {
    label: &'a str,
    /// Output lines, each marked true when it is a match (not context or a separator).
    lines: Vec<(bool, String)>,
    matches: usize,
    last_line: Option<u64>,
}

fn cut(text: &[u8]) -> String {
    let text = String::from_utf8_lossy(text);
    let text = text.trim_end_matches(['\n', '\r']);
    if text.chars().count() > MAX_LINE_CHARS {
        format!("{}…", text.chars().take(MAX_LINE_CHARS).collect::<String>())
    } else {
        text.to_string()
    }
}

impl FileSink<'_> {
    fn separate(&mut self, line: u64) {
        if let Some(last) = self.last_line
            && line > last + 1
            && !self.lines.is_empty()
        {
            self.lines.push((false, "--".into()));
        }
        self.last_line = Some(line);
    }
}

impl Sink for FileSink<'_> {
    type Error = std::io::Error;

    fn matched(&mut self, _: &Searcher, m: &SinkMatch<'_>) -> Result<bool, Self::Error> {
        let line = m.line_number().unwrap_or(0);
        self.separate(line);
        self.matches += 1;
        self.lines
            .push((true, format!("{}:{line}:{}", self.label, cut(m.bytes()))));
        Ok(true)
    }

    fn context(&mut self, _: &Searcher, c: &SinkContext<'_>) -> Result<bool, Self::Error> {
        if matches!(c.kind(), SinkContextKind::Other) {
            return Ok(true);
        }
        let line = c.line_number().unwrap_or(0);
        self.separate(line);
        self.lines
            .push((false, format!("{}-{line}-{}", self.label, cut(c.bytes()))));
        Ok(true)
    }
}

fn search_content(
    args: &Args,
    scope: &Scope,
    limit: usize,
    offset: usize,
    cancel: &CancellationToken,
    secrets: &SecretFilter,
) -> Result<(String, usize), ToolError> {
    let matcher = RegexMatcherBuilder::new()
        .case_smart(true)
        .build(&args.pattern)
        .map_err(|e| ToolError::args(format!("invalid regex {:?}: {e}", args.pattern)))?;
    let context = args.context.unwrap_or(0).min(10);
    let results: Mutex<Vec<FileLines>> = Mutex::new(Vec::new());
    let stored = AtomicUsize::new(0);
    let total_matches = AtomicUsize::new(0);
    let overflow = AtomicBool::new(false);
    walk_files(scope, args.file_glob.as_deref(), cancel, secrets, || {
        let matcher = matcher.clone();
        let mut searcher = SearcherBuilder::new()
            .line_number(true)
            .before_context(context)
            .after_context(context)
            .binary_detection(BinaryDetection::quit(0))
            .build();
        let (results, stored, total_matches, overflow) =
            (&results, &stored, &total_matches, &overflow);
        move |path: &Path| {
            let label = scope.label(path);
            let mut sink = FileSink {
                label: &label,
                lines: Vec::new(),
                matches: 0,
                last_line: None,
            };
            // Opened as the walk saw it: a file swapped for a link since is not searched.
            let Some(file) = scope.open_found(path) else {
                return;
            };
            if searcher.search_file(&matcher, &file, &mut sink).is_err()
                || sink.matches == 0
                || !secrets.admits_matches(&file)
            {
                return;
            }
            total_matches.fetch_add(sink.matches, Ordering::Relaxed);
            if stored.fetch_add(sink.lines.len(), Ordering::Relaxed) < MAX_STORED_LINES {
                lock(results).push((path.to_path_buf(), sink.lines));
            } else {
                overflow.store(true, Ordering::Relaxed);
            }
        }
    })?;
    if cancel.is_cancelled() {
        return Err(ToolError::Cancelled("search"));
    }
    let mut results = talaria_util::into_inner(results);
    results.sort_by(|a, b| a.0.cmp(&b.0));
    let total = total_matches.load(Ordering::Relaxed);
    let (out, shown) = page_of_matches(&results, offset, limit);
    let mut text = out.join("\n");
    text.push_str(&footer(shown, offset, total, "matches"));
    if overflow.load(Ordering::Relaxed) {
        text.push_str(
            "\n(very many matches: only part of them could be listed; narrow the search)",
        );
    }
    Ok((text, total))
}

/// The page of matches: `offset` matches skipped, `limit` shown with their context lines
/// (which wait in `pending` until it is known whether their match is on the page); returns
/// the lines and how many matches they show.
fn page_of_matches(results: &[FileLines], offset: usize, limit: usize) -> (Vec<&str>, usize) {
    let mut out: Vec<&str> = Vec::new();
    let mut seen = 0;
    let mut shown = 0;
    'files: for (_, lines) in results {
        let mut pending: Vec<&str> = Vec::new();
        let mut emitting = false;
        for (is_match, line) in lines {
            if *is_match {
                seen += 1;
                if seen > offset && shown < limit {
                    out.append(&mut pending);
                    out.push(line);
                    shown += 1;
                    emitting = true;
                } else {
                    pending.clear();
                    emitting = false;
                    if shown >= limit {
                        break 'files;
                    }
                }
            } else if emitting && line != "--" {
                out.push(line);
            } else {
                if line == "--" {
                    emitting = false;
                    pending.clear();
                }
                pending.push(line);
            }
        }
    }
    // A separator may only stand between shown lines.
    while out.last().is_some_and(|l| *l == "--") {
        out.pop();
    }
    while out.first().is_some_and(|l| *l == "--") {
        out.remove(0);
    }
    (out, shown)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tool::ToolStatus;

    fn tree() -> (tempfile::TempDir, ToolContext) {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path();
        std::fs::create_dir_all(root.join("src/nested")).expect("mkdir");
        std::fs::create_dir_all(root.join("target")).expect("mkdir");
        std::fs::write(root.join(".gitignore"), "target/\n").expect("write");
        std::fs::write(root.join("src/main.rs"), "fn main() {\n    helper();\n}\n").expect("write");
        std::fs::write(
            root.join("src/nested/helper.rs"),
            "pub fn helper() {}\n// Helper docs\n",
        )
        .expect("write");
        std::fs::write(root.join("target/out.rs"), "fn helper() {}\n").expect("write");
        std::fs::write(
            root.join("blob.bin"),
            [0u8, b'h', b'e', b'l', b'p', b'e', b'r'],
        )
        .expect("write");
        let ctx = ToolContext::local(
            root.to_path_buf(),
            CancellationToken::new(),
            Default::default(),
        );
        (dir, ctx)
    }

    #[tokio::test]
    async fn content_search_respects_gitignore_binaries_and_smart_case() {
        let (_dir, ctx) = tree();
        let out = SearchFiles.call(json!({"pattern": "helper"}), &ctx).await;
        assert_eq!(out.status, ToolStatus::Completed);
        assert!(
            out.content.contains("src/main.rs:2:    helper();"),
            "{}",
            out.content
        );
        assert!(
            out.content
                .contains("src/nested/helper.rs:1:pub fn helper() {}")
        );
        assert!(
            out.content
                .contains("src/nested/helper.rs:2:// Helper docs"),
            "smart case: lower-case pattern ignores case"
        );
        assert!(!out.content.contains("target/"), "gitignored");
        assert!(!out.content.contains("blob.bin"), "binary skipped");
        let paged = SearchFiles
            .call(json!({"pattern": "helper", "limit": 1}), &ctx)
            .await;
        let far = SearchFiles
            .call(json!({"pattern": "helper", "offset": u64::MAX}), &ctx)
            .await;
        assert_eq!(far.status, ToolStatus::Completed, "{}", far.content);
        assert!(paged.content.contains("offset=1"), "{}", paged.content);
        let context = SearchFiles
            .call(json!({"pattern": "helper\\(\\);", "context": 1}), &ctx)
            .await;
        assert!(
            context.content.contains("src/main.rs-1-fn main() {"),
            "{}",
            context.content
        );
        let glob = SearchFiles
            .call(json!({"pattern": "helper", "file_glob": "main.rs"}), &ctx)
            .await;
        assert!(!glob.content.contains("nested"), "{}", glob.content);
        let bad = SearchFiles.call(json!({"pattern": "("}), &ctx).await;
        assert_eq!(bad.status, ToolStatus::Failed);
        assert!(bad.content.contains("invalid regex"));
    }

    #[tokio::test]
    async fn a_search_that_finds_nothing_tries_the_other_kind_with_its_words() {
        let (dir, ctx) = tree();
        std::fs::create_dir_all(dir.path().join("config")).expect("mkdir");
        std::fs::write(dir.path().join("config/app.toml"), "request_timeout = 30\n")
            .expect("write");
        let by_name = SearchFiles
            .call(
                json!({"pattern": "*request_timeout*", "target": "files"}),
                &ctx,
            )
            .await;
        assert!(
            by_name.content.contains("a content search"),
            "{}",
            by_name.content
        );
        assert!(
            by_name
                .content
                .contains("config/app.toml:1:request_timeout = 30"),
            "{}",
            by_name.content
        );
        let by_content = SearchFiles
            .call(json!({"pattern": "helper.rs"}), &ctx)
            .await;
        assert!(
            by_content.content.contains("a file-name search"),
            "{}",
            by_content.content
        );
        assert!(
            by_content.content.contains("src/nested/helper.rs"),
            "{}",
            by_content.content
        );
        let nowhere = SearchFiles
            .call(
                json!({"pattern": "*no_such_thing*", "target": "files"}),
                &ctx,
            )
            .await;
        assert_eq!(nowhere.content, "No files found.");
        let short = SearchFiles
            .call(json!({"pattern": "zq", "target": "content"}), &ctx)
            .await;
        assert_eq!(short.content, "No matches found.");
    }

    #[tokio::test]
    async fn file_search_matches_names_or_paths() {
        let (_dir, ctx) = tree();
        let out = SearchFiles
            .call(json!({"pattern": "*.rs", "target": "files"}), &ctx)
            .await;
        assert_eq!(out.content, "src/main.rs\nsrc/nested/helper.rs\n(2 files)");
        let nested = SearchFiles
            .call(json!({"pattern": "src/**/h*.rs", "target": "files"}), &ctx)
            .await;
        assert!(
            nested.content.starts_with("src/nested/helper.rs"),
            "{}",
            nested.content
        );
        let none = SearchFiles
            .call(json!({"pattern": "*.py", "target": "files"}), &ctx)
            .await;
        assert_eq!(none.content, "No files found.");
    }

    #[tokio::test]
    async fn files_holding_secrets_are_skipped_unless_the_search_aims_at_them() {
        let (dir, mut ctx) = tree();
        let home = dir.path().join("home");
        std::fs::create_dir_all(home.join("keys")).expect("mkdir");
        std::fs::write(home.join("keys/deploy.pem"), "PRIVATE KEY secret\n").expect("write");
        std::fs::write(home.join("notes.txt"), "not a secret\n").expect("write");
        std::fs::write(dir.path().join("src/prod.env"), "TOKEN=secret\n").expect("write");
        ctx.sensitive = Arc::new(SensitivePaths::new(Some(home.clone()), None));
        let out = SearchFiles.call(json!({"pattern": "secret"}), &ctx).await;
        assert!(
            out.content.contains("home/notes.txt:1:not a secret"),
            "{}",
            out.content
        );
        assert!(!out.content.contains("PRIVATE KEY"), "{}", out.content);
        assert!(!out.content.contains("TOKEN="), "{}", out.content);
        assert!(
            out.content.contains("2 files that may hold secrets"),
            "{}",
            out.content
        );
        // A hard link to the key under an ordinary name is of unknown origin: skipped too.
        std::fs::hard_link(
            home.join("keys/deploy.pem"),
            dir.path().join("src/notes.bak"),
        )
        .expect("hard link");
        let out = SearchFiles.call(json!({"pattern": "PRIVATE"}), &ctx).await;
        assert!(!out.content.contains("PRIVATE KEY"), "{}", out.content);
        assert!(
            out.content.contains("3 files that may hold secrets"),
            "{}",
            out.content
        );
        // Aimed at the key (which the policy asks about first), the search may read it.
        let aimed = SearchFiles
            .call(
                json!({"pattern": "PRIVATE", "path": "home/keys/deploy.pem"}),
                &ctx,
            )
            .await;
        assert!(aimed.content.contains("PRIVATE KEY"), "{}", aimed.content);
    }

    /// A context whose commands run in a sandbox that hides `hidden` (and every other
    /// session's temporary folder).
    fn sandboxed(ws: &Path, hidden: Vec<PathBuf>) -> ToolContext {
        let policy = talaria_sandbox::SandboxPolicy {
            writable: vec![ws.to_path_buf()],
            hidden,
            ..talaria_sandbox::SandboxPolicy::default()
        };
        let shell = crate::shell::Shell::new(crate::shell::ShellSettings {
            sandboxing: Some(crate::shell::Sandboxing::Enforced(Arc::new(policy))),
            helper: Some(PathBuf::from("/bin/true")),
            ..crate::shell::ShellSettings::default()
        });
        let mut ctx = ToolContext::local(
            ws.to_path_buf(),
            CancellationToken::new(),
            Default::default(),
        );
        ctx.shell = Arc::new(shell);
        ctx
    }

    #[tokio::test]
    async fn a_link_into_what_the_sandbox_hides_is_never_searched_or_listed() {
        let dir = tempfile::tempdir().expect("tempdir");
        let base = dir.path().canonicalize().expect("canonical");
        let (ws, notes) = (base.join("ws"), base.join("notes"));
        std::fs::create_dir_all(ws.join("private")).expect("private");
        std::fs::create_dir_all(&notes).expect("notes");
        std::fs::write(notes.join("diary.txt"), "HIDDEN-NOTE\n").expect("note");
        std::fs::write(ws.join("private/token.txt"), "HIDDEN-TOKEN\n").expect("token");
        std::fs::write(ws.join("open.txt"), "visible\n").expect("open");
        // Another session's private temporary folder, beside this one's.
        let other = tempfile::Builder::new()
            .prefix("talaria-999999-0-")
            .tempdir()
            .expect("other session");
        std::fs::write(other.path().join("scratch.txt"), "HIDDEN-SCRATCH\n").expect("scratch");
        std::os::unix::fs::symlink(other.path(), ws.join("peek")).expect("link");
        std::os::unix::fs::symlink(&notes, ws.join("peek2")).expect("link");
        std::os::unix::fs::symlink(notes.join("diary.txt"), ws.join("diary.txt")).expect("link");
        let ctx = sandboxed(&ws, vec![notes.clone(), ws.join("private")]);
        for path in ["peek", "peek2", "diary.txt", "private"] {
            for target in ["content", "files"] {
                let out = SearchFiles
                    .call(
                        json!({"pattern": if target == "files" { "*" } else { "HIDDEN" }, "path": path, "target": target}),
                        &ctx,
                    )
                    .await;
                assert_eq!(
                    out.status,
                    ToolStatus::Failed,
                    "{path} {target}: {}",
                    out.content
                );
                assert!(
                    out.content.contains("hid"),
                    "{path} {target}: {}",
                    out.content
                );
                assert!(!out.content.contains("HIDDEN-"), "{}", out.content);
                assert!(!out.content.contains("scratch"), "{}", out.content);
            }
        }
        // From the workspace's root: the hidden folder inside it is not walked, links are not
        // followed.
        let out = SearchFiles
            .call(json!({"pattern": "HIDDEN|visible"}), &ctx)
            .await;
        assert!(out.content.contains("open.txt"), "{}", out.content);
        assert!(!out.content.contains("HIDDEN-"), "{}", out.content);
        let listed = SearchFiles
            .call(json!({"pattern": "*", "target": "files"}), &ctx)
            .await;
        assert!(!listed.content.contains("token.txt"), "{}", listed.content);
        assert!(!listed.content.contains("scratch"), "{}", listed.content);
    }
}
