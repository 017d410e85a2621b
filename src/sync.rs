//! Locks that outlive a panic, locks taken per key, and the background work the daemon waits
//! for before it exits.
//!
//! A thread that panics while holding a lock poisons it; every lock in soma-mount guards data
//! that each use leaves consistent (one insert, one swap, one read), so a poisoned lock's
//! data is taken as it is rather than failing every FUSE request after it.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::{Arc, Condvar, LockResult, Mutex, PoisonError};
use std::time::Duration;

/// The guard of a lock (`lock()`, `read()`, `write()`, a condition variable's `wait()`),
/// poisoned or not.
pub trait Recover<Guard> {
    fn recover(self) -> Guard;
}

impl<Guard> Recover<Guard> for LockResult<Guard> {
    fn recover(self) -> Guard {
        self.unwrap_or_else(PoisonError::into_inner)
    }
}

/// One lock per key, made when first asked for and forgotten when no one holds it: work on
/// one key (generating a cache entry, opening a URI) runs once at a time, while other keys
/// go on. The second caller waits for the first, then finds its result.
pub struct KeyedLocks<Key> {
    locks: Mutex<HashMap<Key, Arc<Mutex<()>>>>,
}

impl<Key: Eq + Hash> KeyedLocks<Key> {
    /// The lock of `key`: lock it for the time of the work.
    pub fn of(&self, key: Key) -> Arc<Mutex<()>> {
        let mut locks = self.locks.lock().recover();
        // Only the map holds a lock no caller has: it is no one's to wait on.
        locks.retain(|_, lock| Arc::strong_count(lock) > 1);
        locks.entry(key).or_default().clone()
    }
}

impl<Key> Default for KeyedLocks<Key> {
    fn default() -> Self {
        KeyedLocks {
            locks: Mutex::new(HashMap::new()),
        }
    }
}

/// Work running on threads of its own, outside any FUSE request: members opened ahead of
/// looks into them, files generated while they are read. The daemon stops it and waits for
/// it before it exits ([`Background::stop`], [`Background::wait`]): no thread may still be inside
/// libtiledb when its static state is torn down.
#[derive(Default)]
pub struct Background {
    /// How many tasks run, and whether new ones are refused.
    state: Mutex<(usize, bool)>,
    ended: Condvar,
}

/// One running piece of background work: it ends when this is dropped.
pub struct Task(Arc<Background>);

impl Background {
    /// Counts a new task in, unless background work has stopped.
    pub fn begin(self: &Arc<Self>) -> Option<Task> {
        let mut state = self.state.lock().recover();
        if state.1 {
            return None;
        }
        state.0 += 1;
        Some(Task(self.clone()))
    }

    /// Whether the daemon is ending: running tasks should skip what they have not started.
    pub fn stopped(&self) -> bool {
        self.state.lock().recover().1
    }

    /// Refuses new tasks from now on.
    pub fn stop(&self) {
        self.state.lock().recover().1 = true;
    }

    /// Waits up to `limit` for running tasks to end: false if some still run.
    pub fn wait(&self, limit: Duration) -> bool {
        let state = self.state.lock().recover();
        let (state, _) = self
            .ended
            .wait_timeout_while(state, limit, |s| s.0 > 0)
            .recover();
        state.0 == 0
    }
}

impl Drop for Task {
    fn drop(&mut self) {
        let mut state = self.0.state.lock().recover();
        state.0 -= 1;
        if state.0 == 0 {
            self.0.ended.notify_all();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    #[test]
    fn a_key_is_locked_once_at_a_time_and_forgotten_when_free() {
        let locks = KeyedLocks::default();
        let a = locks.of("a");
        let held = a.lock().unwrap();
        assert!(locks.of("a").try_lock().is_err(), "same key, same lock");
        assert!(locks.of("b").try_lock().is_ok(), "another key is free");
        drop(held);
        drop(a);
        let _ = locks.of("c");
        assert_eq!(
            locks.locks.lock().unwrap().len(),
            1,
            "unheld locks are dropped"
        );
    }

    #[test]
    fn stopping_waits_for_running_tasks_and_refuses_new_ones() {
        let background = Arc::new(Background::default());
        let task = background.begin().expect("running");
        let worker = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(200));
            drop(task);
        });
        let started = Instant::now();
        background.stop();
        assert!(background.wait(Duration::from_secs(10)));
        assert!(started.elapsed() >= Duration::from_millis(150));
        assert!(background.stopped());
        assert!(background.begin().is_none());
        worker.join().unwrap();
    }

    #[test]
    fn stopping_gives_up_after_the_limit() {
        let background = Arc::new(Background::default());
        let task = background.begin().expect("running");
        background.stop();
        assert!(!background.wait(Duration::from_millis(50)));
        drop(task);
        assert!(background.wait(Duration::from_millis(50)));
    }
}
