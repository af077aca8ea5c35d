//! A shell command parser for classification (not execution): words with quotes and escapes,
//! pipelines, lists (`;`, `&&`, `||`, `&`, newlines), subshells and brace groups, command and
//! process substitution (`$(…)`, backticks, `<(…)`), redirects, and function definitions.
//! Nested scripts (subshells, substitutions) are parsed recursively.

/// One word after quote removal. Substitutions are kept as nested scripts.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Word {
    /// The literal text (substitutions contribute nothing).
    pub text: String,
    /// Command substitutions inside the word, as source text.
    pub substitutions: Vec<String>,
    /// Contains a parameter expansion (`$VAR`, `${…}`) or a substitution.
    pub dynamic: bool,
}

/// A redirect such as `> file` or `2>> log`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Redirect {
    pub operator: String,
    pub target: Word,
}

/// One simple command: words and redirects.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SimpleCommand {
    pub words: Vec<Word>,
    pub redirects: Vec<Redirect>,
}

/// Commands joined by `|`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Pipeline {
    pub commands: Vec<SimpleCommand>,
}

/// A parsed script: its pipelines (including those of nested subshells and brace groups),
/// the scripts of its substitutions, and the functions it defines (name and body source).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Script {
    pub pipelines: Vec<Pipeline>,
    pub substitutions: Vec<Script>,
    pub functions: Vec<(String, String)>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Token {
    Word(Word),
    /// `|`, `||`, `&&`, `;`, `&`, `\n`, `(`, `)`, or a redirect operator.
    Op(String),
}

/// Limits that keep classification of hostile input bounded.
const MAX_INPUT: usize = 128 * 1024;
const MAX_DEPTH: usize = 16;
/// The deepest nesting of subshells and function bodies within one script.
const MAX_GROUP_DEPTH: usize = 64;

/// Why a command could not be parsed (the caller treats it as "needs a human").
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseError(pub String);

/// Parses `source`.
pub fn parse(source: &str) -> Result<Script, ParseError> {
    parse_at(source, 0)
}

fn parse_at(source: &str, depth: usize) -> Result<Script, ParseError> {
    if source.len() > MAX_INPUT {
        return Err(ParseError(format!(
            "command is {} bytes long",
            source.len()
        )));
    }
    if depth > MAX_DEPTH {
        return Err(ParseError("nesting too deep".into()));
    }
    let tokens = tokenize(source)?;
    let mut script = Script::default();
    let mut substitutions = Vec::new();
    build(&tokens, &mut script, &mut substitutions, 0)?;
    for sub in substitutions {
        script.substitutions.push(parse_at(&sub, depth + 1)?);
    }
    Ok(script)
}

fn is_redirect(op: &str) -> bool {
    matches!(
        op,
        ">" | ">>" | "<" | "<<" | "<<<" | ">&" | "<&" | "&>" | "&>>" | ">|" | "<>"
    )
}

