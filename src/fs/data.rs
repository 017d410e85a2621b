//! Generating content into the cache: the options that govern it, cache keys made from
//! array snapshots, and generating a file whole exactly once however many ask for it. What
//! each kind of file holds is in [`super::files`].

use std::fs::File;
use std::io;
use std::path::Path;
use std::sync::Arc;

use log::debug;

use crate::digest::Digest;
use crate::soma::ArrayObject;

use super::activity::{self, Progress};
use super::cache::{CacheKey, ContentCache};
use super::error::{FsError, FsResult};
use super::open_file::OpenFile;

/// How data files are generated and cached (the command line's options).
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
/// ask at the same time).
pub fn generate_whole(
    cache: &ContentCache,
    key: &CacheKey,
    what: &str,
    generate: impl FnOnce(&mut (dyn io::Write + Send)) -> io::Result<()>,
) -> FsResult<()> {
    generate_whole_seekable(cache, key, what, |out| generate(out))
}

/// [`generate_whole`] for content that a library writes to a file it opens itself
/// (libhdf5), and whose key is known only once it is written (an h5ad's parts open while its
/// first elements are written): `generate` writes the file at the path it is given and
/// returns its key. It is generated once for `first` (opens that come meanwhile wait for
/// it), and becomes the entry for the key returned.
pub fn generate_whole_at(
    cache: &ContentCache,
    first: &CacheKey,
    what: &str,
    generate: impl FnOnce(&Path) -> io::Result<CacheKey>,
) -> FsResult<()> {
    generate_into(cache, first, what, |_, path| generate(path).map(Some))
}

/// [`generate_whole`] for content written with seeks (sized Parquet leaves holes, which a
/// cache file keeps sparse).
pub fn generate_whole_seekable(
    cache: &ContentCache,
    key: &CacheKey,
    what: &str,
    generate: impl FnOnce(&mut CacheWriter) -> io::Result<()>,
) -> FsResult<()> {
    generate_into(cache, key, what, |file, _| {
        let mut out = io::BufWriter::with_capacity(WRITE_BUFFER_BYTES, CountingFile(file));
        generate(&mut out)?;
        io::Write::flush(&mut out).map(|()| None)
    })
}

/// A cache file being written, buffered, that can seek.
pub type CacheWriter<'a> = io::BufWriter<CountingFile<'a>>;

/// A cache file being written, whose bytes count as the generation's progress.
pub struct CountingFile<'a>(&'a File);

impl io::Write for CountingFile<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        // A file generated whole needs room in the cache: say so when there is none.
        let written = (&mut &*self.0).write(buf).map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("writing it into the cache (--cache-dir): {e}"),
            )
        })?;
        activity::count_bytes(written as u64);
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
/// path), unless there is one; `generate` may name another key for it once written. It waits for a generation slot first, unless it runs inside
/// another generation (a Zarr chunk that needs its matrix's entries per row kept first),
/// which holds one for both: waiting there could wait for itself. It is shown by
/// `soma-mount status` while it runs.
fn generate_into(
    cache: &ContentCache,
    key: &CacheKey,
    what: &str,
    generate: impl FnOnce(&File, &Path) -> io::Result<Option<CacheKey>>,
) -> FsResult<()> {
    if cache.size(key).is_some() {
        return Ok(());
    }
    cache.generate_once(key, || {
        // Generated by an open that ended just before this one's run began.
        if cache.size(key).is_some() {
            return Ok(());
        }
        let _slot = (!activity::generating()).then(|| crate::budget::generations().take(1));
        let progress = Progress::begin();
        let started = std::time::Instant::now();
        let (mut pending, file) = cache.begin(key).map_err(|e| FsError::io(what, e))?;
        let written = crate::sync::catch_panic(|| progress.run(|| generate(&file, pending.path())))
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

/// Runs `work`, work on the store for one file that is not a generation (the count its
/// size follows from), as one: in a turn of `--max-generations`, and shown by `soma-mount
/// status` while it runs. Inside a generation it is part of that one, and takes no turn of
/// its own (waiting for one could wait for itself).
pub fn as_generation<T>(work: impl FnOnce() -> T) -> T {
    if activity::generating() {
        return work();
    }
    let _slot = crate::budget::generations().take(1);
    Progress::begin().run(work)
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
    cache: &ContentCache,
    key: &CacheKey,
    what: &str,
    generate: impl FnOnce(&mut (dyn io::Write + Send)) -> io::Result<()>,
) -> FsResult<OpenFile> {
    generate_whole(cache, key, what, generate)?;
    open_generated(cache, key, what)
}
