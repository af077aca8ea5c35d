//! Where skills live and what is there: the roots (`TALARIA_HOME/skills`, writable; the
//! project's `.talaria/skills`; read-only `.agents/skills` and `~/.claude/skills` where they
//! exist), scanned into a catalog of valid skills (first root wins a name) and invalid ones
//! (reported, never fatal), with the compact index the system prompt carries.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::skill::{self, SKILL_FILE, Skill};

/// One place skills are read from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Root {
    pub path: PathBuf,
    pub writable: bool,
}

/// The roots of a session, in precedence order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Roots {
    pub roots: Vec<Root>,
}

impl Roots {
    /// `TALARIA_HOME/skills` (writable), then `<cwd>/.talaria/skills`, `<cwd>/.agents/skills`
    /// and `~/.claude/skills`.
    pub fn for_session(talaria_home: &Path, cwd: &Path, user_home: Option<&Path>) -> Self {
        let mut roots = vec![Root {
            path: talaria_home.join("skills"),
            writable: true,
        }];
        for path in [cwd.join(".talaria/skills"), cwd.join(".agents/skills")] {
            roots.push(Root {
                path,
                writable: false,
            });
        }
        if let Some(home) = user_home {
            roots.push(Root {
                path: home.join(".claude/skills"),
                writable: false,
            });
        }
        Self { roots }
    }

    /// The writable root.
    pub fn writable(&self) -> Option<&Path> {
        self.roots
            .iter()
            .find(|r| r.writable)
            .map(|r| r.path.as_path())
    }
}

/// A skill folder that could not be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Invalid {
    pub path: PathBuf,
    pub why: String,
}

/// The skills found in a set of roots.
#[derive(Debug, Clone, Default)]
pub struct Catalog {
    pub skills: Vec<Skill>,
    pub invalid: Vec<Invalid>,
}

fn is_hidden(path: &Path) -> bool {
    path.file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| n.starts_with('.'))
}

fn subdirs(dir: &Path) -> Vec<PathBuf> {
    let Ok(read) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut dirs: Vec<PathBuf> = read
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.is_dir() && !is_hidden(p))
        .collect();
    dirs.sort();
    dirs
}

impl Catalog {
    /// Scans every root: `<root>/<name>/SKILL.md` and `<root>/<category>/<name>/SKILL.md`.
    pub fn scan(roots: &Roots) -> Self {
        let mut catalog = Self::default();
        for root in &roots.roots {
            for dir in subdirs(&root.path) {
                if dir.join(SKILL_FILE).is_file() {
                    catalog.add(&dir, None, root.writable);
                    continue;
                }
                let category = dir.file_name().and_then(|n| n.to_str()).map(str::to_string);
                for inner in subdirs(&dir) {
                    if inner.join(SKILL_FILE).is_file() {
                        catalog.add(&inner, category.as_deref(), root.writable);
                    }
                }
            }
        }
        catalog
    }

    fn add(&mut self, dir: &Path, category: Option<&str>, writable: bool) {
        match skill::load(dir, category, writable) {
            // An earlier root wins the name.
            Ok(found) if self.get(&found.name).is_some() => {}
            Ok(found) => self.skills.push(found),
            Err(why) => self.invalid.push(Invalid {
                path: dir.join(SKILL_FILE),
                why: why.to_string(),
            }),
        }
    }

    pub fn get(&self, name: &str) -> Option<&Skill> {
        self.skills.iter().find(|s| s.name == name)
    }

    /// Skills grouped by category (`general` for none), names sorted.
    pub fn by_category(&self) -> BTreeMap<String, Vec<&Skill>> {
        let mut groups: BTreeMap<String, Vec<&Skill>> = BTreeMap::new();
        for found in &self.skills {
            groups
                .entry(found.category.clone().unwrap_or_else(|| "general".into()))
                .or_default()
                .push(found);
        }
        for list in groups.values_mut() {
            list.sort_by(|a, b| a.name.cmp(&b.name));
        }
        groups
    }

    /// The index for the system prompt (`None` when there are no skills).
    pub fn index(&self) -> Option<String> {
        if self.skills.is_empty() {
            return None;
        }
        let mut out = String::from(
            "Skills: saved procedures. Before a task, check whether one applies and load it with skill_view.\n",
        );
        for (category, skills) in self.by_category() {
            out.push_str(&format!("{category}:\n"));
            for found in skills {
                out.push_str(&format!(
                    "- {}: {}\n",
                    found.name,
                    one_line(&found.description)
                ));
            }
        }
        Some(out)
    }
}

/// The first line of a description, at most 200 characters.
pub fn one_line(text: &str) -> String {
    let line = text.lines().next().unwrap_or("").trim();
    let mut short: String = line.chars().take(200).collect();
    if line.chars().count() > 200 {
        short.push('…');
    }
    short
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, name: &str, text: &str) {
        std::fs::create_dir_all(dir.join(name)).expect("mkdir");
        std::fs::write(dir.join(name).join(SKILL_FILE), text).expect("write");
    }

    #[test]
    fn roots_are_scanned_in_order_and_invalid_skills_are_reported() {
        let home = tempfile::tempdir().expect("dir");
        let cwd = tempfile::tempdir().expect("dir");
        let user = tempfile::tempdir().expect("dir");
        let roots = Roots::for_session(home.path(), cwd.path(), Some(user.path()));
        write(
            &home.path().join("skills"),
            "deploy",
            "---\nname: deploy\ndescription: Ship it\n---\nSteps.\n",
        );
        write(
            &home.path().join("skills/ci"),
            "flaky",
            "---\nname: flaky\ndescription: Fix flaky tests\n---\nSteps.\n",
        );
        write(
            &cwd.path().join(".agents/skills"),
            "deploy",
            "---\nname: deploy\ndescription: shadowed\n---\nSteps.\n",
        );
        write(
            &user.path().join(".claude/skills"),
            "broken",
            "no front matter",
        );
        write(
            &user.path().join(".claude/skills"),
            "review",
            "---\nname: review\ndescription: Review a PR\nmetadata:\n  category: git\n---\nSteps.\n",
        );
        let catalog = Catalog::scan(&roots);
        let mut names: Vec<&str> = catalog.skills.iter().map(|s| s.name.as_str()).collect();
        names.sort_unstable();
        assert_eq!(names, ["deploy", "flaky", "review"]);
        assert_eq!(
            catalog.get("deploy").map(|s| s.description.as_str()),
            Some("Ship it")
        );
        assert!(catalog.get("deploy").is_some_and(|s| s.writable));
        assert!(catalog.get("review").is_some_and(|s| !s.writable));
        assert_eq!(catalog.invalid.len(), 1);
        assert!(catalog.invalid[0].why.contains("front matter"));
        let index = catalog.index().expect("index");
        assert!(index.contains("ci:\n- flaky: Fix flaky tests\n"), "{index}");
        assert!(index.contains("git:\n- review: Review a PR\n"), "{index}");
        assert!(
            Catalog::scan(&Roots { roots: Vec::new() })
                .index()
                .is_none()
        );
    }
}
