//! Generating content into the cache: the options that govern it, cache keys made from
//! array snapshots, and generating a file whole exactly once however many ask for it, as a
//! generation of the file the [`FileContext`] names (in a slot of its budget, listed by its
//! activity). What each kind of file holds is in [`super::files`].

use std::fs::File;
use std::io;
use std::path::Path;
use std::sync::Arc;

use log::debug;

use crate::digest::Digest;
use crate::soma::ArrayObject;

use super::activity::Progress;
use super::cache::{CacheKey, ContentCache};
use super::error::{FsError, FsResult};
use super::files::FileContext;
use super::open_file::OpenFile;

/// How data files are generated and cached (the command line's options).
#[derive(Clone)]
pub struct DataOptions {
    pub cache: Arc<ContentCache>,
    /// Data files estimated below this size are generated whole when opened.
    pub materialize_limit: u64,
    /// Generate every data file whole when opened, so every size is exact.
    pub exact_sizes: bool,
    /// `slices/` cuts arrays into chunks of about this many stored cells.
    pub chunk_cells: u64,
    /// How long a directory's listing (its object's metadata and structure) is kept before
    /// the object is looked at again.
    pub metadata_ttl: std::time::Duration,
}

/// Whether a file of about `estimated_bytes` is small: generated whole when it is opened,
/// and when a `stat` of it is the first look at its size (`Err`: the estimate failed, and
/// generating it reports the failure rather than a size of 0). It is below
/// `--materialize-limit`, and the cache has room for it whole
/// ([`ContentCache::whole_file_room`]); a larger one is streamed, and a stream the cache
/// cannot hold is still read whole.
pub fn small<E>(options: &DataOptions, estimated_bytes: Result<u64, E>) -> bool {
    match estimated_bytes {
        Ok(bytes) => bytes < options.materialize_limit && bytes <= options.cache.whole_file_room(),
        Err(_) => true,
    }
}

/// About how many bytes a file of `array`'s stored cells comes to at `cell_bytes` a cell
/// (libtiledb's estimate of its cells, or a dense array's domain).
pub fn estimated_bytes(array: &ArrayObject, cell_bytes: u64) -> crate::soma::Result<u64> {
    let cells = crate::soma::estimated_cells(array, &crate::soma::Selection::default())?;
    Ok(cells.saturating_mul(cell_bytes))
}

/// The widest text of each of `array`'s columns, in schema order, where the bounds of its
/// stored cells tell it: an integer index column's digits and sign (`None` for the others).
pub fn text_widths(array: &ArrayObject) -> Vec<Option<u64>> {
    let mut bounds = array.non_empty_domain.iter();
    let digits =
        |n: i128| n.unsigned_abs().checked_ilog10().unwrap_or(0) as u64 + 1 + u64::from(n < 0);
    (array.schema.columns.iter())
        .map(|column| match column.is_index {
            false => None,
            true => match bounds.next()? {
                Some((lo, hi)) => Some(digits(lo.as_i128()?).max(digits(hi.as_i128()?))),
                None => None,
            },
        })
        .collect()
}

/// The cache key of content made from `arrays` (their snapshots) and what `describe` says
/// of it.
pub fn content_key<'a>(
    arrays: impl IntoIterator<Item = &'a ArrayObject>,
    describe: impl FnOnce(&mut Digest),
) -> CacheKey {
    CacheKey::of(|digest| {
        describe(digest);
        for array in arrays {
            digest.text(&array.content_id);
        }
    })
}

/// Small writes to a cache file are gathered up to this size; larger ones (the text encoders'
/// pieces, about a quarter of a MiB each) go to the file as they are, without a copy.
pub const WRITE_BUFFER_BYTES: usize = 64 << 10;

/// Generates the cache entry for `key` whole, unless there is one (once, even when several
/// ask at the same time), as a generation of the file `cx` names: `generate` writes it, and
/// is given the context of work inside the generation.
pub fn generate(
    cx: &FileContext,
    key: &CacheKey,
    what: &str,
    generate: impl FnOnce(&mut (dyn io::Write + Send), &FileContext) -> io::Result<()>,
) -> FsResult<()> {
    generate_seekable(cx, key, what, |out, cx| generate(out, cx))
}

/// [`generate`] for content written with seeks (sized Parquet leaves holes, which a cache
/// file keeps sparse).
pub fn generate_seekable(
    cx: &FileContext,
    key: &CacheKey,
    what: &str,
    generate: impl FnOnce(&mut CacheWriter, &FileContext) -> io::Result<()>,
) -> FsResult<()> {
    let begin = || cx.begin_generation();
    generate_into(
        &cx.options.cache,
        key,
        what,
        begin,
        |file, _, (_, generation)| {
            let inside = cx.inside(generation.clone());
            write_counted(file, Some(generation), |out| generate(out, &inside))
        },
    )
}