fn build(
    tokens: &[Token],
    script: &mut Script,
    subs: &mut Vec<String>,
    depth: usize,
) -> Result<(), ParseError> {
    if depth > MAX_GROUP_DEPTH {
        return Err(ParseError("subshells nested too deep".into()));
    }
    let mut pipeline = Pipeline::default();
    let mut command = SimpleCommand::default();
    let mut i = 0;
    let finish_command = |pipeline: &mut Pipeline, command: &mut SimpleCommand| {
        if !command.words.is_empty() || !command.redirects.is_empty() {
            pipeline.commands.push(std::mem::take(command));
        }
    };
    while i < tokens.len() {
        match &tokens[i] {
            Token::Word(word) => {
                subs.extend(word.substitutions.iter().cloned());
                // `name ( )` starts a function definition.
                if command.words.is_empty()
                    && matches!(tokens.get(i + 1), Some(Token::Op(o)) if o == "(")
                    && matches!(tokens.get(i + 2), Some(Token::Op(o)) if o == ")")
                {
                    let name = word.text.clone();
                    let body_start = i + 3;
                    let body_end = matching_group_end(tokens, body_start);
                    let body: Vec<String> = tokens[body_start..body_end]
                        .iter()
                        .map(token_text)
                        .collect();
                    script.functions.push((name, body.join(" ")));
                    build(&tokens[body_start..body_end], script, subs, depth + 1)?;
                    i = body_end;
                    continue;
                }
                command.words.push(word.clone());
            }
            Token::Op(op) if is_redirect(op) => {
                if let Some(Token::Word(target)) = tokens.get(i + 1) {
                    subs.extend(target.substitutions.iter().cloned());
                    command.redirects.push(Redirect {
                        operator: op.clone(),
                        target: target.clone(),
                    });
                    i += 1;
                }
            }
            Token::Op(op) if op == "|" => {
                finish_command(&mut pipeline, &mut command);
            }
            Token::Op(op) if op == "(" => {
                let end = matching_paren(tokens, i);
                build(&tokens[i + 1..end], script, subs, depth + 1)?;
                i = end;
            }
            Token::Op(_) => {
                finish_command(&mut pipeline, &mut command);
                if !pipeline.commands.is_empty() {
                    script.pipelines.push(std::mem::take(&mut pipeline));
                }
            }
        }
        i += 1;
    }
    finish_command(&mut pipeline, &mut command);
    if !pipeline.commands.is_empty() {
        script.pipelines.push(pipeline);
    }
    Ok(())
}

fn token_text(token: &Token) -> String {
    match token {
        Token::Word(word) => word.text.clone(),
        Token::Op(op) => op.clone(),
    }
}

fn matching_paren(tokens: &[Token], open: usize) -> usize {
    let mut depth = 0;
    for (index, token) in tokens.iter().enumerate().skip(open) {
        match token {
            Token::Op(o) if o == "(" => depth += 1,
            Token::Op(o) if o == ")" => {
                depth -= 1;
                if depth == 0 {
                    return index;
                }
            }
            _ => {}
        }
    }
    tokens.len()
}

/// The end of a function body starting at `start` (a `{ … }` group, or a single command).
fn matching_group_end(tokens: &[Token], start: usize) -> usize {
    let mut depth = 0;
    for (index, token) in tokens.iter().enumerate().skip(start) {
        match token {
            Token::Word(w) if w.text == "{" => depth += 1,
            Token::Word(w) if w.text == "}" => {
                depth -= 1;
                if depth <= 0 {
                    return index + 1;
                }
            }
            Token::Op(o) if depth == 0 && (o == ";" || o == "\n") => return index,
            _ => {}
        }
    }
    tokens.len()
}

