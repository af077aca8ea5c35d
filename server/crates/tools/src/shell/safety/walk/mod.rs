//! Walks the syntax tree: every simple command anywhere in it, with what feeds its input, the
//! redirects around it, the directory a static `cd` moved to and the variables assigned
//! before it.

mod dynamic;
mod expand;
mod floor;
mod nested;
mod programs;

use std::cell::RefCell;
use std::collections::{HashMap, HashSet};

use super::StartDir;

use tree_sitter::{Node, Parser, Tree};

use super::targets::Cwd;
use super::words::{Word, text};
use super::{CommandClass, ShellEnv};

/// Nested scripts (`sh -c`, `eval`, here-documents) deeper than this are not analysed.
const MAX_NESTING: usize = 8;
/// Syntax trees deeper than this are not analysed (bounded stack on hostile input).
const MAX_DEPTH: usize = 200;
/// Input longer than this is not analysed.
const MAX_INPUT: usize = 1024 * 1024;

thread_local! {
    static PARSER: RefCell<Option<Parser>> = const { RefCell::new(None) };
}

fn parse(source: &str) -> Option<Tree> {
    PARSER.with(|cell| {
        let mut slot = cell.borrow_mut();
        if slot.is_none() {
            let mut parser = Parser::new();
            parser
                .set_language(&tree_sitter_bash::LANGUAGE.into())
                .ok()?;
            *slot = Some(parser);
        }
        slot.as_mut()?.parse(source, None)
    })
}

/// Whether the last command of `node` is a `cd` or `pushd`.
fn ends_with_cd(node: Node, src: &str) -> bool {
    match node.kind() {
        "command" => node
            .child_by_field_name("name")
            .is_some_and(|name| matches!(text(name, src), "cd" | "pushd")),
        "redirected_statement" => node
            .child_by_field_name("body")
            .is_some_and(|body| ends_with_cd(body, src)),
        "list" => {
            let count = node.named_child_count();
            count > 0
                && node
                    .named_child(count - 1)
                    .is_some_and(|last| ends_with_cd(last, src))
        }
        _ => false,
    }
}

/// Bash's reserved words: never programs.
pub(super) const RESERVED: &[&str] = &[
    "if", "then", "else", "elif", "fi", "do", "done", "while", "until", "for", "select", "case",
    "esac", "in", "function", "!", "time", "[[", "]]", "{", "}", "coproc",
];

/// Splits at list separators, groups and `||`; at `|` too when `pipes` (else pipelines stay
/// whole, so `curl … | sh` is still seen).
fn fallback_pieces(source: &str, pipes: bool) -> Vec<&str> {
    let mut pieces = Vec::new();
    let mut start = 0;
    let bytes = source.as_bytes();
    let mut index = 0;
    while index < bytes.len() {
        let split = match bytes[index] {
            b';' | b'&' | b'\n' | b'(' | b')' | b'{' | b'}' | b'`' => 1,
            b'|' if bytes.get(index + 1) == Some(&b'|') => 2,
            b'|' if pipes => 1,
            _ => 0,
        };
        if split > 0 {
            pieces.push(&source[start..index]);
            start = index + split;
            index += split;
        } else {
            index += 1;
        }
    }
    pieces.push(&source[start..]);
    pieces
}

/// Rewrites `$IFS` as `${IFS}` where a name character does not follow.
fn spell_out_ifs(source: &str) -> std::borrow::Cow<'_, str> {
    if !source.contains("$IFS") {
        return std::borrow::Cow::Borrowed(source);
    }
    let mut out = String::with_capacity(source.len() + 8);
    let mut rest = source;
    while let Some(at) = rest.find("$IFS") {
        out.push_str(&rest[..at]);
        let after = &rest[at + 4..];
        if after.starts_with(|c: char| c.is_ascii_alphanumeric() || c == '_') {
            out.push_str("$IFS");
        } else {
            out.push_str("${IFS}");
        }
        rest = after;
    }
    out.push_str(rest);
    std::borrow::Cow::Owned(out)
}

