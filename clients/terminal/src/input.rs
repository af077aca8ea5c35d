//! The terminal's input, read on a thread of its own. At the prompt a line editor with history
//! and slash-command completion reads the line; a permission question is answered by a key
//! press (no Enter needed); while a turn runs, typing is not echoed into the answer: complete
//! lines are collected to be sent after the turn. Without a terminal (pipes), lines are read
//! as they come, a question's answer too.

use std::io::{BufRead, IsTerminal, Write};
use std::os::fd::AsFd;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rustyline::completion::{Completer, Pair};
use rustyline::error::ReadlineError;
use rustyline::highlight::Highlighter;
use rustyline::hint::Hinter;
use rustyline::validate::Validator;
use rustyline::{Context, Editor, Helper};
use tokio::sync::mpsc;

/// What the input thread should do next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mode {
    /// Read a line at this prompt.
    Prompt(String),
    /// Ask this question and read one of these keys (Enter too) on a terminal; a line
    /// without one.
    Keys(String, Vec<char>),
    /// A turn runs: collect lines without echo.
    Busy,
    /// Stop reading.
    Stop,
}

/// What the user did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Input {
    /// A line at a prompt.
    Line(String),
    /// A line typed while a turn ran.
    Typed(String),
    /// Ctrl-C at a prompt, when the key was read.
    Interrupted(std::time::Instant),
    /// End of input.
    Eof,
}

/// Slash commands offered for completion (built-in and the agent's).
pub type Commands = Arc<Mutex<Vec<String>>>;

struct SlashCompleter {
    commands: Commands,
}

impl Helper for SlashCompleter {}
impl Highlighter for SlashCompleter {}
impl Validator for SlashCompleter {}
impl Hinter for SlashCompleter {
    type Hint = String;
}

impl Completer for SlashCompleter {
    type Candidate = Pair;

    fn complete(
        &self,
        line: &str,
        pos: usize,
        _ctx: &Context<'_>,
    ) -> rustyline::Result<(usize, Vec<Pair>)> {
        let typed = &line[..pos];
        if !typed.starts_with('/') {
            return Ok((pos, Vec::new()));
        }
        // A command name, or (after a space) a command with its argument (`/mode ask`).
        let with_argument = typed.contains(' ');
        let commands = talaria_util::lock(&self.commands);
        let pairs = commands
            .iter()
            .filter(|c| c.contains(' ') == with_argument && c.starts_with(&typed[1..]))
            .map(|c| Pair {
                display: format!("/{c}"),
                replacement: format!("/{c} "),
            })
            .collect();
        Ok((0, pairs))
    }
}

/// The mode, numbered so the thread serves each prompt once.
#[derive(Debug)]
struct Shared {
    mode: Mode,
    seq: u64,
    /// Lines typed during a turn that the main loop has handled: the thread waits for each
    /// before it reads the mode again (the loop may have started a turn for it).
    acked: u64,
}

/// The shared mode and the thread's handle.
pub struct InputThread {
    shared: Arc<Mutex<Shared>>,
    pub lines: mpsc::UnboundedReceiver<Input>,
    /// Whether the line editor shows prompts (else they are printed here).
    terminal: bool,
}

impl InputThread {
    /// Says that a [`Input::Typed`] line was handled (after the mode it calls for was set).
    pub fn ack(&self) {
        talaria_util::lock(&self.shared).acked += 1;
    }

    pub fn set(&self, mode: Mode) {
        if let Mode::Prompt(prompt) | Mode::Keys(prompt, _) = &mode
            && !self.terminal
        {
            eprint!("{prompt}");
        }
        let mut shared = talaria_util::lock(&self.shared);
        shared.mode = mode;
        shared.seq += 1;
    }
}

fn current(shared: &Mutex<Shared>) -> (Mode, u64) {
    let shared = talaria_util::lock(shared);
    (shared.mode.clone(), shared.seq)
}

