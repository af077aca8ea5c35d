//! The tools over skills and memory (Hermes-compatible names and parameters): `skills_list`,
//! `skill_view`, `skill_manage` and `memory`. Their disk work runs on the blocking pool.

use crate::SkillError;

use std::path::{Path, PathBuf};
use std::sync::{Arc, LazyLock};

use futures_util::future::BoxFuture;
use serde::Deserialize;
use serde_json::{Value, json};
use talaria_files::Dir;
use talaria_tools::{
    ApprovalNeed, CallDescription, Concurrency, Effects, Kept, Tool, ToolContext, ToolDefinition,
    ToolEffect, ToolKind, ToolOutcome,
};

use crate::catalog::{Roots, one_line};
use crate::context::{SkillsContext, WriteMode};
use crate::manage::{self, ManageArgs};
use crate::memory::{Operation, Target};
use crate::provenance::{self, Record};
use crate::skill::SKILL_FILE;

/// The four tools over one session's stores.
pub fn tools(context: Arc<SkillsContext>) -> Vec<Arc<dyn Tool>> {
    vec![
        Arc::new(SkillsList(context.clone())),
        Arc::new(SkillView(context.clone())),
        Arc::new(SkillManage(context.clone())),
        Arc::new(Memory(context)),
    ]
}

/// The names of the tools a review may use.
pub const NAMES: [&str; 4] = ["memory", "skills_list", "skill_view", "skill_manage"];

async fn blocking<F: FnOnce() -> ToolOutcome + Send + 'static>(work: F) -> ToolOutcome {
    tokio::task::spawn_blocking(work)
        .await
        .unwrap_or_else(|e| ToolOutcome::failed(format!("the tool stopped unexpectedly: {e}")))
}

fn definition(
    name: &str,
    description: &str,
    parameters: Value,
    kind: ToolKind,
    approval: ApprovalNeed,
) -> ToolDefinition {
    ToolDefinition {
        name: name.into(),
        toolset: "skills".into(),
        description: description.into(),
        parameters,
        kind,
        approval,
        concurrency: if approval == ApprovalNeed::ReadOnly {
            Concurrency::ReadOnly
        } else {
            Concurrency::Exclusive
        },
        max_result_chars: None,
        // Skills and memory are Talaria's own files, never the user's: a tool that changes
        // them still declares that it writes (with no path of the user's).
        effects: if approval == ApprovalNeed::ReadOnly {
            Effects::reads(&[])
        } else {
            Effects::writes(&[])
        },
    }
}

/// `skills_list {category?}`.
pub struct SkillsList(Arc<SkillsContext>);

static LIST: LazyLock<ToolDefinition> = LazyLock::new(|| {
    definition(
        "skills_list",
        "List saved skills (name and description), optionally of one category.",
        json!({"type": "object", "properties": {"category": {"type": "string"}}}),
        ToolKind::Read,
        ApprovalNeed::ReadOnly,
    )
});

impl Tool for SkillsList {
    fn definition(&self) -> &ToolDefinition {
        &LIST
    }

    fn describe(&self, args: &Value, _ctx: &ToolContext) -> CallDescription {
        CallDescription {
            title: match args["category"].as_str() {
                Some(category) => format!("List skills in {category}"),
                None => "List skills".into(),
            },
            read_only: true,
            ..CallDescription::default()
        }
    }

    fn call<'a>(&'a self, args: Value, _ctx: &'a ToolContext) -> BoxFuture<'a, ToolOutcome> {
        let context = self.0.clone();
        Box::pin(blocking(move || {
            let catalog = context.catalog();
            let wanted = args["category"].as_str();
            let mut out = String::new();
            for (category, skills) in catalog.by_category() {
                if wanted.is_some_and(|w| w != category) {
                    continue;
                }
                out.push_str(&format!("{category}:\n"));
                for found in skills {
                    out.push_str(&format!(
                        "- {}: {}{}\n",
                        found.name,
                        one_line(&found.description),
                        if found.writable { "" } else { " (read-only)" }
                    ));
                }
            }
            for invalid in &catalog.invalid {
                out.push_str(&format!(
                    "invalid: {} — {}\n",
                    invalid.path.display(),
                    invalid.why
                ));
            }
            if out.is_empty() {
                out = "No skills saved yet.".into();
            }
            ToolOutcome::completed(out)
        }))
    }
}