/// What a command reads on standard input.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Feed {
    /// Nothing known and not a pipe (the terminal, a file).
    Opaque,
    /// Another program's output, through a pipe.
    Piped,
    /// Text known before the command runs (`echo …`, a here-document, `find ROOT`).
    Text(Word),
    /// Something downloaded.
    Fetched,
}

/// Walks one command (and the scripts nested in it), filling a [`CommandClass`].
pub(super) struct Walker<'e> {
    pub env: &'e ShellEnv,
    pub class: CommandClass,
    /// Variables assigned a literal value on every path so far (a best effort for the floor).
    pub vars: HashMap<String, String>,
    /// Variables whose value is only known at run time (`read`, loops, conditional
    /// assignments): they stand for anything, code included.
    pub tainted: HashSet<String>,
    pub functions: HashSet<String>,
    /// The functions whose bodies are being walked (a call to one is recursion).
    pub defining: Vec<String>,
    /// The directory commands run in now, as far as the walk can tell.
    pub cwd: Cwd,
    /// Other directories they may run in (a `cd` that may have failed, a branch not taken).
    pub alternatives: Vec<Cwd>,
    /// Where the command started.
    pub start: Cwd,
    /// `$OLDPWD` (for `cd -`) and the `pushd` stack.
    pub oldpwd: Cwd,
    pub dir_stack: Vec<Cwd>,
    /// Inside a branch, loop, function, pipeline or `&&`/`||` list: what happens here may not.
    pub conditional: usize,
    /// What a pipeline stage that is a subshell or group reads.
    pub inherited_feed: Option<Feed>,
    /// A program outside the read-only list ran, or output went to a file.
    pub writes: bool,
    nesting: usize,
    in_fallback: bool,
    /// A reserved word was read as a program: the grammar misread the structure.
    pub misread: bool,
}

impl<'e> Walker<'e> {
    pub fn new(env: &'e ShellEnv) -> Self {
        let start = match &env.start {
            StartDir::Project => Cwd::Session,
            StartDir::At(dir) => {
                super::targets::normalize(dir, &Cwd::Session).map_or(Cwd::Unknown, Cwd::Known)
            }
            StartDir::Unknown => Cwd::Unknown,
        };
        Self {
            env,
            class: CommandClass::default(),
            vars: HashMap::new(),
            tainted: HashSet::new(),
            functions: HashSet::new(),
            defining: Vec::new(),
            cwd: start.clone(),
            alternatives: Vec::new(),
            start,
            oldpwd: Cwd::Unknown,
            dir_stack: Vec::new(),
            conditional: 0,
            inherited_feed: None,
            writes: false,
            nesting: 0,
            in_fallback: false,
            misread: false,
        }
    }

    pub fn finish(mut self) -> CommandClass {
        self.class.scopes.sort();
        self.class.scopes.dedup();
        self.class.paths.sort();
        self.class.paths.dedup();
        self.class.read_only = !self.writes
            && self.class.floor.is_none()
            && self.class.unknown.is_none()
            && !self.class.scopes.is_empty();
        self.class
    }

    /// Moves to `dir`; the directory before stays possible (the move may fail).
    pub fn change_dir(&mut self, dir: Cwd) {
        let before = std::mem::replace(&mut self.cwd, dir);
        if before != self.cwd && !self.alternatives.contains(&before) {
            self.alternatives.push(before.clone());
        }
        self.oldpwd = before;
    }

    /// What `target` is under every directory the command may be in.
    pub fn protection(&self, target: &str) -> super::targets::Protection {
        use super::targets::{Protection, protection};
        let mut result = Protection::Safe;
        for cwd in std::iter::once(&self.cwd).chain(&self.alternatives) {
            match protection(target, cwd, self.env) {
                Protection::Protected(dir) => return Protection::Protected(dir),
                Protection::Unevaluable => result = Protection::Unevaluable,
                Protection::Safe => {}
            }
        }
        result
    }

    /// Walks `node` as a part that may or may not run: its directory changes and assignments
    /// stay possible, never certain.
    fn conditionally(&mut self, node: Node, src: &str, depth: usize) {
        let before = self.cwd.clone();
        self.conditional += 1;
        self.children(node, src, depth);
        self.conditional -= 1;
        if self.cwd != before && !self.alternatives.contains(&before) {
            self.alternatives.push(before);
        }
    }

