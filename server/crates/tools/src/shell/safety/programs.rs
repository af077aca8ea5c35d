//! What a simple command runs: wrappers seen through (`sudo`, `env`, `xargs`, `find -exec`,
//! …), scripts nested in strings (`sh -c`, `eval`, `trap`, here-documents and pipes into a
//! shell), `cd` followed, and the approval scope of the program that finally runs.

use super::floor;
use super::walk::{Cwd, Feed, Walker};
use super::words::{FETCHERS, UNKNOWN, Word, basename};

/// Programs that only read (with the arguments `reads_only` checks): a command made of them
/// alone, with no output redirected into a file, is harmless without a sandbox.
const READ_ONLY: &[&str] = &[
    "ls",
    "cat",
    "head",
    "tail",
    "wc",
    "grep",
    "egrep",
    "fgrep",
    "rg",
    "find",
    "pwd",
    "echo",
    "printf",
    "which",
    "type",
    "file",
    "stat",
    "du",
    "df",
    "tree",
    "sort",
    "uniq",
    "cut",
    "tr",
    "diff",
    "cmp",
    "basename",
    "dirname",
    "realpath",
    "readlink",
    "date",
    "id",
    "whoami",
    "uname",
    "hostname",
    "true",
    "false",
    "test",
    "[",
    "nl",
    "column",
    "od",
    "hexdump",
    "md5sum",
    "sha1sum",
    "sha256sum",
    "sha512sum",
    "seq",
    "sleep",
    "printenv",
    "jq",
    "ps",
    "cd",
    "less",
    "more",
    "env",
];
/// Subcommands of `git` that only read.
const GIT_READ_ONLY: &[&str] = &[
    "git status",
    "git log",
    "git diff",
    "git show",
    "git rev-parse",
    "git ls-files",
    "git blame",
    "git describe",
    "git shortlog",
    "git grep",
    "git cat-file",
    "git ls-tree",
];

/// Whether `program` with `args` only reads.
fn reads_only(scope: &str, program: &str, args: &[Word]) -> bool {
    let has = |flags: &[&str]| args.iter().any(|a| flags.contains(&a.text.as_str()));
    match program {
        "git" => GIT_READ_ONLY.contains(&scope),
        "find" => !args.iter().any(|a| {
            a.text.starts_with("-exec")
                || a.text.starts_with("-ok")
                || a.text.starts_with("-fprint")
                || matches!(a.text.as_str(), "-delete" | "-fls")
        }),
        "sort" => !has(&["-o"]) && !args.iter().any(|a| a.text.starts_with("--output")),
        "env" => args.iter().all(|a| a.text.starts_with('-')),
        p => READ_ONLY.contains(&p),
    }
}

/// Programs that name other programs as data (`which rm`, `man mkfs`): their arguments are
/// never scanned for floor commands.
const NAMES_PROGRAMS: &[&str] = &[
    "echo",
    "printf",
    "which",
    "type",
    "whereis",
    "man",
    "info",
    "help",
    "whatis",
    "apropos",
    "dpkg",
    "apt",
    "apt-get",
    "apt-cache",
    "brew",
    "pacman",
    "dnf",
    "yum",
    "rpm",
    "snap",
    "pkill",
    "pgrep",
    "killall",
    "pidof",
    "grep",
    "egrep",
    "fgrep",
    "rg",
    "ag",
    "ack",
    "locate",
    "find",
    "printenv",
    "ls",
    "file",
    "stat",
    "cat",
    "less",
    "more",
    "head",
    "tail",
    "strings",
    "git",
    "jq",
    "sed",
    "awk",
    "tldr",
    "ps",
    "cd",
    "test",
    "[",
    "command",
    "hash",
    "alias",
    "complete",
    "compgen",
    "declare",
    "typeset",
    "export",
    "local",
    "readonly",
    "unset",
    "read",
];

