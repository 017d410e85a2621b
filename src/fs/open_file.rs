//! Open files: what a file handle reads from. Small documents are bytes in memory; generated
//! data is a cache entry on disk, or a stream that a generator thread is still writing into a
//! cache file; some files (`.npy`) read each byte range on demand.
//!
//! Reads are answered through a callback: a read of a stream beyond what has been generated
//! is answered by the generator thread once it has written that far, so no FUSE request
//! thread waits for a generation. A generation holds one of the daemon's generation slots
//! (`--max-generations`) while it runs, and gives it back while it waits for its readers;
//! when they come back it goes on at once, taking a slot back only if one is free.

use std::fs::File;
use std::io::{self, Write};
use std::os::unix::fs::FileExt;
use std::sync::{Arc, Condvar, Mutex};

use crate::budget::Permit;
use crate::sync::{Recover, Task};

use super::activity::Progress;
use super::cache::{CacheKey, ContentCache};

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
    finished: Option<Outcome>,
    cancelled: bool,
    /// Called with the outcome once there is one (`stat`s waiting for the exact size).
    waiters: Vec<Waiter>,
    /// Reads of bytes not produced yet: offset, size and where the bytes go.
    reads: Vec<(u64, u32, ReadAnswer)>,
}

/// Called with a stream's outcome once it has one.
type Waiter = Box<dyn FnOnce(&Outcome) + Send>;

/// How a stream's generation ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Generated whole and committed to the cache: this many bytes.
    Done(u64),
    /// Every reader closed the file before the end: nothing was committed.
    Stopped,
    /// Generation failed: nothing was committed.
    Failed(String),
}

/// Content a generator thread is writing into a cache file while readers read it.
pub struct Stream {
    file: File,
    state: Mutex<StreamState>,
    changed: Condvar,
    progress: Arc<Progress>,
}

impl Stream {
    /// Starts `generate` on its own thread, writing into a new entry of `cache` for `key`,
    /// which is committed when generation succeeds. The thread is `task`: it ends with it.
    /// It holds `slot`, a generation slot, while it runs (see the module's notes).
    pub fn start(
        cache: Arc<ContentCache>,
        key: CacheKey,
        task: Task,
        slot: Permit,
        generate: impl FnOnce(&mut (dyn Write + Send)) -> io::Result<()> + Send + 'static,
    ) -> io::Result<Arc<Stream>> {
        let (pending, file) = cache.begin(&key)?;
        let stream = Arc::new(Stream {
            file: file.try_clone()?,
            state: Mutex::new(StreamState {
                produced: 0,
                wanted: 0,
                finished: None,
                cancelled: false,
                waiters: Vec::new(),
                reads: Vec::new(),
            }),
            changed: Condvar::new(),
            progress: Progress::begin(),
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
                    file,
                    slot: Some(slot),
                };
                let started = std::time::Instant::now();
                let result = crate::sync::catch_panic(|| {
                    producer.progress.clone().run(|| generate(&mut sink))?;
                    crate::fault::pass(crate::fault::Point::Commit);
                    let produced = producer.lock().produced;
                    // Only a generation that ran to its end is committed.
                    cache.commit(pending, produced)?;
                    log::debug!("streamed {produced} bytes in {:?}", started.elapsed());
                    Ok(produced)
                })
                .unwrap_or_else(|panic| Err(io::Error::other(panic)));
                // A failure reaches the reader as EIO, which logs it once.
                outcome.set(match result {
                    Ok(size) => Outcome::Done(size),
                    Err(_) if producer.lock().cancelled => Outcome::Stopped,
                    Err(e) => Outcome::Failed(e.to_string()),
                });
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
        let bytes = self.available(&state, offset, size);
        drop(state);
        answer(bytes.and_then(|available| read_at(&self.file, offset, available)));
    }

    /// How many bytes a read at `offset` gets now, or the error it gets: called once there
    /// are bytes at `offset` or the generation has ended.
    fn available(&self, state: &StreamState, offset: u64, size: u32) -> io::Result<u64> {
        if state.produced > offset {
            return Ok((state.produced - offset).min(u64::from(size)));
        }
        match &state.finished {
            Some(Outcome::Failed(e)) => Err(io::Error::other(e.clone())),
            Some(Outcome::Stopped) => Err(io::Error::other("the file's generation was stopped")),
            Some(Outcome::Done(_)) | None => Ok(0),
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
            .map(|(offset, size, answer)| (offset, self.available(&state, offset, size), answer))
            .collect();
        drop(state);
        for (offset, available, answer) in answers {
            self.progress.reader_answered();
            let bytes = available.and_then(|n| read_at(&self.file, offset, n));
            // One reader's answer must not keep the others from theirs.
            let _ = crate::sync::catch_panic(|| answer(bytes));
        }
    }

    fn cancel(&self) {
        self.lock().cancelled = true;
        self.changed.notify_all();
    }

    /// Calls `then` with the generation's outcome: now if it has ended, else when it does.
    /// Meanwhile the generator runs ahead of the readers without bound: whoever waits for
    /// the end must not wait for a reader that waits for it (`fstat` before the first read).
    pub fn when_finished(&self, then: impl FnOnce(&Outcome) + Send + 'static) {
        let mut state = self.lock();
        match state.finished.clone() {
            Some(outcome) => {
                drop(state);
                then(&outcome);
            }
            None => {
                state.waiters.push(Box::new(then));
                state.wanted = u64::MAX;
                self.changed.notify_all();
            }
        }
    }
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
        for then in waiters {
            // A waiter's panic must not keep the others from their answers.
            let _ = crate::sync::catch_panic(|| then(&outcome));
        }
    }
}

/// The generator's side of a stream: writes go to the cache file, then wait while the
/// generator is far ahead of every reader, without its generation slot. Once the readers
/// are gone, writes fail, which stops the generator and the TileDB query behind it.
struct StreamSink<'a> {
    stream: &'a Stream,
    file: File,
    /// The generation slot, held while generating (not while waiting for readers).
    slot: Option<Permit>,
}

impl Write for StreamSink<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if self.stream.lock().cancelled {
            return Err(io::Error::new(
                io::ErrorKind::BrokenPipe,
                "every reader closed the file",
            ));
        }
        self.file.write_all(buf)?;
        self.stream.progress.add_bytes(buf.len() as u64);
        let mut state = self.stream.lock();
        state.produced += buf.len() as u64;
        let ahead = |s: &StreamState| s.produced > s.wanted.saturating_add(READ_AHEAD_BYTES);
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
        self.file.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sync::Background;
    use std::sync::mpsc;
    use std::time::Duration;

    fn cache(name: &str) -> (Arc<ContentCache>, std::path::PathBuf) {
        let dir =
            std::env::temp_dir().join(format!("soma-mount-stream-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        (Arc::new(ContentCache::open(&dir, 1 << 30).unwrap()), dir)
    }

    /// A generation slot of a budget of one.
    fn slot() -> Permit {
        crate::budget::Budget::new(1).take(1)
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
            key.clone(),
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
            key.clone(),
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
            CacheKey::new(["later"]),
            background.begin().unwrap(),
            slots.take(1),
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
