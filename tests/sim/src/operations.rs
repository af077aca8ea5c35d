//! The client operations the crash suite cuts: each prepares a home in a process of its own
//! (ended cleanly), then runs in the process under test — load what it needs, mark where the
//! operation begins ([`Marks::begin`]), do it — and says what else must hold after a restart.

use std::path::{Path, PathBuf};

use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use talaria_harness::{MockReply, MockToolCall};

use crate::client::{Client, prompt_params};
use crate::home::{Faults, Home};
use crate::invariants::{Problems, Snapshot, snapshot};
use crate::ledger::Fact;
use crate::points::read_trace;

/// An operation of a client, as the crash suite runs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operation {
    /// A prompt whose turn writes and reads files with tool calls.
    PromptWithTools,
    /// A message steered into a turn while its answer streams, then one while a command
    /// of the next turn runs (recorded as waiting at once, entered after the command).
    Steer,
    /// `session/cancel` of a turn mid-answer.
    Cancel,
    /// `session/fork` of a session with history.
    Fork,
    /// A turn, then `session/close`.
    Close,
    /// `session/delete` of a session whose turn changed files.
    Delete,
    /// `_session/rewind` of the last turn, files left as they are.
    Rewind,
    /// `_session/rewind` of the last turn with `restoreFiles`.
    RewindFiles,
    /// `/compact` of a session with history, then one more turn.
    Compaction,
    /// A plan-mode turn whose plan is handed over and implemented in the same turn.
    PlanHandover,
}

impl Operation {
    pub const ALL: [Operation; 10] = [
        Operation::PromptWithTools,
        Operation::Steer,
        Operation::Cancel,
        Operation::Fork,
        Operation::Close,
        Operation::Delete,
        Operation::Rewind,
        Operation::RewindFiles,
        Operation::Compaction,
        Operation::PlanHandover,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Operation::PromptWithTools => "prompt-with-tools",
            Operation::Steer => "steer",
            Operation::Cancel => "cancel",
            Operation::Fork => "fork",
            Operation::Close => "close",
            Operation::Delete => "delete",
            Operation::Rewind => "rewind",
            Operation::RewindFiles => "rewind-with-files",
            Operation::Compaction => "compaction",
            Operation::PlanHandover => "plan-handover",
        }
    }
}

/// The configuration every home of the suite runs with: no question for file tools, no
/// background reviews (their requests are not scripted), quick retries, a summariser model.
pub const CONFIG: &str = "mode = \"yolo\"\nretry_base_ms = 1\n\
[learning]\nskill_review_after = 0\nmemory_review_after = 0\n\
[auxiliary.compression]\nmodel = \"summary-model\"\n";

/// What the preparation left: the sessions, what was promised in it, and the snapshot of
/// the sessions the operation must not change.
pub struct Prepared {
    /// The session the operation works on.
    pub main: String,
    /// A second session the operation names (the one deleted).
    pub other: Option<String>,
    /// Promises made while preparing (they hold after any crash of the operation).
    pub facts: Vec<Fact>,
    /// Sessions the operation does not name, as stored before it.
    pub bystanders: Snapshot,
    /// The workspace before and after the turn a rewind cuts, and the rewind's params.
    pub rewind: Option<RewindCase>,
}

/// A rewind's request and the workspace it goes between.
pub struct RewindCase {
    pub params: Value,
    pub before: Vec<(PathBuf, Vec<u8>)>,
    pub after: Vec<(PathBuf, Vec<u8>)>,
}

/// Where the operation began in the trace (lines passed before it).
#[derive(Debug, Default, Clone)]
pub struct Marks {
    trace: Option<PathBuf>,
    pub begun_at: Option<usize>,
}

impl Marks {
    pub fn new(trace: Option<PathBuf>) -> Marks {
        Marks {
            trace,
            begun_at: None,
        }
    }

    /// The operation starts now.
    pub fn begin(&mut self) {
        self.begun_at = Some(self.trace.as_deref().map_or(0, |t| read_trace(t).len()));
    }
}

/// A chunk of text the model streams, one tool call, several.
fn calls(calls: &[(&str, &str, Value)]) -> MockReply {
    MockReply::ToolCalls {
        calls: calls
            .iter()
            .map(|(id, name, args)| MockToolCall {
                id: (*id).into(),
                name: (*name).into(),
                arguments: args.to_string(),
            })
            .collect(),
        text: None,
        fragment_chars: None,
        usage: None,
        delay_ms: 0,
    }
}

