//! Opening data files: from the content cache when generated before; else generated whole
//! now (small files, Parquet, `--exact-sizes`), or streamed while a generator writes them.

use std::io;
use std::sync::Arc;

use log::{debug, error};

use crate::format::png::{self, ImageAxis};
use crate::format::text::TextBuf;
use crate::format::{self, mtx, TableFormat};
use crate::soma::tenx::{Positions, TenxLayer};
use crate::soma::{
    dense_values, estimated_cells, ArrayObject, BatchReader, ReadAhead, Selection, BATCH_BYTES,
};
use crate::sync::Background;

use super::cache::{CacheKey, ContentCache};
use super::node::{Table, TenxFile};
use super::open_file::{OpenFile, Stream};
use super::tree::{FsError, FsResult};
use crate::digest::Digest;

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

/// Logs a failure and makes it `EIO`.
pub fn io_error(what: &str, e: impl std::fmt::Display) -> FsError {
    error!("{what}: {e}");
    FsError::Io(format!("{what}: {e}"))
}

/// The cache key of content made from `arrays` (their snapshots) and what `describe` says
/// of it.
fn content_key<'a>(
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

/// The cache key of a table in a format: the array's snapshot and the selection.
pub fn table_key(table: &Table, format: TableFormat) -> CacheKey {
    content_key([table.array()], |digest| {
        digest.text(format.extension());
        table.selection.digest_into(digest);
    })
}

/// About how many bytes a table comes to in a format.
fn estimated_bytes(table: &Table, format: TableFormat) -> u64 {
    let array = table.array();
    estimated_cells(array, &table.selection)
        .saturating_mul(format.estimated_row_bytes(&array.schema.arrow()))
}

/// Whether opening a table generates it whole first (so that its size is exact from the
/// open on): Parquet always (its footer comes last), every file with `--exact-sizes`, and
/// files estimated below `--materialize-limit`. Other files stream while generated.
fn generated_whole_on_open(options: &DataOptions, table: &Table, format: TableFormat) -> bool {
    format == TableFormat::Parquet
        || options.exact_sizes
        || estimated_bytes(table, format) < options.materialize_limit
}

/// Whether a `stat` of a table not generated yet generates it, to answer its exact size:
/// every file with `--exact-sizes`, and an array's whole-array files (`data.<ext>`)
/// estimated below `--materialize-limit`, which tools that take sizes from `stat` (`fread`,
/// `tar`, `rsync`) read most. Never a slice or a category without `--exact-sizes`: `ls -l`
/// of `slices/` would generate every chunk.
pub fn generated_on_stat(options: &DataOptions, table: &Table, format: TableFormat) -> bool {
    options.exact_sizes
        || (table.selection == Selection::default()
            && estimated_bytes(table, format) < options.materialize_limit)
}

/// What a table's file is, for log lines.
fn table_what(table: &Table, format: TableFormat) -> String {
    format!(
        "{} ({:?} as {})",
        table.array().uri,
        table.selection,
        format.extension()
    )
}

/// Starts reading a table on a thread of its own.
fn read_table(table: &Table) -> crate::tiledb::Result<ReadAhead> {
    let reader = BatchReader::open(table.array(), &table.selection, BATCH_BYTES)?;
    ReadAhead::start(reader).map_err(|e| crate::tiledb::Error::new(e.to_string()))
}

/// Generates a table whole into the cache, unless it is there (once, even when several ask
/// at the same time).
pub fn generate_table(options: &DataOptions, table: &Table, format: TableFormat) -> FsResult<()> {
    let key = table_key(table, format);
    let what = table_what(table, format);
    generate_whole(&options.cache, &key, &what, |out| {
        let mut reader = read_table(table).map_err(io::Error::other)?;
        let schema = reader.schema();
        let next_batch = || reader.next_batch().map_err(io::Error::other);
        format::write_table(format, schema, next_batch, out)
    })
}

