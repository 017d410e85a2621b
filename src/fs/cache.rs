//! The on-disk content cache: generated files, keyed by what they were generated from (the
//! array's URI and fragments, the format, the slice), so a changed array gets a new key and
//! is never served stale. Entries are written under a temporary name and renamed into place
//! whole; the least recently used are removed to keep the total under the size limit. Content
//! being written counts too: a writer makes room for its bytes before it writes them
//! ([`Pending::make_room`]), so the cache stays under its limit while a large file is written,
//! and content that cannot fit is told so before it has filled the disk.

use std::collections::HashMap;
use std::fs::{self, File};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use log::{debug, warn};

use crate::digest::Digest;
use crate::sync::{Recover, SingleFlight};

use super::error::FsResult;

/// A cache key: a 128-bit digest of what the content is made from, as hex.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct CacheKey(String);

impl CacheKey {
    /// The key of content that `describe` describes to a digest, in this version of
    /// soma-mount.
    pub fn of(describe: impl FnOnce(&mut Digest)) -> CacheKey {
        let mut digest = Digest::new("soma-mount cache entry");
        digest.text(env!("CARGO_PKG_VERSION"));
        describe(&mut digest);
        CacheKey(digest.finish())
    }

    /// The key of content whose key is made in two steps: `first` from what is known before
    /// it is generated, `rest` from what is known once it is ([`ContentCache::holds_first`]
    /// finds such keys by their first part).
    pub fn joined(first: &CacheKey, rest: &CacheKey) -> CacheKey {
        CacheKey(format!("{}-{}", first.0, rest.0))
    }

    /// The key of content described by `parts` of text alone.
    pub fn new<'a>(parts: impl IntoIterator<Item = &'a str>) -> CacheKey {
        CacheKey::of(|digest| {
            for part in parts {
                digest.text(part);
            }
        })
    }
}

struct Entry {
    size: u64,
    last_used: u64,
}

/// Generated content on local disk.
pub struct ContentCache {
    dir: PathBuf,
    limit_bytes: u64,
    entries: Mutex<HashMap<String, Entry>>,
    /// Bytes made room for by content being written (not entries yet), shared with each
    /// [`Pending`] so that it gives its room back when dropped.
    writing: Arc<AtomicU64>,
    clock: AtomicU64,
    /// Keys being generated whole, so that concurrent opens generate an entry once.
    generating: SingleFlight<CacheKey, FsResult<()>>,
}

/// Content being written; it becomes an entry on [`ContentCache::commit`], and its temporary
/// file is removed if it is dropped before.
pub struct Pending {
    key: CacheKey,
    path: PathBuf,
    committed: bool,
    /// The bytes this content has made room for, counted in the cache's `writing`.
    room: u64,
    writing: Arc<AtomicU64>,
}

/// Why content cannot be kept in the cache.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NoRoom(pub String);

impl std::fmt::Display for NoRoom {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl Pending {
    /// Makes it, when committed, the entry for `key` rather than the key it was begun with
    /// (content whose key is known only once it is written).
    pub fn rekey(&mut self, key: CacheKey) {
        self.key = key;
    }