/// Programs the floor has rules for; after an unknown wrapper their words are checked too.
const FLOOR_NAMES: &[&str] = &[
    "rm",
    "mv",
    "chmod",
    "chown",
    "chgrp",
    "dd",
    "shred",
    "kill",
    "shutdown",
    "reboot",
    "halt",
    "poweroff",
    "systemctl",
    "loginctl",
    "init",
    "telinit",
    "wipefs",
    "blkdiscard",
    "fdisk",
    "sfdisk",
    "parted",
    "gdisk",
    "sgdisk",
    "cfdisk",
    "mkswap",
    "mke2fs",
    "mkdosfs",
    "cryptsetup",
    "zpool",
    "mdadm",
    "find",
    "tee",
    "cp",
];

/// Device paths through which a program reads its own standard input.
fn is_stdin_path(text: &str) -> bool {
    matches!(text, "/dev/stdin" | "-")
        || text.starts_with("/dev/fd/")
        || text.starts_with("/proc/self/fd/")
        || text.starts_with("/proc/thread-self/fd/")
}

/// `git -c KEY=VALUE` keys that never run a program.
const SAFE_GIT_KEYS: &[&str] = &[
    "user.name",
    "user.email",
    "color.",
    "core.quotepath",
    "core.autocrlf",
    "core.safecrlf",
    "init.defaultbranch",
    "advice.",
    "commit.gpgsign",
    "tag.gpgsign",
    "pull.rebase",
    "pull.ff",
    "push.default",
    "log.",
    "status.",
    "safe.directory",
    "protocol.version",
    "fetch.prune",
    "merge.ff",
    "diff.renames",
    "diff.noprefix",
    "column.ui",
    "i18n.",
];

pub(super) const SHELLS: &[&str] = &["sh", "bash", "zsh", "dash", "ksh", "fish", "ash", "mksh"];
const INTERPRETERS: &[&str] = &[
    "python", "python2", "python3", "perl", "ruby", "node", "php", "lua", "deno", "bun",
];
/// Programs whose first non-option argument is a subcommand worth scoping by.
const MULTIPLEXERS: &[&str] = &[
    "git",
    "cargo",
    "npm",
    "pnpm",
    "yarn",
    "bun",
    "deno",
    "docker",
    "podman",
    "kubectl",
    "go",
    "pip",
    "pip3",
    "uv",
    "poetry",
    "apt",
    "apt-get",
    "brew",
    "make",
    "systemctl",
    "gh",
    "rustup",
    "bundle",
    "rake",
    "mvn",
    "gradle",
    "dotnet",
    "terraform",
    "helm",
    "conda",
    "composer",
];
/// Commands nested deeper than this inside wrappers are not analysed.
const MAX_WRAPPERS: usize = 32;

pub(super) fn is_interpreter(program: &str) -> bool {
    INTERPRETERS.contains(&program)
        || program
            .strip_prefix("python")
            .is_some_and(|v| v.chars().all(|c| c.is_ascii_digit() || c == '.'))
}

pub(super) fn is_assignment(text: &str) -> bool {
    match text.split_once('=') {
        Some((name, _)) => {
            !name.is_empty()
                && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                && !name.starts_with(|c: char| c.is_ascii_digit())
        }
        None => false,
    }
}

/// Counts the option words (and the values of `with_value` options) at the start of `args`.
pub(super) fn skip_options(args: &[Word], with_value: &[&str]) -> usize {
    let mut n = 0;
    while n < args.len() {
        let text = args[n].text.as_str();
        if text == "--" {
            return n + 1;
        }
        if !text.starts_with('-') || text == "-" {
            break;
        }
        n += if with_value.contains(&text) { 2 } else { 1 };
    }
    n.min(args.len())
}

/// The value of `flag` among `args` (`-c 'script'`), for programs taking a script string.
fn script_flag(args: &[Word], short: char) -> Option<&Word> {
    let position = args.iter().position(|w| {
        let t = w.text.as_str();
        t.starts_with('-') && !t.starts_with("--") && t[1..].contains(short)
    })?;
    args[position + 1..]
        .iter()
        .find(|w| !w.text.starts_with('-') || w.text == "-")
}

