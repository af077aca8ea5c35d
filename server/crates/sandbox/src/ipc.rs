//! System V IPC without namespaces: shared memory segments, message queues and semaphore
//! sets live in the machine's IPC namespace, where a command could attach another program's
//! segment by its key or its id. The watcher (`watcher.rs`) is handed every such call: it
//! makes the objects a command asks for itself (as the same user, in the same namespace) and
//! remembers them; a command may then find and use those, and only those. (With namespaces
//! the command has an IPC namespace of its own.)
//!
//! - `shmget`, `msgget`, `semget`: with `IPC_PRIVATE`, made on the caller's behalf; with a
//!   key, the object with that key if this command made it, a new one if none has the key
//!   (made exclusively, so one another program makes meanwhile is never taken), refused
//!   (`EACCES`) if another program's has it.
//! - Calls on an object by id (`shmat`, `msgsnd`, `semop`, the `…ctl` calls): let through
//!   for the command's own objects (the id is a value: nothing the caller changes afterwards
//!   can redirect it); the counts and limits of the machine (`IPC_INFO`, `SHM_INFO`…) too;
//!   anything else answers as a missing object (`EINVAL`), so `ipcs` lists none.

use std::collections::HashSet;
use std::sync::Mutex;

use talaria_unotify::{IpcCall, IpcKind, Listener};

use crate::recorder::Recorder;
use crate::refusals::Refusal;

/// `IPC_PRIVATE`: a key that makes a new object every time.
const PRIVATE: i32 = 0;
/// `IPC_CREAT`, `IPC_EXCL`.
const CREATE: i32 = 0o1000;
const EXCLUSIVE: i32 = 0o2000;
/// `IPC_RMID`.
const REMOVE: i32 = 0;
/// `IPC_INFO`: the machine's limits, for every kind.
const IPC_INFO: i32 = 3;

/// Whether `command` of a `…ctl` call of `kind` reads the machine's counts and limits, not
/// an object (`IPC_INFO`; `SHM_INFO`, `MSG_INFO`, `SEM_INFO`, whose numbers are other
/// commands for the other kinds: 12 is `MSG_INFO` but `semctl`'s `GETVAL`).
fn reads_the_machine(kind: IpcKind, command: i32) -> bool {
    let own_info = match kind {
        IpcKind::SharedMemory => 14,
        IpcKind::MessageQueue => 12,
        IpcKind::Semaphores => 19,
    };
    command == IPC_INFO || command == own_info
}

/// The objects one command made.
#[derive(Default)]
pub(crate) struct OwnObjects {
    made: Mutex<HashSet<(IpcKind, i32)>>,
}

/// What the watcher answers a System V call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Answer {
    /// Let the call go on as made.
    Continue,
    /// Return this id (the watcher made the call itself).
    Value(i32),
    /// Fail with this error number.
    Error(i32),
}

impl OwnObjects {
    fn owns(&self, kind: IpcKind, id: i32) -> bool {
        self.made
            .lock()
            .is_ok_and(|made| made.contains(&(kind, id)))
    }

    fn remember(&self, kind: IpcKind, id: i32) {
        if let Ok(mut made) = self.made.lock() {
            made.insert((kind, id));
        }
    }

    fn forget(&self, kind: IpcKind, id: i32) {
        if let Ok(mut made) = self.made.lock() {
            made.remove(&(kind, id));
        }
    }

    /// The answer to `call`, with `get` making or finding objects (`sysv_get`, replaced in
    /// tests).
    pub(crate) fn judge(
        &self,
        call: IpcCall,
        get: impl Fn(IpcKind, i32, u64, i32) -> Result<i32, i32>,
    ) -> Answer {
        match call {
            IpcCall::Get {
                kind,
                key,
                size,
                flags,
            } => self.find_or_make(kind, key, size, flags, get),
            IpcCall::On { kind, id, command } => {
                if command.is_some_and(|c| reads_the_machine(kind, c)) {
                    return Answer::Continue;
                }
                if !self.owns(kind, id) {
                    return Answer::Error(libc::EINVAL);
                }
                if command == Some(REMOVE) {
                    // Its id may be given to another program's object next.
                    self.forget(kind, id);
                }
                Answer::Continue
            }
        }
    }

    fn find_or_make(
        &self,
        kind: IpcKind,
        key: i32,
        size: u64,
        flags: i32,
        get: impl Fn(IpcKind, i32, u64, i32) -> Result<i32, i32>,
    ) -> Answer {
        if key == PRIVATE {
            return self.made_by(kind, get(kind, key, size, flags));
        }
        match get(kind, key, 0, 0) {
            // One with the key exists: the command's own (the call as asked), or another
            // program's (refused).
            Ok(id) if self.owns(kind, id) => match get(kind, key, size, flags) {
                Ok(id) => Answer::Value(id),
                Err(errno) => Answer::Error(errno),
            },
            Ok(_) => Answer::Error(libc::EACCES),
            Err(libc::ENOENT) if flags & CREATE != 0 => {
                match get(kind, key, size, flags | EXCLUSIVE) {
                    // Another program made one with this key meanwhile: not the command's.
                    Err(libc::EEXIST) if flags & EXCLUSIVE == 0 => Answer::Error(libc::EACCES),
                    made => self.made_by(kind, made),
                }
            }
            Err(errno) => Answer::Error(errno),
        }
    }

    fn made_by(&self, kind: IpcKind, made: Result<i32, i32>) -> Answer {
        match made {
            Ok(id) => {
                self.remember(kind, id);
                Answer::Value(id)
            }
            Err(errno) => Answer::Error(errno),
        }
    }
}

