//! What the daemon is generating now, for `soma-mount status` and the progress lines of
//! the log: each generation's file, bytes and rows done, the estimate of its size, its
//! rate and its readers.
//!
//! A generation is tracked from where it runs ([`super::data`] for files generated whole,
//! [`super::open_file::Stream`] for files streamed while read), which knows bytes but not
//! which file of the mount it makes. The tree says that: it names the file on the thread
//! that opens or generates it ([`named`]), and a generation started on that thread takes
//! the name. Rows are counted by whoever hands batches to an encoder ([`count_rows`]), on
//! the generation's own thread.

use std::cell::RefCell;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use crate::sync::Recover;

/// One generation under way.
#[derive(Debug)]
pub struct Progress {
    /// The file, relative to the mount's root.
    pub path: String,
    pub started: Instant,
    bytes: AtomicU64,
    rows: AtomicU64,
    /// About how many bytes it comes to; 0 when not known.
    estimated_bytes: AtomicU64,
    /// Reads waiting for bytes not generated yet.
    readers: AtomicUsize,
}

/// A generation as `status` shows it.
#[derive(Debug, Clone)]
pub struct Running {
    pub path: String,
    pub seconds: f64,
    pub bytes: u64,
    pub rows: u64,
    pub estimated_bytes: Option<u64>,
    pub readers: usize,
}

static RUNNING: Mutex<Vec<Weak<Progress>>> = Mutex::new(Vec::new());

thread_local! {
    /// The file this thread opens or generates, and its estimated size.
    static NAMED: RefCell<Option<(String, Option<u64>)>> = const { RefCell::new(None) };
    /// The generation running on this thread.
    static CURRENT: RefCell<Option<Arc<Progress>>> = const { RefCell::new(None) };
}

/// Runs `work` (an open or a generation of the file at `path`) with the file named: a
/// generation it starts is shown under that name.
pub fn named<T>(path: &str, work: impl FnOnce() -> T) -> T {
    let outer = NAMED.with(|n| n.replace(Some((path.to_owned(), None))));
    let result = work();
    NAMED.with(|n| *n.borrow_mut() = outer);
    result
}

/// Says about how many bytes the file being opened on this thread comes to.
pub fn expect_bytes(bytes: u64) {
    NAMED.with(|n| {
        if let Some((_, estimate)) = n.borrow_mut().as_mut() {
            *estimate = Some(bytes);
        }
    });
}

impl Progress {
    /// A new generation of the file named on this thread, shown until dropped.
    pub fn begin() -> Arc<Progress> {
        let (path, estimate) = NAMED
            .with(|n| n.borrow().clone())
            .unwrap_or_else(|| ("(a file)".to_owned(), None));
        let progress = Arc::new(Progress {
            path,
            started: Instant::now(),
            bytes: AtomicU64::new(0),
            rows: AtomicU64::new(0),
            estimated_bytes: AtomicU64::new(estimate.unwrap_or(0)),
            readers: AtomicUsize::new(0),
        });
        let mut running = RUNNING.lock().recover();
        running.retain(|p| p.strong_count() > 0);
        running.push(Arc::downgrade(&progress));
        progress
    }

    /// Runs `work` as this generation: rows counted on this thread count for it.
    pub fn run<T>(self: &Arc<Self>, work: impl FnOnce() -> T) -> T {
        let outer = CURRENT.with(|c| c.replace(Some(self.clone())));
        let result = work();
        CURRENT.with(|c| *c.borrow_mut() = outer);
        result
    }

    pub fn add_bytes(&self, bytes: u64) {
        self.bytes.fetch_add(bytes, Ordering::Relaxed);
    }

    /// Reads waiting for this generation: counted while they wait.
    pub fn reader_waits(&self) {
        self.readers.fetch_add(1, Ordering::Relaxed);
    }

    pub fn reader_answered(&self) {
        self.readers.fetch_sub(1, Ordering::Relaxed);
    }

    fn running(&self) -> Running {
        let estimate = self.estimated_bytes.load(Ordering::Relaxed);
        Running {
            path: self.path.clone(),
            seconds: self.started.elapsed().as_secs_f64(),
            bytes: self.bytes.load(Ordering::Relaxed),
            rows: self.rows.load(Ordering::Relaxed),
            estimated_bytes: (estimate > 0).then_some(estimate),
            readers: self.readers.load(Ordering::Relaxed),
        }
    }
}

