//! Tests of calls written as text: what is taken, what is held while it streams, what is never run.

use super::*;

fn offered() -> (Registry, Vec<String>) {
    let registry = talaria_tools::builtin_registry();
    let names = registry.definitions().map(|d| d.name.to_string()).collect();
    (registry, names)
}

#[test]
fn a_fenced_call_with_valid_arguments_is_taken() {
    let (registry, names) = offered();
    let text = "I'll read it.\n```json\n{\"name\": \"read_file\", \"arguments\": {\"path\": \"main.py\"}}\n```";
    let Some(TextCall::Call { call, rest, .. }) = find(text, &registry, &names) else {
        panic!("no call");
    };
    assert_eq!(call.name, "read_file");
    assert_eq!(call.arguments, "{\"path\":\"main.py\"}");
    assert_eq!(rest, "I'll read it.");
    let bare = "{\"function\": {\"name\": \"terminal\", \"arguments\": \"{\\\"command\\\": \\\"ls\\\"}\"}}";
    let named = "```json\n{\"function\": \"read_file\", \"arguments\": {\"path\": \"a\"}}\n```";
    assert!(
        matches!(find(named, &registry, &names), Some(TextCall::Call { call, .. }) if call.name == "read_file")
    );
    assert!(
        matches!(find(bare, &registry, &names), Some(TextCall::Call { call, .. }) if call.name == "terminal")
    );
}

#[test]
fn a_call_written_as_text_is_held_back_while_it_streams_and_code_is_not() {
    let (_, names) = offered();
    let upto = |text: &str| showable(text, 0, &names).upto;
    // A fenced call is held from its fence, also before it is complete.
    let call =
        "I'll read it.\n```json\n{\"name\": \"read_file\", \"arguments\": {\"path\": \"a\"}}\n```";
    let fence = call.find("```").unwrap_or_default();
    for cut in [fence + 1, fence + 3, fence + 8, fence + 12, call.len()] {
        assert_eq!(upto(&call[..cut]), fence, "{:?}", &call[..cut]);
    }
    assert_eq!(upto("I'll read it.\n`"), "I'll read it.\n".len());
    // An answer that is one JSON object is held whole.
    assert_eq!(upto("  {\"name\": \"terminal\""), 2);
    // Code and JSON that names no offered tool stream, and so does what follows them.
    let code = "Run:\n```sh\ncargo test\n```\nThen look.";
    assert_eq!(upto(code), code.len());
    assert_eq!(upto(&code[..12]), 12, "an open code fence streams");
    let config = "Config:\n```json\n{\"port\": 8080}\n```\ndone";
    assert_eq!(upto(config), config.len());
    assert_eq!(upto(&config[..20]), 8, "open JSON waits until it closes");
    // Scanning resumes where it settled and gives what a fresh scan gives, piece by piece.
    for text in [
        call,
        code,
        config,
        "one\ntwo ```not a fence\n``` \n{",
        "  \n{\"name\": 1}",
    ] {
        let mut resume = 0;
        for end in (1..=text.len()).filter(|&e| text.is_char_boundary(e)) {
            let step = showable(&text[..end], resume, &names);
            assert_eq!(step.upto, upto(&text[..end]), "{:?}", &text[..end]);
            resume = step.resume;
        }
    }
    assert_eq!(upto("plain prose"), "plain prose".len());
}

#[test]
fn a_call_in_call_tags_is_taken_and_held_while_it_streams() {
    let (registry, names) = offered();
    for text in [
        "<tools>\n{\"name\": \"read_file\", \"arguments\": {\"path\": \"main.py\"}}\n</tools>",
        "<tool_call>{\"name\": \"read_file\", \"arguments\": {\"path\": \"main.py\"}}</tool_call>",
    ] {
        let Some(TextCall::Call { call, rest, .. }) = find(text, &registry, &names) else {
            panic!("no call in {text}");
        };
        assert_eq!(call.name, "read_file");
        assert_eq!(rest, "");
        for cut in [1, 4, 8, 20, text.len()] {
            assert_eq!(
                showable(&text[..cut], 0, &names).upto,
                0,
                "{:?}",
                &text[..cut]
            );
        }
    }
    assert_eq!(
        showable("<b>bold</b> claim", 0, &names).upto,
        "<b>bold</b> claim".len()
    );
    assert_eq!(find("<p>{\"a\": 1}</p>", &registry, &names), None);
}

