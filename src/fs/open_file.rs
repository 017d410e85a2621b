//! Open files: what a file handle reads from. Small documents are bytes in memory; generated
//! data is a cache entry on disk, or a stream that a generator thread is still writing into a
//! cache file (or, when the cache has no room for it, into a window of memory that its
//! reader reads once, from start to end); some files (`.npy`) read each byte range on
//! demand.
//!
//! Reads are answered through a callback: a read of a stream beyond what has been generated
//! is answered by the generator thread once it has written that far, so no FUSE request
//! thread waits for a generation. A generation holds one of the daemon's generation slots
//! (`--max-generations`) while it runs, and gives it back while it waits for its readers;
//! when they come back it goes on at once, taking a slot back only if one is free.

use std::collections::VecDeque;
use std::fs::File;
use std::io::{self, Write};
use std::os::unix::fs::FileExt;
use std::sync::{Arc, Condvar, Mutex};

use crate::budget::Permit;
use crate::sync::{Recover, Task};

use super::activity::Progress;
use super::cache::{CacheKey, ContentCache, NoRoom, Pending};

/// How far a generator may run ahead of the furthest byte a reader asked for.
const READ_AHEAD_BYTES: u64 = 64 << 20;

/// Content read a byte range at a time, each range on its own.
pub trait ReadAt: Send + Sync {
    /// Up to `size` bytes at `offset`; fewer only at the end.
    fn read_at(&self, offset: u64, size: u32) -> io::Result<Vec<u8>>;
}

/// Where a read's bytes (or its error) go.
pub type ReadAnswer = Box<dyn FnOnce(io::Result<Vec<u8>>) + Send>;

/// What one file handle reads.
pub enum OpenFile {
    Bytes(Arc<[u8]>),
    Cached(File),
    Streaming(Arc<Stream>),
    Ranges(Box<dyn ReadAt>),
}

impl OpenFile {
    /// Answers with up to `size` bytes at `offset`; fewer only at the end of the content, or
    /// while a stream has produced less so far (a short read; the reader asks again). A
    /// stream answers once it has bytes at `offset`, from its generator's thread; the rest
    /// answer before this returns (ranges read from the store: see
    /// [`OpenFile::reads_from_store`]).
    pub fn read(&self, offset: u64, size: u32, answer: ReadAnswer) {
        match self {
            OpenFile::Bytes(bytes) => {
                let start = usize::try_from(offset)
                    .unwrap_or(usize::MAX)
                    .min(bytes.len());
                let end = start.saturating_add(size as usize).min(bytes.len());
                answer(Ok(bytes[start..end].to_vec()))
            }
            OpenFile::Cached(file) => answer(read_at(file, offset, size as u64)),
            OpenFile::Streaming(stream) => stream.read(offset, size, answer),
            OpenFile::Ranges(ranges) => answer(ranges.read_at(offset, size)),
        }
    }

    /// Whether a read goes to the store (and may take as long as a request to it).
    pub fn reads_from_store(&self) -> bool {
        matches!(self, OpenFile::Ranges(_))
    }

    /// The handle is closed: an unfinished stream stops generating.
    pub fn close(&self) {
        if let OpenFile::Streaming(stream) = self {
            stream.cancel();
        }
    }
}

