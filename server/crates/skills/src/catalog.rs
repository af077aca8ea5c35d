//! Where skills live and what is there: the roots (`TALARIA_HOME/skills`, writable; the
//! project's `.talaria/skills`; read-only `.agents/skills` and `~/.claude/skills` where they
//! exist), scanned into a catalog of valid skills (first root wins a name) and invalid ones
//! (reported, never fatal), with the compact index the system prompt carries.
//!
//! Every read goes through the one way to the user's files (`talaria-files`): a root in the
//! workspace (whose commands may change it) is reached beneath the workspace held, no link
//! followed, and every skill folder and file below a root too; what the session's sandbox
//! hides is refused. A `SKILL.md` swapped for a link to `~/.aws/credentials` is never read.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use talaria_files::{Dir, FileError, Kind, Places, Unguarded};

use crate::SkillError;
use crate::skill::{self, SKILL_FILE, Skill};

/// One place skills are read from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Root {
    pub path: PathBuf,
    pub writable: bool,
    /// The folder held first when the root is inside it (the workspace): the root is reached
    /// below it with no link followed.
    pub within: Option<PathBuf>,
}

/// What a session may read from the workspace's skill roots: the files as the user accepted
/// them when the folder was trusted (a sandboxed command may rewrite them mid-session).
pub trait ContentPin: Send + Sync + std::fmt::Debug {
    /// Whether `bytes`, read from `relative` (below the workspace), are what was accepted.
    fn admits(&self, relative: &Path, bytes: &[u8]) -> bool;
}

/// The roots of a session, in precedence order, and what its sandbox hides.
#[derive(Debug, Clone)]
pub struct Roots {
    pub roots: Vec<Root>,
    /// The session's places (the writable root, Talaria's own, is read unguarded).
    pub places: Arc<dyn Places>,
    /// When set, every file read from a workspace root must be as it admits.
    pub pin: Option<Arc<dyn ContentPin>>,
}

impl Roots {
    /// `TALARIA_HOME/skills` (writable), then `<cwd>/.talaria/skills`, `<cwd>/.agents/skills`
    /// and `~/.claude/skills`.
    pub fn for_session(talaria_home: &Path, cwd: &Path, user_home: Option<&Path>) -> Self {
        let mut roots = vec![Root {
            path: talaria_home.join("skills"),
            writable: true,
            within: None,
        }];
        for path in [cwd.join(".talaria/skills"), cwd.join(".agents/skills")] {
            roots.push(Root {
                path,
                writable: false,
                within: Some(cwd.to_path_buf()),
            });
        }
        if let Some(home) = user_home {
            roots.push(Root {
                path: home.join(".claude/skills"),
                writable: false,
                within: None,
            });
        }
        Self {
            roots,
            places: Arc::new(Unguarded),
            pin: None,
        }
    }

    /// The same roots, their workspace files read only as `pin` admits them.
    pub fn with_pin(mut self, pin: Arc<dyn ContentPin>) -> Self {
        self.pin = Some(pin);
        self
    }

    /// Refuses `bytes` read from `path` when it lies in a workspace root and the pin does not
    /// admit them (the root is the first that holds the path, as for [`Self::skill_dir`]).
    pub fn admit(&self, path: &Path, bytes: &[u8]) -> Result<(), SkillError> {
        skill::Admits::admit(self, path, bytes)
    }
}

impl skill::Admits for Roots {
    fn admit(&self, path: &Path, bytes: &[u8]) -> Result<(), SkillError> {
        let Some(pin) = &self.pin else {
            return Ok(());
        };
        let Some(root) = self.roots.iter().find(|root| path.starts_with(&root.path)) else {
            return Ok(());
        };
        let Some(within) = &root.within else {
            return Ok(());
        };
        let relative = path.strip_prefix(within).unwrap_or(path);
        if pin.admits(relative, bytes) {
            return Ok(());
        }
        Err(SkillError::Invalid(format!(
            "{} changed (or appeared) after its folder's trust was judged at the start of this \
             session: it is not read now; a new session shows it for review",
            path.display()
        )))
    }
}

impl Roots {
    /// The same roots without the workspace's own (an untrusted folder's skills are not
    /// read).
    pub fn without_workspace(mut self) -> Self {
        self.roots.retain(|root| root.within.is_none());
        self
    }

    /// The same roots, judged by a session's `places`.
    pub fn with_places(mut self, places: Arc<dyn Places>) -> Self {
        self.places = places;
        self
    }