/// [`generate`] for content that a library writes to a file it opens itself (libhdf5), and
/// whose key is known only once it is written: `generate` writes the file at the path it is
/// given and returns its key. It is generated once for `first` (opens that come meanwhile
/// wait for it), and becomes the entry for the key returned.
pub fn generate_at(
    cx: &FileContext,
    first: &CacheKey,
    what: &str,
    generate: impl FnOnce(&Path, &FileContext) -> io::Result<CacheKey>,
) -> FsResult<()> {
    let begin = || cx.begin_generation();
    generate_into(
        &cx.options.cache,
        first,
        what,
        begin,
        |_, path, (_, generation)| generate(path, &cx.inside(generation.clone())).map(Some),
    )
}

/// Generates the cache entry for `key` whole, unless there is one, outside any generation:
/// it takes no generation slot and `status` does not list it. For content that is no file
/// of the mount: the entries per row kept for a CSR matrix, counted for the Zarr chunk or
/// listing that needs them.
pub fn generate_whole(
    cache: &ContentCache,
    key: &CacheKey,
    what: &str,
    generate: impl FnOnce(&mut (dyn io::Write + Send)) -> io::Result<()>,
) -> FsResult<()> {
    generate_into(
        cache,
        key,
        what,
        || (),
        |file, _, ()| write_counted(file, None, |out| generate(out)),
    )
}

/// Writes the cache file `file` with `write`, buffered, its bytes counted as
/// `generation`'s.
fn write_counted(
    file: &File,
    generation: Option<&Arc<Progress>>,
    write: impl FnOnce(&mut CacheWriter) -> io::Result<()>,
) -> io::Result<Option<CacheKey>> {
    let counting = CountingFile(file, generation.cloned());
    let mut out = io::BufWriter::with_capacity(WRITE_BUFFER_BYTES, counting);
    write(&mut out)?;
    io::Write::flush(&mut out).map(|()| None)
}

/// A cache file being written, buffered, that can seek.
pub type CacheWriter<'a> = io::BufWriter<CountingFile<'a>>;

/// A cache file being written, whose bytes count as its generation's progress.
pub struct CountingFile<'a>(&'a File, Option<Arc<Progress>>);

impl io::Write for CountingFile<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        // A file generated whole needs room in the cache: say so when there is none.
        let written = (&mut &*self.0).write(buf).map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("writing it into the cache (--cache-dir): {e}"),
            )
        })?;
        if let Some(progress) = &self.1 {
            progress.count_bytes(written as u64);
        }
        Ok(written)
    }

    fn flush(&mut self) -> io::Result<()> {
        (&mut &*self.0).flush()
    }
}

impl io::Seek for CountingFile<'_> {
    fn seek(&mut self, to: io::SeekFrom) -> io::Result<u64> {
        (&mut &*self.0).seek(to)
    }
}

/// Generates the cache entry for `key` whole into its temporary file (given open, and by
/// path), unless there is one; `generate` may name another key for it once written. It is
/// given what `begin` returns, called first: a generation begun for it
/// ([`FileContext::begin_generation`]), held until it ends.
fn generate_into<Turn>(
    cache: &ContentCache,
    key: &CacheKey,
    what: &str,
    begin: impl FnOnce() -> Turn,
    generate: impl FnOnce(&File, &Path, &Turn) -> io::Result<Option<CacheKey>>,
) -> FsResult<()> {
    if cache.size(key).is_some() {
        return Ok(());
    }
    cache.generate_once(key, || {
        // Generated by an open that ended just before this one's run began.
        if cache.size(key).is_some() {
            return Ok(());
        }
        let turn = begin();
        let started = std::time::Instant::now();
        let (mut pending, file) = cache.begin(key).map_err(|e| FsError::io(what, e))?;
        let written = crate::sync::catch_panic(|| generate(&file, pending.path(), &turn))
            .unwrap_or_else(|panic| Err(io::Error::other(panic)));
        // A generation that failed leaves nothing: `pending` removes its file when dropped.
        if let Some(key) = written.map_err(|e| FsError::io(what, e))? {
            pending.rekey(key);
        }
        let size = file.metadata().map_err(|e| FsError::io(what, e))?.len();
        cache
            .commit(pending, size)
            .map_err(|e| FsError::io(what, e))?;
        debug!("generated {what}: {size} bytes in {:?}", started.elapsed());
        Ok(())
    })
}

/// Runs `work`, work on the store for the file `cx` names that is not a generation (the
/// count its size follows from), as one: in a generation slot, and listed by `status` while
/// it runs. Inside a generation it is part of that one, and takes no slot of its own.
pub fn as_generation<T>(cx: &FileContext, work: impl FnOnce(&FileContext) -> T) -> T {
    if cx.generation.is_some() {
        return work(cx);
    }
    let (_slot, generation) = cx.begin_generation();
    work(&cx.inside(generation))
}