fn read_at(file: &File, offset: u64, len: u64) -> io::Result<Vec<u8>> {
    let mut buf = vec![0u8; len as usize];
    let mut filled = 0;
    while filled < buf.len() {
        match file.read_at(&mut buf[filled..], offset + filled as u64) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    buf.truncate(filled);
    Ok(buf)
}

struct StreamState {
    produced: u64,
    /// The furthest byte any reader has asked for.
    wanted: u64,
    /// Someone waits for the end (an `fstat` for the exact size): the generator runs ahead
    /// of the readers without bound, while the content goes to the cache file.
    to_end: bool,
    /// The bytes from 0 to here are in the cache file.
    in_file: u64,
    /// Once the content is not cached: its latest bytes, kept in memory for the reader.
    memory: Option<Window>,
    /// Once the content is not cached: the cache file it began in, kept (with its room in
    /// the cache) while the stream is, for reads of the bytes it holds.
    abandoned: Option<Pending>,
    finished: Option<Outcome>,
    cancelled: bool,
    /// Called with the outcome once there is one (`stat`s waiting for the exact size).
    waiters: Vec<Waiter>,
    /// Reads of bytes not produced yet: offset, size and where the bytes go.
    reads: Vec<(u64, u32, ReadAnswer)>,
}

/// The latest bytes of content that is not cached, as the generator wrote them: `pieces`
/// hold the bytes from `start` on, and go from the front once the reader is past them.
struct Window {
    start: u64,
    pieces: VecDeque<Vec<u8>>,
}

impl Window {
    /// A window of the bytes from `start` on, none written yet.
    fn at(start: u64) -> Window {
        Window {
            start,
            pieces: VecDeque::new(),
        }
    }

    /// Adds the next bytes, and lets go of the pieces wholly before `keep_from`.
    fn push(&mut self, bytes: &[u8], keep_from: u64) {
        self.pieces.push_back(bytes.to_vec());
        while let Some(first) = self.pieces.front() {
            let end = self.start + first.len() as u64;
            if end > keep_from {
                break;
            }
            self.start = end;
            self.pieces.pop_front();
        }
    }

    /// Up to `size` bytes at `offset`; `None` when they are gone.
    fn copy(&self, offset: u64, size: u64) -> Option<Vec<u8>> {
        let mut at = offset.checked_sub(self.start)?;
        let mut bytes = Vec::new();
        for piece in &self.pieces {
            let len = piece.len() as u64;
            if at >= len {
                at -= len;
                continue;
            }
            let end = len.min(at + size - bytes.len() as u64);
            bytes.extend_from_slice(&piece[at as usize..end as usize]);
            at = 0;
            if bytes.len() as u64 == size {
                break;
            }
        }
        Some(bytes)
    }

    /// The bytes it holds.
    #[cfg(test)]
    fn held(&self) -> u64 {
        self.pieces.iter().map(|piece| piece.len() as u64).sum()
    }
}

/// For content that is not cached, kept in memory: how far the generator may run ahead of
/// the furthest byte its reader asked for, and how much before that byte is kept for reads
/// that come again (at least the largest read FUSE sends).
const MEMORY_AHEAD_BYTES: u64 = 8 << 20;
const MEMORY_BEHIND_BYTES: u64 = 4 << 20;

/// Called with a stream's outcome once it has one.
type Waiter = Box<dyn FnOnce(&Outcome) + Send>;

/// How a stream's generation ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Generated whole and committed to the cache: this many bytes.
    Done(u64),
    /// The content is not cached (the cache has no room for it): it is generated for this
    /// stream's readers alone, from start to end, and its size is not known before the end.
    /// Waiters hear this as soon as it is so; the stream ends with it too.
    NotCached,
    /// Every reader closed the file before the end: nothing was committed.
    Stopped,
    /// Generation failed: nothing was committed.
    Failed(String),
}

/// Where a read's bytes are: in the cache file (offset and length), or copied from memory.
enum Piece {
    InFile(u64, u64),
    Copied(Vec<u8>),
}

/// Content a generator thread writes for its readers: into a cache file, which readers read
/// while it grows and which becomes a cache entry at the end; or, when the cache has no
/// room for it, into memory, a window of its latest bytes (see [`StreamSink`]).
pub struct Stream {
    /// The cache file, for reads (`None`: the content was never cached).
    file: Option<File>,
    state: Mutex<StreamState>,
    changed: Condvar,
    progress: Arc<Progress>,
}