/// SHA-256 of a message's text as a rewind names it.
fn fingerprint(text: &str) -> String {
    let digest = Sha256::digest(text.as_bytes());
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    format!("sha256:{hex}")
}

/// A message as a rewind names it.
pub fn point(id: &str, text: &str) -> Value {
    json!({"messageId": id, "messageFingerprint": fingerprint(text), "messageOccurrence": 1})
}

/// The id of the last answer the client saw streamed on `session`.
fn last_answer_id(client: &Client, session: &str) -> Option<String> {
    client
        .agent
        .transcript
        .iter()
        .rev()
        .filter(|m| m["params"]["sessionId"] == session)
        .map(|m| &m["params"]["update"])
        .find(|u| u["sessionUpdate"] == "agent_message_chunk")
        .and_then(|u| u["messageId"].as_str())
        .map(str::to_string)
}

fn answered(answer: &Value) -> anyhow::Result<()> {
    match answer["result"]["stopReason"].as_str() {
        Some("end_turn") => Ok(()),
        _ => anyhow::bail!("not answered end_turn: {answer}"),
    }
}

fn seed_workspace(dir: &Path) -> anyhow::Result<()> {
    for (name, text) in [
        ("a.txt", "alpha\n"),
        ("b.txt", "bravo\nline two\n"),
        ("c.txt", "charlie\n"),
    ] {
        std::fs::write(dir.join(name), text)?;
    }
    Ok(())
}

/// The turn that edits the workspace: a write, a patch, a new file, then an answer.
fn editing_turn() -> Vec<MockReply> {
    vec![
        calls(&[
            (
                "w",
                "write_file",
                json!({"path": "a.txt", "content": "ALPHA rewritten\n"}),
            ),
            (
                "p",
                "patch",
                json!({"path": "b.txt", "old_string": "line two", "new_string": "LINE 2"}),
            ),
        ]),
        calls(&[
            (
                "n",
                "write_file",
                json!({"path": "new.txt", "content": "fresh\n"}),
            ),
            ("r", "read_file", json!({"path": "a.txt"})),
        ]),
        MockReply::text(&["edited the files"]),
    ]
}

/// What an operation's preparation adds to the common one.
#[derive(Default)]
struct Extra {
    other: Option<String>,
    rewind: Option<RewindCase>,
}

impl Operation {
    /// Prepares `home` in a process of its own, which ends cleanly: a bystander session with
    /// one turn, the main session with one (and what the operation needs besides).
    pub async fn prepare(self, home: &Home) -> anyhow::Result<Prepared> {
        seed_workspace(&home.workspace())?;
        let mut client = Client::new(home.initialized(&Faults::default()).await?);
        let workspace = home.workspace();
        let bystander = client.new_session(&workspace).await?;
        home.script([MockReply::text(&["the bystander's answer"])]);
        answered(&client.prompt(&bystander, "a bystander's question").await?)?;
        let main = client.new_session(&workspace).await?;
        home.script([MockReply::text(&["first answer"])]);
        answered(&client.prompt(&main, "look around").await?)?;
        let extra = self.prepare_more(&mut client, home, &main).await?;
        let ledger = client.ledger();
        client.agent.close_stdin();
        let status = client.agent.wait_exit(crate::client::ANSWER_WITHIN).await?;
        anyhow::ensure!(status.success(), "the preparation did not end cleanly");
        let mut spared = vec![bystander];
        if self == Operation::Fork {
            spared.push(main.clone());
        }
        let mut facts = ledger.facts;
        self.conditional_promises(home, &main, &extra, &mut facts)
            .await?;
        Ok(Prepared {
            bystanders: snapshot(home, &spared).await?,
            main,
            other: extra.other,
            facts,
            rewind: extra.rewind,
        })
    }

    async fn prepare_more(
        self,
        client: &mut Client,
        home: &Home,
        main: &str,
    ) -> anyhow::Result<Extra> {
        let mut extra = Extra::default();
        match self {
            Operation::Delete => {
                let doomed = client.new_session(&home.workspace()).await?;
                home.script(editing_turn());
                answered(&client.prompt(&doomed, "change things").await?)?;
                extra.other = Some(doomed);
            }
            Operation::Rewind | Operation::RewindFiles => {
                extra.rewind = Some(self.prepare_rewind(client, home, main).await?);
            }
            Operation::Compaction | Operation::Fork => {
                for n in 2..=3 {
                    home.script(vec![
                        calls(&[(&format!("read{n}"), "read_file", json!({"path": "c.txt"}))]),
                        MockReply::text(&[&format!("answer {n}: {}", "words ".repeat(40))]),
                    ]);
                    answered(&client.prompt(main, &format!("question {n}")).await?)?;
                }
            }
            Operation::PlanHandover => {
                let params = json!({"sessionId": main, "modeId": "plan"});
                succeeded(client.request("session/set_mode", params).await?)?;
            }
            _ => {}
        }
        Ok(extra)
    }