    /// Where the content is being written (for a library that writes to a path itself).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Makes room in `cache` for the content to hold `size` bytes in all, evicting the least
    /// recently used entries as needed. Room is made a step (`ROOM_STEP_BYTES`) ahead, so
    /// that a writer takes the cache's lock seldom. Fails, evicting nothing, when `size` is
    /// more than the cache's limit, or than what it leaves beside other content being
    /// written.
    pub fn make_room(&mut self, cache: &ContentCache, size: u64) -> Result<(), NoRoom> {
        if size <= self.room {
            return Ok(());
        }
        let size = size.max((self.room + ROOM_STEP_BYTES).min(cache.limit_bytes));
        if size > cache.limit_bytes {
            return Err(NoRoom(format!(
                "it is larger than --cache-size ({} bytes)",
                cache.limit_bytes
            )));
        }
        let mut entries = cache.entries.lock().recover();
        let more = size - self.room;
        if self.writing.load(Ordering::Relaxed) + more > cache.limit_bytes {
            return Err(NoRoom(format!(
                "the cache's {} bytes are taken by other files being written",
                cache.limit_bytes
            )));
        }
        self.writing.fetch_add(more, Ordering::Relaxed);
        self.room = size;
        cache.evict_to_fit(&mut entries, None);
        Ok(())
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        self.writing.fetch_sub(self.room, Ordering::Relaxed);
        if !self.committed {
            let _ = fs::remove_file(&self.path);
        }
    }
}

/// The bytes free to an unprivileged user on the file system of `dir`.
fn free_bytes(dir: &Path) -> Option<u64> {
    use std::os::unix::ffi::OsStrExt;
    let path = std::ffi::CString::new(dir.as_os_str().as_bytes()).ok()?;
    let mut stat = std::mem::MaybeUninit::<libc::statvfs>::uninit();
    // SAFETY: `path` is a NUL-terminated string that outlives the call, and `stat` is
    // writable memory for one `statvfs`, which the call fills when it returns 0.
    let stat = match unsafe { libc::statvfs(path.as_ptr(), stat.as_mut_ptr()) } {
        // SAFETY: the call returned 0, so it filled `stat`.
        0 => unsafe { stat.assume_init() },
        _ => return None,
    };
    Some(stat.f_bavail.saturating_mul(stat.f_frsize))
}

const SUFFIX: &str = ".data";
/// Content being written makes room for this many more bytes at a time.
const ROOM_STEP_BYTES: u64 = 16 << 20;
const TMP_SUFFIX: &str = ".tmp";

impl ContentCache {
    /// Opens (creating) the cache in `dir`; leftovers of an earlier run's unfinished writes
    /// are removed, finished entries are kept.
    pub fn open(dir: &Path, limit_bytes: u64) -> io::Result<ContentCache> {
        fs::create_dir_all(dir)?;
        let mut entries = HashMap::new();
        for item in fs::read_dir(dir)? {
            let item = item?;
            let name = item.file_name().to_string_lossy().into_owned();
            if name.ends_with(TMP_SUFFIX) {
                let _ = fs::remove_file(item.path());
            } else if let Some(key) = name.strip_suffix(SUFFIX) {
                let size = item.metadata()?.len();
                entries.insert(key.to_owned(), Entry { size, last_used: 0 });
            }
        }
        Ok(ContentCache {
            dir: dir.to_owned(),
            limit_bytes,
            entries: Mutex::new(entries),
            writing: Arc::default(),
            clock: AtomicU64::new(1),
            generating: SingleFlight::default(),
        })
    }

    fn path(&self, key: &CacheKey) -> PathBuf {
        self.dir.join(format!("{}{SUFFIX}", key.0))
    }

    /// The most the cache holds, in bytes (`--cache-size`).
    pub fn limit_bytes(&self) -> u64 {
        self.limit_bytes
    }

    /// The entries' bytes in all, the limit, and how many entries there are.
    pub fn usage(&self) -> (u64, u64, usize) {
        let entries = self.entries.lock().recover();
        let bytes = entries.values().map(|e| e.size).sum();
        (bytes, self.limit_bytes, entries.len())
    }

    /// The most a file generated whole (not streamed) may be estimated at: a tenth of
    /// `--cache-size`, so that the cache stays under its limit while it is written (a
    /// stream makes room as it grows), and half of what the cache could take on its disk
    /// (what is free, and what its entries hold), so that an estimate a little under the
    /// file's size still fits.
    pub fn whole_file_room(&self) -> u64 {
        let (held, _, _) = self.usage();
        let disk = free_bytes(&self.dir).map_or(u64::MAX, |free| free.saturating_add(held));
        (self.limit_bytes / 10).min(disk / 2)
    }

    /// The size of the entry for `key`, if there is one.
    pub fn size(&self, key: &CacheKey) -> Option<u64> {
        let entries = self.entries.lock().recover();
        entries.get(&key.0).map(|e| e.size)
    }

