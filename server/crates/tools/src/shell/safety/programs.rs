//! What a simple command runs: wrappers seen through (`sudo`, `env`, `xargs`, `find -exec`,
//! …), scripts nested in strings (`sh -c`, `eval`, `trap`, here-documents and pipes into a
//! shell), `cd` followed, and the approval scope of the program that finally runs.

use super::floor;
use super::walk::{Cwd, Feed, Walker};
use super::words::{FETCHERS, UNKNOWN, Word, basename};

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

fn is_assignment(text: &str) -> bool {
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
fn skip_options(args: &[Word], with_value: &[&str]) -> usize {
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

/// How many words after the wrapper's name belong to the wrapper, if `program` is one.
fn wrapper_prefix(program: &str, args: &[Word]) -> Option<usize> {
    Some(match program {
        "sudo" | "doas" => skip_options(
            args,
            &["-u", "-g", "-C", "-D", "-h", "-p", "-U", "-r", "-t", "-R"],
        ),
        "env" => {
            let mut n = 0;
            while n < args.len() {
                let t = args[n].text.as_str();
                if matches!(
                    t,
                    "-u" | "--unset" | "-C" | "--chdir" | "-S" | "--split-string"
                ) {
                    n += 2;
                } else if t.starts_with('-') || is_assignment(t) {
                    n += 1;
                } else {
                    break;
                }
            }
            n.min(args.len())
        }
        "nohup" | "exec" | "builtin" | "setsid" | "time" | "stdbuf" | "busybox" | "toybox" => {
            skip_options(args, &["-a"])
        }
        "command" => skip_options(args, &[]),
        "nice" | "ionice" => skip_options(args, &["-n", "-c", "--adjustment", "--class"]),
        "timeout" => {
            (skip_options(args, &["-s", "-k", "--signal", "--kill-after"]) + 1).min(args.len())
        }
        "chroot" | "flock" => (skip_options(args, &["-w", "-E", "--userspec"]) + 1).min(args.len()),
        "xargs" => skip_options(
            args,
            &[
                "-I",
                "-i",
                "-n",
                "-P",
                "-L",
                "-d",
                "-E",
                "-s",
                "-a",
                "--delimiter",
            ],
        ),
        _ => return None,
    })
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
        // Leading assignments: `FOO=1 cmd`.
        while argv.first().is_some_and(|w| is_assignment(&w.text)) {
            argv.remove(0);
        }
        let piped = !matches!(input, Feed::Opaque) || from_heredoc;
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
            if let Some(skip) = wrapper_prefix(&program, &args) {
                if program == "command"
                    && args
                        .first()
                        .is_some_and(|a| a.text.starts_with("-v") || a.text.starts_with("-V"))
                {
                    self.add_scope(&program, &args);
                    return Feed::Opaque;
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
                    words.extend(args[skip..].iter().cloned());
                    argv = words;
                    continue;
                }
                let mut inner = args[skip..].to_vec();
                if inner.is_empty() {
                    self.add_scope(&program, &args);
                    return Feed::Opaque;
                }
                if program == "xargs" {
                    self.xargs_input(&args[..skip], &mut inner, &input);
                }
                argv = inner;
                continue;
            }
            return self.program(&program, &args, input, from_heredoc, piped, depth);
        }
        self.mark_unknown("too many nested wrappers to analyse");
        Feed::Opaque
    }

    /// `echo / | xargs rm -rf`: what xargs reads becomes the command's arguments.
    fn xargs_input(&mut self, options: &[Word], inner: &mut Vec<Word>, input: &Feed) {
        let Feed::Text(text) = input else { return };
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
        for arg in args {
            self.record_path(arg);
        }
        if self.defining.iter().any(|f| f == program) {
            self.refuse(format!(
                "a self-replicating shell function (`{program}`), the shape of a fork bomb"
            ));
        }
        if self.functions.contains(program) {
            // A call of a function defined in the command: its body was walked.
            return Feed::Opaque;
        }
        self.add_scope(program, args);
        floor::check(self, program, args);
        let fetched_arg = args.iter().any(|a| a.fetched);
        match program {
            "cd" | "pushd" => {
                self.cwd = match args
                    .iter()
                    .find(|a| !a.text.starts_with('-') || a.text == "-")
                {
                    None => self.env.home.clone().map_or(Cwd::Unknown, Cwd::Known),
                    Some(dir) if dir.exact => match floor::normalize(&dir.text, &self.cwd) {
                        Some(path) => Cwd::Known(path),
                        None => Cwd::Unknown,
                    },
                    Some(_) => Cwd::Unknown,
                };
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
            "source" | "." => {
                if fetched_arg {
                    self.refuse(format!(
                        "downloaded code run by `{program}` (download-and-run)"
                    ));
                }
                match args.first() {
                    Some(file) if file.exact => {}
                    Some(file) => self.mark_unknown(format!(
                        "`{program}` of a file only known at run time (`{}`)",
                        file.shown()
                    )),
                    None => self.reads_program_from(program, &input, from_heredoc),
                }
                Feed::Opaque
            }
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
            p if SHELLS.contains(&p) => {
                if fetched_arg {
                    self.refuse(format!("downloaded code run by `{p}` (download-and-run)"));
                }
                if let Some(code) = script_flag(args, 'c') {
                    self.nested(code, &format!("`{p} -c`"));
                } else if args.iter().all(|a| a.text.starts_with('-')) {
                    self.reads_program_from(p, &input, from_heredoc);
                }
                Feed::Opaque
            }
            p if is_interpreter(p) => {
                if fetched_arg {
                    self.refuse(format!("downloaded code run by `{p}` (download-and-run)"));
                }
                let has_script = args
                    .iter()
                    .any(|a| !a.text.starts_with('-') || a.text == "-c" || a.text == "-e");
                if !has_script || args.iter().any(|a| a.text == "-") {
                    self.reads_program_from(p, &input, from_heredoc);
                }
                Feed::Opaque
            }
            p if FETCHERS.contains(&p) => Feed::Fetched,
            _ => Feed::Opaque,
        }
    }

    /// `find ROOT… [-delete] [-exec CMD {} ;]`: the roots are what `{}` stands for.
    fn find(&mut self, args: &[Word], depth: usize) -> Feed {
        let roots: Vec<Word> = args
            .iter()
            .take_while(|a| !a.text.starts_with('-') && a.text != "(" && a.text != "!")
            .cloned()
            .collect();
        let root = roots.first().cloned().unwrap_or_else(|| Word::literal("."));
        if args.iter().any(|a| a.text == "-delete")
            && floor::is_protected(&root.text, &self.cwd, self.env)
        {
            self.refuse(format!(
                "find … -delete over `{}` (the root, home or a system directory)",
                root.shown()
            ));
        }
        let mut index = 0;
        while index < args.len() {
            if matches!(
                args[index].text.as_str(),
                "-exec" | "-execdir" | "-ok" | "-okdir"
            ) {
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
