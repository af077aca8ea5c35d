//! The actions of `skill_manage` on one skill folder: create, patch, edit, delete,
//! write_file, remove_file. Writes are atomic (a temporary file renamed into place); paths stay
//! inside the skill's folder and its support folders (`..`, absolute paths and symlinks are
//! refused); sizes and names are checked; content is scanned before it is kept.

use crate::SkillError;

use std::path::{Component, Path, PathBuf};

use serde::Deserialize;

use crate::scan;
use crate::skill::{self, MAX_SUPPORT_BYTES, SKILL_FILE, SUPPORT_DIRS};

/// The arguments of `skill_manage`.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
pub struct ManageArgs {
    pub action: String,
    pub name: String,
    /// The whole `SKILL.md` (create, edit).
    #[serde(default)]
    pub content: Option<String>,
    /// Patch: the exact text to replace, and its replacement.
    #[serde(default)]
    pub old_string: Option<String>,
    #[serde(default)]
    pub new_string: Option<String>,
    #[serde(default)]
    pub replace_all: bool,
    /// A support file below the skill folder (`references/notes.md`); for patch, the file to
    /// patch (default `SKILL.md`).
    #[serde(default)]
    pub file_path: Option<String>,
    /// The support file's content (write_file).
    #[serde(default)]
    pub file_content: Option<String>,
}

/// The actions, as the tool's schema lists them.
pub const ACTIONS: [&str; 6] = [
    "create",
    "patch",
    "edit",
    "delete",
    "write_file",
    "remove_file",
];

/// Whether an action changes an existing skill (and so needs it viewed first in a review).
pub fn changes_existing(action: &str) -> bool {
    matches!(
        action,
        "patch" | "edit" | "delete" | "write_file" | "remove_file"
    )
}

fn is_symlink(path: &Path) -> bool {
    std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink())
}

/// The names of a support file's path (`references/notes.md`: a support folder, then plain
/// names), or why it is refused.
pub fn support_parts(relative: &str) -> Result<Vec<&str>, SkillError> {
    let path = Path::new(relative);
    let parts: Vec<&str> = path
        .components()
        .map(|c| match c {
            Component::Normal(part) => part.to_str().ok_or("a path that is not UTF-8"),
            _ => Err(
                "only plain relative paths inside the skill folder (no `..`, no absolute paths)",
            ),
        })
        .collect::<Result<_, _>>()
        .map_err(|why| SkillError::Invalid(format!("refused {relative:?}: {why}")))?;
    if parts.len() < 2 || !SUPPORT_DIRS.contains(&parts[0]) {
        return Err(SkillError::Invalid(format!(
            "refused {relative:?}: support files go in {} (e.g. references/notes.md)",
            SUPPORT_DIRS.join(", ")
        )));
    }
    Ok(parts)
}

/// A support file's path inside `dir`, or why it is refused.
pub fn confine(dir: &Path, relative: &str) -> Result<PathBuf, SkillError> {
    let parts = support_parts(relative)?;
    let mut current = dir.to_path_buf();
    if is_symlink(&current) {
        return Err(SkillError::Invalid(format!(
            "refused: {} is a symbolic link",
            current.display()
        )));
    }
    for part in &parts {
        current.push(part);
        if is_symlink(&current) {
            return Err(SkillError::Invalid(format!(
                "refused {relative:?}: {} is a symbolic link",
                current.display()
            )));
        }
    }
    Ok(current)
}

/// The folder holding `path` (made when missing), held, and the file's name in it: the
/// stores are reached through the one way to files (`talaria-files`), no link followed below
/// the folder.
fn folder_of(path: &Path) -> Result<(talaria_files::Root, &std::ffi::OsStr), SkillError> {
    let (Some(parent), Some(name)) = (path.parent(), path.file_name()) else {
        return Err(SkillError::Invalid("a file needs a folder".into()));
    };
    let folder =
        talaria_files::Root::open_making(parent, std::sync::Arc::new(talaria_files::Unguarded))
            .map_err(|e| SkillError::io("open", parent)(e.into()))?;
    Ok((folder, name))
}

/// Writes a file atomically: a temporary file made exclusively beside it, then a rename
/// within the folder.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), SkillError> {
    let (folder, name) = folder_of(path)?;
    folder
        .as_dir()
        .replace(name, bytes, &talaria_files::Replace::default())
        .map_err(|e| SkillError::io("write", path)(e.into()))
}