impl Walker<'_> {
    /// Records the path-like words of a command, for the policy's credential checks.
    pub(super) fn record_path(&mut self, word: &Word) {
        let mut text = word.text.replace(UNKNOWN, "*");
        if let Some((_, value)) = text.split_once('=')
            && text.starts_with('-')
        {
            text = value.to_string();
        }
        if text.is_empty() || (text.starts_with('-') && !text.contains('/')) {
            return;
        }
        let resolved = match (&self.cwd, text.starts_with('/')) {
            (Cwd::Known(dir), false) => format!("{dir}/{text}"),
            _ => text,
        };
        self.class.paths.push(resolved);
    }

    fn add_scope(&mut self, program: &str, args: &[Word]) {
        let scope = if MULTIPLEXERS.contains(&program) {
            let mut rest = args;
            // `git -C dir push`, `git -c k=v push`.
            while let Some((first, tail)) = rest.split_first() {
                if matches!(first.text.as_str(), "-C" | "-c") && program == "git" {
                    rest = tail.get(1..).unwrap_or(&[]);
                } else if first.text.starts_with('-') || first.text.starts_with('+') {
                    rest = tail;
                } else {
                    break;
                }
            }
            match rest.first() {
                Some(sub) if sub.exact => format!("{program} {}", sub.text),
                _ => program.to_string(),
            }
        } else {
            program.to_string()
        };
        self.class.scopes.push(scope);
    }

    /// Classifies shell code given as a string (`sh -c`, `eval`, `trap`, …).
    fn nested(&mut self, code: &Word, what: &str) {
        if code.fetched {
            self.refuse(format!("downloaded code run by {what} (download-and-run)"));
        }
        if !code.exact {
            self.mark_unknown(format!(
                "{what} runs code only known at run time (`{}`)",
                code.shown()
            ));
        }
        let saved = self.cwd.clone();
        self.script(&code.text.replace(UNKNOWN, " "));
        self.cwd = saved;
    }

    /// A shell or interpreter that reads its program from standard input.
    fn reads_program_from(&mut self, program: &str, input: &Feed, from_heredoc: bool) {
        let source = if from_heredoc {
            "a here-document"
        } else {
            "a pipe"
        };
        match input {
            Feed::Fetched => self.refuse(format!(
                "downloaded code piped into `{program}` (download-and-run)"
            )),
            Feed::Text(code) => {
                if code.fetched {
                    self.refuse(format!(
                        "downloaded code fed to `{program}` (download-and-run)"
                    ));
                }
                self.mark_unknown(format!("`{program}` reads its program from {source}"));
                if SHELLS.contains(&program) {
                    let saved = self.cwd.clone();
                    self.script(&code.text.replace(UNKNOWN, " "));
                    self.cwd = saved;
                }
            }
            Feed::Opaque if !from_heredoc => {}
            Feed::Opaque | Feed::Piped => {
                self.mark_unknown(format!("`{program}` reads its program from {source}"));
            }
        }
    }

    /// Resolves and checks one simple command; returns what it prints on standard output.
    pub(super) fn run(
        &mut self,
        mut argv: Vec<Word>,
        input: Feed,
        from_heredoc: bool,
        depth: usize,
    ) -> Feed {
        // Leading assignments: `FOO=1 cmd` (they reach the program, not the shell).
        while argv.first().is_some_and(|w| is_assignment(&w.text)) {
            let word = argv.remove(0);
            self.prefix_assignment(&word.text);
        }
        let piped = !matches!(input, Feed::Opaque) || from_heredoc;
        let mut outer_cwd = None;
        let fed = self.run_wrapped(argv, input, from_heredoc, piped, depth, &mut outer_cwd);
        // A wrapper's `--chdir` moved only the program it ran.
        if let Some(cwd) = outer_cwd {
            self.cwd = cwd;
        }
        fed
    }

    /// An assignment that reaches one program's environment (`FOO=1 cmd`, `env FOO=1 cmd`).
    fn prefix_assignment(&mut self, text: &str) {
        let name = text.split('=').next().unwrap_or(text);
        if super::dynamic::runs_code(name) {
            self.mark_unknown(format!("`{name}` makes the shell run code from a variable"));
        }
        if super::dynamic::changes_programs(name) && self.class.unscoped.is_none() {
            self.class.unscoped = Some(format!(
                "it sets `{name}`, which changes which program runs or how it is configured"
            ));
        }
    }

    /// Sees through wrappers to the program that finally runs.
    // One loop that peels wrappers in the order the shell applies them (program name,
    // keyword, `command -v`, `env` assignments and `-S`, directory changes, the wrapped
    // argv): split up, the order the floor's checks rely on would be spread over several
    // functions and their shared state.
    #[allow(clippy::too_many_lines)]
    fn run_wrapped(
        &mut self,
        mut argv: Vec<Word>,
        input: Feed,
        from_heredoc: bool,
        piped: bool,
        depth: usize,
        outer_cwd: &mut Option<Cwd>,
    ) -> Feed {
        for _ in 0..MAX_WRAPPERS {
            let Some(first) = argv.first() else {
                return Feed::Opaque;
            };
            if !first.exact {
                self.mark_unknown(format!(
                    "the program name `{}` is only known at run time",
                    first.shown()
                ));
            }
            // `$(echo rm -rf)` may stand for several words.
            if first.text.contains(' ') && !first.exact {
                let split: Vec<Word> = first
                    .text
                    .split_whitespace()
                    .map(|t| Word {
                        text: t.to_string(),
                        exact: false,
                        fetched: first.fetched,
                    })
                    .collect();
                argv.splice(0..1, split);
                continue;
            }
            let program = basename(&argv[0].text).to_string();
            if program.contains(UNKNOWN) || program.is_empty() {
                return Feed::Opaque;
            }
            if argv[0].exact
                && super::walk::RESERVED.contains(&argv[0].text.as_str())
                && program != "time"
            {
                // The grammar read a keyword as a program: its structure cannot be trusted.
                self.misread = true;
                self.mark_unknown(format!(
                    "`{program}` was read as a program, so the command's structure is unclear"
                ));
                return Feed::Opaque;
            }
            let args = argv[1..].to_vec();
            let Some(wrapper) = super::wrappers::wrapper(&program, &args) else {
                return self.program(&program, &args, input, from_heredoc, piped, depth);
            };
            if program == "command"
                && args
                    .first()
                    .is_some_and(|a| a.text.starts_with("-v") || a.text.starts_with("-V"))
            {
                self.add_scope(&program, &args);
                return Feed::Opaque;
            }
            if let Some(why) = wrapper.unscoped
                && self.class.unscoped.is_none()
            {
                self.class.unscoped = Some(format!("`{program}`: {why}"));
            }
            if program == "env" {
                for word in args[..wrapper.skip]
                    .iter()
                    .filter(|w| is_assignment(&w.text))
                {
                    self.prefix_assignment(&word.text);
                }
            }
            if let Some(dir) = &wrapper.chdir {
                outer_cwd.get_or_insert_with(|| self.cwd.clone());
                self.cwd = if dir.exact || !dir.text.contains(UNKNOWN) {
                    self.dir_after(&dir.text)
                } else {
                    Cwd::Unknown
                };
            }
            if program == "env"
                && let Some(pos) = args
                    .iter()
                    .position(|a| a.text == "-S" || a.text == "--split-string")
                && let Some(split) = args.get(pos + 1)
            {
                // `env -S 'rm -rf /'`: the string is split into the command.
                let mut words: Vec<Word> = split
                    .text
                    .split_whitespace()
                    .map(|t| Word {
                        text: t.to_string(),
                        exact: split.exact,
                        fetched: split.fetched,
                    })
                    .collect();
                words.extend(args[wrapper.skip..].iter().cloned());
                argv = words;
                continue;
            }
            let mut inner = args[wrapper.skip..].to_vec();
            if inner.is_empty() {
                self.add_scope(&program, &args);
                self.writes |= !reads_only(&program, &program, &args);
                return Feed::Opaque;
            }
            if program == "xargs" {
                self.xargs_input(&args[..wrapper.skip], &mut inner, &input);
            }
            self.writes |= program != "command" && program != "builtin";
            argv = inner;
        }
        self.mark_unknown("too many nested wrappers to analyse");
        Feed::Opaque
    }

    /// `echo / | xargs rm -rf`: what xargs reads becomes the command's arguments.
    fn xargs_input(&mut self, options: &[Word], inner: &mut Vec<Word>, input: &Feed) {
        let Feed::Text(text) = input else {
            // Arguments read from a pipe or a file: only known at run time.
            inner.push(Word {
                text: UNKNOWN.to_string(),
                exact: false,
                fetched: matches!(input, Feed::Fetched),
            });
            return;
        };
        let fed: Vec<Word> = text
            .text
            .split_whitespace()
            .take(64)
            .map(|t| Word {
                text: t.to_string(),
                exact: false,
                fetched: text.fetched,
            })
            .collect();
        let replace = options
            .iter()
            .position(|o| o.text == "-I")
            .and_then(|i| options.get(i + 1))
            .map(|w| w.text.clone());
        match replace {
            Some(token) => {
                if let Some(first) = fed.first() {
                    for word in inner.iter_mut().skip(1) {
                        if word.text.contains(&token) {
                            word.text = word.text.replace(&token, &first.text);
                            word.exact = false;
                        }
                    }
                }
            }
            None => inner.extend(fed),
        }
    }

    /// The program that finally runs.
    fn program(
        &mut self,
        program: &str,
        args: &[Word],
        input: Feed,
        from_heredoc: bool,
        piped: bool,
        depth: usize,
    ) -> Feed {
        if self.note_program(program, args, depth) {
            // A call of a function defined in the command: its body was walked.
            return Feed::Opaque;
        }
        let fetched_arg = args.iter().any(|a| a.fetched);
        let code = CodeInput {
            input: &input,
            from_heredoc,
            fetched_arg,
        };
        match program {
            "cd" | "pushd" | "popd" => {
                self.change_directory(program, args);
                Feed::Opaque
            }
            "unset" => {
                for name in args.iter().filter(|a| !a.text.starts_with('-')) {
                    self.tainted.remove(&name.text);
                    self.vars.insert(name.text.clone(), String::new());
                }
                Feed::Opaque
            }
            "git" => {
                self.git_options(args);
                Feed::Opaque
            }
            "echo" | "printf" => {
                let printed: Vec<&str> = args
                    .iter()
                    .map(|a| a.text.as_str())
                    .filter(|t| !t.starts_with('-'))
                    .collect();
                Feed::Text(Word {
                    text: printed.join(" "),
                    exact: args.iter().all(|a| a.exact),
                    fetched: fetched_arg,
                })
            }
            "cat" if args.is_empty() => match input {
                Feed::Opaque if !piped => Feed::Opaque,
                other => other,
            },
            "find" => self.find(args, depth),
            "eval" => {
                let code = join(args);
                self.nested(&code, "eval");
                Feed::Opaque
            }
            "source" | "." => self.source(program, args, &code),
            "trap" => {
                if let Some(code) = args.iter().find(|a| !a.text.starts_with('-')) {
                    self.nested(code, "trap");
                }
                Feed::Opaque
            }
            "su" | "runuser" | "script" => {
                if let Some(code) = script_flag(args, 'c') {
                    self.nested(code, &format!("`{program} -c`"));
                }
                Feed::Opaque
            }
            "watch" => {
                let skip = skip_options(args, &["-n", "--interval", "-d"]);
                if skip < args.len() {
                    self.nested(&join(&args[skip..]), "`watch`");
                }
                Feed::Opaque
            }
            p if SHELLS.contains(&p) => self.shell(p, args, &code),
            p if is_interpreter(p) => self.interpreter(p, args, &code),
            p if FETCHERS.contains(&p) => Feed::Fetched,
            _ => Feed::Opaque,
        }
    }

    /// What every program's words say, whatever the program: the paths it names, a fork
    /// bomb's shape, its scope and whether it writes, the floor, code hidden in its
    /// arguments, variables it assigns. `true` when it is a function the command defined.
    fn note_program(&mut self, program: &str, args: &[Word], depth: usize) -> bool {
        for arg in args {
            self.record_path(arg);
        }
        if self.defining.iter().any(|f| f == program) {
            self.refuse(format!(
                "a self-replicating shell function (`{program}`), the shape of a fork bomb"
            ));
        }
        if self.functions.contains(program) {
            return true;
        }
        self.add_scope(program, args);
        if let Some(scope) = self.class.scopes.last().cloned() {
            self.writes |= !reads_only(&scope, program, args);
        }
        floor::check(self, program, args);
        if !NAMES_PROGRAMS.contains(&program) {
            self.scan_for_floor(args, depth);
        }
        let texts: Vec<&str> = args.iter().map(|a| a.text.as_str()).collect();
        if let Some(why) = super::dynamic::hides_code(program, &texts) {
            self.mark_unknown(why);
        }
        for name in super::dynamic::assigned_by(program, args) {
            self.taint(&name);
        }
        false
    }

    /// `source FILE` / `. FILE`: runs the file's code in this shell.
    fn source(&mut self, program: &str, args: &[Word], code: &CodeInput<'_>) -> Feed {
        if code.fetched_arg {
            self.refuse(format!(
                "downloaded code run by `{program}` (download-and-run)"
            ));
        }
        match args.first() {
            Some(file) if is_stdin_path(&file.text) => {
                self.reads_program_from(program, code.input, code.from_heredoc);
            }
            Some(file) if file.exact => {}
            Some(file) => self.mark_unknown(format!(
                "`{program}` of a file only known at run time (`{}`)",
                file.shown()
            )),
            None => self.reads_program_from(program, code.input, code.from_heredoc),
        }
        Feed::Opaque
    }

    /// A shell: `-c CODE` is walked, a script file is read, else it reads its program from
    /// its input.
    fn shell(&mut self, p: &str, args: &[Word], code: &CodeInput<'_>) -> Feed {
        if code.fetched_arg {
            self.refuse(format!("downloaded code run by `{p}` (download-and-run)"));
        }
        if let Some(script) = script_flag(args, 'c') {
            self.nested(script, &format!("`{p} -c`"));
        } else if args
            .iter()
            .all(|a| a.text.starts_with('-') && a.text != "-")
        {
            self.reads_program_from(p, code.input, code.from_heredoc);
        } else {
            self.script_file(p, args, code.input, code.from_heredoc);
        }
        Feed::Opaque
    }

    /// An interpreter (python, node, …): a program from its input, or a script only known
    /// at run time, cannot be analysed.
    fn interpreter(&mut self, p: &str, args: &[Word], code: &CodeInput<'_>) -> Feed {
        if code.fetched_arg {
            self.refuse(format!("downloaded code run by `{p}` (download-and-run)"));
        }
        let has_script = args
            .iter()
            .any(|a| !a.text.starts_with('-') || a.text == "-c" || a.text == "-e");
        if !has_script || args.iter().any(|a| is_stdin_path(&a.text)) {
            self.reads_program_from(p, code.input, code.from_heredoc);
        } else if let Some(script) = args.iter().find(|a| !a.text.starts_with('-'))
            && script.text.contains(UNKNOWN)
            && !args
                .iter()
                .any(|a| matches!(a.text.as_str(), "-c" | "-e" | "-m"))
        {
            self.mark_unknown(format!(
                "`{p}` runs a script only known at run time (`{}`)",
                script.shown()
            ));
        }
        Feed::Opaque
    }

    /// `find ROOT… [-delete] [-exec CMD {} ;]`: the roots are what `{}` stands for.
    fn find(&mut self, args: &[Word], depth: usize) -> Feed {
        let roots = find_roots(args);
        let root = roots.first().cloned().unwrap_or_else(|| Word::literal("."));
        let destructive = args.iter().any(|a| {
            matches!(
                a.text.as_str(),
                "-delete" | "-exec" | "-execdir" | "-ok" | "-okdir"
            )
        });
        if destructive {
            for each in roots.iter().chain(roots.is_empty().then_some(&root)) {
                match self.protection(&each.text) {
                    super::targets::Protection::Protected(dir)
                        if args.iter().any(|a| a.text == "-delete") =>
                    {
                        self.refuse(format!(
                            "find … -delete over `{}` ({dir}: the root, home or a system directory)",
                            each.shown()
                        ));
                    }
                    super::targets::Protection::Unevaluable => self.mark_unknown(format!(
                        "find acts on `{}`, only known at run time",
                        each.shown()
                    )),
                    _ => {}
                }
            }
        }
        let mut index = 0;
        while index < args.len() {
            if matches!(
                args[index].text.as_str(),
                "-exec" | "-execdir" | "-ok" | "-okdir"
            ) {
                // Every root is what `{}` stands for: the first protected one is the danger.
                let root = roots
                    .iter()
                    .find(|r| {
                        matches!(
                            self.protection(&r.text),
                            super::targets::Protection::Protected(_)
                        )
                    })
                    .cloned()
                    .unwrap_or_else(|| root.clone());
                let end = args[index + 1..]
                    .iter()
                    .position(|a| a.text == ";" || a.text == "+")
                    .map_or(args.len(), |p| index + 1 + p);
                let command: Vec<Word> = args[index + 1..end]
                    .iter()
                    .map(|a| {
                        if a.text.contains("{}") {
                            Word {
                                text: a.text.replace("{}", &root.text),
                                exact: false,
                                fetched: a.fetched,
                            }
                        } else {
                            a.clone()
                        }
                    })
                    .collect();
                self.run(command, Feed::Opaque, false, depth + 1);
                index = end;
            }
            index += 1;
        }
        Feed::Text(root)
    }
}

