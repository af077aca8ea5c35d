//! The answer's Markdown on a terminal: headings (bold, the first level underlined), bold,
//! italics, strike-through, inline code and fenced code blocks (cyan, the fences dimmed),
//! lists (`•` and their numbers), quotes (`│`), links (underlined, their address after) and
//! rules. The answer streams: the line being written shows as it comes, and each finished
//! line is written again, styled, in its place. Each line is read by pulldown-cmark (the
//! code blocks are followed across lines here). Control characters in the model's text never
//! reach the terminal (no escape sequence of the model's runs there).

use std::io::Write;

use pulldown_cmark::{Event, HeadingLevel, Options, Parser, Tag, TagEnd};
use unicode_width::UnicodeWidthChar;

const RESET: &str = "\x1b[0m";

/// The model's text without control characters (a tab stays).
fn printable(text: &str) -> String {
    text.chars()
        .filter(|c| *c == '\t' || !c.is_control())
        .collect()
}

/// A fenced code block being read: its fence's character and length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Fence {
    marker: char,
    length: usize,
}

/// The fence a line opens or closes, if it is one.
fn fence_of(line: &str) -> Option<Fence> {
    let trimmed = line.trim_start();
    let marker = trimmed.chars().next().filter(|c| *c == '`' || *c == '~')?;
    let length = trimmed.chars().take_while(|c| *c == marker).count();
    (length >= 3).then_some(Fence { marker, length })
}

/// Styles whole lines, following fenced code blocks from one line to the next.
#[derive(Debug, Default)]
pub struct Styler {
    fence: Option<Fence>,
}

/// The styles open while a line is written, outermost first.
#[derive(Default)]
struct Styled {
    out: String,
    stack: Vec<&'static str>,
    /// An open link: its address and the text written for it so far.
    link: Option<(String, String)>,
    /// The number of the next item of an ordered list.
    number: Option<u64>,
}

impl Styled {
    fn push(&mut self, code: &'static str) {
        self.stack.push(code);
        self.out.push_str(&format!("\x1b[{code}m"));
    }

    fn pop(&mut self) {
        self.stack.pop();
        self.out.push_str(RESET);
        if !self.stack.is_empty() {
            self.out
                .push_str(&format!("\x1b[{}m", self.stack.join(";")));
        }
    }

    fn text(&mut self, text: &str) {
        if let Some((_, written)) = &mut self.link {
            written.push_str(text);
        }
        self.out.push_str(text);
    }

    fn start(&mut self, tag: Tag<'_>) {
        match tag {
            Tag::Heading { level, .. } => self.push(if level == HeadingLevel::H1 {
                "1;4"
            } else {
                "1"
            }),
            Tag::Emphasis => self.push("3"),
            Tag::Strong => self.push("1"),
            Tag::Strikethrough => self.push("9"),
            Tag::BlockQuote(_) => self.out.push_str("\x1b[2m│\x1b[0m "),
            Tag::List(first) => self.number = first,
            Tag::Item => {
                let marker = match &mut self.number {
                    Some(number) => {
                        *number += 1;
                        format!("{}.", *number - 1)
                    }
                    None => "•".to_string(),
                };
                self.out.push_str(&format!("{marker} "));
            }
            Tag::Link { dest_url, .. } => {
                self.link = Some((dest_url.to_string(), String::new()));
                self.push("4");
            }
            _ => {}
        }
    }

    fn end(&mut self, tag: TagEnd) {
        match tag {
            TagEnd::Heading(_) | TagEnd::Emphasis | TagEnd::Strong | TagEnd::Strikethrough => {
                self.pop()
            }
            TagEnd::Link => {
                self.pop();
                if let Some((url, written)) = self.link.take()
                    && url != written
                    && !url.is_empty()
                {
                    self.out.push_str(&format!("\x1b[2m ({url})\x1b[0m"));
                }
            }
            _ => {}
        }
    }
}

impl Styler {
    /// One whole line (without its line break), styled.
    pub fn line(&mut self, line: &str) -> String {
        let line = printable(line);
        if let Some(open) = self.fence {
            if fence_of(&line).is_some_and(|f| f.marker == open.marker && f.length >= open.length)
                && line.trim().chars().all(|c| c == open.marker)
            {
                self.fence = None;
                return format!("\x1b[2m{line}{RESET}");
            }
            return format!("\x1b[36m{line}{RESET}");
        }
        if let Some(fence) = fence_of(&line) {
            self.fence = Some(fence);
            return format!("\x1b[2m{line}{RESET}");
        }
        let body = line.trim_start();
        let indent = &line[..line.len() - body.len()];
        let mut styled = Styled::default();
        for event in Parser::new_ext(body, Options::ENABLE_STRIKETHROUGH) {
            match event {
                Event::Start(tag) => styled.start(tag),
                Event::End(tag) => styled.end(tag),
                Event::Text(text) | Event::Html(text) | Event::InlineHtml(text) => {
                    styled.text(&text)
                }
                Event::Code(code) => {
                    styled.push("36");
                    styled.text(&code);
                    styled.pop();
                }
                Event::Rule => styled
                    .out
                    .push_str(&format!("\x1b[2m{}{RESET}", "─".repeat(40))),
                Event::SoftBreak | Event::HardBreak => styled.out.push(' '),
                _ => {}
            }
        }
        format!("{indent}{}", styled.out)
    }