    /// The editing turn a rewind cuts, and the rewind's request.
    async fn prepare_rewind(
        self,
        client: &mut Client,
        home: &Home,
        main: &str,
    ) -> anyhow::Result<RewindCase> {
        let first_answer = last_answer_id(client, main).unwrap_or_default();
        let before = home.workspace_files();
        home.script(editing_turn());
        let second = client.prompt(main, "change things").await?;
        answered(&second)?;
        let user = second["result"]["_meta"]["userMessageId"]
            .as_str()
            .unwrap_or_default();
        Ok(RewindCase {
            params: json!({
                "sessionId": main,
                "beforeMessage": point(user, "change things"),
                "resumeAtMessage": point(&first_answer, "first answer"),
                "restoreFiles": self == Operation::RewindFiles,
            }),
            before,
            after: home.workspace_files(),
        })
    }

    /// What holds whether or not the operation was answered: a delete cut short leaves its
    /// session whole or removes it; a fork, answered or not, is a whole copy or absent.
    async fn conditional_promises(
        self,
        home: &Home,
        main: &str,
        extra: &Extra,
        facts: &mut Vec<Fact>,
    ) -> anyhow::Result<()> {
        if let Some(doomed) = &extra.other {
            let holds = facts
                .iter()
                .filter(|f| f.session() == doomed)
                .cloned()
                .collect();
            facts.retain(|f| f.session() != doomed);
            facts.push(Fact::WholeOrGone {
                session: doomed.clone(),
                holds,
            });
        }
        if self == Operation::Fork {
            facts.push(Fact::CopiesOf {
                parent: main.to_string(),
                path: crate::invariants::path_json(home, main).await?,
            });
        }
        Ok(())
    }

    /// Runs the operation in `client`'s process; an error once the process is gone is the
    /// crash the run asked for.
    pub async fn run(
        self,
        client: &mut Client,
        home: &Home,
        prepared: &Prepared,
        marks: &mut Marks,
    ) -> anyhow::Result<()> {
        let main = prepared.main.as_str();
        if self != Operation::Delete {
            let loaded = client.load(main, &home.workspace()).await?;
            anyhow::ensure!(loaded.get("result").is_some(), "load: {loaded}");
        }
        match self {
            Operation::PromptWithTools => {
                home.script(editing_turn());
                marks.begin();
                answered(&client.prompt(main, "change things").await?)
            }
            Operation::Steer => steer(client, home, main, marks).await,
            Operation::Cancel => cancel(client, home, main, marks).await,
            Operation::Fork => {
                marks.begin();
                let params = json!({"sessionId": main, "cwd": home.workspace(), "mcpServers": []});
                succeeded(client.request("session/fork", params).await?)
            }
            Operation::Close => {
                home.script([MockReply::text(&["the last answer"])]);
                marks.begin();
                answered(&client.prompt(main, "one more").await?)?;
                let params = json!({"sessionId": main});
                succeeded(client.request("session/close", params).await?)
            }
            Operation::Delete => {
                let params = json!({"sessionId": prepared.other});
                marks.begin();
                succeeded(client.request("session/delete", params).await?)
            }
            Operation::Rewind | Operation::RewindFiles => {
                let params = prepared.rewind.as_ref().map(|r| r.params.clone());
                marks.begin();
                let answer = client
                    .request("_session/rewind", params.unwrap_or_default())
                    .await?;
                anyhow::ensure!(answer["result"]["rewound"] == true, "rewind: {answer}");
                Ok(())
            }
            Operation::Compaction => compaction(client, home, main, marks).await,
            Operation::PlanHandover => plan_handover(client, home, main, marks).await,
        }
    }