/// `skill_view {name, file_path?}`.
pub struct SkillView(Arc<SkillsContext>);

static VIEW: LazyLock<ToolDefinition> = LazyLock::new(|| {
    definition(
        "skill_view",
        "Load a skill's instructions (SKILL.md), or one of its files with file_path (e.g. references/notes.md).",
        json!({"type": "object", "properties": {
            "name": {"type": "string"},
            "file_path": {"type": "string"}
        }, "required": ["name"]}),
        ToolKind::Read,
        ApprovalNeed::ReadOnly,
    )
});

/// The folder `name` is read from, held: the staged copy in a review that has one (in
/// Talaria's own proposals), else the live skill reached from its root with no link followed.
fn skill_dir(context: &SkillsContext, name: &str) -> Option<Result<Dir, SkillError>> {
    if let WriteMode::Staged { review } = &context.mode {
        let staged = context
            .proposals_dir()
            .join(format!("{name}-{review}"))
            .join("skill");
        if let Ok(dir) = talaria_files::Root::open(&staged, Arc::new(talaria_files::Unguarded))
            && matches!(dir.as_dir().stat(SKILL_FILE.as_ref()), Ok(Some(_)))
        {
            return Some(dir.dir(Path::new("")).map_err(held_error(&staged)));
        }
    }
    let roots = &context.roots;
    let found = context.catalog().get(name).cloned()?;
    Some(roots.skill_dir(&found).map_err(held_error(&found.dir)))
}

/// Why there is no skill `name`: the reason its folder of that name could not be read, or
/// that there is none.
fn not_found(context: &SkillsContext, name: &str) -> String {
    let catalog = context.catalog();
    let unreadable = catalog.invalid.iter().find(|invalid| {
        invalid
            .path
            .parent()
            .and_then(Path::file_name)
            .is_some_and(|folder| folder == name)
    });
    match unreadable {
        Some(invalid) => format!("The skill {name:?} cannot be read: {}", invalid.why),
        None => format!("There is no skill {name:?}; skills_list shows the saved ones."),
    }
}

fn held_error(path: &Path) -> impl FnOnce(talaria_files::FileError) -> SkillError + '_ {
    move |e| SkillError::io("open", path)(e.into())
}

/// The support files of the held skill folder `dir` (regular files only).
fn list_files(dir: &Dir) -> Vec<String> {
    let mut out = Vec::new();
    for sub in crate::skill::SUPPORT_DIRS {
        let Ok(inner) = dir.open_dir(sub.as_ref()) else {
            continue;
        };
        for (entry, kind) in inner.entries().unwrap_or_default() {
            if kind == talaria_files::Kind::File {
                out.push(format!("{sub}/{}", entry.to_string_lossy()));
            }
        }
    }
    out.sort();
    out
}

/// The text of `file_path` (`SKILL.md` when `None`) in the held skill folder `dir`.
fn read_in_skill(roots: &Roots, dir: &Dir, file_path: Option<&str>) -> Result<String, SkillError> {
    match file_path {
        Some(relative) if relative != SKILL_FILE => {
            let parts = manage::support_parts(relative)?;
            let (name, above) = parts.split_last().unwrap_or((&"", &[]));
            let folder: PathBuf = above.iter().collect();
            let inner = dir.dir(&folder).map_err(held_error(dir.shown()))?;
            let limit = crate::skill::MAX_SUPPORT_BYTES as u64;
            crate::skill::read_text(roots, &inner, name, limit)
        }
        _ => crate::skill::read_text(roots, dir, SKILL_FILE, crate::skill::MAX_SKILL_BYTES),
    }
}