impl Stream {
    /// Starts `generate` on its own thread, writing into a new entry of `cache` for `key`,
    /// which is committed when generation succeeds; content the cache cannot hold (about
    /// `estimated_bytes`, more than `--cache-size`; or more than it has room for once
    /// written) is streamed from memory instead, and `what` is logged. The thread is `task`:
    /// it ends with it. It runs as the generation `progress` shows, and holds `slot`, its
    /// generation slot (none inside another generation), while it runs (see the module's
    /// notes).
    pub fn start(
        cache: Arc<ContentCache>,
        (key, what): (CacheKey, String),
        estimated_bytes: u64,
        task: Task,
        (slot, progress): (Option<Permit>, Arc<Progress>),
        generate: impl FnOnce(&mut (dyn Write + Send)) -> io::Result<()> + Send + 'static,
    ) -> io::Result<Arc<Stream>> {
        let limit = cache.limit_bytes();
        let cache_file = match estimated_bytes > limit {
            true => Err(NoRoom(format!(
                "its estimated {estimated_bytes} bytes are more than --cache-size ({limit} bytes)"
            ))),
            false => cache.begin(&key).map_err(|e| NoRoom(e.to_string())),
        };
        let (cache_file, memory) = match cache_file {
            Ok((pending, file)) => (Some((pending, file)), None),
            Err(reason) => {
                not_cached(&what, &reason);
                (None, Some(Window::at(0)))
            }
        };
        let stream = Arc::new(Stream {
            file: match &cache_file {
                Some((_, file)) => Some(file.try_clone()?),
                None => None,
            },
            state: Mutex::new(StreamState {
                produced: 0,
                wanted: 0,
                to_end: false,
                in_file: 0,
                memory,
                abandoned: None,
                finished: None,
                cancelled: false,
                waiters: Vec::new(),
                reads: Vec::new(),
            }),
            changed: Condvar::new(),
            progress,
        });
        let producer = stream.clone();
        std::thread::Builder::new()
            .name("soma-generate".into())
            .spawn(move || {
                // Whatever happens below, the stream ends with an outcome: readers never
                // wait for a generator that is gone.
                let outcome = Finish(&producer);
                let mut sink = StreamSink {
                    stream: &producer,
                    cache: &cache,
                    what: &what,
                    cache_file,
                    slot,
                };
                let started = std::time::Instant::now();
                let result = crate::sync::catch_panic(|| {
                    generate(&mut sink)?;
                    crate::fault::pass(crate::fault::Point::Commit);
                    let produced = producer.lock().produced;
                    log::debug!("streamed {produced} bytes in {:?}", started.elapsed());
                    // Only a generation that ran to its end is committed.
                    match sink.cache_file.take() {
                        Some((pending, _)) => {
                            cache.commit(pending, produced)?;
                            Ok(Outcome::Done(produced))
                        }
                        None => Ok(Outcome::NotCached),
                    }
                })
                .unwrap_or_else(|panic| Err(io::Error::other(panic)));
                // A failure reaches the reader as EIO, which logs it once.
                outcome.set(match result {
                    Ok(outcome) => outcome,
                    Err(_) if producer.lock().cancelled => Outcome::Stopped,
                    Err(e) => Outcome::Failed(e.to_string()),
                });
                // The task ends last, once the cache file of a generation that was not
                // committed is gone.
                drop(sink);
                drop(task);
            })?;
        Ok(stream)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, StreamState> {
        self.state.lock().recover()
    }

    /// Answers a read at once when there are bytes at `offset` or the generation has
    /// ended, or else once the generator has written past `offset` (from its thread).
    fn read(&self, offset: u64, size: u32, answer: ReadAnswer) {
        let mut state = self.lock();
        let end = offset.saturating_add(u64::from(size));
        if end > state.wanted {
            state.wanted = end;
            self.changed.notify_all();
        }
        if state.produced <= offset && state.finished.is_none() {
            self.progress.reader_waits();
            state.reads.push((offset, size, answer));
            return;
        }
        let piece = self.piece(&state, offset, size);
        drop(state);
        answer(piece.and_then(|piece| self.bytes_of(piece)));
    }

    /// Where the bytes a read at `offset` gets now are, or the error it gets: called once
    /// there are bytes at `offset` or the generation has ended.
    fn piece(&self, state: &StreamState, offset: u64, size: u32) -> io::Result<Piece> {
        let size = u64::from(size);
        if state.in_file > offset {
            return Ok(Piece::InFile(offset, (state.in_file - offset).min(size)));
        }
        if state.produced > offset {
            let copied = (state.memory.as_ref()).and_then(|window| window.copy(offset, size));
            return copied.map(Piece::Copied).ok_or_else(|| {
                io::Error::other(format!(
                    "the bytes at {offset} are gone: the file is not cached (no room), so it \
                     is read once, from start to end"
                ))
            });
        }
        match &state.finished {
            Some(Outcome::Failed(e)) => Err(io::Error::other(e.clone())),
            Some(Outcome::Stopped) => Err(io::Error::other("the file's generation was stopped")),
            Some(Outcome::Done(_) | Outcome::NotCached) | None => Ok(Piece::Copied(Vec::new())),
        }
    }

    /// The bytes of a piece.
    fn bytes_of(&self, piece: Piece) -> io::Result<Vec<u8>> {
        match (piece, &self.file) {
            (Piece::Copied(bytes), _) => Ok(bytes),
            (Piece::InFile(offset, len), Some(file)) => read_at(file, offset, len),
            (Piece::InFile(..), None) => Err(io::Error::other("the stream has no cache file")),
        }
    }

    /// Answers the waiting reads that can be answered now (bytes at their offset, or the
    /// end), outside the lock.
    fn answer_reads(&self) {
        let mut state = self.lock();
        let (ready, waiting): (Vec<_>, Vec<_>) = std::mem::take(&mut state.reads)
            .into_iter()
            .partition(|(offset, _, _)| state.produced > *offset || state.finished.is_some());
        state.reads = waiting;
        let answers: Vec<_> = ready
            .into_iter()
            .map(|(offset, size, answer)| (self.piece(&state, offset, size), answer))
            .collect();
        drop(state);
        for (piece, answer) in answers {
            self.progress.reader_answered();
            let bytes = piece.and_then(|piece| self.bytes_of(piece));
            // One reader's answer must not keep the others from theirs.
            let _ = crate::sync::catch_panic(|| answer(bytes));
        }
    }

    fn cancel(&self) {
        self.lock().cancelled = true;
        self.changed.notify_all();
    }

    /// Calls `then` with the generation's outcome: now if it has ended or the content is
    /// not cached, else when it does. Meanwhile the generator runs ahead of the readers
    /// without bound: whoever waits for the end must not wait for a reader that waits for
    /// it (`fstat` before the first read).
    pub fn when_finished(&self, then: impl FnOnce(&Outcome) + Send + 'static) {
        let mut state = self.lock();
        let now = match (&state.finished, &state.memory) {
            (Some(outcome), _) => Some(outcome.clone()),
            (None, Some(_)) => Some(Outcome::NotCached),
            (None, None) => None,
        };
        match now {
            Some(outcome) => {
                drop(state);
                then(&outcome);
            }
            None => {
                state.waiters.push(Box::new(then));
                state.to_end = true;
                self.changed.notify_all();
            }
        }
    }
}

/// Logs, once for each stream, that its content is not cached and why.
fn not_cached(what: &str, reason: &NoRoom) {
    log::warn!(
        "{what}: not cached ({reason}); streamed to its reader from memory, read once from \
         start to end, with no size"
    );
}

/// Sets a stream's outcome when the generator thread ends, however it ends (an outcome not
/// set by then, after a panic that got past everything, is a failure), wakes its readers
/// and answers its waiters.
struct Finish<'a>(&'a Stream);

