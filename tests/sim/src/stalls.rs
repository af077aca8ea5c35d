//! A store held by another program: SQLite's write lock taken by a connection of the test's
//! own (`BEGIN IMMEDIATE`), held until the guard is dropped.

use std::path::Path;
use std::sync::mpsc;
use std::time::Duration;

/// Holds the write lock of the SQLite file at `path` until dropped.
pub struct HeldLock {
    release: Option<mpsc::Sender<()>>,
    holder: Option<std::thread::JoinHandle<()>>,
}

impl Drop for HeldLock {
    fn drop(&mut self) {
        drop(self.release.take());
        if let Some(holder) = self.holder.take() {
            let _ = holder.join();
        }
    }
}

/// Takes the write lock of the store at `path` (waiting up to 30 s for it); held until the
/// guard is dropped. `None` if it could not be taken.
pub fn hold_write_lock(path: &Path) -> Option<HeldLock> {
    let (held, holding) = mpsc::channel();
    let (release, released) = mpsc::channel::<()>();
    let path = path.to_path_buf();
    let holder = std::thread::spawn(move || {
        let Ok(connection) = rusqlite::Connection::open(&path) else {
            let _ = held.send(false);
            return;
        };
        let _ = connection.busy_timeout(Duration::from_secs(30));
        let taken = connection.execute_batch("BEGIN IMMEDIATE").is_ok();
        let _ = held.send(taken);
        if taken {
            // Until the guard goes (its sender dropped).
            let _ = released.recv();
            let _ = connection.execute_batch("COMMIT");
        }
    });
    match holding.recv_timeout(Duration::from_secs(31)) {
        Ok(true) => Some(HeldLock {
            release: Some(release),
            holder: Some(holder),
        }),
        _ => None,
    }
}