    /// Whether an entry's key was joined from `first` and a second part ([`CacheKey::joined`]).
    pub fn holds_first(&self, first: &CacheKey) -> bool {
        let entries = self.entries.lock().recover();
        let prefix = format!("{}-", first.0);
        entries.keys().any(|key| key.starts_with(&prefix))
    }

    /// Opens the entry for `key` for reading, marking it used.
    pub fn open_entry(&self, key: &CacheKey) -> Option<(File, u64)> {
        let mut entries = self.entries.lock().recover();
        let entry = entries.get_mut(&key.0)?;
        match File::open(self.path(key)) {
            Ok(file) => {
                entry.last_used = self.clock.fetch_add(1, Ordering::Relaxed);
                Some((file, entry.size))
            }
            Err(_) => {
                // Removed behind our back: forget it.
                entries.remove(&key.0);
                None
            }
        }
    }

    /// A new temporary file for content of `key`, opened for writing and for reading.
    pub fn begin(&self, key: &CacheKey) -> io::Result<(Pending, File)> {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let path = self
            .dir
            .join(format!("{}.{}.{n}{TMP_SUFFIX}", key.0, std::process::id()));
        let file = fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&path)?;
        Ok((
            Pending {
                key: key.clone(),
                path,
                committed: false,
                room: 0,
                writing: self.writing.clone(),
            },
            file,
        ))
    }

    /// Makes finished content an entry, then removes the least recently used entries until
    /// the cache fits its limit (the new entry is kept even when it alone is larger).
    pub fn commit(&self, mut pending: Pending, size: u64) -> io::Result<()> {
        fs::rename(&pending.path, self.path(&pending.key))?;
        pending.committed = true;
        let mut entries = self.entries.lock().recover();
        let now = self.clock.fetch_add(1, Ordering::Relaxed);
        entries.insert(
            pending.key.0.clone(),
            Entry {
                size,
                last_used: now,
            },
        );
        // Its room is its entry's now.
        self.writing.fetch_sub(pending.room, Ordering::Relaxed);
        pending.room = 0;
        self.evict_to_fit(&mut entries, Some(&pending.key));
        Ok(())
    }

    /// Removes the least recently used entries (but `keep`) until they and the content being
    /// written fit the limit, or none is left.
    fn evict_to_fit(&self, entries: &mut HashMap<String, Entry>, keep: Option<&CacheKey>) {
        let writing = self.writing.load(Ordering::Relaxed);
        let mut total: u64 = entries.values().map(|e| e.size).sum::<u64>() + writing;
        while total > self.limit_bytes {
            let Some(oldest) = entries
                .iter()
                .filter(|(k, _)| keep.is_none_or(|keep| **k != keep.0))
                .min_by_key(|(_, e)| e.last_used)
                .map(|(k, _)| k.clone())
            else {
                break;
            };
            let removed = entries.remove(&oldest).map_or(0, |e| e.size);
            total -= removed;
            debug!("cache: evicting {oldest} ({removed} bytes)");
            // An open reader keeps its descriptor; the name goes now.
            if let Err(e) = fs::remove_file(self.dir.join(format!("{oldest}{SUFFIX}"))) {
                warn!("cache: cannot remove {oldest}: {e}");
            }
        }
    }

    /// Runs `generate`, which makes the entry for `key`, unless it is running for `key`
    /// already: then this waits for that run and shares its outcome (an open that comes
    /// while the file is generated, or fails to be, does not generate it again).
    pub fn generate_once(
        &self,
        key: &CacheKey,
        generate: impl FnOnce() -> FsResult<()>,
    ) -> FsResult<()> {
        self.generating.run(key.clone(), generate)
    }
}

/// The S3 front's objects (immutable files of the store, fetched whole) are entries of
/// their own, within `--cache-size` like the rest, kept across mounts.
impl crate::s3::ObjectsKept for ContentCache {
    fn kept(&self, name: &str, version: &str) -> Option<Vec<u8>> {
        use std::io::Read;
        let (mut file, size) = self.open_entry(&object_key(name, version))?;
        let mut bytes = Vec::with_capacity(size as usize);
        file.read_to_end(&mut bytes).ok()?;
        (bytes.len() as u64 == size).then_some(bytes)
    }

