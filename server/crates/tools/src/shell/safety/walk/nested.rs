//! Scripts nested in a command: `sh -c` strings, `eval`, `source`, here-documents and pipes
//! into a shell or an interpreter, script files; each walked (or refused) like the command
//! around it.

use super::{Feed, Walker};
use crate::shell::safety::tables::*;
use crate::shell::safety::words::{UNKNOWN, Word};

/// Where a program that runs code may get it from.
pub(in crate::shell::safety) struct CodeInput<'f> {
    /// What is fed to its standard input.
    pub(in crate::shell::safety) input: &'f Feed,
    /// That input is a here-document.
    pub(in crate::shell::safety) from_heredoc: bool,
    /// One of its words was downloaded.
    pub(in crate::shell::safety) fetched_arg: bool,
}

impl Walker<'_> {
    /// Classifies shell code given as a string (`sh -c`, `eval`, `trap`, …).
    pub(in crate::shell::safety) fn nested(&mut self, code: &Word, what: &str) {
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
    pub(in crate::shell::safety) fn reads_program_from(
        &mut self,
        program: &str,
        input: &Feed,
        from_heredoc: bool,
    ) {
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

    /// `source FILE` / `. FILE`: runs the file's code in this shell.
    pub(in crate::shell::safety) fn source(
        &mut self,
        program: &str,
        args: &[Word],
        code: &CodeInput<'_>,
    ) -> Feed {
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
    pub(in crate::shell::safety) fn shell(
        &mut self,
        p: &str,
        args: &[Word],
        code: &CodeInput<'_>,
    ) -> Feed {
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
    pub(in crate::shell::safety) fn interpreter(
        &mut self,
        p: &str,
        args: &[Word],
        code: &CodeInput<'_>,
    ) -> Feed {
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

    /// A shell given a script file: one known only at run time, or standard input, is code
    /// only known at run time.
    pub(in crate::shell::safety) fn script_file(
        &mut self,
        shell: &str,
        args: &[Word],
        input: &Feed,
        from_heredoc: bool,
    ) {
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
}