/// Reads a store's text file, with no link followed below its folder.
pub fn read_text(path: &Path) -> Result<String, SkillError> {
    let (folder, name) = folder_of(path)?;
    let bytes = folder
        .as_dir()
        .read(name, MAX_READ_BYTES)
        .map_err(|e| SkillError::io("read", path)(e.into()))?;
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

/// The most a store's file read by [`read_text`] may hold.
const MAX_READ_BYTES: u64 = 16 << 20;

/// Removes a store's file (the name itself), with no link followed.
fn remove_file(path: &Path) -> Result<(), SkillError> {
    let (folder, name) = folder_of(path)?;
    folder
        .as_dir()
        .remove(name)
        .map(|_| ())
        .map_err(|e| SkillError::io("remove", path)(e.into()))
}

/// Removes a store's folder and everything in it, no link followed.
pub fn remove_tree(path: &Path) -> Result<(), SkillError> {
    let (folder, name) = folder_of(path)?;
    folder
        .as_dir()
        .remove_tree(name)
        .map_err(|e| SkillError::io("delete", path)(e.into()))
}

fn checked_skill_text(args: &ManageArgs, text: &str) -> Result<(), SkillError> {
    let (name, _, _) = skill::parse(text)?;
    if name != args.name {
        return Err(SkillError::Invalid(format!(
            "the front matter names the skill {name:?}, but the call is for {:?}",
            args.name
        )));
    }
    scan::check(text)
}

fn require<'a>(value: &'a Option<String>, what: &str, action: &str) -> Result<&'a str, SkillError> {
    value
        .as_deref()
        .ok_or_else(|| SkillError::Invalid(format!("{action} needs `{what}`")))
}

/// `patch`: replaces `old_string` in SKILL.md or a support file, checked like a new write.
fn patch(dir: &Path, skill_file: &Path, args: &ManageArgs) -> Result<String, SkillError> {
    let old = require(&args.old_string, "old_string", "patch")?;
    let new = require(&args.new_string, "new_string", "patch")?;
    if old.is_empty() {
        return Err(SkillError::Invalid(
            "patch needs a non-empty `old_string`".into(),
        ));
    }
    let target = match &args.file_path {
        Some(relative) if relative != SKILL_FILE => confine(dir, relative)?,
        _ => skill_file.to_path_buf(),
    };
    let text = read_text(&target)?;
    let found = text.matches(old).count();
    if found == 0 {
        return Err(SkillError::Invalid(
            "`old_string` does not occur in the file; view it and copy the exact text".into(),
        ));
    }
    if found > 1 && !args.replace_all {
        return Err(SkillError::Invalid(format!(
            "`old_string` occurs {found} times; give more context or set replace_all"
        )));
    }
    let patched = if args.replace_all {
        text.replace(old, new)
    } else {
        text.replacen(old, new, 1)
    };
    if target == skill_file {
        checked_skill_text(args, &patched)?;
    } else {
        scan::check(&patched)?;
    }
    write_atomic(&target, patched.as_bytes())?;
    Ok(format!(
        "Patched {} of skill {} ({} replacement{}).",
        target.strip_prefix(dir).unwrap_or(&target).display(),
        args.name,
        if args.replace_all { found } else { 1 },
        if args.replace_all && found > 1 {
            "s"
        } else {
            ""
        }
    ))
}

/// Applies `args` to the skill folder `dir`; returns what was done.
pub fn apply(dir: &Path, args: &ManageArgs) -> Result<String, SkillError> {
    skill::check_name(&args.name)?;
    let skill_file = dir.join(SKILL_FILE);
    let exists = skill_file.is_file();
    if is_symlink(dir) || is_symlink(&skill_file) {
        return Err(SkillError::Invalid(format!(
            "refused: {} is a symbolic link",
            dir.display()
        )));
    }
    let action = args.action.as_str();
    if action != "create" && !exists {
        return Err(SkillError::NotFound(format!(
            "there is no skill {:?} to {action} (create it first)",
            args.name
        )));
    }
    match action {
        "create" | "edit" => {
            if action == "create" && exists {
                return Err(SkillError::Invalid(format!(
                    "the skill {:?} exists already; use edit or patch",
                    args.name
                )));
            }
            let content = require(&args.content, "content", action)?;
            checked_skill_text(args, content)?;
            write_atomic(&skill_file, content.as_bytes())?;
            Ok(format!(
                "{} skill {} ({} characters).",
                if action == "create" {
                    "Created"
                } else {
                    "Rewrote"
                },
                args.name,
                content.chars().count()
            ))
        }
        "patch" => patch(dir, &skill_file, args),
        "delete" => {
            remove_tree(dir)?;
            Ok(format!("Deleted skill {}.", args.name))
        }
        "write_file" => {
            let relative = require(&args.file_path, "file_path", action)?;
            let content = require(&args.file_content, "file_content", action)?;
            if content.len() > MAX_SUPPORT_BYTES {
                return Err(SkillError::Invalid(format!(
                    "support files are at most {MAX_SUPPORT_BYTES} bytes; this one is {}",
                    content.len()
                )));
            }
            scan::check(content)?;
            let target = confine(dir, relative)?;
            write_atomic(&target, content.as_bytes())?;
            Ok(format!("Wrote {relative} in skill {}.", args.name))
        }
        "remove_file" => {
            let relative = require(&args.file_path, "file_path", action)?;
            let target = confine(dir, relative)?;
            remove_file(&target)?;
            Ok(format!("Removed {relative} from skill {}.", args.name))
        }
        other => Err(SkillError::Invalid(format!(
            "unknown action {other:?}; use one of {}",
            ACTIONS.join(", ")
        ))),
    }
}
