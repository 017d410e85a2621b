//! What a mount is generating now, for `soma-mount status` and the progress lines of the
//! log: each generation's file, bytes and rows done, the estimate of its size, its rate and
//! its readers.
//!
//! The generations running are an [`Activity`], one per tree, which `status` reads. Each
//! is begun for the file that work is [`Named`] for (the tree names every open and `stat`
//! it hands to a file), and its [`Progress`] is carried by the work it runs: the encoder's
//! feeder counts rows on it, the cache writer bytes, and a thread the work spawns takes a
//! clone along.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use crate::sync::Recover;

/// The file work is for, as `status` shows it.
#[derive(Debug, Clone, Default)]
pub struct Named {
    /// The file, relative to the mount's root; empty when the work names none.
    pub path: Arc<str>,
    /// About how many bytes it comes to, once known.
    pub estimated_bytes: Option<u64>,
}

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

/// The generations running in one tree: each listed while its [`Progress`] lives.
#[derive(Debug, Default)]
pub struct Activity {
    running: Mutex<Vec<Weak<Progress>>>,
}

impl Activity {
    /// A new generation of the file `named` names, listed until its progress is dropped.
    pub fn begin(&self, named: &Named) -> Arc<Progress> {
        let path = match &*named.path {
            "" => "(a file)".to_owned(),
            path => path.to_owned(),
        };
        let progress = Arc::new(Progress {
            path,
            started: Instant::now(),
            bytes: AtomicU64::new(0),
            rows: AtomicU64::new(0),
            estimated_bytes: AtomicU64::new(named.estimated_bytes.unwrap_or(0)),
            readers: AtomicUsize::new(0),
        });
        let mut running = self.running.lock().recover();
        running.retain(|p| p.strong_count() > 0);
        running.push(Arc::downgrade(&progress));
        progress
    }

    /// The generations under way, oldest first.
    pub fn running(&self) -> Vec<Running> {
        let running = self.running.lock().recover();
        running
            .iter()
            .filter_map(Weak::upgrade)
            .map(|p| p.running())
            .collect()
    }

    /// Logs each generation that has run longer than `after`, at info level (`-v`): the
    /// daemon calls it every few seconds.
    pub fn log_long_running(&self, after: Duration) {
        for generation in self.running() {
            if generation.seconds >= after.as_secs_f64() {
                log::info!("generating {}", generation.describe());
            }
        }
    }
}

impl Progress {
    /// Counts rows handed to its encoder.
    pub fn count_rows(&self, rows: usize) {
        self.rows.fetch_add(rows as u64, Ordering::Relaxed);
    }

    /// Counts bytes it wrote.
    pub fn count_bytes(&self, bytes: u64) {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_generation_is_listed_by_its_activity_under_its_name_while_it_runs() {
        let activity = Activity::default();
        let named = Named {
            path: "obs/data.csv".into(),
            estimated_bytes: Some(1000),
        };
        let progress = activity.begin(&named);
        let counted_apart = {
            let progress = progress.clone();
            std::thread::spawn(move || progress.count_rows(7))
        };
        counted_apart.join().unwrap();
        progress.count_bytes(300);
        let shown = activity.running();
        assert_eq!(shown.len(), 1);
        assert_eq!(shown[0].path, "obs/data.csv");
        assert_eq!((shown[0].bytes, shown[0].rows), (300, 7));
        assert_eq!(shown[0].estimated_bytes, Some(1000));
        assert!(
            Activity::default().running().is_empty(),
            "another tree's is apart"
        );
        drop(progress);
        assert!(activity.running().is_empty());
        let unnamed = activity.begin(&Named::default());
        assert_eq!(activity.running()[0].path, "(a file)");
        drop(unnamed);
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