impl Finish<'_> {
    fn set(self, outcome: Outcome) {
        self.0.lock().finished = Some(outcome);
    }
}

impl Drop for Finish<'_> {
    fn drop(&mut self) {
        let mut state = self.0.lock();
        let outcome = state
            .finished
            .get_or_insert_with(|| {
                Outcome::Failed("the generator thread ended without an outcome".into())
            })
            .clone();
        let waiters = std::mem::take(&mut state.waiters);
        drop(state);
        self.0.changed.notify_all();
        self.0.answer_reads();
        answer_waiters(waiters, &outcome);
    }
}

/// Calls each waiter with `outcome`; one's panic must not keep the others from theirs.
fn answer_waiters(waiters: Vec<Waiter>, outcome: &Outcome) {
    for then in waiters {
        let _ = crate::sync::catch_panic(|| then(outcome));
    }
}

/// The generator's side of a stream. Writes go to the cache file, making room in the cache
/// as it grows; when the cache has none (the file is larger than `--cache-size`, the disk
/// is full, the file cannot be written), the content is not cached from there on: the file
/// keeps what it has for the readers, and later bytes go to a window in memory. Writes
/// then wait while the generator is far ahead of every reader, without its generation
/// slot. Once the readers are gone, writes fail, which stops the generator and the TileDB
/// query behind it.
struct StreamSink<'a> {
    stream: &'a Stream,
    cache: &'a ContentCache,
    what: &'a str,
    /// The cache entry being written and its file; `None` once the content is not cached.
    cache_file: Option<(Pending, File)>,
    /// The generation slot, held while generating (not while waiting for readers).
    slot: Option<Permit>,
}