impl Walker<'_> {
    /// The directory `dir` (already expanded) names from here.
    pub(super) fn dir_after(&self, dir: &str) -> Cwd {
        if dir.contains(UNKNOWN) || dir.is_empty() {
            return Cwd::Unknown;
        }
        if dir.starts_with('/') {
            return super::targets::normalize(dir, &Cwd::Session).map_or(Cwd::Unknown, Cwd::Known);
        }
        match &self.cwd {
            // Inside the project, a relative move stays in the project unless it climbs out.
            Cwd::Session if !dir.split('/').any(|part| part == "..") => Cwd::Session,
            Cwd::Known(_) if self.alternatives.is_empty() => {
                super::targets::normalize(dir, &self.cwd).map_or(Cwd::Unknown, Cwd::Known)
            }
            _ => Cwd::Unknown,
        }
    }

    /// `cd DIR`, `cd`, `cd -`, `pushd DIR`, `popd`.
    fn change_directory(&mut self, program: &str, args: &[Word]) {
        let operand = args
            .iter()
            .find(|a| !a.text.starts_with('-') || a.text == "-" || a.text.starts_with("-P"));
        let operand = operand.filter(|a| !a.text.starts_with("-P"));
        let next = match (program, operand) {
            ("popd", _) => self.dir_stack.pop().unwrap_or(Cwd::Unknown),
            ("pushd", None) => self.dir_stack.pop().unwrap_or(Cwd::Unknown),
            (_, Some(dir)) if dir.text == "-" => self.oldpwd.clone(),
            ("pushd", Some(dir)) if dir.text.starts_with(['+', '-']) => Cwd::Unknown,
            (_, Some(dir)) => self.dir_after(&dir.text),
            ("cd", None) => self.env.home.clone().map_or(Cwd::Unknown, Cwd::Known),
            _ => Cwd::Unknown,
        };
        if program == "pushd" {
            self.dir_stack.push(self.cwd.clone());
        }
        self.change_dir(next);
    }

    /// `git -c KEY=VALUE`, `--config-env`, `--exec-path`, `GIT_*`: configuration that can make
    /// git run programs. An alias that starts with `!` is shell code.
    fn git_options(&mut self, args: &[Word]) {
        let mut iter = args.iter();
        while let Some(arg) = iter.next() {
            let text = arg.text.as_str();
            if !text.starts_with('-') {
                break;
            }
            let setting = match text {
                "-c" => iter.next().map(|w| w.text.clone()),
                "--config-env" => iter.next().map(|w| w.text.clone()),
                t if t.starts_with("--config-env=") || t.starts_with("--exec-path=") => {
                    Some(t.to_string())
                }
                "-C" | "--git-dir" | "--work-tree" | "--namespace" => {
                    iter.next();
                    None
                }
                _ => None,
            };
            let Some(setting) = setting else { continue };
            if self.class.unscoped.is_none() {
                self.class.unscoped = Some("it changes git's configuration for one run".into());
            }
            let (key, value) = setting.split_once('=').unwrap_or((&setting, ""));
            let key = key.to_ascii_lowercase();
            if key.starts_with("alias.") && value.starts_with('!') {
                self.nested(&Word::literal(&value[1..]), "a git alias");
            }
            if !SAFE_GIT_KEYS
                .iter()
                .any(|safe| key == *safe || (safe.ends_with('.') && key.starts_with(safe)))
            {
                self.mark_unknown(format!("`git -c {key}=…` can make git run a program"));
            }
        }
    }

    /// A shell given a script file: one known only at run time, or standard input, is code
    /// only known at run time.
    fn script_file(&mut self, shell: &str, args: &[Word], input: &Feed, from_heredoc: bool) {
        let Some(script) = args
            .iter()
            .find(|a| !a.text.starts_with('-') || a.text == "-")
        else {
            return;
        };
        if is_stdin_path(&script.text) {
            self.reads_program_from(shell, input, from_heredoc);
            self.mark_unknown(format!("`{shell}` reads its program from {}", script.text));
        } else if script.text.contains(UNKNOWN) || script.text.starts_with("/proc/") {
            self.mark_unknown(format!(
                "`{shell}` runs a script only known at run time (`{}`)",
                script.shown()
            ));
        }
    }

    /// A program the floor has rules for, anywhere in the words of another program (an
    /// unknown wrapper such as `taskset 1 rm -rf /`): checked as if it ran.
    fn scan_for_floor(&mut self, args: &[Word], depth: usize) {
        for (index, word) in args.iter().enumerate() {
            let name = basename(&word.text);
            if !word.exact || !(FLOOR_NAMES.contains(&name) || SHELLS.contains(&name)) {
                continue;
            }
            let mut probe = Walker::new(self.env);
            probe.cwd = self.cwd.clone();
            probe.alternatives = self.alternatives.clone();
            probe.vars = self.vars.clone();
            probe.run(args[index..].to_vec(), Feed::Opaque, false, depth + 1);
            if let Some(why) = probe.class.floor {
                self.refuse(why);
                return;
            }
        }
    }
}

fn join(words: &[Word]) -> Word {
    Word {
        text: words
            .iter()
            .map(|w| w.text.as_str())
            .collect::<Vec<_>>()
            .join(" "),
        exact: words.iter().all(|w| w.exact),
        fetched: words.iter().any(|w| w.fetched),
    }
}

/// `find -H|-L|-P|-D OPTS|-O3 ROOT… EXPR`: the roots, after the options before them.
fn find_roots(args: &[Word]) -> Vec<Word> {
    let mut leading = 0;
    while let Some(arg) = args.get(leading) {
        match arg.text.as_str() {
            "-H" | "-L" | "-P" => leading += 1,
            "-D" => leading += 2,
            t if t.starts_with("-O") => leading += 1,
            _ => break,
        }
    }
    let rest = args.get(leading..).unwrap_or(&[]);
    rest.iter()
        .take_while(|a| !a.text.starts_with('-') && a.text != "(" && a.text != "!")
        .cloned()
        .collect()
}

/// Where a program that runs code may get it from.
struct CodeInput<'f> {
    /// What is fed to its standard input.
    input: &'f Feed,
    /// That input is a here-document.
    from_heredoc: bool,
    /// One of its words was downloaded.
    fetched_arg: bool,
}