    pub fn refuse(&mut self, why: impl Into<String>) {
        if self.class.floor.is_none() {
            self.class.floor = Some(why.into());
        }
    }

    pub fn mark_unknown(&mut self, why: impl Into<String>) {
        if self.class.unknown.is_none() {
            self.class.unknown = Some(why.into());
        }
    }

    /// Parses and walks a script (the command itself, or one nested in it).
    pub fn script(&mut self, source: &str) {
        if self.nesting > MAX_NESTING {
            self.mark_unknown("shell code nested too deeply to analyse");
            return;
        }
        if source.len() > MAX_INPUT {
            self.mark_unknown("the command is too long to analyse");
            return;
        }
        // The grammar reads `$IFS/` as `$` + `IFS/`; the braced form parses as bash means it.
        let source = spell_out_ifs(source);
        let Some(tree) = parse(&source) else {
            self.mark_unknown("the command could not be parsed");
            return;
        };
        let root = tree.root_node();
        self.nesting += 1;
        self.node(root, &source, 0);
        if root.has_error() {
            self.mark_unknown("the shell grammar reports a syntax error");
        }
        if (root.has_error() || std::mem::take(&mut self.misread)) && !self.in_fallback {
            self.fallback(&source);
        }
        self.nesting -= 1;
    }

    /// Where the grammar gave up, bash may still run the text: each piece between command
    /// separators is checked on its own, so the floor does not depend on a clean parse.
    fn fallback(&mut self, source: &str) {
        self.in_fallback = true;
        let saved = self.cwd.clone();
        let pieces = fallback_pieces(source, false)
            .into_iter()
            .chain(fallback_pieces(source, true));
        for piece in pieces {
            let mut rest = piece.trim();
            while let Some(keyword) = RESERVED.iter().find(|k| {
                rest.strip_prefix(**k)
                    .is_some_and(|after| after.is_empty() || after.starts_with(char::is_whitespace))
            }) {
                rest = rest[keyword.len()..].trim_start();
            }
            if !rest.is_empty() {
                self.script(rest);
            }
        }
        self.cwd = saved;
        self.in_fallback = false;
    }

    fn children(&mut self, node: Node, src: &str, depth: usize) {
        let mut cursor = node.walk();
        let children: Vec<Node> = node.named_children(&mut cursor).collect();
        for child in children {
            self.node(child, src, depth + 1);
        }
    }

    fn node(&mut self, node: Node, src: &str, depth: usize) {
        if depth > MAX_DEPTH {
            self.mark_unknown("the command nests too deeply to analyse");
            return;
        }
        match node.kind() {
            "command" => {
                self.command(node, src, &[], Feed::Opaque, depth);
            }
            "redirected_statement" => {
                self.redirected(node, src, Feed::Opaque, depth);
            }
            "pipeline" => {
                self.conditional += 1;
                self.pipeline(node, src, depth);
                self.conditional -= 1;
            }
            "subshell" => {
                let saved = (self.cwd.clone(), self.alternatives.clone());
                self.conditional += 1;
                self.children(node, src, depth);
                self.conditional -= 1;
                (self.cwd, self.alternatives) = saved;
            }
            "function_definition" => self.function(node, src, depth),
            "variable_assignment" => {
                self.assign(node, src);
                self.children(node, src, depth);
            }
            "declaration_command" => self.declaration(node, src, depth),
            "unset_command" => {
                let mut cursor = node.walk();
                let names: Vec<String> = node
                    .named_children(&mut cursor)
                    .map(|n| text(n, src).to_string())
                    .filter(|n| !n.starts_with('-'))
                    .collect();
                for name in names {
                    self.assigned(&name, None);
                }
            }
            "for_statement" | "select_statement" => {
                if let Some(variable) = node.child_by_field_name("variable") {
                    self.taint(text(variable, src));
                }
                self.conditionally(node, src, depth);
            }
            "if_statement"
            | "while_statement"
            | "until_statement"
            | "case_statement"
            | "c_style_for_statement"
            | "negated_command" => {
                self.conditionally(node, src, depth);
            }
            "list" => self.list(node, src, depth),
            "compound_statement" if text(node, src).starts_with("((") => {
                self.arithmetic(node, src);
                self.conditionally(node, src, depth);
            }
            "arithmetic_expansion" => {
                self.arithmetic(node, src);
                self.children(node, src, depth);
            }
            "subscript" => {
                if let Some(index) = node.child_by_field_name("index") {
                    self.arithmetic(index, src);
                }
                self.children(node, src, depth);
            }
            "test_command" => {
                self.numeric_test(node, src);
                self.children(node, src, depth);
            }
            "ERROR" => {
                self.mark_unknown("the shell grammar reports a syntax error");
                self.children(node, src, depth);
            }
            _ => self.children(node, src, depth),
        }
    }