fn tokenize(source: &str) -> Result<Vec<Token>, ParseError> {
    let chars: Vec<char> = source.chars().collect();
    let mut tokens = Vec::new();
    let mut word = Word::default();
    let mut in_word = false;
    let mut i = 0;
    let push_word = |tokens: &mut Vec<Token>, word: &mut Word, in_word: &mut bool| {
        if *in_word {
            tokens.push(Token::Word(std::mem::take(word)));
            *in_word = false;
        }
    };
    while i < chars.len() {
        let c = chars[i];
        match c {
            ' ' | '\t' | '\r' => {
                push_word(&mut tokens, &mut word, &mut in_word);
                i += 1;
            }
            '#' if !in_word => {
                while i < chars.len() && chars[i] != '\n' {
                    i += 1;
                }
            }
            '\\' => {
                if let Some(&next) = chars.get(i + 1) {
                    if next != '\n' {
                        word.text.push(next);
                        in_word = true;
                    }
                    i += 2;
                } else {
                    i += 1;
                }
            }
            '\'' => {
                in_word = true;
                let end = find_char(&chars, i + 1, '\'')
                    .ok_or_else(|| ParseError("unterminated single quote".into()))?;
                word.text.extend(&chars[i + 1..end]);
                i = end + 1;
            }
            '"' => {
                in_word = true;
                i = double_quoted(&chars, i + 1, &mut word)?;
            }
            '`' => {
                in_word = true;
                let end = find_char(&chars, i + 1, '`')
                    .ok_or_else(|| ParseError("unterminated backquote".into()))?;
                word.substitutions.push(chars[i + 1..end].iter().collect());
                word.dynamic = true;
                i = end + 1;
            }
            '$' => {
                in_word = true;
                i = dollar(&chars, i, &mut word)?;
            }
            '<' | '>' if chars.get(i + 1) == Some(&'(') => {
                // Process substitution: a nested command whose output or input is a file.
                in_word = true;
                let end = matching_close(&chars, i + 2)?;
                word.substitutions.push(chars[i + 2..end].iter().collect());
                word.dynamic = true;
                i = end + 1;
            }
            '|' | '&' | ';' | '(' | ')' | '<' | '>' | '\n' => {
                // A file-descriptor number directly before a redirect belongs to the operator.
                let fd_prefix = in_word
                    && (c == '<' || c == '>')
                    && !word.dynamic
                    && !word.text.is_empty()
                    && word.text.chars().all(|d| d.is_ascii_digit());
                if fd_prefix {
                    word = Word::default();
                    in_word = false;
                }
                push_word(&mut tokens, &mut word, &mut in_word);
                let rest: String = chars[i..chars.len().min(i + 3)].iter().collect();
                let op = [
                    "&>>", "<<<", "&&", "||", ";;", ">>", "<<", ">&", "<&", "&>", ">|", "<>",
                ]
                .into_iter()
                .find(|op| rest.starts_with(op))
                .map(str::to_string)
                .unwrap_or_else(|| c.to_string());
                i += op.chars().count();
                tokens.push(Token::Op(op));
            }
            _ => {
                word.text.push(c);
                in_word = true;
                i += 1;
            }
        }
    }
    push_word(&mut tokens, &mut word, &mut in_word);
    Ok(tokens)
}

fn find_char(chars: &[char], from: usize, target: char) -> Option<usize> {
    (from..chars.len()).find(|&i| chars[i] == target)
}

/// Reads a double-quoted string starting after the opening quote; returns the index after it.
fn double_quoted(chars: &[char], mut i: usize, word: &mut Word) -> Result<usize, ParseError> {
    while i < chars.len() {
        match chars[i] {
            '"' => return Ok(i + 1),
            '\\' => {
                if let Some(&next) = chars.get(i + 1) {
                    if !matches!(next, '"' | '\\' | '$' | '`' | '\n') {
                        word.text.push('\\');
                    }
                    if next != '\n' {
                        word.text.push(next);
                    }
                }
                i += 2;
            }
            '$' => i = dollar(chars, i, word)?,
            '`' => {
                let end = find_char(chars, i + 1, '`')
                    .ok_or_else(|| ParseError("unterminated backquote".into()))?;
                word.substitutions.push(chars[i + 1..end].iter().collect());
                word.dynamic = true;
                i = end + 1;
            }
            c => {
                word.text.push(c);
                i += 1;
            }
        }
    }
    Err(ParseError("unterminated double quote".into()))
}

