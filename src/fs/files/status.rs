//! `.soma-mount.status`: what the daemon is doing now, as JSON made afresh at each open. It
//! is found by name at the mount's root and never listed (`ls -a` does not show it);
//! `soma-mount status <mountpoint>` reads it. It shows each file being generated (bytes and
//! rows done, the estimate of the total, the rate, reads waiting), the memory budget and the
//! generation slots (in use, waiting), the inodes the daemon holds, open handles and the
//! content cache.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

use serde_json::json;

use super::super::activity;
use super::super::error::FsResult;
use super::super::open_file::OpenFile;
use super::{FileContext, FileKind};

/// The status file's name at the mount's root.
pub const STATUS_NAME: &str = ".soma-mount.status";

/// Counts the tree keeps for the status file.
#[derive(Debug, Default)]
pub struct TreeCounts {
    /// Inodes the kernel holds (it looked them up and has not forgotten them).
    pub inodes: AtomicUsize,
    /// Directories and files the daemon holds in memory: those inodes and the entries of
    /// the listings they hold.
    pub nodes: AtomicUsize,
    pub open_handles: AtomicUsize,
}

/// The status file of a mount.
#[derive(Debug)]
pub struct StatusFile {
    uri: String,
    started: Instant,
    counts: Arc<TreeCounts>,
}

impl StatusFile {
    pub fn new(uri: &str, counts: Arc<TreeCounts>) -> StatusFile {
        StatusFile {
            uri: uri.to_owned(),
            started: Instant::now(),
            counts,
        }
    }

    /// The status now, as JSON.
    fn render(&self, cx: &FileContext) -> serde_json::Value {
        let memory = cx.budgets.memory.usage();
        let generations = cx.budgets.generations.usage();
        let running: Vec<_> = (cx.activity.running().into_iter())
            .map(|r| r.to_json())
            .collect();
        let (cache_bytes, cache_limit, cache_entries) = cx.options.cache.usage();
        let count = |c: &AtomicUsize| c.load(Ordering::Relaxed);
        json!({
            "pid": std::process::id(),
            "uri": self.uri,
            "uptime_seconds": self.started.elapsed().as_secs_f64(),
            "inodes": count(&self.counts.inodes),
            "nodes": count(&self.counts.nodes),
            "open_handles": count(&self.counts.open_handles),
            "memory": {
                "budget_bytes": memory.limit,
                "in_use_bytes": memory.in_use,
                "peak_bytes": memory.peak,
                "waiting": memory.waiting,
            },
            "generations": {
                "limit": generations.limit,
                "in_use": generations.in_use,
                "running": running,
                "waiting": generations.waiting,
            },
            "cache": {
                "bytes": cache_bytes,
                "limit_bytes": cache_limit,
                "entries": cache_entries,
            },
        })
    }
}

/// The status file's JSON, for people.
pub fn describe_status(status: &serde_json::Value) -> String {
    use activity::human_bytes;
    let n = |v: &serde_json::Value| v.as_u64().unwrap_or(0);
    let mut text = format!(
        "{} (daemon {}, up {:.0} s)\n",
        status["uri"].as_str().unwrap_or("?"),
        n(&status["pid"]),
        status["uptime_seconds"].as_f64().unwrap_or(0.0)
    );
    let generations = &status["generations"];
    let running = generations["running"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    text += &format!(
        "generating {} file(s) (at most {} at once), {} waiting for a turn\n",
        running.len(),
        n(&generations["limit"]),
        n(&generations["waiting"])
    );
    for file in &running {
        text += &format!("  {}\n", activity::Running::from_json(file).describe());
    }
    let memory = &status["memory"];
    text += &format!(
        "memory: {} of {} in use (peak {}), {} reader(s) waiting for memory\n",
        human_bytes(n(&memory["in_use_bytes"])),
        human_bytes(n(&memory["budget_bytes"])),
        human_bytes(n(&memory["peak_bytes"])),
        n(&memory["waiting"])
    );
    text += &format!(
        "inodes held: {}, open files: {}\n",
        n(&status["inodes"]),
        n(&status["open_handles"])
    );
    let cache = &status["cache"];
    text += &format!(
        "cache: {} of {} in {} file(s)\n",
        human_bytes(n(&cache["bytes"])),
        human_bytes(n(&cache["limit_bytes"])),
        n(&cache["entries"])
    );
    text
}

impl FileKind for StatusFile {
    /// Never known: the status is made at each open, and read with direct I/O.
    fn size(&self, _cx: &FileContext) -> FsResult<Option<u64>> {
        Ok(None)
    }

    fn open(&self, cx: &FileContext) -> FsResult<OpenFile> {
        let mut text =
            serde_json::to_vec_pretty(&self.render(cx)).expect("a JSON value always serializes");
        text.push(b'\n');
        Ok(OpenFile::Bytes(text.into()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::budget::Budgets;
    use crate::fs::files::testing::file_context;

    #[test]
    fn status_lists_the_generations_its_tree_runs_and_its_budgets() {
        let dir = std::env::temp_dir().join(format!("soma-mount-status-{}", std::process::id()));
        let cx = file_context(&dir, Budgets::new(8 << 20, 3));
        let status = StatusFile::new("mem://exp", Arc::default());
        let (slot, progress) = cx.for_file("obs/data.csv").begin_generation();
        progress.count_rows(5);
        let shown = status.render(&cx);
        let generations = &shown["generations"];
        assert_eq!(
            (
                generations["limit"].as_u64(),
                generations["in_use"].as_u64()
            ),
            (Some(3), Some(1))
        );
        assert_eq!(generations["running"][0]["path"], "obs/data.csv");
        assert_eq!(generations["running"][0]["rows"], 5);
        assert_eq!(shown["memory"]["budget_bytes"], 8 << 20);
        assert!(describe_status(&shown).contains("generating 1 file(s) (at most 3 at once)"));
        let other = file_context(&dir.with_extension("other"), Budgets::default());
        let apart = status.render(&other);
        assert_eq!(
            apart["generations"]["running"].as_array().map(Vec::len),
            Some(0)
        );
        assert_eq!(apart["generations"]["in_use"], 0);
        drop((slot, progress));
        assert_eq!(
            status.render(&cx)["generations"]["running"]
                .as_array()
                .map(Vec::len),
            Some(0)
        );
        std::fs::remove_dir_all(&dir).unwrap();
        std::fs::remove_dir_all(dir.with_extension("other")).unwrap();
    }
}