/// Opens a table in a format; the flag says whether it must be read with direct I/O. A file
/// streamed while it is generated is `background` work.
pub fn open_table(
    options: &DataOptions,
    background: &Arc<Background>,
    table: &Table,
    format: TableFormat,
) -> FsResult<(OpenFile, bool)> {
    let cache = &options.cache;
    let key = table_key(table, format);
    if let Some((file, _)) = cache.open_entry(&key) {
        return Ok((OpenFile::Cached(file), false));
    }
    let what = table_what(table, format);
    if generated_whole_on_open(options, table, format) {
        generate_table(options, table, format)?;
        return open_generated(cache, &key, &what).map(|file| (file, false));
    }
    let mut reader = read_table(table).map_err(|e| io_error(&what, e))?;
    let schema = reader.schema();
    let mut next_batch = move || reader.next_batch().map_err(io::Error::other);
    let task = background
        .begin()
        .ok_or_else(|| io_error(&what, "the daemon is ending"))?;
    let stream = Stream::start(cache.clone(), key, task, move |out| {
        format::write_table(format, schema, &mut next_batch, out)
    })
    .map_err(|e| io_error(&what, e))?;
    Ok((OpenFile::Streaming(stream), true))
}

/// Small writes to a cache file are gathered up to this size; larger ones (the text encoders'
/// pieces, about a quarter of a MiB each) go to the file as they are, without a copy.
const WRITE_BUFFER_BYTES: usize = 64 << 10;

/// Generates the cache entry for `key` whole, unless there is one (once, even when several
/// ask at the same time).
fn generate_whole(
    cache: &ContentCache,
    key: &CacheKey,
    what: &str,
    generate: impl FnOnce(&mut (dyn io::Write + Send)) -> io::Result<()>,
) -> FsResult<()> {
    if cache.size(key).is_some() {
        return Ok(());
    }
    cache.generate_once(key, || {
        // Generated by an open that ended just before this one's run began.
        if cache.size(key).is_some() {
            return Ok(());
        }
        let started = std::time::Instant::now();
        let (pending, file) = cache.begin(key).map_err(|e| io_error(what, e))?;
        let written = crate::sync::catch_panic(|| {
            let mut out = io::BufWriter::with_capacity(WRITE_BUFFER_BYTES, &file);
            generate(&mut out)?;
            io::Write::flush(&mut out)
        })
        .unwrap_or_else(|panic| Err(io::Error::other(panic)));
        // A generation that failed leaves nothing: `pending` removes its file when dropped.
        written.map_err(|e| io_error(what, e))?;
        let size = file.metadata().map_err(|e| io_error(what, e))?.len();
        cache.commit(pending, size).map_err(|e| io_error(what, e))?;
        debug!("generated {what}: {size} bytes in {:?}", started.elapsed());
        Ok(())
    })
}

/// Opens the cache entry for `key`, just generated.
fn open_generated(cache: &ContentCache, key: &CacheKey, what: &str) -> FsResult<OpenFile> {
    let (file, _) = cache
        .open_entry(key)
        .ok_or_else(|| io_error(what, "the generated file left the cache at once"))?;
    Ok(OpenFile::Cached(file))
}

/// Opens the cache entry for `key`, generating it whole first if there is none.
fn open_whole(
    cache: &ContentCache,
    key: &CacheKey,
    what: &str,
    generate: impl FnOnce(&mut (dyn io::Write + Send)) -> io::Result<()>,
) -> FsResult<OpenFile> {
    generate_whole(cache, key, what, generate)?;
    open_generated(cache, key, what)
}

/// The cache key of a level's PNG.
fn png_key(level: &ArrayObject) -> CacheKey {
    content_key([level], |digest| {
        digest.text("png");
    })
}