impl Tool for SkillView {
    fn definition(&self) -> &ToolDefinition {
        &VIEW
    }

    fn describe(&self, args: &Value, _ctx: &ToolContext) -> CallDescription {
        CallDescription {
            title: format!("View skill {}", args["name"].as_str().unwrap_or("?")),
            read_only: true,
            ..CallDescription::default()
        }
    }

    fn call<'a>(&'a self, args: Value, _ctx: &'a ToolContext) -> BoxFuture<'a, ToolOutcome> {
        let context = self.0.clone();
        Box::pin(blocking(move || {
            let name = args["name"].as_str().unwrap_or_default().to_string();
            let dir = match skill_dir(&context, &name) {
                None => return ToolOutcome::failed(not_found(&context, &name)),
                Some(Err(why)) => return ToolOutcome::failed(why.to_string()),
                Some(Ok(dir)) => dir,
            };
            let file_path = args["file_path"].as_str();
            match read_in_skill(&context.roots, &dir, file_path) {
                Ok(text) => {
                    context.note_viewed(&name);
                    let files = list_files(&dir);
                    let main = file_path.is_none_or(|p| p == SKILL_FILE);
                    let footer = if files.is_empty() || !main {
                        String::new()
                    } else {
                        format!("\n\n[Files of this skill: {}]", files.join(", "))
                    };
                    ToolOutcome::completed(format!("{text}{footer}"))
                }
                Err(e) => ToolOutcome::failed(format!("Cannot read it: {e}")),
            }
        }))
    }
}

/// `skill_manage {action, name, …}`.
pub struct SkillManage(Arc<SkillsContext>);

static MANAGE: LazyLock<ToolDefinition> = LazyLock::new(|| {
    definition(
        "skill_manage",
        "Save reusable procedures as skills (never project code: change project files with \
         patch or write_file). action: create (content = whole SKILL.md with \
         front matter `name`, `description`), edit (content), patch (old_string, new_string, \
         optional file_path), delete, write_file / remove_file (file_path under references/, \
         templates/, scripts/ or assets/; file_content). View a skill before changing it.",
        json!({"type": "object", "properties": {
            "action": {"type": "string", "enum": manage::ACTIONS},
            "name": {"type": "string"},
            "content": {"type": "string"},
            "old_string": {"type": "string"},
            "new_string": {"type": "string"},
            "replace_all": {"type": "boolean"},
            "file_path": {"type": "string"},
            "file_content": {"type": "string"}
        }, "required": ["action", "name"]}),
        ToolKind::Edit,
        ApprovalNeed::Edits,
    )
});

/// The live folder a skill is written in: its own when it is in the writable root, else a
/// new folder there.
fn live_target(context: &SkillsContext, name: &str) -> Result<PathBuf, SkillError> {
    let root = context
        .roots
        .writable()
        .ok_or_else(|| SkillError::Invalid("there is no writable skill folder".into()))?;
    match context.catalog().get(name) {
        Some(found) if found.writable => Ok(found.dir.clone()),
        Some(found) => Err(SkillError::Invalid(format!(
            "skill {name} is read-only (in {}); create a new skill under another name instead",
            found.dir.display()
        ))),
        None => Ok(root.join(name)),
    }
}