/// Starts the thread in `initial` mode.
pub fn start(initial: Mode, commands: Commands) -> InputThread {
    let terminal = std::io::stdin().is_terminal() && std::io::stderr().is_terminal();
    let shared = Arc::new(Mutex::new(Shared {
        mode: initial,
        seq: 1,
        acked: 0,
    }));
    // Unbounded: lines the user typed, each read as the user presses Enter.
    let (sender, lines) = mpsc::unbounded_channel();
    let thread_shared = shared.clone();
    std::thread::spawn(move || {
        if terminal {
            run_terminal(&thread_shared, &sender, commands);
        } else {
            run_piped(&thread_shared, &sender);
        }
    });
    InputThread {
        shared,
        lines,
        terminal,
    }
}

/// Pipes: every line as it comes, tagged by the mode it arrived in.
fn run_piped(shared: &Mutex<Shared>, sender: &mpsc::UnboundedSender<Input>) {
    let stdin = std::io::stdin();
    for line in stdin.lock().lines() {
        let Ok(line) = line else { break };
        let input = match current(shared).0 {
            Mode::Stop => return,
            Mode::Busy => Input::Typed(line),
            Mode::Prompt(_) | Mode::Keys(..) => Input::Line(line),
        };
        if sender.send(input).is_err() {
            return;
        }
    }
    let _ = sender.send(Input::Eof);
}

/// Turns the terminal's echo off (while a turn runs) or back on.
fn set_echo(on: bool) {
    let stdin = std::io::stdin();
    let Ok(mut termios) = nix::sys::termios::tcgetattr(stdin.as_fd()) else {
        return;
    };
    termios
        .local_flags
        .set(nix::sys::termios::LocalFlags::ECHO, on);
    let _ =
        nix::sys::termios::tcsetattr(stdin.as_fd(), nix::sys::termios::SetArg::TCSANOW, &termios);
}

/// Whether stdin has input within `wait`.
fn readable(wait: Duration) -> bool {
    let stdin = std::io::stdin();
    let mut fds = [nix::poll::PollFd::new(
        stdin.as_fd(),
        nix::poll::PollFlags::POLLIN,
    )];
    let millis = u16::try_from(wait.as_millis()).unwrap_or(u16::MAX);
    matches!(nix::poll::poll(&mut fds, millis), Ok(n) if n > 0)
}

/// The terminal's settings while a key is read: no line buffering, no echo, and Ctrl-C a key
/// (as the line editor reads it); put back when dropped.
struct KeyMode {
    saved: Option<nix::sys::termios::Termios>,
}

impl KeyMode {
    fn start() -> KeyMode {
        use nix::sys::termios::{
            LocalFlags, SetArg, SpecialCharacterIndices, tcgetattr, tcsetattr,
        };
        let stdin = std::io::stdin();
        let saved = tcgetattr(stdin.as_fd()).ok();
        if let Some(mut raw) = saved.clone() {
            raw.local_flags
                .remove(LocalFlags::ICANON | LocalFlags::ECHO | LocalFlags::ISIG);
            raw.control_chars[SpecialCharacterIndices::VMIN as usize] = 1;
            raw.control_chars[SpecialCharacterIndices::VTIME as usize] = 0;
            let _ = tcsetattr(stdin.as_fd(), SetArg::TCSANOW, &raw);
        }
        KeyMode { saved }
    }
}

impl Drop for KeyMode {
    fn drop(&mut self) {
        if let Some(saved) = &self.saved {
            let stdin = std::io::stdin();
            let _ = nix::sys::termios::tcsetattr(
                stdin.as_fd(),
                nix::sys::termios::SetArg::TCSANOW,
                saved,
            );
        }
    }
}