    /// `name=value`: remembered when the value is literal and the assignment happens on every
    /// path; otherwise the variable stands for anything from here on.
    pub(super) fn assign(&mut self, node: Node, src: &str) {
        let (Some(name), value) = (
            node.child_by_field_name("name"),
            node.child_by_field_name("value"),
        ) else {
            return;
        };
        let name = text(name, src).to_string();
        let word = value.map(|v| self.word(v, src, true));
        self.assigned(&name, word);
    }

    /// Records an assignment of `word` (`None`: empty) to `name`.
    pub(super) fn assigned(&mut self, name: &str, word: Option<Word>) {
        if crate::shell::safety::variables::runs_code(name)
            && word.as_ref().is_some_and(|w| !w.text.is_empty())
        {
            self.mark_unknown(format!("`{name}` makes the shell run code from a variable"));
        }
        if crate::shell::safety::variables::changes_programs(name) && self.class.unscoped.is_none()
        {
            self.class.unscoped = Some(format!(
                "it sets `{name}`, which changes which program runs or how it is configured"
            ));
        }
        match word {
            Some(word) if word.text.contains(super::words::UNKNOWN) || self.conditional > 0 => {
                self.taint(name);
            }
            Some(word) => {
                self.tainted.remove(name);
                self.vars.insert(name.to_string(), word.text);
            }
            None if self.conditional > 0 => self.taint(name),
            None => {
                self.tainted.remove(name);
                self.vars.insert(name.to_string(), String::new());
            }
        }
    }

    /// `export`/`declare`/`local`/`readonly`/`typeset`: assignments, and with `-i` values
    /// evaluated as arithmetic.
    fn declaration(&mut self, node: Node, src: &str, depth: usize) {
        let mut cursor = node.walk();
        let parts: Vec<Node> = node.named_children(&mut cursor).collect();
        let integer = parts.iter().any(|p| {
            p.kind() == "word" && text(*p, src).starts_with('-') && text(*p, src).contains('i')
        });
        for part in &parts {
            match part.kind() {
                "variable_assignment" => {
                    self.assign(*part, src);
                    if integer && let Some(value) = part.child_by_field_name("value") {
                        let value = self.word(value, src, false);
                        self.arithmetic_text(&value.text.replace(super::words::UNKNOWN, "$("));
                    }
                }
                "variable_name" | "word" => {
                    let name = text(*part, src);
                    if !name.starts_with('-')
                        && crate::shell::safety::variables::changes_programs(name)
                    {
                        self.assigned(name, None);
                    }
                }
                _ => {}
            }
        }
        self.children(node, src, depth);
    }

    /// `a && b`, `a || b`: `b` may not run. After `cd DIR &&` the directory is certain.
    fn list(&mut self, node: Node, src: &str, depth: usize) {
        let mut cursor = node.walk();
        let parts: Vec<Node> = node.children(&mut cursor).collect();
        let Some((first, rest)) = parts.split_first() else {
            return;
        };
        self.node(*first, src, depth + 1);
        let mut previous = *first;
        let mut operator = "";
        for part in rest {
            if !part.is_named() {
                operator = text(*part, src);
                continue;
            }
            let before = self.cwd.clone();
            self.conditional += 1;
            if operator == "&&" && ends_with_cd(previous, src) {
                let unsure = std::mem::take(&mut self.alternatives);
                self.node(*part, src, depth + 1);
                for cwd in unsure {
                    if !self.alternatives.contains(&cwd) {
                        self.alternatives.push(cwd);
                    }
                }
            } else {
                self.node(*part, src, depth + 1);
            }
            self.conditional -= 1;
            if self.cwd != before && !self.alternatives.contains(&before) {
                self.alternatives.push(before);
            }
            previous = *part;
        }
    }

