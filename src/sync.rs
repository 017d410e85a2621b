//! Locks that outlive a panic. A thread that panics while holding a lock poisons it; every
//! lock in soma-mount guards data that each use leaves consistent (one insert, one swap, one
//! read), so a poisoned lock's data is taken as it is rather than failing every FUSE request
//! after it.

use std::sync::{LockResult, PoisonError};

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