/// Whether this thread runs a generation (which holds a generation slot).
pub fn generating() -> bool {
    CURRENT.with(|c| c.borrow().is_some())
}

/// Counts rows handed to the encoder of the generation running on this thread.
pub fn count_rows(rows: usize) {
    CURRENT.with(|c| {
        if let Some(progress) = c.borrow().as_ref() {
            progress.rows.fetch_add(rows as u64, Ordering::Relaxed);
        }
    });
}

/// Counts bytes written by the generation running on this thread.
pub fn count_bytes(bytes: u64) {
    CURRENT.with(|c| {
        if let Some(progress) = c.borrow().as_ref() {
            progress.add_bytes(bytes);
        }
    });
}

/// The generations under way, oldest first.
pub fn running() -> Vec<Running> {
    let running = RUNNING.lock().recover();
    running
        .iter()
        .filter_map(Weak::upgrade)
        .map(|p| p.running())
        .collect()
}

impl Running {
    /// As the status file shows it.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "path": self.path,
            "bytes": self.bytes,
            "rows": self.rows,
            "estimated_bytes": self.estimated_bytes,
            "seconds": self.seconds,
            "bytes_per_second": self.bytes_per_second(),
            "readers": self.readers,
        })
    }

    /// Read back from the status file (what is missing reads as none).
    pub fn from_json(json: &serde_json::Value) -> Running {
        let count = |key: &str| json[key].as_u64().unwrap_or(0);
        Running {
            path: json["path"].as_str().unwrap_or("?").to_owned(),
            seconds: json["seconds"].as_f64().unwrap_or(0.0),
            bytes: count("bytes"),
            rows: count("rows"),
            estimated_bytes: json["estimated_bytes"].as_u64(),
            readers: count("readers") as usize,
        }
    }

    pub fn bytes_per_second(&self) -> f64 {
        if self.seconds > 0.0 {
            self.bytes as f64 / self.seconds
        } else {
            0.0
        }
    }

    /// One line for people: the file, what is done, the rate and the estimate.
    pub fn describe(&self) -> String {
        let mut line = format!(
            "{}: {} in {:.1} s ({}/s), {} rows",
            self.path,
            human_bytes(self.bytes),
            self.seconds,
            human_bytes(self.bytes_per_second() as u64),
            self.rows
        );
        if let Some(estimate) = self.estimated_bytes {
            line += &format!(", about {} in all", human_bytes(estimate));
        }
        if self.readers > 0 {
            line += &format!(", {} reads waiting", self.readers);
        }
        line
    }
}

/// Bytes as people read them, in the powers of 1024 that `--max-memory 512M` and
/// `--cache-size` mean: 12.3 MiB.
pub fn human_bytes(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes} B")
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

/// Logs each generation that has run longer than `after`, at info level (`-v`): the daemon
/// calls it every few seconds.
pub fn log_long_running(after: Duration) {
    for generation in running() {
        if generation.seconds >= after.as_secs_f64() {
            log::info!("generating {}", generation.describe());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_generation_takes_the_name_given_on_its_thread_and_counts_its_rows() {
        let progress = named("obs/data.csv", || {
            expect_bytes(1000);
            Progress::begin()
        });
        progress.run(|| count_rows(7));
        progress.add_bytes(300);
        let shown = running()
            .into_iter()
            .find(|r| r.path == "obs/data.csv")
            .expect("listed while it runs");
        assert_eq!((shown.bytes, shown.rows), (300, 7));
        assert_eq!(shown.estimated_bytes, Some(1000));
        drop(progress);
        assert!(running().iter().all(|r| r.path != "obs/data.csv"));
        assert_eq!(human_bytes(12_345_678), "11.8 MiB");
        assert_eq!(human_bytes(512 << 20), "512.0 MiB");
        assert_eq!(human_bytes(1023), "1023 B");
    }

    #[test]
    fn a_generation_reads_back_from_the_status_file_as_it_was() {
        let running = Running {
            path: "X/data.csv".to_owned(),
            seconds: 2.0,
            bytes: 4 << 20,
            rows: 1000,
            estimated_bytes: Some(8 << 20),
            readers: 1,
        };
        let again = Running::from_json(&running.to_json());
        assert_eq!(again.describe(), running.describe());
        assert_eq!(
            running.describe(),
            "X/data.csv: 4.0 MiB in 2.0 s (2.0 MiB/s), 1000 rows, about 8.0 MiB in all, 1 reads waiting"
        );
    }
}