    /// The answer ended: a code block it left open ends with it.
    pub fn reset(&mut self) {
        self.fence = None;
    }
}

/// How many columns `text` takes (a tab to the next multiple of eight).
fn columns(text: &str) -> usize {
    text.chars().fold(0, |at, c| match c {
        '\t' => (at / 8 + 1) * 8,
        c => at + c.width().unwrap_or(0),
    })
}

/// The terminal's width, from standard output.
fn terminal_columns() -> usize {
    rustix::termios::tcgetwinsize(std::io::stdout())
        .ok()
        .map(|size| usize::from(size.ws_col))
        .filter(|cols| *cols > 0)
        .unwrap_or(80)
}

/// The answer on a terminal: lines styled once whole, the line being written shown as it
/// comes.
#[derive(Debug, Default)]
pub struct AnswerStream {
    styler: Styler,
    /// The line being written.
    partial: String,
    /// How many columns of it were shown as they came.
    shown: usize,
}

impl AnswerStream {
    /// Shows a piece of the answer.
    pub fn push(&mut self, text: &str, out: &mut impl Write) {
        for piece in text.split_inclusive('\n') {
            match piece.strip_suffix('\n') {
                Some(end) => {
                    self.partial.push_str(end);
                    self.write_line(out);
                    let _ = writeln!(out);
                }
                None => {
                    let shown = printable(piece);
                    let _ = write!(out, "{shown}");
                    self.shown = columns(&format!("{}{shown}", printable(&self.partial)));
                    self.partial.push_str(piece);
                }
            }
        }
        let _ = out.flush();
    }

    /// The answer stops here (for now): its last line is styled, and a code block it left
    /// open ends.
    pub fn finish(&mut self, out: &mut impl Write) {
        if !self.partial.is_empty() {
            self.write_line(out);
        }
        self.styler.reset();
        let _ = out.flush();
    }

    /// Writes the line being written again, styled, over what was shown of it.
    fn write_line(&mut self, out: &mut impl Write) {
        if self.shown > 0 {
            let rows = self.shown.div_ceil(terminal_columns());
            if rows > 1 {
                let _ = write!(out, "\x1b[{}A", rows - 1);
            }
            let _ = write!(out, "\r\x1b[J");
        }
        let styled = self.styler.line(&self.partial);
        let _ = write!(out, "{styled}");
        self.partial.clear();
        self.shown = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn styled(lines: &[&str]) -> Vec<String> {
        let mut styler = Styler::default();
        lines.iter().map(|l| styler.line(l)).collect()
    }

    #[test]
    fn headings_emphasis_code_lists_quotes_and_links_are_styled_without_their_marks() {
        assert_eq!(
            styled(&[
                "# Title",
                "Some **bold** and *italic* with `code`.",
                "- one",
                "  2. two",
                "> quoted",
                "[docs](https://example.com/d)",
                "snake_case_name stays",
            ]),
            [
                "\x1b[1;4mTitle\x1b[0m",
                "Some \x1b[1mbold\x1b[0m and \x1b[3mitalic\x1b[0m with \x1b[36mcode\x1b[0m.",
                "• one",
                "  2. two",
                "\x1b[2m│\x1b[0m quoted",
                "\x1b[4mdocs\x1b[0m\x1b[2m (https://example.com/d)\x1b[0m",
                "snake_case_name stays",
            ]
        );
    }

    #[test]
    fn a_code_block_is_followed_across_lines_and_its_text_is_not_read_as_markdown() {
        assert_eq!(
            styled(&["```rust", "let **x** = 1;", "```", "**after**"]),
            [
                "\x1b[2m```rust\x1b[0m",
                "\x1b[36mlet **x** = 1;\x1b[0m",
                "\x1b[2m```\x1b[0m",
                "\x1b[1mafter\x1b[0m",
            ]
        );
    }

    #[test]
    fn the_models_control_characters_never_reach_the_terminal() {
        assert_eq!(styled(&["a\x1b]0;title\x07b"]), ["a]0;titleb"]);
    }

    #[test]
    fn a_finished_line_is_written_again_styled_over_what_streamed() {
        let mut stream = AnswerStream::default();
        let mut out = Vec::new();
        stream.push("Hello **wor", &mut out);
        stream.push("ld**\nnext", &mut out);
        stream.finish(&mut out);
        let out = String::from_utf8(out).expect("utf-8");
        assert_eq!(
            out,
            "Hello **wor\r\x1b[JHello \x1b[1mworld\x1b[0m\nnext\r\x1b[Jnext"
        );
    }
}