/// Answers the stopped System V call `id` of the listener.
pub(crate) fn answer(
    listener: &Listener,
    objects: &OwnObjects,
    recorder: &Recorder,
    id: u64,
    call: IpcCall,
) {
    let answer = objects.judge(call, |kind, key, size, flags| {
        talaria_unotify::sysv_get(kind, key, size, flags)
            .map_err(|e| e.raw_os_error().unwrap_or(libc::EACCES))
    });
    match answer {
        Answer::Continue => listener.let_continue(id),
        Answer::Value(value) => listener.respond_value(id, i64::from(value)),
        Answer::Error(errno) => {
            if errno == libc::EACCES {
                recorder.record(Refusal::SharedObject);
            }
            listener.respond(id, Err(errno));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;
    use std::collections::HashMap;

    /// A machine's IPC namespace: keys to ids, and the next id.
    #[derive(Default)]
    struct Machine {
        keys: RefCell<HashMap<i32, i32>>,
        next: RefCell<i32>,
    }

    impl Machine {
        fn get(&self, _kind: IpcKind, key: i32, _size: u64, flags: i32) -> Result<i32, i32> {
            let existing = (key != PRIVATE)
                .then(|| self.keys.borrow().get(&key).copied())
                .flatten();
            match existing {
                Some(_) if flags & (CREATE | EXCLUSIVE) == CREATE | EXCLUSIVE => Err(libc::EEXIST),
                Some(id) => Ok(id),
                None if key != PRIVATE && flags & CREATE == 0 => Err(libc::ENOENT),
                None => {
                    *self.next.borrow_mut() += 1;
                    let id = *self.next.borrow();
                    if key != PRIVATE {
                        self.keys.borrow_mut().insert(key, id);
                    }
                    Ok(id)
                }
            }
        }
    }

    const SHM: IpcKind = IpcKind::SharedMemory;

    fn get(key: i32, flags: i32) -> IpcCall {
        IpcCall::Get {
            kind: SHM,
            key,
            size: 4096,
            flags,
        }
    }

    fn on(id: i32, command: Option<i32>) -> IpcCall {
        IpcCall::On {
            kind: SHM,
            id,
            command,
        }
    }

    #[test]
    fn a_command_reaches_the_objects_it_made_and_no_other_programs() {
        let machine = Machine::default();
        let objects = OwnObjects::default();
        let judge = |call| objects.judge(call, |k, key, s, f| machine.get(k, key, s, f));
        // Another program's segment, by key 7 (id 1).
        assert_eq!(machine.get(SHM, 7, 4096, CREATE), Ok(1));
        assert_eq!(judge(get(7, 0)), Answer::Error(libc::EACCES));
        assert_eq!(judge(get(7, CREATE)), Answer::Error(libc::EACCES));
        assert_eq!(judge(on(1, None)), Answer::Error(libc::EINVAL));
        assert_eq!(
            judge(on(1, Some(2))),
            Answer::Error(libc::EINVAL),
            "IPC_STAT"
        );
        // Its own: a private one, and one by a key of its own, found again by that key.
        assert_eq!(judge(get(PRIVATE, 0o600)), Answer::Value(2));
        assert_eq!(judge(get(9, CREATE | 0o600)), Answer::Value(3));
        assert_eq!(judge(get(9, 0)), Answer::Value(3));
        assert_eq!(
            judge(get(9, CREATE | EXCLUSIVE)),
            Answer::Error(libc::EEXIST)
        );
        assert_eq!(judge(get(11, 0)), Answer::Error(libc::ENOENT));
        for id in [2, 3] {
            assert_eq!(judge(on(id, None)), Answer::Continue);
        }
        // The machine's counts, not an object; the same numbers are other commands for the
        // other kinds (semctl's GETVAL and GETNCNT).
        assert_eq!(judge(on(0, Some(14))), Answer::Continue, "SHM_INFO");
        assert_eq!(judge(on(0, Some(3))), Answer::Continue, "IPC_INFO");
        let semaphores = |command| IpcCall::On {
            kind: IpcKind::Semaphores,
            id: 1,
            command: Some(command),
        };
        for command in [12, 14] {
            assert_eq!(judge(semaphores(command)), Answer::Error(libc::EINVAL));
        }
        assert_eq!(judge(semaphores(19)), Answer::Continue, "SEM_INFO");
        // Removed, its id is no longer the command's.
        assert_eq!(judge(on(2, Some(REMOVE))), Answer::Continue);
        assert_eq!(judge(on(2, None)), Answer::Error(libc::EINVAL));
    }

    #[test]
    fn a_key_another_program_takes_between_the_look_and_the_make_is_refused() {
        let objects = OwnObjects::default();
        // The look finds nothing; by the make, another program's (id 99) has the key: an
        // exclusive make says so, a plain one would hand it over.
        let racing = |_: IpcKind, _: i32, _: u64, flags: i32| {
            if flags & CREATE == 0 {
                Err(libc::ENOENT)
            } else if flags & EXCLUSIVE != 0 {
                Err(libc::EEXIST)
            } else {
                Ok(99)
            }
        };
        assert_eq!(
            objects.judge(get(5, CREATE), racing),
            Answer::Error(libc::EACCES)
        );
        assert_eq!(
            objects.judge(get(5, CREATE | EXCLUSIVE), racing),
            Answer::Error(libc::EEXIST)
        );
    }
}