impl StreamSink<'_> {
    /// Writes `buf` to the cache file, after its bytes so far, making room for it first.
    fn write_to_cache(&mut self, buf: &[u8], so_far: u64) -> Result<(), NoRoom> {
        let Some((pending, file)) = &mut self.cache_file else {
            return Err(NoRoom("not cached".into()));
        };
        pending.make_room(self.cache, so_far + buf.len() as u64)?;
        file.write_all(buf).map_err(|e| NoRoom(e.to_string()))
    }

    /// From now on the content is not cached: its later bytes are kept in memory.
    fn stop_caching(&mut self, reason: &NoRoom) {
        not_cached(self.what, reason);
        let mut state = self.stream.lock();
        state.abandoned = self.cache_file.take().map(|(pending, _)| pending);
        state.memory = Some(Window::at(state.in_file));
        state.to_end = false;
        let waiters = std::mem::take(&mut state.waiters);
        drop(state);
        answer_waiters(waiters, &Outcome::NotCached);
    }
}

impl Write for StreamSink<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let (cancelled, so_far) = {
            let state = self.stream.lock();
            (state.cancelled, state.produced)
        };
        if cancelled {
            return Err(io::Error::new(
                io::ErrorKind::BrokenPipe,
                "every reader closed the file",
            ));
        }
        if self.cache_file.is_some() {
            if let Err(reason) = self.write_to_cache(buf, so_far) {
                self.stop_caching(&reason);
            }
        }
        self.stream.progress.count_bytes(buf.len() as u64);
        let mut state = self.stream.lock();
        state.produced += buf.len() as u64;
        let wanted = state.wanted;
        match &mut state.memory {
            None => state.in_file = state.produced,
            // What is more than a little before the furthest byte asked for goes.
            Some(window) => window.push(buf, wanted.saturating_sub(MEMORY_BEHIND_BYTES)),
        }
        let ahead = |s: &StreamState| {
            let bound = match s.memory {
                Some(_) => MEMORY_AHEAD_BYTES,
                None => READ_AHEAD_BYTES,
            };
            !s.to_end && s.produced > s.wanted.saturating_add(bound)
        };
        let readers_wait = !state.reads.is_empty();
        drop(state);
        self.stream.changed.notify_all();
        if readers_wait {
            self.stream.answer_reads();
        }
        let mut state = self.stream.lock();
        if ahead(&state) && !state.cancelled {
            // Others generate while this one waits for its readers.
            let budget = self.slot.take().map(|slot| slot.budget().clone());
            while ahead(&state) && !state.cancelled {
                state = self.stream.changed.wait(state).recover();
            }
            drop(state);
            // Its readers are back: it goes on at once, with a turn if one is free. Waiting
            // for one could wait forever: the generations holding the turns may be waiting
            // for memory that this one holds.
            self.slot = budget.and_then(|budget| budget.try_take(1));
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        match &mut self.cache_file {
            Some((_, file)) => file.flush(),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fs::activity::{Activity, Named};
    use crate::sync::Background;
    use std::sync::mpsc;
    use std::time::Duration;

    fn cache(name: &str) -> (Arc<ContentCache>, std::path::PathBuf) {
        cache_of(name, 1 << 30)
    }

    fn cache_of(name: &str, limit: u64) -> (Arc<ContentCache>, std::path::PathBuf) {
        let dir =
            std::env::temp_dir().join(format!("soma-mount-stream-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        (Arc::new(ContentCache::open(&dir, limit).unwrap()), dir)
    }

    /// The byte at `i` of the content the tests of uncached streams generate.
    fn byte_at(i: u64) -> u8 {
        (i % 251) as u8
    }

    /// Starts a stream of `size` bytes (`byte_at`), written in pieces of a quarter MiB.
    fn counting_stream(
        cache: &Arc<ContentCache>,
        background: &Arc<Background>,
        name: &str,
        (size, estimated_bytes): (u64, u64),
    ) -> Arc<Stream> {
        Stream::start(
            cache.clone(),
            (CacheKey::new([name]), name.into()),
            estimated_bytes,
            background.begin().unwrap(),
            slot(),
            move |out| {
                let mut at = 0;
                while at < size {
                    let end = (at + (256 << 10)).min(size);
                    out.write_all(&(at..end).map(byte_at).collect::<Vec<u8>>())?;
                    at = end;
                }
                Ok(())
            },
        )
        .unwrap()
    }

    /// Asserts that `content` is the `size` bytes of a [`counting_stream`].
    fn assert_counts_to(content: &[u8], size: u64) {
        assert_eq!(content.len() as u64, size);
        assert!(content
            .iter()
            .enumerate()
            .all(|(i, &b)| b == byte_at(i as u64)));
    }

    /// Reads a stream from start to end, a MiB at a time, as a reader through FUSE does.
    fn read_through(stream: &Stream) -> Vec<u8> {
        let mut content = Vec::new();
        loop {
            let bytes = read(stream, content.len() as u64, 1 << 20).unwrap();
            if bytes.is_empty() {
                return content;
            }
            content.extend_from_slice(&bytes);
        }
    }

    #[test]
    fn content_larger_than_the_cache_is_read_whole_from_the_file_then_memory_and_not_kept() {
        // The cache takes 20 MiB of the 40 MiB, then has no room: the rest comes from memory.
        let (cache, dir) = cache_of("larger", 20 << 20);
        let background = Arc::new(Background::default());
        let size = 40 << 20;
        let stream = counting_stream(&cache, &background, "larger", (size, 0));
        let content = read_through(&stream);
        assert_counts_to(&content, size);
        assert_eq!(outcome_of(&stream), Outcome::NotCached);
        assert!(
            read(&stream, 0, 10).is_ok(),
            "what went to the cache file reads again"
        );
        // The cache file took the first 20 MiB; the window in memory keeps what is after
        // the reader, and a few MiB before it.
        let err = read(&stream, 21 << 20, 10).expect_err("bytes long passed are gone");
        assert!(err.to_string().contains("not cached"), "{err}");
        assert_eq!(cache.usage(), (0, 20 << 20, 0), "nothing is kept");
        assert!(background.wait(Duration::from_secs(10)));
        drop(stream);
        assert_eq!(
            std::fs::read_dir(&dir).unwrap().count(),
            0,
            "no file left once the stream is"
        );
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn content_estimated_larger_than_the_cache_never_touches_it_and_its_waiters_hear_at_once() {
        let (cache, dir) = cache_of("estimated", 1 << 20);
        let background = Arc::new(Background::default());
        let size = 30 << 20;
        let stream = counting_stream(&cache, &background, "estimated", (size, 2 << 20));
        // An `fstat` waiting for the end would wait for a reader: it hears at once instead.
        assert_eq!(outcome_of(&stream), Outcome::NotCached);
        let content = read_through(&stream);
        assert_counts_to(&content, size);
        assert!(stream.file.is_none(), "no cache file was made");
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0);
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn content_not_cached_waits_for_its_reader_within_its_window() {
        let (cache, dir) = cache_of("window", 1 << 20);
        let background = Arc::new(Background::default());
        let stream = counting_stream(&cache, &background, "window", (64 << 20, 64 << 20));
        assert_eq!(
            read(&stream, 0, 4).unwrap(),
            (0..4).map(byte_at).collect::<Vec<_>>()
        );
        // No reader reads on: the generator stops a window ahead, holding that much.
        std::thread::sleep(Duration::from_millis(300));
        let held = {
            let state = stream.lock();
            (state.produced, state.memory.as_ref().unwrap().held())
        };
        assert!(
            held.0 <= MEMORY_AHEAD_BYTES + (1 << 20),
            "ran ahead to {}",
            held.0
        );
        assert!(held.1 <= held.0);
        let content = read_through(&stream);
        assert_counts_to(&content, 64 << 20);
        std::fs::remove_dir_all(dir).unwrap();
    }

    /// A generation with a slot of a budget of one.
    fn slot() -> (Option<Permit>, Arc<Progress>) {
        let slot = crate::budget::Budget::new(1).take(1);
        (Some(slot), progress())
    }

    /// The progress of a generation listed by an activity of its own.
    fn progress() -> Arc<Progress> {
        Activity::default().begin(&Named::default())
    }

    /// Reads through the callback, waiting up to ten seconds for the answer.
    fn read(stream: &Stream, offset: u64, size: u32) -> io::Result<Vec<u8>> {
        let (tx, rx) = mpsc::channel();
        stream.read(offset, size, Box::new(move |bytes| tx.send(bytes).unwrap()));
        rx.recv_timeout(Duration::from_secs(10))
            .expect("the read was never answered")
    }

    /// Waits up to ten seconds for an outcome given to `when_finished`.
    fn outcome_of(stream: &Stream) -> Outcome {
        let (tx, rx) = mpsc::channel();
        stream.when_finished(move |outcome| tx.send(outcome.clone()).unwrap());
        rx.recv_timeout(Duration::from_secs(10))
            .expect("the stream never finished")
    }

    #[test]
    fn a_waiter_lets_the_generator_run_past_the_read_ahead_bound() {
        let (cache, dir) = cache("ahead");
        let background = Arc::new(Background::default());
        let key = CacheKey::new(["ahead"]);
        let piece = vec![b'x'; 1 << 20];
        let pieces = (READ_AHEAD_BYTES >> 20) + 2;
        let stream = Stream::start(
            cache.clone(),
            (key.clone(), "test".into()),
            0,
            background.begin().unwrap(),
            slot(),
            {
                move |out| {
                    for _ in 0..pieces {
                        out.write_all(&piece)?;
                    }
                    Ok(())
                }
            },
        )
        .unwrap();
        // No reader reads: the generator would stop at the bound, but for the waiter.
        let size = pieces << 20;
        assert_eq!(outcome_of(&stream), Outcome::Done(size));
        assert_eq!(cache.size(&key), Some(size));
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn a_generator_that_panics_fails_its_readers_and_its_waiters_and_leaves_nothing() {
        let (cache, dir) = cache("panic");
        let background = Arc::new(Background::default());
        let key = CacheKey::new(["panic"]);
        let stream = Stream::start(
            cache.clone(),
            (key.clone(), "test".into()),
            0,
            background.begin().unwrap(),
            slot(),
            {
                |out| {
                    out.write_all(b"some rows\n")?;
                    panic!("a bug");
                }
            },
        )
        .unwrap();
        assert!(matches!(outcome_of(&stream), Outcome::Failed(e) if e.contains("a bug")));
        assert_eq!(
            read(&stream, 0, 4).unwrap(),
            b"some",
            "what was written reads"
        );
        assert!(
            read(&stream, 10, 4).is_err(),
            "the end is an error, not the end"
        );
        assert_eq!(cache.size(&key), None);
        assert!(
            background.wait(Duration::from_secs(10)),
            "the generator's task ended"
        );
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0, "no file left");
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn a_read_past_what_is_generated_is_answered_by_the_generator_without_its_slot() {
        let (cache, dir) = cache("later");
        let background = Arc::new(Background::default());
        let slots = crate::budget::Budget::new(1);
        let (go, wait) = mpsc::channel::<()>();
        let stream = Stream::start(
            cache.clone(),
            (CacheKey::new(["later"]), "test".into()),
            0,
            background.begin().unwrap(),
            (Some(slots.take(1)), progress()),
            move |out| {
                wait.recv().unwrap();
                out.write_all(b"first")?;
                // Far past the read-ahead bound: the generator waits for a reader, and
                // gives its slot back meanwhile.
                out.write_all(&vec![b'x'; READ_AHEAD_BYTES as usize + 10])?;
                Ok(())
            },
        )
        .unwrap();
        let (tx, rx) = mpsc::channel();
        stream.read(0, 5, Box::new(move |bytes| tx.send(bytes).unwrap()));
        assert!(rx.try_recv().is_err(), "nothing to answer with yet");
        go.send(()).unwrap();
        let bytes = rx.recv_timeout(Duration::from_secs(10)).unwrap().unwrap();
        assert_eq!(bytes, b"first");
        let started = std::time::Instant::now();
        let other = loop {
            if let Some(permit) = slots.try_take(1) {
                break permit;
            }
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "the slot was kept"
            );
            std::thread::sleep(Duration::from_millis(10));
        };
        drop(other);
        let end = READ_AHEAD_BYTES + 15;
        assert_eq!(read(&stream, end - 1, 10).unwrap(), b"x");
        assert_eq!(outcome_of(&stream), Outcome::Done(end));
        assert_eq!(read(&stream, end, 10).unwrap(), b"", "the end");
        std::fs::remove_dir_all(dir).unwrap();
    }
}
