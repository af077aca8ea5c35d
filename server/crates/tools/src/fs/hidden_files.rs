//! The files of the places the sandbox hides, known by device and inode, so that a second
//! name of one (a hard link in the workspace, under any folder) is hidden too, for every
//! reader of the one way (file tools, checkpoints, rewinds, skills).
//!
//! The walk is kept until a file it is asked about could have been linked or moved since it
//! began: a new link, or a rename into a hidden place, changes the file's status time, so a
//! file whose status changed after the walk began is answered by a new walk. A walk cut
//! short (more entries than [`MAX_ENTRIES`]) answers "hidden" for every file with several
//! links (closed).

use std::collections::HashSet;
use std::ffi::OsStr;
use std::path::Path;
use std::sync::Arc;

use talaria_files::{Dir, Kind, Root, Stat, Unguarded};
use talaria_sandbox::SandboxPolicy;

/// How many entries of the hidden places a walk looks at before it gives up.
pub(crate) const MAX_ENTRIES: usize = 20_000;
/// How far a file's status time may lag the clock the walk's start was read from.
const CLOCK_SLACK_NS: i128 = 1_000_000_000;

/// The regular files of the hidden places at one moment.
#[derive(Debug)]
pub(crate) struct HiddenFiles {
    /// When the walk began (nanoseconds since the epoch).
    began_ns: i128,
    files: HashSet<(u64, u64)>,
    /// Every entry was looked at.
    complete: bool,
}

impl HiddenFiles {
    /// Walks every hidden place of `policy` (its `[sandbox] hidden` places and
    /// `TALARIA_HOME`, each home's credential stores and the keys at its top), leaving out
    /// what it lets commands read again. Blocking.
    pub(crate) fn walk(policy: &SandboxPolicy) -> Self {
        let mut known = HiddenFiles {
            began_ns: now_ns(),
            files: HashSet::new(),
            complete: true,
        };
        let mut budget = MAX_ENTRIES;
        let mut places = policy.hidden.clone();
        for home in &policy.homes {
            places.extend(talaria_sandbox::credentials::home_stores(home));
            places.extend(talaria_sandbox::credentials::keys_at_top(home));
        }
        for place in &places {
            if !known.walk_place(place, policy, &mut budget) {
                known.complete = false;
                break;
            }
        }
        known
    }

    /// Whether this walk still tells what `file` is: it was neither linked nor moved since
    /// the walk began.
    pub(crate) fn still_tells(&self, file: &Stat) -> bool {
        file.ctime_ns < self.began_ns - CLOCK_SLACK_NS
    }

    /// Whether `file` is one of the hidden files (or the walk could not tell).
    pub(crate) fn holds(&self, file: &Stat) -> bool {
        !self.complete || self.files.contains(&(file.dev, file.ino))
    }

    /// Records the files at `place`; `false` when the budget ran out.
    fn walk_place(&mut self, place: &Path, policy: &SandboxPolicy, budget: &mut usize) -> bool {
        let (Some(parent), Some(name)) = (place.parent(), place.file_name()) else {
            return true;
        };
        let Ok(above) = Root::open(parent, Arc::new(Unguarded)) else {
            return true;
        };
        self.walk_entry(above.as_dir(), name, policy, budget)
    }

    fn walk_entry(
        &mut self,
        dir: &Dir,
        name: &OsStr,
        policy: &SandboxPolicy,
        budget: &mut usize,
    ) -> bool {
        if *budget == 0 {
            return false;
        }
        *budget -= 1;
        let path = dir.real().join(name);
        if policy.readable.iter().any(|r| path.starts_with(r)) {
            return true;
        }
        let Ok(Some(stat)) = dir.stat(name) else {
            return true;
        };
        match stat.kind {
            Kind::File => {
                self.files.insert((stat.dev, stat.ino));
                true
            }
            Kind::Directory => {
                let Ok(inner) = dir.open_dir(name) else {
                    return true;
                };
                let Ok(entries) = inner.entries() else {
                    return true;
                };
                entries
                    .iter()
                    .all(|(entry, _)| self.walk_entry(&inner, entry, policy, budget))
            }
            Kind::Link | Kind::Other => true,
        }
    }
}

fn now_ns() -> i128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i128::try_from(d.as_nanos()).unwrap_or(i128::MAX))
}