/// Opens the cache entry for `key`, just generated.
pub fn open_generated(cache: &ContentCache, key: &CacheKey, what: &str) -> FsResult<OpenFile> {
    let (file, _) = cache
        .open_entry(key)
        .ok_or_else(|| FsError::io(what, "the generated file left the cache at once"))?;
    Ok(OpenFile::Cached(file))
}

/// Opens the cache entry for `key`, generating it whole first if there is none.
pub fn open_whole(
    cx: &FileContext,
    key: &CacheKey,
    what: &str,
    generate: impl FnOnce(&mut (dyn io::Write + Send)) -> io::Result<()>,
) -> FsResult<OpenFile> {
    self::generate(cx, key, what, |out, _| generate(out))?;
    open_generated(&cx.options.cache, key, what)
}

#[cfg(test)]
mod tests {
    use std::sync::mpsc::{self, Receiver};
    use std::time::Duration;

    use super::*;
    use crate::budget::Budgets;
    use crate::fs::files::testing::file_context;

    const TEN_SECONDS: Duration = Duration::from_secs(10);

    fn cache_dir(name: &str) -> std::path::PathBuf {
        std::env::temp_dir().join(format!("soma-mount-data-{name}-{}", std::process::id()))
    }

    /// Generates `key` in `cx` on a thread of its own, writing `content`: its outcome comes.
    fn generate_apart(
        cx: &FileContext,
        key: &str,
        content: &'static [u8],
    ) -> Receiver<FsResult<()>> {
        let (cx, key) = (cx.clone(), CacheKey::new([key]));
        let (done, outcome) = mpsc::channel();
        std::thread::spawn(move || {
            let _ = done.send(generate(&cx, &key, "test", |out, _| out.write_all(content)));
        });
        outcome
    }

    #[test]
    fn a_file_generated_from_a_thread_a_generation_spawns_takes_no_slot_of_its_own() {
        let dir = cache_dir("nested");
        let cx = file_context(&dir, Budgets::new(1 << 20, 1)).for_file("outer.csv");
        let (done, outcome) = mpsc::channel();
        {
            let cx = cx.clone();
            std::thread::spawn(move || {
                let key = CacheKey::new(["outer"]);
                let generated = generate(&cx, &key, "outer", |out, inside| {
                    let running = inside.activity.running().len();
                    let inner = inside.for_file("inner.csv");
                    let inner = std::thread::spawn(move || {
                        let key = CacheKey::new(["inner"]);
                        generate(&inner, &key, "inner", |out, inner| {
                            let paths: Vec<_> = (inner.activity.running().into_iter())
                                .map(|r| r.path)
                                .collect();
                            assert_eq!(paths, ["outer.csv", "inner.csv"]);
                            out.write_all(b"inner")
                        })
                    });
                    inner.join().unwrap().map_err(io::Error::other)?;
                    assert_eq!(running, 1);
                    out.write_all(b"outer")
                });
                let _ = done.send(generated);
            });
        }
        let generated = outcome
            .recv_timeout(TEN_SECONDS)
            .expect("the inner file waited for the outer generation's slot");
        assert_eq!(generated, Ok(()));
        let cache = &cx.options.cache;
        assert_eq!(cache.size(&CacheKey::new(["inner"])), Some(5));
        assert_eq!(cache.size(&CacheKey::new(["outer"])), Some(5));
        assert_eq!(cx.budgets.generations.usage().peak, 1);
        assert!(cx.activity.running().is_empty());
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn trees_made_with_budgets_of_their_own_do_not_share_them() {
        let (first_dir, second_dir) = (cache_dir("first"), cache_dir("second"));
        let first = file_context(&first_dir, Budgets::new(1 << 20, 1)).for_file("a.csv");
        let second = file_context(&second_dir, Budgets::new(1 << 20, 1)).for_file("b.csv");
        let (slot, progress) = first.begin_generation();
        let second_generated = generate_apart(&second, "b", b"b");
        assert_eq!(second_generated.recv_timeout(TEN_SECONDS), Ok(Ok(())));
        let first_generated = generate_apart(&first, "a", b"a");
        let waited = first_generated.recv_timeout(Duration::from_millis(200));
        assert!(waited.is_err(), "the first tree's only slot is held");
        assert_eq!(first.budgets.generations.usage().waiting, 1);
        assert_eq!(second.budgets.generations.usage().in_use, 0);
        assert_eq!(first.activity.running().len(), 1);
        assert!(second.activity.running().is_empty());
        drop((slot, progress));
        assert_eq!(first_generated.recv_timeout(TEN_SECONDS), Ok(Ok(())));
        std::fs::remove_dir_all(first_dir).unwrap();
        std::fs::remove_dir_all(second_dir).unwrap();
    }
}