#[test]
fn invalid_or_missing_tools_are_never_run() {
    let (registry, names) = offered();
    let invalid = "```json\n{\"name\": \"read_file\", \"arguments\": {\"file\": 3}}\n```";
    assert!(
        matches!(find(invalid, &registry, &names), Some(TextCall::Invalid { tool, .. }) if tool == "read_file")
    );
    let unknown = "```json\n{\"name\": \"rm_everything\", \"arguments\": {}}\n```";
    assert_eq!(
        find(unknown, &registry, &names),
        Some(TextCall::Unknown {
            tool: "rm_everything".into()
        })
    );
    // The 1.5B model asked to add a function.
    let add = "{\"name\": \"add\", \"arguments\": {\"a\": 5, \"b\": 3}}";
    assert_eq!(
        find(add, &registry, &names),
        Some(TextCall::Unknown { tool: "add".into() })
    );
    let prose = "The config is `{\"a\": 1}` and nothing else.";
    assert_eq!(find(prose, &registry, &names), None);
    let person = "```json\n{\"name\": \"Ada\", \"born\": 1815}\n```";
    assert_eq!(
        find(person, &registry, &names),
        None,
        "JSON that is no call"
    );
    let not_offered: Vec<String> = vec!["write_file".into()];
    let fenced = "```json\n{\"name\": \"read_file\", \"arguments\": {\"path\": \"a\"}}\n```";
    assert_eq!(
        find(fenced, &registry, &not_offered),
        Some(TextCall::Unknown {
            tool: "read_file".into()
        })
    );
}

#[test]
fn of_several_calls_the_first_is_taken_and_the_others_are_named() {
    let (registry, names) = offered();
    // Seen on the 1.5B model: a plan, then two fenced calls in the `tool {…}` shape.
    let plan = "First I run the tests, then I track the work.\n```\nterminal {\"command\": \"pytest\"}\n```\n```\ntodo {\"todos\": [{\"id\": \"1\", \"content\": \"fix\", \"status\": \"pending\"}]}\n```";
    let Some(TextCall::Call { call, rest, unrun }) = find(plan, &registry, &names) else {
        panic!("no call");
    };
    assert_eq!(call.name, "terminal");
    assert_eq!(call.arguments, "{\"command\":\"pytest\"}");
    assert_eq!(unrun, ["todo"]);
    assert_eq!(rest, "First I run the tests, then I track the work.");
    let two = "```json\n{\"name\": \"read_file\", \"arguments\": {\"path\": \"a\"}}\n{\"name\": \"read_file\", \"arguments\": {\"path\": \"b\"}}\n```";
    let Some(TextCall::Call { call, unrun, .. }) = find(two, &registry, &names) else {
        panic!("no call");
    };
    assert_eq!(call.arguments, "{\"path\":\"a\"}");
    assert_eq!(unrun, ["read_file"]);
    // A call of a missing tool beside a valid one: the valid one runs.
    let mixed = "<tool_call>{\"name\": \"add\", \"arguments\": {}}</tool_call>\n<tool_call>{\"name\": \"read_file\", \"arguments\": {\"path\": \"a\"}}</tool_call>";
    assert!(
        matches!(find(mixed, &registry, &names), Some(TextCall::Call { call, unrun, .. }) if call.name == "read_file" && unrun.is_empty())
    );
}

#[test]
fn a_tagged_call_after_prose_is_taken_and_held_from_its_tag() {
    let (registry, names) = offered();
    let text = "Let me look.\n<tool_call>\n{\"name\": \"read_file\", \"arguments\": {\"path\": \"a.py\"}}\n</tool_call>";
    let Some(TextCall::Call { call, rest, .. }) = find(text, &registry, &names) else {
        panic!("no call");
    };
    assert_eq!(call.name, "read_file");
    assert_eq!(rest, "Let me look.");
    let tag = text.find('<').unwrap_or_default();
    let mut resume = 0;
    for end in (1..=text.len()).filter(|&e| text.is_char_boundary(e)) {
        let step = showable(&text[..end], resume, &names);
        assert!(step.upto <= tag, "{:?}", &text[..end]);
        assert_eq!(step.upto, showable(&text[..end], 0, &names).upto);
        resume = step.resume;
    }
    // A labelled fence or a `tool {` body is held too.
    for held in [
        "Run:\n```terminal\n{\"command\": \"ls\"}\n```",
        "Run:\n```\nterminal {\"command\": \"ls\"}\n```",
        "Run:\n```\nterm",
    ] {
        assert_eq!(showable(held, 0, &names).upto, 5, "{held}");
    }
    let code = "Run:\n```\nterminal_width = 80\n```";
    assert_eq!(showable(code, 0, &names).upto, code.len());
}

#[test]
fn calls_written_as_function_tags_are_taken() {
    let (registry, names) = offered();
    // Seen on the 1.5B model with the stock template.
    let text = "<tools>\n  <function name=\"read_file\" arguments='{\"path\": \"util.py\", \"offset\": 0, \"limit\": 500}'/>\n</tools><tools>\n  <function name=\"read_file\" arguments='{\"path\": \"util.py\", \"offset\": 0, \"limit\": 500}'/>\n</tools>";
    let Some(TextCall::Call { call, unrun, rest }) = find(text, &registry, &names) else {
        panic!("no call");
    };
    assert_eq!(call.name, "read_file");
    assert_eq!(unrun, ["read_file"]);
    assert!(!rest.contains("<function"), "{rest}");
    let mut resume = 0;
    for end in (1..=text.len()).filter(|&e| text.is_char_boundary(e)) {
        let step = showable(&text[..end], resume, &names);
        assert_eq!(step.upto, 0, "{:?}", &text[..end]);
        resume = step.resume;
    }
    let prose = "Use <function name=\"x\"> sparingly.";
    assert_eq!(find(prose, &registry, &names), None);
}