/// Reads a `$…` expansion at `i`; returns the index after it.
fn dollar(chars: &[char], i: usize, word: &mut Word) -> Result<usize, ParseError> {
    match chars.get(i + 1) {
        Some('(') if chars.get(i + 2) == Some(&'(') => {
            // Arithmetic: dynamic, nothing to run.
            let end = matching_close(chars, i + 3)?;
            word.dynamic = true;
            Ok((end + 2).min(chars.len()))
        }
        Some('(') => {
            let end = matching_close(chars, i + 2)?;
            word.substitutions.push(chars[i + 2..end].iter().collect());
            word.dynamic = true;
            Ok(end + 1)
        }
        Some('{') => {
            let end =
                find_char(chars, i + 2, '}').ok_or_else(|| ParseError("unterminated ${".into()))?;
            let name: String = chars[i + 2..end].iter().collect();
            word.text.push_str(&format!("${{{name}}}"));
            word.dynamic = true;
            Ok(end + 1)
        }
        Some(c)
            if c.is_ascii_alphanumeric()
                || matches!(c, '_' | '@' | '*' | '#' | '?' | '$' | '!' | '-') =>
        {
            let mut end = i + 2;
            if c.is_ascii_alphabetic() || *c == '_' {
                while end < chars.len() && (chars[end].is_ascii_alphanumeric() || chars[end] == '_')
                {
                    end += 1;
                }
            }
            let name: String = chars[i + 1..end].iter().collect();
            word.text.push('$');
            word.text.push_str(&name);
            word.dynamic = true;
            Ok(end)
        }
        _ => {
            word.text.push('$');
            Ok(i + 1)
        }
    }
}

/// Finds the `)` closing a `(` whose content starts at `from`, skipping quotes and nesting.
fn matching_close(chars: &[char], from: usize) -> Result<usize, ParseError> {
    let mut depth = 1;
    let mut i = from;
    while i < chars.len() {
        match chars[i] {
            '\\' => i += 1,
            '\'' => {
                i = find_char(chars, i + 1, '\'')
                    .ok_or_else(|| ParseError("unterminated quote".into()))?
            }
            '"' => {
                let mut j = i + 1;
                while j < chars.len() && chars[j] != '"' {
                    if chars[j] == '\\' {
                        j += 1;
                    }
                    j += 1;
                }
                i = j;
            }
            '(' => depth += 1,
            ')' => {
                depth -= 1;
                if depth == 0 {
                    return Ok(i);
                }
            }
            _ => {}
        }
        i += 1;
    }
    Err(ParseError("unterminated $( or (".into()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(script: &Script) -> Vec<Vec<String>> {
        script
            .pipelines
            .iter()
            .flat_map(|p| p.commands.iter())
            .map(|c| c.words.iter().map(|w| w.text.clone()).collect())
            .collect()
    }

    #[test]
    fn lists_pipes_quotes_and_redirects() {
        let script =
            parse("cd 'my dir' && ls -la | grep \"a b\" > out.txt 2>&1; echo done").expect("parse");
        assert_eq!(
            words(&script),
            vec![
                vec!["cd", "my dir"],
                vec!["ls", "-la"],
                vec!["grep", "a b"],
                vec!["echo", "done"]
            ]
        );
        assert_eq!(script.pipelines.len(), 3);
        let grep = &script.pipelines[1].commands[1];
        assert_eq!(grep.redirects[0].operator, ">");
        assert_eq!(grep.redirects[0].target.text, "out.txt");
        assert_eq!(grep.redirects[1].operator, ">&");
    }

    #[test]
    fn substitutions_and_subshells_are_parsed_recursively() {
        let script = parse("$(echo rm) -rf / ; (cd x && `whoami`) ; bash <(curl -s http://x)")
            .expect("parse");
        assert_eq!(script.substitutions.len(), 3);
        assert_eq!(words(&script.substitutions[0]), vec![vec!["echo", "rm"]]);
        assert!(script.pipelines[0].commands[0].words[0].dynamic);
        assert_eq!(
            words(&script.substitutions[2]),
            vec![vec!["curl", "-s", "http://x"]]
        );
        assert!(words(&script).contains(&vec!["cd".to_string(), "x".to_string()]));
    }

    #[test]
    fn functions_and_escapes() {
        let script = parse(":(){ :|:& };:").expect("parse");
        assert_eq!(script.functions[0].0, ":");
        assert!(script.functions[0].1.contains(':'));
        let script = parse("echo a\\ b \"x\\\"y\" $HOME ${X}").expect("parse");
        assert_eq!(
            words(&script),
            vec![vec!["echo", "a b", "x\"y", "$HOME", "${X}"]]
        );
        assert!(parse("echo 'open").is_err());
    }
}