    /// The folder of `root`, held: below the folder it is within, no link followed.
    pub fn open(&self, root: &Root) -> Result<Dir, FileError> {
        let places = if root.writable {
            Arc::new(Unguarded)
        } else {
            self.places.clone()
        };
        let base = root.within.as_deref().unwrap_or(&root.path);
        let relative = root.path.strip_prefix(base).unwrap_or(Path::new(""));
        talaria_files::Root::open(base, places)?.dir(relative)
    }

    /// The folder of `found`, held, reached from its root with no link followed.
    pub fn skill_dir(&self, found: &Skill) -> Result<Dir, FileError> {
        let root = self
            .roots
            .iter()
            .find(|root| found.dir.starts_with(&root.path))
            .ok_or_else(|| FileError::Outside(found.dir.clone()))?;
        let relative = found.dir.strip_prefix(&root.path).unwrap_or(Path::new(""));
        self.open(root)?.dir(relative)
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

/// The folders in `dir` (a link is not one; names starting with `.` left out), sorted, held.
fn subdirs(dir: &Dir) -> Vec<Dir> {
    let Ok(entries) = dir.entries() else {
        return Vec::new();
    };
    let mut names: Vec<_> = entries
        .into_iter()
        .filter(|(name, kind)| *kind == Kind::Directory && !name.to_string_lossy().starts_with('.'))
        .map(|(name, _)| name)
        .collect();
    names.sort();
    names
        .iter()
        .filter_map(|name| dir.open_dir(name).ok())
        .collect()
}

/// Whether `dir` holds an entry `SKILL.md` (a link there counts: it is reported invalid).
fn holds_skill(dir: &Dir) -> bool {
    matches!(dir.stat(SKILL_FILE.as_ref()), Ok(Some(stat)) if stat.kind != Kind::Directory)
}

impl Catalog {
    /// Scans every root: `<root>/<name>/SKILL.md` and `<root>/<category>/<name>/SKILL.md`.
    pub fn scan(roots: &Roots) -> Self {
        let mut catalog = Self::default();
        for root in &roots.roots {
            let Ok(top) = roots.open(root) else {
                continue;
            };
            for dir in subdirs(&top) {
                if holds_skill(&dir) {
                    catalog.add(roots, &dir, None, root.writable);
                    continue;
                }
                let category = dir
                    .shown()
                    .file_name()
                    .and_then(|n| n.to_str())
                    .map(str::to_string);
                for inner in subdirs(&dir) {
                    if holds_skill(&inner) {
                        catalog.add(roots, &inner, category.as_deref(), root.writable);
                    }
                }
            }
        }
        catalog
    }

    fn add(&mut self, roots: &Roots, dir: &Dir, category: Option<&str>, writable: bool) {
        match skill::load(roots, dir, category, writable) {
            // An earlier root wins the name.
            Ok(found) if self.get(&found.name).is_some() => {}
            Ok(found) => self.skills.push(found),
            Err(why) => self.invalid.push(Invalid {
                path: dir.shown().join(SKILL_FILE),
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

    /// Admits only the files it names, with the bytes given.
    #[derive(Debug)]
    struct Accepted(Vec<(PathBuf, Vec<u8>)>);

    impl ContentPin for Accepted {
        fn admits(&self, relative: &Path, bytes: &[u8]) -> bool {
            self.0.iter().any(|(p, b)| p == relative && b == bytes)
        }
    }

    #[test]
    fn a_pin_refuses_workspace_skills_not_as_accepted_and_leaves_the_others_alone() {
        let home = tempfile::tempdir().expect("dir");
        let cwd = tempfile::tempdir().expect("dir");
        let text = |name: &str| format!("---\nname: {name}\ndescription: D\n---\nSteps.\n");
        write(&home.path().join("skills"), "mine", &text("mine"));
        let workspace = cwd.path().join(".talaria/skills");
        write(&workspace, "kept", &text("kept"));
        write(&workspace, "planted", &text("planted"));
        let pin = Accepted(vec![(
            PathBuf::from(".talaria/skills/kept/SKILL.md"),
            text("kept").into_bytes(),
        )]);
        let roots = Roots::for_session(home.path(), cwd.path(), None).with_pin(Arc::new(pin));
        let catalog = Catalog::scan(&roots);
        let names: Vec<&str> = catalog.skills.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["mine", "kept"]);
        assert_eq!(catalog.invalid.len(), 1, "{:?}", catalog.invalid);
        assert!(catalog.invalid[0].why.contains("changed (or appeared)"));
        // Unpinned, the same roots read both.
        let roots = Roots::for_session(home.path(), cwd.path(), None);
        assert_eq!(Catalog::scan(&roots).skills.len(), 3);
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
            Catalog::scan(&Roots {
                roots: Vec::new(),
                places: Arc::new(Unguarded),
                pin: None,
            })
            .index()
            .is_none()
        );
    }
}
