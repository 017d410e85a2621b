//! Faults that tests inject into a running daemon, to see that a failure inside a generation
//! reaches its readers as an error and leaves nothing behind.
//!
//! `SOMA_MOUNT_FAULT=<point>:<n>` in the daemon's environment makes the `n`-th pass (from 1)
//! through the named point panic, once. The points are listed in [`Point`]. Without the
//! variable every point is a relaxed atomic load.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

/// The places a fault can be injected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Point {
    /// A reader thread, after it has read a batch and before it hands it over.
    Read,
    /// A text encoder thread, before it encodes a piece.
    Encode,
    /// A generator thread streaming a file, before it commits the file to the cache.
    Commit,
}

impl Point {
    fn name(self) -> &'static str {
        match self {
            Point::Read => "read",
            Point::Encode => "encode",
            Point::Commit => "commit",
        }
    }
}

/// The configured fault: its point, and how many passes are left before it fires.
struct Fault {
    point: Point,
    remaining: AtomicU64,
}

fn configured() -> Option<&'static Fault> {
    static FAULT: OnceLock<Option<Fault>> = OnceLock::new();
    FAULT
        .get_or_init(|| {
            let spec = std::env::var("SOMA_MOUNT_FAULT").ok()?;
            let (name, n) = spec.split_once(':')?;
            let point = [Point::Read, Point::Encode, Point::Commit]
                .into_iter()
                .find(|p| p.name() == name)?;
            let n: u64 = n.parse().ok().filter(|&n| n > 0)?;
            log::warn!("fault injection: pass {n} through {name} will panic");
            Some(Fault {
                point,
                remaining: AtomicU64::new(n),
            })
        })
        .as_ref()
}

/// A pass through `point`: panics if this is the pass the environment asked for.
pub fn pass(point: Point) {
    let Some(fault) = configured().filter(|f| f.point == point) else {
        return;
    };
    let before = fault
        .remaining
        .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1));
    if before == Ok(1) {
        panic!("fault injected at {}", point.name());
    }
}
