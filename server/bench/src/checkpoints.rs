//! What checkpoints cost on a workspace of 10,000 files: a file tool's edit (its file read
//! before and after), a command (the stat walk before and after, one file changed), a rewind
//! putting back 100 files, and what the checkpoint store grows by per turn. Measured on the
//! checkpoint library the orchestrator calls, so the figures are the checkpoints' own.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use talaria_checkpoints::{BlobStore, Bounds, Workspace};

pub struct CheckpointCost {
    /// First read of the whole workspace (at session start, in the background).
    pub index_ms: f64,
    /// Added to one file tool's edit: (median, min) ms.
    pub edit: (f64, f64),
    /// Added to one command that changes one file: (median, min) ms.
    pub command: (f64, f64),
    /// A rewind putting back 100 files, ms.
    pub restore_100_ms: f64,
    /// Bytes the checkpoint store grows by for a turn that edits 3 files and runs a command
    /// changing 2 (each file 2 KB).
    pub growth_per_turn: u64,
}

/// 10,000 files of 2 KB in 100 folders (the shape of a mid-sized repository).
fn seed(root: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let mut files = Vec::with_capacity(10_000);
    for dir in 0..100 {
        let folder = root.join(format!("src{dir}"));
        std::fs::create_dir_all(&folder)?;
        for n in 0..100 {
            let path = folder.join(format!("file{n}.rs"));
            std::fs::write(&path, format!("// {dir}/{n}\n").repeat(200))?;
            files.push(path);
        }
    }
    Ok(files)
}

fn dir_bytes(dir: &Path) -> u64 {
    let mut seen = std::collections::HashSet::new();
    let mut total = 0;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(at) = stack.pop() {
        for entry in std::fs::read_dir(&at).into_iter().flatten().flatten() {
            let Ok(meta) = entry.metadata() else { continue };
            if meta.is_dir() {
                stack.push(entry.path());
            } else if seen.insert(std::os::unix::fs::MetadataExt::ino(&meta)) {
                total += meta.len();
            }
        }
    }
    total
}

fn timed(runs: usize, mut run: impl FnMut(usize)) -> (f64, f64) {
    let mut times: Vec<f64> = (0..runs)
        .map(|i| {
            let began = Instant::now();
            run(i);
            began.elapsed().as_secs_f64() * 1000.0
        })
        .collect();
    super::median(&mut times)
}

pub fn measure(runs: usize) -> anyhow::Result<CheckpointCost> {
    let home = tempfile::tempdir()?;
    let work = tempfile::tempdir()?;
    let files = seed(work.path())?;
    let blobs = Arc::new(BlobStore::open(home.path())?);
    let bounds = Bounds::default();
    let space = Workspace::new(
        vec![work.path().to_path_buf()],
        blobs.clone(),
        bounds,
        Arc::new(talaria_files::Unguarded),
    );
    let began = Instant::now();
    space.before_command();
    let index_ms = began.elapsed().as_secs_f64() * 1000.0;

    let edit = timed(runs, |i| {
        let path = vec![files[i % files.len()].clone()];
        let before = space.files_before(&path);
        let _ = std::fs::write(&path[0], format!("edited {i}\n"));
        space.files_after("bench", before);
    });
    let command = timed(runs, |i| {
        space.before_command();
        let _ = std::fs::write(&files[(i * 7) % files.len()], format!("command {i}\n"));
        space.after_command("bench");
    });

    // A turn's worth of changes to 100 files, then a rewind of them.
    space.before_command();
    for (i, path) in files.iter().take(100).enumerate() {
        std::fs::write(path, format!("turn {i}\n"))?;
    }
    let changes = space.after_command("rewind").changes;
    let began = Instant::now();
    let report = space.restore("rewind", &changes, false);
    let restore_100_ms = began.elapsed().as_secs_f64() * 1000.0;
    anyhow::ensure!(report.restored.len() == 100, "restored {:?}", report);

    // Growth: a fresh session's turn (new contents, as an agent writes them).
    let store = home.path().join("checkpoints");
    let grown_before = dir_bytes(&store.join("sessions")) + dir_bytes(&store.join("blobs"));
    let edits: Vec<PathBuf> = files[200..203].to_vec();
    for path in &edits {
        let before = space.files_before(std::slice::from_ref(path));
        std::fs::write(path, "x".repeat(2048))?;
        space.files_after("growth", before);
    }
    space.before_command();
    for path in &files[300..302] {
        std::fs::write(path, "y".repeat(2048) + &path.display().to_string())?;
    }
    space.after_command("growth");
    let grown_after = dir_bytes(&store.join("sessions")) + dir_bytes(&store.join("blobs"));
    Ok(CheckpointCost {
        index_ms,
        edit,
        command,
        restore_100_ms,
        growth_per_turn: grown_after.saturating_sub(grown_before),
    })
}