fn manage_call(context: &SkillsContext, args: ManageArgs) -> ToolOutcome {
    let record = |dir: &Path| {
        let _ = provenance::append(
            dir,
            &Record {
                origin: context.origin,
                session: context.session.clone(),
                at_ms: provenance::now_ms(),
                action: args.action.clone(),
                subject: args.name.clone(),
            },
        );
    };
    match &context.mode {
        WriteMode::Live => {
            let dir = match live_target(context, &args.name) {
                Ok(dir) => dir,
                Err(why) => return ToolOutcome::failed(why.to_string()),
            };
            match manage::apply(&dir, &args) {
                Ok(done) => {
                    if args.action != "delete" {
                        record(&dir);
                    }
                    if context.origin == provenance::Origin::Review {
                        context.note_staged(&format!("the skill {} ({})", args.name, args.action));
                    }
                    ToolOutcome::completed(done)
                        .with_raw_output(json!({"skills_changed": true, "skill": args.name}))
                        .with_effect(ToolEffect::Kept(Kept::Skill { live: true }))
                }
                Err(why) => ToolOutcome::failed(why.to_string()),
            }
        }
        WriteMode::Staged { review } => {
            // One scan of the skill folders per call.
            let live = context.catalog().get(&args.name).map(|s| s.dir.clone());
            if manage::changes_existing(&args.action)
                && live.is_some()
                && !context.was_viewed(&args.name)
            {
                return ToolOutcome::failed(format!(
                    "View the skill first (skill_view name={:?}) before you {} it.",
                    args.name, args.action
                ));
            }
            let staged = context.proposals.stage_skill(
                review,
                &args.name,
                live.as_deref(),
                &context.session,
                &|from, bytes| context.roots.admit(from, bytes),
            );
            let (id, dir) = match staged {
                Ok(staged) => staged,
                Err(why) => return ToolOutcome::failed(why.to_string()),
            };
            let result = if args.action == "delete" {
                Ok(format!("Deletion of skill {} proposed.", args.name))
            } else {
                manage::apply(&dir, &args)
            };
            match result {
                Ok(done) => {
                    if args.action != "delete" {
                        record(&dir);
                    }
                    context.note_staged(&id);
                    match context.proposals.note_skill_action(&id, &args.action) {
                        Ok(_) => ToolOutcome::completed(format!(
                            "{done} Staged as proposal {id} for the user to accept."
                        ))
                        .with_effect(ToolEffect::Kept(Kept::Skill { live: false })),
                        Err(why) => ToolOutcome::failed(why.to_string()),
                    }
                }
                Err(why) => ToolOutcome::failed(why.to_string()),
            }
        }
    }
}

impl Tool for SkillManage {
    fn definition(&self) -> &ToolDefinition {
        &MANAGE
    }

    fn describe(&self, args: &Value, _ctx: &ToolContext) -> CallDescription {
        let name = args["name"].as_str().unwrap_or("?");
        let action = args["action"].as_str().unwrap_or("?");
        let writes = match (&self.0.mode, live_target(&self.0, name)) {
            (WriteMode::Live, Ok(dir)) => vec![dir.join(SKILL_FILE)],
            _ => Vec::new(),
        };
        CallDescription {
            title: format!("Skill {name}: {action}"),
            paths: writes.clone(),
            writes,
            own_store: true,
            ..CallDescription::default()
        }
    }

    fn call<'a>(&'a self, args: Value, _ctx: &'a ToolContext) -> BoxFuture<'a, ToolOutcome> {
        let context = self.0.clone();
        Box::pin(blocking(move || {
            match serde_json::from_value::<ManageArgs>(args) {
                Ok(args) => manage_call(&context, args),
                Err(e) => ToolOutcome::failed(format!("Invalid arguments for skill_manage: {e}")),
            }
        }))
    }
}

/// `memory {action, target, content?, old_text?}` or `{operations: [...]}`.
pub struct Memory(Arc<SkillsContext>);

static MEMORY: LazyLock<ToolDefinition> = LazyLock::new(|| {
    definition(
        "memory",
        "Keep durable notes across sessions: target memory (your notes: environment facts, \
         conventions, lessons) or user (the user's preferences and corrections). action add \
         (content), replace (old_text identifies the entry, content), remove (old_text); or \
         `operations`, a list of such changes applied together. The files are small: keep \
         entries short; no task logs.",
        json!({"type": "object", "properties": {
            "action": {"type": "string", "enum": ["add", "replace", "remove"]},
            "target": {"type": "string", "enum": ["memory", "user"]},
            "content": {"type": "string"},
            "old_text": {"type": "string"},
            "operations": {"type": "array", "items": {"type": "object", "properties": {
                "action": {"type": "string", "enum": ["add", "replace", "remove"]},
                "target": {"type": "string", "enum": ["memory", "user"]},
                "content": {"type": "string"},
                "old_text": {"type": "string"}
            }, "required": ["action", "target"]}}
        }}),
        ToolKind::Edit,
        ApprovalNeed::Edits,
    )
});