    fn function(&mut self, node: Node, src: &str, depth: usize) {
        let name = node
            .child_by_field_name("name")
            .map(|n| text(n, src).to_string())
            .unwrap_or_default();
        self.functions.insert(name.clone());
        // A function defined inside another of the same name shadows it: calls after it are
        // not recursion.
        for outer in self.defining.iter_mut().filter(|outer| **outer == name) {
            outer.clear();
        }
        self.defining.push(name);
        let saved = (self.cwd.clone(), self.alternatives.clone());
        self.conditional += 1;
        if let Some(body) = node.child_by_field_name("body") {
            self.node(body, src, depth + 1);
        }
        self.conditional -= 1;
        (self.cwd, self.alternatives) = saved;
        self.defining.pop();
    }

    /// Stages of a pipeline, each fed what the one before it printed.
    fn pipeline(&mut self, node: Node, src: &str, depth: usize) {
        let mut cursor = node.walk();
        let stages: Vec<Node> = node.named_children(&mut cursor).collect();
        let mut feed = Feed::Opaque;
        let saved = (self.cwd.clone(), self.alternatives.clone());
        for stage in stages {
            feed = self.stage(stage, src, feed, depth + 1);
        }
        (self.cwd, self.alternatives) = saved;
    }

    /// One pipeline stage; returns what it prints.
    fn stage(&mut self, node: Node, src: &str, feed: Feed, depth: usize) -> Feed {
        let fetched = feed == Feed::Fetched;
        let out = match node.kind() {
            "command" => self.command(node, src, &[], feed, depth),
            "redirected_statement" => self.redirected(node, src, feed, depth),
            "negated_command" => match node.named_child(0) {
                Some(inner) => self.stage(inner, src, feed, depth + 1),
                None => Feed::Opaque,
            },
            _ => {
                // `curl … | (sh)`, `… | { bash; }`: the commands inside read the pipe.
                let outer = self.inherited_feed.replace(feed);
                self.node(node, src, depth);
                self.inherited_feed = outer;
                Feed::Opaque
            }
        };
        // Downloaded bytes stay suspect through filters (`curl … | tee x | sh`).
        match out {
            _ if fetched => Feed::Fetched,
            Feed::Opaque => Feed::Piped,
            other => other,
        }
    }

    /// A statement with redirects (and here-documents, which may carry the rest of a
    /// pipeline: `cat <<EOF | sh`).
    fn redirected(&mut self, node: Node, src: &str, feed: Feed, depth: usize) -> Feed {
        let mut cursor = node.walk();
        let redirects: Vec<Node> = node
            .children_by_field_name("redirect", &mut cursor)
            .collect();
        let out = match node.child_by_field_name("body") {
            Some(body) if body.kind() == "command" => {
                self.command(body, src, &redirects, feed, depth + 1)
            }
            Some(body) => {
                self.node(body, src, depth + 1);
                for redirect in &redirects {
                    self.redirect_target(*redirect, src);
                }
                Feed::Opaque
            }
            None => Feed::Opaque,
        };
        // What follows a here-document's start on its line (`| sh`, `&& …`).
        let mut out = Some(out);
        for redirect in redirects {
            let mut cursor = redirect.walk();
            let rest: Vec<Node> = redirect
                .named_children(&mut cursor)
                .filter(|c| !c.kind().starts_with("heredoc") && c.kind() != "file_descriptor")
                .collect();
            for part in rest {
                if part.kind() == "pipeline" {
                    let mut feed = out.take().unwrap_or(Feed::Opaque);
                    let mut cursor = part.walk();
                    let stages: Vec<Node> = part.named_children(&mut cursor).collect();
                    for stage in stages {
                        feed = self.stage(stage, src, feed, depth + 1);
                    }
                } else if redirect.kind() == "heredoc_redirect" {
                    self.node(part, src, depth + 1);
                }
            }
        }
        out.unwrap_or(Feed::Opaque)
    }

