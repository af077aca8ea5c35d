//! What a simple command runs: wrappers seen through (`sudo`, `env`, `xargs`, `find -exec`,
//! …), `cd` followed, git's options read, and the approval scope of the program that
//! finally runs. Nested scripts are in `nested.rs`.

use super::floor;
use super::nested::CodeInput;
use super::{Feed, Walker};
use crate::shell::safety::tables::*;
use crate::shell::safety::targets::Cwd;
use crate::shell::safety::words::{FETCHERS, UNKNOWN, Word, basename};

impl Walker<'_> {
    /// Records the path-like words of a command, for the policy's credential checks.
    pub(in crate::shell::safety) fn record_path(&mut self, word: &Word) {
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

    pub(in crate::shell::safety) fn add_scope(&mut self, program: &str, args: &[Word]) {
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

    /// Resolves and checks one simple command; returns what it prints on standard output.
    pub(in crate::shell::safety) fn run(
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
    pub(in crate::shell::safety) fn prefix_assignment(&mut self, text: &str) {
        let name = text.split('=').next().unwrap_or(text);
        if crate::shell::safety::variables::runs_code(name) {
            self.mark_unknown(format!("`{name}` makes the shell run code from a variable"));
        }
        if crate::shell::safety::variables::changes_programs(name) && self.class.unscoped.is_none()
        {
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
    pub(in crate::shell::safety) fn run_wrapped(
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
                && super::RESERVED.contains(&argv[0].text.as_str())
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
            let Some(wrapper) = crate::shell::safety::wrappers::wrapper(&program, &args) else {
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
    pub(in crate::shell::safety) fn xargs_input(
        &mut self,
        options: &[Word],
        inner: &mut Vec<Word>,
        input: &Feed,
    ) {
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
    pub(in crate::shell::safety) fn program(
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
    pub(in crate::shell::safety) fn note_program(
        &mut self,
        program: &str,
        args: &[Word],
        depth: usize,
    ) -> bool {
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
        if let Some(why) = crate::shell::safety::variables::hides_code(program, &texts) {
            self.mark_unknown(why);
        }
        for name in crate::shell::safety::variables::assigned_by(program, args) {
            self.taint(&name);
        }
        false
    }

    /// `find ROOT… [-delete] [-exec CMD {} ;]`: the roots are what `{}` stands for.
    pub(in crate::shell::safety) fn find(&mut self, args: &[Word], depth: usize) -> Feed {
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
                    crate::shell::safety::targets::Protection::Protected(dir)
                        if args.iter().any(|a| a.text == "-delete") =>
                    {
                        self.refuse(format!(
                            "find … -delete over `{}` ({dir}: the root, home or a system directory)",
                            each.shown()
                        ));
                    }
                    crate::shell::safety::targets::Protection::Unevaluable => self.mark_unknown(
                        format!("find acts on `{}`, only known at run time", each.shown()),
                    ),
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
                            crate::shell::safety::targets::Protection::Protected(_)
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
    pub(in crate::shell::safety) fn dir_after(&self, dir: &str) -> Cwd {
        if dir.contains(UNKNOWN) || dir.is_empty() {
            return Cwd::Unknown;
        }
        if dir.starts_with('/') {
            return crate::shell::safety::targets::normalize(dir, &Cwd::Session)
                .map_or(Cwd::Unknown, Cwd::Known);
        }
        match &self.cwd {
            // Inside the project, a relative move stays in the project unless it climbs out.
            Cwd::Session if !dir.split('/').any(|part| part == "..") => Cwd::Session,
            Cwd::Known(_) if self.alternatives.is_empty() => {
                crate::shell::safety::targets::normalize(dir, &self.cwd)
                    .map_or(Cwd::Unknown, Cwd::Known)
            }
            _ => Cwd::Unknown,
        }
    }

    /// `cd DIR`, `cd`, `cd -`, `pushd DIR`, `popd`.
    pub(in crate::shell::safety) fn change_directory(&mut self, program: &str, args: &[Word]) {
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
    pub(in crate::shell::safety) fn git_options(&mut self, args: &[Word]) {
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

    /// A program the floor has rules for, anywhere in the words of another program (an
    /// unknown wrapper such as `taskset 1 rm -rf /`): checked as if it ran.
    pub(in crate::shell::safety) fn scan_for_floor(&mut self, args: &[Word], depth: usize) {
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

pub(in crate::shell::safety) fn join(words: &[Word]) -> Word {
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
pub(in crate::shell::safety) fn find_roots(args: &[Word]) -> Vec<Word> {
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
