//! Faults that tests inject into a running daemon: to see that a failure inside a generation
//! reaches its readers as an error and leaves nothing behind.
//!
//! `SOMA_MOUNT_FAULT=<point>:<n>` in the daemon's environment makes the `n`-th pass (from 1)
//! through the named point panic, once. The points are listed in [`Point`]. Without the
//! variable every point is a load of an initialised `OnceLock`.

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

    /// The point a variable's `<point>:<value>` names, and the value.
    fn parse(spec: &str) -> Option<(Point, u64)> {
        let (name, value) = spec.split_once(':')?;
        let point = [Point::Read, Point::Encode, Point::Commit]
            .into_iter()
            .find(|p| p.name() == name)?;
        Some((point, value.parse().ok()?))
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
            let (point, n) = Point::parse(&std::env::var("SOMA_MOUNT_FAULT").ok()?)?;
            let n = Some(n).filter(|&n| n > 0)?;
            log::warn!(
                "fault injection: pass {n} through {} will panic",
                point.name()
            );
            Some(Fault {
                point,
                remaining: AtomicU64::new(n),
            })
        })
        .as_ref()
}

/// A pass through `point`: panics if this is the pass the environment asked to fail.
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