    /// The words of a command node: its name and arguments, in order.
    pub(super) fn command_words(&self, node: Node, src: &str) -> Vec<Word> {
        let mut words = Vec::new();
        let mut cursor = node.walk();
        for (index, child) in node.children(&mut cursor).enumerate() {
            let field = u32::try_from(index)
                .ok()
                .and_then(|i| node.field_name_for_child(i));
            if matches!(field, Some("name" | "argument")) {
                words.extend(self.words(child, src));
            }
        }
        words
    }

    /// A simple command: its words, redirects and input; returns what it prints.
    fn command(
        &mut self,
        node: Node,
        src: &str,
        outer_redirects: &[Node],
        feed: Feed,
        depth: usize,
    ) -> Feed {
        let argv = self.command_words(node, src);
        let mut cursor = node.walk();
        let mut redirects: Vec<Node> = node
            .children_by_field_name("redirect", &mut cursor)
            .collect();
        redirects.extend_from_slice(outer_redirects);
        let mut input = match (&feed, &self.inherited_feed) {
            (Feed::Opaque, Some(inherited)) => inherited.clone(),
            _ => feed,
        };
        let mut from_heredoc = false;
        for redirect in &redirects {
            if let Some(body) = self.redirect_target(*redirect, src) {
                input = Feed::Text(body);
                from_heredoc = true;
            }
        }
        let out = self.run(argv, input, from_heredoc, depth);
        // Commands inside substitutions and here-document bodies.
        self.children(node, src, depth);
        for redirect in outer_redirects {
            let mut cursor = redirect.walk();
            let bodies: Vec<Node> = redirect
                .named_children(&mut cursor)
                .filter(|c| c.kind() == "heredoc_body" || c.kind() == "file_redirect")
                .collect();
            for body in bodies {
                self.children(body, src, depth);
            }
        }
        out
    }

    /// Checks one redirect and records its path; returns the text it feeds on standard input
    /// when it is a here-document or here-string.
    fn redirect_target(&mut self, node: Node, src: &str) -> Option<Word> {
        match node.kind() {
            "heredoc_redirect" => {
                let mut cursor = node.walk();
                let body = node
                    .named_children(&mut cursor)
                    .find(|c| c.kind() == "heredoc_body");
                Some(match body {
                    Some(body) => {
                        let mut cursor = body.walk();
                        let expands = body
                            .named_children(&mut cursor)
                            .any(|c| c.kind() != "heredoc_content");
                        Word {
                            text: text(body, src).to_string(),
                            exact: !expands,
                            fetched: super::words::contains_fetcher(body, src),
                        }
                    }
                    None => Word::literal(""),
                })
            }
            "herestring_redirect" => {
                let mut cursor = node.walk();
                let value = node.named_children(&mut cursor).last()?;
                Some(self.word(value, src, true))
            }
            "file_redirect" => {
                let destination = node.child_by_field_name("destination")?;
                let target = self.word(destination, src, true);
                let operator = (0..node.child_count())
                    .filter_map(|i| node.child(i))
                    .find(|c| !c.is_named())
                    .map(|c| text(c, src))
                    .unwrap_or("");
                if operator.contains('>') && floor::is_block_device(&target.text) {
                    self.refuse(format!("writing to the block device {}", target.shown()));
                }
                if operator.contains('>') && floor::is_kernel_trigger(&target.text) {
                    self.refuse("writing to /proc/sysrq-trigger (it can stop the machine)");
                }
                if operator.contains('>')
                    && !operator.contains('&')
                    && !matches!(
                        target.text.as_str(),
                        "/dev/null" | "/dev/stdout" | "/dev/stderr"
                    )
                {
                    self.writes = true;
                }
                if !operator.contains('&') || operator == "&>" || operator == "&>>" {
                    self.record_path(&target);
                }
                None
            }
            _ => None,
        }
    }
}
