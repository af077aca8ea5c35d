//! A task's workspace: a `repo` checked out (a git repository, at `rev`) or copied (a plain
//! directory) afresh into a throwaway directory, removed when the task is done; or a
//! `workspace` used as it is; or, with neither, an empty throwaway directory.

use std::path::{Path, PathBuf};
use std::process::Command;

use talaria_util::tree::{Links, copy_tree};

use crate::task::Task;

/// Why a workspace could not be made.
#[derive(Debug, thiserror::Error)]
pub enum WorkspaceError {
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("git {step} failed: {said}")]
    Git { step: &'static str, said: String },
}

/// The directory a task runs in; a throwaway one is removed on drop.
#[derive(Debug)]
pub struct Workspace {
    path: PathBuf,
    throwaway: bool,
}

impl Workspace {
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for Workspace {
    fn drop(&mut self) {
        if self.throwaway {
            let _ = std::fs::remove_dir_all(&self.path);
        }
    }
}

/// Makes the workspace of `task` under `work` (blocking: run it off the runtime's threads).
/// `work` itself is made for every kind of task: the agent writes the task's trajectory
/// there, whether or not the task has a throwaway folder.
pub fn prepare(task: &Task, work: &Path) -> Result<Workspace, WorkspaceError> {
    std::fs::create_dir_all(work)?;
    if let Some(dir) = &task.workspace {
        return Ok(Workspace {
            path: dir.clone(),
            throwaway: false,
        });
    }
    let path = work.join(format!("ws-{}", task.id));
    if path.exists() {
        // Left by a run that was killed: it starts afresh.
        std::fs::remove_dir_all(&path)?;
    }
    let workspace = Workspace {
        path,
        throwaway: true,
    };
    match &task.repo {
        None => std::fs::create_dir_all(&workspace.path)?,
        Some(repo) if repo.join(".git").exists() => {
            checkout(repo, task.rev.as_deref(), &workspace.path)?;
        }
        Some(repo) => copy_tree(repo, &workspace.path, Links::Keep)?,
    }
    Ok(workspace)
}

fn git(step: &'static str, args: &[&std::ffi::OsStr]) -> Result<(), WorkspaceError> {
    let output = Command::new("git")
        .args(args)
        .env("GIT_TERMINAL_PROMPT", "0")
        .output()?;
    if output.status.success() {
        Ok(())
    } else {
        Err(WorkspaceError::Git {
            step,
            said: String::from_utf8_lossy(&output.stderr).trim().to_string(),
        })
    }
}

fn checkout(repo: &Path, rev: Option<&str>, into: &Path) -> Result<(), WorkspaceError> {
    let os = |s: &'static str| std::ffi::OsStr::new(s);
    git(
        "clone",
        &[
            os("clone"),
            os("--quiet"),
            os("--no-hardlinks"),
            repo.as_os_str(),
            into.as_os_str(),
        ],
    )?;
    if let Some(rev) = rev {
        git(
            "checkout",
            &[
                os("-C"),
                into.as_os_str(),
                os("checkout"),
                os("--quiet"),
                os("--detach"),
                std::ffi::OsStr::new(rev),
            ],
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::task::PromptInput;

    fn task(id: &str) -> Task {
        Task {
            id: id.into(),
            prompt: PromptInput::Text("x".into()),
            repo: None,
            rev: None,
            workspace: None,
            mode: None,
            model: None,
            system_prompt: None,
            max_turns: None,
            timeout_s: None,
            setup: None,
            check: None,
            metadata: serde_json::Value::Null,
            agent: None,
        }
    }

    #[test]
    fn a_plain_repo_is_copied_afresh_with_its_links_and_the_copy_goes_with_the_task() {
        let dir = tempfile::tempdir().expect("dir");
        let repo = dir.path().join("repo");
        std::fs::create_dir_all(repo.join("src")).expect("src");
        std::fs::write(repo.join("src/a.txt"), "a").expect("write");
        std::os::unix::fs::symlink("/etc/passwd", repo.join("link")).expect("link");
        let mut t = task("t1");
        t.repo = Some(repo.clone());
        let work = dir.path().join("work");
        let made = prepare(&t, &work).expect("prepared");
        assert_eq!(
            std::fs::read_to_string(made.path().join("src/a.txt")).expect("copied"),
            "a"
        );
        assert!(made.path().join("link").is_symlink());
        std::fs::write(made.path().join("src/a.txt"), "changed").expect("write");
        assert_eq!(
            std::fs::read_to_string(repo.join("src/a.txt")).expect("read"),
            "a"
        );
        let path = made.path().to_path_buf();
        drop(made);
        assert!(!path.exists());
    }

    #[test]
    fn a_git_repo_is_checked_out_at_its_revision() {
        let dir = tempfile::tempdir().expect("dir");
        let repo = dir.path().join("repo");
        std::fs::create_dir_all(&repo).expect("repo");
        let run = |args: &[&str]| {
            let ok = Command::new("git")
                .args(["-C", repo.to_str().expect("utf-8")])
                .args(["-c", "user.name=t", "-c", "user.email=t@t"])
                .args(args)
                .output()
                .expect("git");
            assert!(ok.status.success(), "{ok:?}");
            String::from_utf8_lossy(&ok.stdout).trim().to_string()
        };
        run(&["init", "--quiet"]);
        std::fs::write(repo.join("f.txt"), "one").expect("write");
        run(&["add", "."]);
        run(&["commit", "--quiet", "-m", "one"]);
        let first = run(&["rev-parse", "HEAD"]);
        std::fs::write(repo.join("f.txt"), "two").expect("write");
        run(&["commit", "--quiet", "-am", "two"]);
        let mut t = task("g");
        t.repo = Some(repo.clone());
        t.rev = Some(first);
        let made = prepare(&t, &dir.path().join("work")).expect("checked out");
        assert_eq!(
            std::fs::read_to_string(made.path().join("f.txt")).expect("read"),
            "one"
        );
        t.rev = Some("no-such-revision".into());
        let failed = prepare(&t, &dir.path().join("work2")).expect_err("no such rev");
        assert!(failed.to_string().contains("checkout"), "{failed}");
    }
}