/// Asks `question` and waits for one of `keys`, Enter, Ctrl-C or Ctrl-D (other keys are
/// ignored); `None` when the question was withdrawn meanwhile (the mode changed).
fn read_key(shared: &Mutex<Shared>, seq: u64, question: &str, keys: &[char]) -> Option<Input> {
    eprint!("{question}");
    let _ = std::io::stderr().flush();
    let _raw = KeyMode::start();
    loop {
        if current(shared).1 != seq {
            eprintln!();
            return None;
        }
        if !readable(Duration::from_millis(50)) {
            continue;
        }
        let mut bytes = [0u8; 16];
        let read = match nix::unistd::read(std::io::stdin().as_fd(), &mut bytes) {
            Ok(0) | Err(_) => return Some(Input::Eof),
            Ok(n) => n,
        };
        // An escape sequence (an arrow, a function key) is one key that answers nothing;
        // otherwise the first byte that answers does (several keys may come in one read).
        if bytes[0] == 0x1b {
            continue;
        }
        let answer = bytes[..read].iter().find_map(|byte| match byte {
            3 => Some(Input::Interrupted(std::time::Instant::now())),
            4 => Some(Input::Eof),
            b'\r' | b'\n' => Some(Input::Line(String::new())),
            byte if keys.contains(&char::from(*byte)) => {
                Some(Input::Line(char::from(*byte).to_string()))
            }
            _ => None,
        });
        let Some(input) = answer else { continue };
        if let Input::Line(key) = &input {
            eprintln!("{key}");
        } else {
            eprintln!();
        }
        return Some(input);
    }
}

/// A line at `prompt`, read by the line editor (kept in its history).
fn read_line(
    editor: &mut Editor<SlashCompleter, rustyline::history::DefaultHistory>,
    prompt: &str,
) -> Input {
    match editor.readline(prompt) {
        Ok(line) => {
            if !line.trim().is_empty() {
                let _ = editor.add_history_entry(line.as_str());
            }
            Input::Line(line)
        }
        Err(ReadlineError::Interrupted) => Input::Interrupted(std::time::Instant::now()),
        Err(_) => Input::Eof,
    }
}

fn run_terminal(shared: &Mutex<Shared>, sender: &mpsc::UnboundedSender<Input>, commands: Commands) {
    let Ok(mut editor) = Editor::<SlashCompleter, rustyline::history::DefaultHistory>::new() else {
        run_piped(shared, sender);
        return;
    };
    editor.set_helper(Some(SlashCompleter { commands }));
    let mut echo_off = false;
    // The last prompt served: the next one waits for a new instruction.
    let mut served = 0;
    let mut typed = 0u64;
    loop {
        let acked = talaria_util::lock(shared).acked;
        if acked < typed {
            std::thread::sleep(Duration::from_millis(10));
            if matches!(current(shared).0, Mode::Stop) {
                break;
            }
            continue;
        }
        let (mode, seq) = current(shared);
        match mode {
            Mode::Stop => break,
            Mode::Prompt(_) | Mode::Keys(..) if seq == served => {
                std::thread::sleep(Duration::from_millis(20));
            }
            Mode::Keys(question, keys) => {
                served = seq;
                let input = read_key(shared, seq, &question, &keys);
                let end = input == Some(Input::Eof);
                if let Some(input) = input
                    && (sender.send(input).is_err() || end)
                {
                    break;
                }
            }
            Mode::Prompt(prompt) => {
                served = seq;
                if echo_off {
                    set_echo(true);
                    echo_off = false;
                }
                let input = read_line(&mut editor, &prompt);
                let end = input == Input::Eof;
                if sender.send(input).is_err() || end {
                    break;
                }
            }
            Mode::Busy => {
                if !echo_off {
                    set_echo(false);
                    echo_off = true;
                }
                if !readable(Duration::from_millis(100)) {
                    continue;
                }
                let mut line = String::new();
                match std::io::stdin().lock().read_line(&mut line) {
                    Ok(0) | Err(_) => {
                        let _ = sender.send(Input::Eof);
                        break;
                    }
                    Ok(_) => {
                        let line = line.trim_end_matches(['\n', '\r']).to_string();
                        typed += 1;
                        if sender.send(Input::Typed(line)).is_err() {
                            break;
                        }
                    }
                }
            }
        }
    }
    if echo_off {
        set_echo(true);
    }
}
