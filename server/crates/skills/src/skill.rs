//! One skill: a folder with `SKILL.md` (agentskills.io front matter: `name`, `description`,
//! optional `metadata`) and optional `references/`, `templates/`, `scripts/`, `assets/`.

use crate::SkillError;

use std::path::PathBuf;

use serde_json::Value;

use crate::frontmatter;

/// The longest name.
pub const MAX_NAME: usize = 64;
/// The longest description.
pub const MAX_DESCRIPTION: usize = 1024;
/// The largest `SKILL.md`, in characters.
pub const MAX_SKILL_CHARS: usize = 100_000;
/// The largest support file, in bytes.
pub const MAX_SUPPORT_BYTES: usize = 1024 * 1024;
/// The folders a skill may hold besides `SKILL.md`.
pub const SUPPORT_DIRS: [&str; 4] = ["references", "templates", "scripts", "assets"];
/// The file that makes a folder a skill.
pub const SKILL_FILE: &str = "SKILL.md";

/// A parsed skill.
#[derive(Debug, Clone, PartialEq)]
pub struct Skill {
    pub name: String,
    pub description: String,
    /// From `metadata.category`, else the folder the skill sits in below its root.
    pub category: Option<String>,
    pub metadata: Value,
    /// The skill's folder.
    pub dir: PathBuf,
    /// Whether it lives in the writable root (`TALARIA_HOME/skills`).
    pub writable: bool,
}

/// Checks a skill name: 1–64 characters of `[a-z0-9._-]`, starting with a letter or digit.
pub fn check_name(name: &str) -> Result<(), SkillError> {
    let ok = !name.is_empty()
        && name.len() <= MAX_NAME
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"._-".contains(&b))
        && name
            .bytes()
            .next()
            .is_some_and(|b| b.is_ascii_lowercase() || b.is_ascii_digit());
    if ok {
        Ok(())
    } else {
        Err(SkillError::Invalid(format!(
            "invalid skill name {name:?}: 1 to {MAX_NAME} characters of a-z, 0-9, '.', '_' or '-', starting with a letter or digit"
        )))
    }
}

/// Parses and checks the text of a `SKILL.md`.
pub fn parse(text: &str) -> Result<(String, String, Value), SkillError> {
    if text.chars().count() > MAX_SKILL_CHARS {
        return Err(SkillError::Invalid(format!(
            "SKILL.md is longer than {MAX_SKILL_CHARS} characters"
        )));
    }
    let (meta, body) = frontmatter::split(text)?;
    let name = meta["name"]
        .as_str()
        .ok_or_else(|| SkillError::Invalid("the front matter has no `name`".into()))?
        .to_string();
    check_name(&name)?;
    let description = meta["description"]
        .as_str()
        .map(str::trim)
        .filter(|d| !d.is_empty())
        .ok_or_else(|| SkillError::Invalid("the front matter has no `description`".into()))?
        .to_string();
    if description.chars().count() > MAX_DESCRIPTION {
        return Err(SkillError::Invalid(format!(
            "the description is longer than {MAX_DESCRIPTION} characters"
        )));
    }
    if body.trim().is_empty() {
        return Err(SkillError::Invalid(
            "SKILL.md has no instructions after the front matter".into(),
        ));
    }
    Ok((name, description, meta["metadata"].clone()))
}

/// The most bytes a `SKILL.md` of [`MAX_SKILL_CHARS`] characters can take.
pub const MAX_SKILL_BYTES: u64 = MAX_SKILL_CHARS as u64 * 4;

/// What may be read as it is: a session's roots refuse bytes of a workspace skill that are
/// not as its folder's trust accepted them (`Roots`, `catalog.rs`).
pub trait Admits {
    /// `Err` when `bytes`, read from `path`, may not be read.
    fn admit(&self, path: &std::path::Path, bytes: &[u8]) -> Result<(), SkillError>;
}

/// The text of the file `name` in the held folder `dir` (no link followed, what the sandbox
/// hides refused, what `roots` do not admit refused), at most `limit` bytes.
pub fn read_text(
    roots: &dyn Admits,
    dir: &talaria_files::Dir,
    name: &str,
    limit: u64,
) -> Result<String, SkillError> {
    let bytes = dir
        .read(name.as_ref(), limit)
        .map_err(|e| SkillError::io("read", &dir.shown().join(name))(e.into()))?;
    roots.admit(&dir.shown().join(name), &bytes)?;
    String::from_utf8(bytes).map_err(|_| {
        SkillError::Invalid(format!(
            "{} is not UTF-8 text",
            dir.shown().join(name).display()
        ))
    })
}

/// Reads the skill in the held folder `dir`; `category` is the folder it sits in below its
/// root, if any.
pub fn load(
    roots: &dyn Admits,
    dir: &talaria_files::Dir,
    category: Option<&str>,
    writable: bool,
) -> Result<Skill, SkillError> {
    let text = read_text(roots, dir, SKILL_FILE, MAX_SKILL_BYTES)?;
    let (name, description, metadata) = parse(&text)?;
    let category = metadata["category"]
        .as_str()
        .map(str::to_string)
        .or_else(|| category.map(str::to_string));
    Ok(Skill {
        name,
        description,
        category,
        metadata,
        dir: dir.shown().to_path_buf(),
        writable,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_descriptions_are_checked() {
        assert!(check_name("fix-flaky-tests.v2").is_ok());
        for bad in ["", "Caps", "-lead", "with space", "../up", &"a".repeat(65)] {
            assert!(check_name(bad).is_err(), "{bad}");
        }
        let good = "---\nname: a\ndescription: d\n---\nDo it.\n";
        assert!(parse(good).is_ok());
        assert!(
            parse("---\nname: a\n---\nDo it.\n").is_err(),
            "no description"
        );
        assert!(
            parse("---\nname: a\ndescription: d\n---\n\n").is_err(),
            "no body"
        );
        let long = format!("---\nname: a\ndescription: {}\n---\nx\n", "d".repeat(1025));
        assert!(parse(&long).is_err());
    }
}