#[derive(Debug, Deserialize)]
struct MemoryArgs {
    action: Option<String>,
    target: Option<Target>,
    content: Option<String>,
    old_text: Option<String>,
    #[serde(default)]
    operations: Vec<Operation>,
}

impl MemoryArgs {
    fn operations(self) -> Result<Vec<Operation>, SkillError> {
        if !self.operations.is_empty() {
            return Ok(self.operations);
        }
        let action = self.action.ok_or_else(|| {
            SkillError::Invalid("give `action` and `target`, or `operations`".into())
        })?;
        Ok(vec![Operation {
            action,
            target: self.target.unwrap_or(Target::Memory),
            content: self.content,
            old_text: self.old_text,
        }])
    }
}

impl Tool for Memory {
    fn definition(&self) -> &ToolDefinition {
        &MEMORY
    }

    fn describe(&self, args: &Value, _ctx: &ToolContext) -> CallDescription {
        let targets: Vec<&str> = match args["operations"].as_array() {
            Some(list) => list.iter().filter_map(|o| o["target"].as_str()).collect(),
            None => vec![args["target"].as_str().unwrap_or("memory")],
        };
        let writes: Vec<PathBuf> = match self.0.mode {
            WriteMode::Live => {
                let mut files: Vec<PathBuf> = targets
                    .iter()
                    .map(|t| {
                        self.0.memory.dir().join(if *t == "user" {
                            Target::User.file()
                        } else {
                            Target::Memory.file()
                        })
                    })
                    .collect();
                files.dedup();
                files
            }
            WriteMode::Staged { .. } => Vec::new(),
        };
        CallDescription {
            title: format!("Memory: {}", args["action"].as_str().unwrap_or("update")),
            paths: writes.clone(),
            writes,
            own_store: true,
            ..CallDescription::default()
        }
    }

    fn call<'a>(&'a self, args: Value, _ctx: &'a ToolContext) -> BoxFuture<'a, ToolOutcome> {
        let context = self.0.clone();
        Box::pin(blocking(move || {
            let operations = match serde_json::from_value::<MemoryArgs>(args)
                .map_err(|e| SkillError::Invalid(format!("Invalid arguments for memory: {e}")))
                .and_then(MemoryArgs::operations)
            {
                Ok(operations) => operations,
                Err(why) => return ToolOutcome::failed(why.to_string()),
            };
            match &context.mode {
                WriteMode::Live => {
                    match context
                        .memory
                        .apply(&operations, context.origin, &context.session)
                    {
                        Ok(done) => {
                            if context.origin == provenance::Origin::Review {
                                context.note_staged("memory changes");
                            }
                            ToolOutcome::completed(format!(
                                "{done} Saved; it shows in the system prompt of the next session."
                            ))
                            .with_effect(ToolEffect::Kept(Kept::Memory))
                        }
                        Err(why) => ToolOutcome::failed(why.to_string()),
                    }
                }
                WriteMode::Staged { review } => {
                    match context
                        .proposals
                        .stage_memory(review, &operations, &context.session)
                    {
                        Ok(proposal) => {
                            context.note_staged(&proposal.id);
                            ToolOutcome::completed(format!(
                                "Staged as proposal {} for the user to accept.",
                                proposal.id
                            ))
                            .with_effect(ToolEffect::Kept(Kept::Memory))
                        }
                        Err(why) => ToolOutcome::failed(why.to_string()),
                    }
                }
            }
        }))
    }
}
