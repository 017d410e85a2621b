//! Open files: what a file handle reads from. Small documents are bytes in memory; generated
//! data is a cache entry on disk, or a stream that a generator thread is still writing into a
//! cache file; some files (`.npy`) read each byte range on demand.

use std::fs::File;
use std::io::{self, Write};
use std::os::unix::fs::FileExt;
use std::sync::{Arc, Condvar, Mutex};

use crate::sync::{Recover, Task};

use super::cache::{CacheKey, ContentCache};

/// How far a generator may run ahead of the furthest byte a reader asked for.
const READ_AHEAD_BYTES: u64 = 64 << 20;

/// Content read a byte range at a time, each range on its own.
pub trait ReadAt: Send + Sync {
    /// Up to `size` bytes at `offset`; fewer only at the end.
    fn read_at(&self, offset: u64, size: u32) -> io::Result<Vec<u8>>;
}

/// What one file handle reads.
pub enum OpenFile {
    Bytes(Arc<[u8]>),
    Cached(File),
    Streaming(Arc<Stream>),
    Ranges(Box<dyn ReadAt>),
}

impl OpenFile {
    /// Up to `size` bytes at `offset`; fewer only at the end of the content, or while a
    /// stream has produced less so far (a short read; the reader asks again).
    pub fn read(&self, offset: u64, size: u32) -> io::Result<Vec<u8>> {
        match self {
            OpenFile::Bytes(bytes) => {
                let start = usize::try_from(offset)
                    .unwrap_or(usize::MAX)
                    .min(bytes.len());
                let end = start.saturating_add(size as usize).min(bytes.len());
                Ok(bytes[start..end].to_vec())
            }
            OpenFile::Cached(file) => read_at(file, offset, size as u64),
            OpenFile::Streaming(stream) => stream.read(offset, size),
            OpenFile::Ranges(ranges) => ranges.read_at(offset, size),
        }
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
}

impl Stream {
    /// Starts `generate` on its own thread, writing into a new entry of `cache` for `key`,
    /// which is committed when generation succeeds. The thread is `task`: it ends with it.
    pub fn start(
        cache: Arc<ContentCache>,
        key: CacheKey,
        task: Task,
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
            }),
            changed: Condvar::new(),
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
                };
                let started = std::time::Instant::now();
                let result = crate::sync::catch_panic(|| {
                    generate(&mut sink)?;
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

    fn read(&self, offset: u64, size: u32) -> io::Result<Vec<u8>> {
        let mut state = self.lock();
        let end = offset.saturating_add(u64::from(size));
        if end > state.wanted {
            state.wanted = end;
            self.changed.notify_all();
        }
        while state.produced <= offset {
            match &state.finished {
                Some(Outcome::Failed(e)) => return Err(io::Error::other(e.clone())),
                Some(Outcome::Stopped) => {
                    return Err(io::Error::other("the file's generation was stopped"))
                }
                Some(Outcome::Done(_)) => return Ok(Vec::new()),
                None => state = self.changed.wait(state).recover(),
            }
        }
        let available = (state.produced - offset).min(u64::from(size));
        drop(state);
        read_at(&self.file, offset, available)
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
        for then in waiters {
            // A waiter's panic must not keep the others from their answers.
            let _ = crate::sync::catch_panic(|| then(&outcome));
        }
    }
}

/// The generator's side of a stream: writes go to the cache file, then wait while the
/// generator is far ahead of every reader. Once the readers are gone, writes fail, which
/// stops the generator and the TileDB query behind it.
struct StreamSink<'a> {
    stream: &'a Stream,
    file: File,
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
        let mut state = self.stream.lock();
        state.produced += buf.len() as u64;
        self.stream.changed.notify_all();
        while state.produced > state.wanted.saturating_add(READ_AHEAD_BYTES) && !state.cancelled {
            state = self.stream.changed.wait(state).recover();
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
        let stream = Stream::start(cache.clone(), key.clone(), background.begin().unwrap(), {
            move |out| {
                for _ in 0..pieces {
                    out.write_all(&piece)?;
                }
                Ok(())
            }
        })
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
        let stream = Stream::start(cache.clone(), key.clone(), background.begin().unwrap(), {
            |out| {
                out.write_all(b"some rows\n")?;
                panic!("a bug");
            }
        })
        .unwrap();
        assert!(matches!(outcome_of(&stream), Outcome::Failed(e) if e.contains("a bug")));
        assert_eq!(
            stream.read(0, 4).unwrap(),
            b"some",
            "what was written reads"
        );
        assert!(
            stream.read(10, 4).is_err(),
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
}