#[test]
fn what_is_left_of_an_answer_has_no_stray_fences_or_blank_runs() {
    let (registry, names) = offered();
    let text = "To see it, I'll read the file:\n\n```json\n{\"name\": \"read_file\", \"arguments\": {\"path\": \"a\"}}\n```\n\n\n\nThen I explain.\n```\n\n```\n```json";
    let Some(TextCall::Call { rest, .. }) = find(text, &registry, &names) else {
        panic!("no call");
    };
    assert_eq!(rest, "To see it, I'll read the file:\n\nThen I explain.");
}

#[test]
fn near_json_calls_are_repaired_and_validated() {
    let (registry, names) = offered();
    let cases = [
        // Python triple-quoted content.
        (
            "```json\n{\"name\": \"write_file\", \"arguments\": {\"path\": \"t.py\", \"content\": \"\"\"def add(a, b):\n    return a + b\n\"\"\"}}\n```",
            "write_file",
        ),
        // Python literals and single quotes.
        (
            "```python\n{'name': 'terminal', 'arguments': {'command': 'python3 -m unittest', 'background': False}}\n```",
            "terminal",
        ),
        // Doubled braces.
        (
            "```json\n{{\"name\": \"read_file\", \"arguments\": {{\"path\": \"main.py\"}}}}\n```",
            "read_file",
        ),
        // Trailing commas.
        (
            "```json\n{\"name\": \"search_files\", \"arguments\": {\"pattern\": \"timeout\", \"target\": \"content\",},}\n```",
            "search_files",
        ),
        // A raw line break inside a string and an unquoted key.
        (
            "```json\n{name: \"patch\", \"arguments\": {\"path\": \"a.py\", \"old_string\": \"x = 1\ny = 2\", \"new_string\": \"x = 2\ny = 2\"}}\n```",
            "patch",
        ),
        // A call tag around single-quoted JSON with None.
        (
            "<tool_call>{'name': 'read_file', 'arguments': {'path': 'util.py', 'offset': None}}</tool_call>",
            "read_file",
        ),
    ];
    for (text, tool) in cases {
        match find(text, &registry, &names) {
            Some(TextCall::Call { call, .. }) => {
                assert_eq!(call.name, tool, "{text}");
                assert!(registry.parse_args(&call.name, &call.arguments).is_ok());
            }
            other => panic!("{text}: {other:?}"),
        }
    }
}

#[test]
fn a_call_that_cannot_be_read_says_why_instead_of_becoming_the_answer() {
    let (registry, names) = offered();
    for text in [
        "```json\n{\"name\": \"read_file\", \"arguments\": {\"path\": \"main.py\"}\n```",
        "```json\n{\"name\": \"terminal\" \"arguments\": {\"command\": \"ls\"}}\n```",
        "```json\n{\"name\": \"patch\", \"arguments\": {\"path\": \"a.py\", \"old_string\": x = 1}}\n```",
        "```read_file\n[\"main.py\"\n```",
        "{\"name\": \"write_file\", \"arguments\": {\"path\": \"a\", \"content\": \"x\"}}}",
    ] {
        match find(text, &registry, &names) {
            Some(TextCall::Unreadable { tool, why }) => {
                assert!(names.contains(&tool), "{text}");
                assert!(!why.is_empty());
            }
            other => panic!("{text}: {other:?}"),
        }
    }
    // JSON that names no tool is not a call at all.
    assert_eq!(
        find("```json\n{\"port\": 80,, }\n```", &registry, &names),
        None
    );
}

#[test]
fn an_answer_cut_inside_its_fence_keeps_the_whole_call_before_the_cut() {
    let (registry, names) = offered();
    let whole = "{\"name\": \"read_file\", \"arguments\": {\"path\": \"main.py\"}}";
    for tail in [
        "",
        "\n",
        "\n{\"name\": \"terminal\", \"argu",
        "\n{\"name\": \"read_file\", \"arguments\": {\"path\": \"main.py\"}}\n{\"na",
        "\n``",
    ] {
        let text = format!("Reading it.\n```json\n{whole}{tail}");
        match find(&text, &registry, &names) {
            Some(TextCall::Call { call, rest, .. }) => {
                assert_eq!(call.name, "read_file", "{text}");
                assert_eq!(rest, "Reading it.");
            }
            other => panic!("{text}: {other:?}"),
        }
    }
}