    fn keep(&self, name: &str, version: &str, bytes: &[u8]) {
        use std::io::Write;
        let kept = self
            .begin(&object_key(name, version))
            .and_then(|(pending, mut file)| {
                file.write_all(bytes)?;
                // On disk before it has its name: a copy found under its name after a crash
                // is whole.
                file.sync_all()?;
                self.commit(pending, bytes.len() as u64)
            });
        if let Err(e) = kept {
            debug!("cache: cannot keep {name}: {e}");
        }
    }
}

fn object_key(name: &str, version: &str) -> CacheKey {
    CacheKey::new(["object of the store", name, version])
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn temp_dir(name: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("soma-mount-test-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        dir
    }

    #[test]
    fn entries_commit_survive_reopen_and_evict_oldest() {
        let dir = temp_dir("cache");
        let cache = ContentCache::open(&dir, 10).unwrap();
        for (name, bytes) in [("one", &b"123456"[..]), ("two", b"abcdef")] {
            let key = CacheKey::new([name]);
            let (pending, mut file) = cache.begin(&key).unwrap();
            file.write_all(bytes).unwrap();
            cache.commit(pending, bytes.len() as u64).unwrap();
        }
        assert_eq!(
            cache.size(&CacheKey::new(["one"])),
            None,
            "evicted to fit 10 bytes"
        );
        assert_eq!(cache.size(&CacheKey::new(["two"])), Some(6));
        let (pending, _file) = cache.begin(&CacheKey::new(["three"])).unwrap();
        drop(pending);
        let reopened = ContentCache::open(&dir, 10).unwrap();
        assert_eq!(reopened.size(&CacheKey::new(["two"])), Some(6));
        assert_eq!(
            fs::read_dir(&dir).unwrap().count(),
            1,
            "no temporary files left"
        );
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn content_keyed_once_written_is_found_by_its_first_part() {
        let dir = temp_dir("joined");
        let cache = ContentCache::open(&dir, 1 << 20).unwrap();
        let (first, rest) = (CacheKey::new(["first"]), CacheKey::new(["rest"]));
        let joined = CacheKey::joined(&first, &rest);
        assert!(!cache.holds_first(&first));
        let (mut pending, mut file) = cache.begin(&first).unwrap();
        file.write_all(b"h5ad").unwrap();
        pending.rekey(joined.clone());
        cache.commit(pending, 4).unwrap();
        assert_eq!(cache.size(&joined), Some(4));
        assert_eq!(cache.size(&first), None);
        assert!(cache.holds_first(&first));
        assert!(!cache.holds_first(&rest));
        let reopened = ContentCache::open(&dir, 1 << 20).unwrap();
        assert!(reopened.holds_first(&first), "kept for the next daemon");
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn content_being_written_makes_room_by_evicting_and_fails_past_the_limit() {
        let dir = temp_dir("room");
        let cache = ContentCache::open(&dir, 50 << 20).unwrap();
        let old = CacheKey::new(["old"]);
        let (pending, mut file) = cache.begin(&old).unwrap();
        file.write_all(&vec![1; 30 << 20]).unwrap();
        cache.commit(pending, 30 << 20).unwrap();
        let (mut growing, _file) = cache.begin(&CacheKey::new(["growing"])).unwrap();
        growing.make_room(&cache, 1).unwrap();
        assert_eq!(
            cache.size(&old),
            Some(30 << 20),
            "16 MiB of room fits beside it"
        );
        growing.make_room(&cache, 20 << 20).unwrap();
        assert_eq!(cache.size(&old), None, "evicted for the room");
        let (mut other, _other_file) = cache.begin(&CacheKey::new(["other"])).unwrap();
        let taken = other.make_room(&cache, 30 << 20).unwrap_err();
        assert!(taken.0.contains("other files"), "{taken}");
        let larger = growing.make_room(&cache, 51 << 20).unwrap_err();
        assert!(larger.0.contains("--cache-size"), "{larger}");
        drop(growing);
        other.make_room(&cache, 30 << 20).unwrap();
        fs::remove_dir_all(&dir).unwrap();
    }
}