    /// What else must hold once the restarted process loaded the sessions: a rewind with
    /// files is finished (the record has its marker) or never begun, file for file; a file
    /// its answer said could not be put back may be either.
    pub fn check_files(
        self,
        home: &Home,
        prepared: &Prepared,
        rewound: bool,
        failed: &[String],
    ) -> Problems {
        let mut problems = Problems::default();
        let Some(case) = &prepared.rewind else {
            return problems;
        };
        let now = home.workspace_files();
        let want = if rewound && self == Operation::RewindFiles {
            &case.before
        } else {
            &case.after
        };
        let content = |files: &[(PathBuf, Vec<u8>)], path: &Path| {
            files
                .iter()
                .find(|(p, _)| p == path)
                .map(|(_, b)| b.clone())
        };
        let mut paths: Vec<&PathBuf> = now.iter().chain(want.iter()).map(|(p, _)| p).collect();
        paths.sort();
        paths.dedup();
        for path in paths {
            let is = content(&now, path);
            let either = failed.iter().any(|f| Path::new(f) == path.as_path());
            let fine = is == content(want, path)
                || (either
                    && (is == content(&case.before, path) || is == content(&case.after, path)));
            if !fine {
                problems.0.push(format!(
                    "{} is neither rewound nor untouched (the rewind in the record: {rewound}): \
                     {:?}, expected {:?}",
                    path.display(),
                    is.map(|b| String::from_utf8_lossy(&b).into_owned()),
                    content(want, path).map(|b| String::from_utf8_lossy(&b).into_owned())
                ));
            }
        }
        problems
    }
}

fn succeeded(answer: Value) -> anyhow::Result<()> {
    anyhow::ensure!(answer.get("result").is_some(), "refused: {answer}");
    Ok(())
}

async fn steer(
    client: &mut Client,
    home: &Home,
    main: &str,
    marks: &mut Marks,
) -> anyhow::Result<()> {
    home.script([
        MockReply::Hang {
            chunks: vec!["writing it with spaces".into()],
        },
        MockReply::text(&["switched to tabs"]),
    ]);
    marks.begin();
    let id = client
        .start("session/prompt", prompt_params(main, "format the file"))
        .await?;
    client.streamed(main, "writing it with spaces").await?;
    let steered = client
        .request("_session/steering", prompt_params(main, "use tabs instead"))
        .await?;
    anyhow::ensure!(
        steered["result"]["outcome"] == "injected",
        "steer: {steered}"
    );
    answered(&client.finish(id).await?)?;
    home.script([
        calls(&[("w1", "terminal", json!({"command": "sleep 1"}))]),
        MockReply::text(&["waited and stopped"]),
    ]);
    let id = client
        .start("session/prompt", prompt_params(main, "wait a second"))
        .await?;
    client.call_runs(main).await?;
    let steered = client
        .request("_session/steering", prompt_params(main, "then stop there"))
        .await?;
    anyhow::ensure!(
        steered["result"]["outcome"] == "injected",
        "steer during a command: {steered}"
    );
    answered(&client.finish(id).await?)
}

async fn cancel(
    client: &mut Client,
    home: &Home,
    main: &str,
    marks: &mut Marks,
) -> anyhow::Result<()> {
    home.script([MockReply::Hang {
        chunks: vec!["a partial answer".into()],
    }]);
    marks.begin();
    let id = client
        .start("session/prompt", prompt_params(main, "a long task"))
        .await?;
    client.streamed(main, "a partial answer").await?;
    client
        .notify("session/cancel", json!({"sessionId": main}))
        .await?;
    let answer = client.finish(id).await?;
    anyhow::ensure!(
        answer["result"]["stopReason"] == "cancelled",
        "cancel: {answer}"
    );
    Ok(())
}

async fn compaction(
    client: &mut Client,
    home: &Home,
    main: &str,
    marks: &mut Marks,
) -> anyhow::Result<()> {
    home.mock.script_for_model(
        "summary-model",
        vec![MockReply::text(&["## Goal\nLook at the files."])],
    );
    home.script([MockReply::text(&["after the compaction"])]);
    marks.begin();
    answered(&client.prompt(main, "/compact").await?)?;
    answered(&client.prompt(main, "what next?").await?)
}

async fn plan_handover(
    client: &mut Client,
    home: &Home,
    main: &str,
    marks: &mut Marks,
) -> anyhow::Result<()> {
    home.script([
        MockReply::text(&["Plan: write notes.txt."]),
        calls(&[(
            "w",
            "write_file",
            json!({"path": "notes.txt", "content": "done\n"}),
        )]),
        MockReply::text(&["Implemented the plan."]),
    ]);
    client.choose = "implement_accept_edits".into();
    marks.begin();
    answered(&client.prompt(main, "write the notes").await?)
}