/// Opens a multiscale image level as PNG, generated whole (a PNG is written in one go).
pub fn open_png(
    options: &DataOptions,
    level: &ArrayObject,
    axes: &[ImageAxis],
) -> FsResult<OpenFile> {
    let what = format!("{} as PNG", level.uri);
    let generate = |out: &mut (dyn io::Write + Send)| {
        let values = dense_values(level, None).map_err(io::Error::other)?;
        let shape = level.schema.shape.clone().unwrap_or_default();
        let value_type = level
            .schema
            .columns
            .iter()
            .rfind(|c| !c.is_index)
            .map(|c| c.arrow_type.clone())
            .ok_or_else(|| io::Error::other("the level has no value column"))?;
        out.write_all(&png::encode(&values, &shape, &value_type, axes)?)
    };
    open_whole(&options.cache, &png_key(level), &what, generate)
}

/// The cache key of a matrix directory's file: obs, var and the layer's snapshots, the
/// category, and which file.
pub fn tenx_key(layer: &TenxLayer, file: TenxFile) -> CacheKey {
    content_key([&*layer.obs, &*layer.var, &*layer.x], |digest| {
        digest.text(match file {
            TenxFile::Matrix => "matrix.mtx",
            TenxFile::Features => "features.tsv",
            TenxFile::Barcodes => "barcodes.tsv",
        });
        let cells = Selection {
            equals: layer.cells.clone(),
            ..Selection::default()
        };
        cells.digest_into(digest);
    })
}

/// Opens a file of a matrix directory, generated whole (the matrix's header counts its
/// entries, so it is written after them).
pub fn open_tenx(options: &DataOptions, layer: &TenxLayer, file: TenxFile) -> FsResult<OpenFile> {
    generate_tenx(options, layer, file)?;
    let what = format!("{} as 10x {file:?}", layer.x.uri);
    open_generated(&options.cache, &tenx_key(layer, file), &what)
}

/// Generates a file of a matrix directory whole into the cache, unless it is there.
pub fn generate_tenx(options: &DataOptions, layer: &TenxLayer, file: TenxFile) -> FsResult<()> {
    let what = format!("{} as 10x {file:?}", layer.x.uri);
    let cache = &options.cache;
    let generate = |out: &mut (dyn io::Write + Send)| -> io::Result<()> {
        let backend = io::Error::other;
        match file {
            TenxFile::Barcodes => {
                let barcodes = layer.barcodes().map_err(backend)?;
                mtx::write_barcodes(barcodes.iter().map(|(_, b)| b.as_str()), out)
            }
            TenxFile::Features => {
                let features = layer.features().map_err(backend)?;
                mtx::write_features(
                    features
                        .iter()
                        .map(|(_, id, name)| (id.as_str(), name.as_str())),
                    out,
                )
            }
            TenxFile::Matrix => {
                let barcodes = layer.barcodes().map_err(backend)?;
                let features = layer.features().map_err(backend)?;
                let cell_ids: Vec<i64> = barcodes.iter().map(|(id, _)| *id).collect();
                let cell_positions = Positions::new(cell_ids.clone());
                let feature_positions = Positions::new(features.iter().map(|f| f.0).collect());
                // The entries go to a scratch file first: the header counts them.
                let scratch_key = CacheKey::new(["matrix entries", &what]);
                let (_scratch, body) = cache.begin(&scratch_key)?;
                let mut body_out = io::BufWriter::with_capacity(WRITE_BUFFER_BYTES, &body);
                let mut entries = 0u64;
                let mut buf = TextBuf::default();
                layer
                    .entries(&cell_ids, |cells, genes, values| {
                        buf.clear();
                        entries += mtx::write_entries(
                            genes.iter().map(|&g| feature_positions.get(g)),
                            cells.iter().map(|&c| cell_positions.get(c)),
                            values,
                            &mut buf,
                        )?;
                        io::Write::write_all(&mut body_out, buf.as_bytes())
                    })
                    .map_err(backend)?;
                io::Write::flush(&mut body_out)?;
                drop(body_out);
                mtx::write_matrix_header(
                    layer.is_integer(),
                    feature_positions.len(),
                    cell_positions.len(),
                    entries,
                    out,
                )?;
                let mut body = &body;
                io::Seek::rewind(&mut body)?;
                io::copy(&mut body, &mut *out).map(|_| ())
            }
        }
    };
    generate_whole(cache, &tenx_key(layer, file), &what, generate)
}
