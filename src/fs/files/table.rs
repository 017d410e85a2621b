//! Tables: an array's rows, or the part a slice or a category selects, in a format
//! (`data.<ext>`, `slices/<name>.<ext>`, `by/<column>/<label>/data.<ext>`).
//!
//! A table is generated from a TileDB read into the cache. Opening one generates it whole
//! first when it is small (estimated below `--materialize-limit`), Parquet (its footer comes
//! last), or with `--exact-sizes`; otherwise it streams while a generator writes it. A
//! `stat` of a listed table generates it when it is small, and a chunk of `slices/` always
//! (chunks are cut small), so that tools that size from a listing or a `stat` (`fread`,
//! `tar`, polars and Spark over a directory) get every byte; a slice opened by name, never
//! listed, only with `--exact-sizes`.
//!
//! The Parquet of an ND array, whole or in one range per dimension, is sized
//! ([`SizedParquet`]): its columns are fixed-width and never null, so its layout, and with
//! it its size, follows from its row count: every cell
//! of a dense array's ranges, and a sparse array's as libtiledb counts them from the
//! coordinates alone. A `stat` counts the rows and answers the exact size without
//! generating the file, so listing `slices/parquet/` reads no cell value; the file is
//! generated in that layout when it is opened.

use std::io;
use std::sync::{Arc, Mutex, OnceLock};

use crate::format::parquet_sized::SizedParquet;
use crate::format::{self, TableFormat};
use crate::soma::{
    counted_cells, estimated_cells, ArrayObject, BatchReader, ReadAhead, Selection, BATCH_BYTES,
};
use crate::sync::Recover;

use arrow_array::RecordBatch;

use super::super::activity::Progress;
use super::super::cache::CacheKey;
use super::super::data::{
    as_generation, content_key, generate, generate_seekable, open_generated, small, text_widths,
    CacheWriter,
};
use super::super::error::{FsError, FsResult};
use super::super::open_file::{OpenFile, Stream};
use super::{FileContext, FileKind};

/// An array's rows, or the part of them a slice or a category selects.
#[derive(Debug, Clone)]
pub struct Table {
    pub array: Arc<ArrayObject>,
    pub selection: Selection,
}

impl Table {
    pub fn array(&self) -> &ArrayObject {
        &self.array
    }
}

/// How a table file is shown, which decides whether a `stat` generates it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shown {
    /// Listed by a directory (`data.<ext>`, a category's): a `stat` generates it when it is
    /// estimated below `--materialize-limit`.
    Listed,
    /// A chunk of `slices/<format>/`, cut to stay below `--materialize-limit`: a `stat`
    /// generates it.
    Chunk,
    /// A slice opened by name, never listed: a `stat` generates it only with
    /// `--exact-sizes` (a look by name is no listing, and `stat`s of many names, as
    /// `find` sends, would generate each).
    ByName,
}

/// A table in a format.
#[derive(Debug)]
pub struct TableFile {
    table: Table,
    format: TableFormat,
    shown: Shown,
    /// Whether the file is sized Parquet (see the module's notes).
    sized: bool,
    /// The layout of sized Parquet, once its rows are counted.
    layout: OnceLock<SizedParquet>,
    /// Held while the rows are counted: a `stat` that comes meanwhile waits for the count.
    counting: Mutex<()>,
    key: CacheKey,
}

impl TableFile {
    pub fn new(table: Table, format: TableFormat, shown: Shown) -> TableFile {
        let array = table.array();
        // libtiledb counts cells in one range per dimension (a count is read in global
        // order), and with no condition: a query's cells, in runs of join ids, are not
        // counted but generated.
        let selection = &table.selection;
        let countable = selection.ranges.iter().all(|r| r.len() <= 1)
            && selection.filter.is_none()
            && selection.equals.is_none();
        let sized = format == TableFormat::Parquet
            && array.soma_type.is_nd_array()
            && selection.columns.is_none()
            && countable
            && SizedParquet::of(&array.schema.arrow(), 0).is_some();
        let key = content_key([table.array()], |digest| {
            digest.text(format.extension());
            if sized {
                digest.text("sized");
            }
            table.selection.digest_into(digest);
        });
        TableFile {
            table,
            format,
            shown,
            sized,
            layout: OnceLock::new(),
            counting: Mutex::new(()),
            key,
        }
    }

    /// The layout of sized Parquet: its rows counted the first time it is asked for, as
    /// work of the generation `cx` runs inside, or as one of its own.
    fn layout(&self, cx: &FileContext) -> FsResult<&SizedParquet> {
        if let Some(layout) = self.layout.get() {
            return Ok(layout);
        }
        let _counting = self.counting.lock().recover();
        if let Some(layout) = self.layout.get() {
            return Ok(layout);
        }
        let array = self.table.array();
        let counted = as_generation(cx, |_| counted_cells(array, &self.table.selection))
            .map_err(|e| FsError::io(self.what(), e))?;
        let layout = counted
            .and_then(|rows| SizedParquet::of(&array.schema.arrow(), rows))
            .ok_or_else(|| FsError::io(self.what(), "not sized Parquet"))?;
        Ok(self.layout.get_or_init(|| layout))
    }

    /// Writes sized Parquet in `layout` into `out`, from `reader`'s rows, counted as
    /// `generation`'s.
    fn write_sized(
        &self,
        layout: &SizedParquet,
        mut reader: ReadAhead,
        out: &mut CacheWriter,
        generation: Option<&Progress>,
    ) -> io::Result<()> {
        if reader.schema() != self.table.array().schema.arrow() {
            return Err(io::Error::other(
                "the read's columns are not the schema's: not sized Parquet",
            ));
        }
        layout.write(|| counted(&mut reader, generation), out)
    }

    /// About how many bytes the file comes to.
    fn estimated_bytes(&self) -> FsResult<u64> {
        let array = self.table.array();
        let cells = estimated_cells(array, &self.table.selection)
            .map_err(|e| FsError::io(self.what(), e))?;
        let row_bytes =
            (self.format).estimated_row_bytes(&array.schema.arrow(), &text_widths(array));
        Ok(cells.saturating_mul(row_bytes))
    }

    /// Whether opening a file of about `estimated_bytes` generates it whole first (see the
    /// module's notes).
    fn generated_whole_on_open(&self, cx: &FileContext, estimated_bytes: u64) -> bool {
        self.format == TableFormat::Parquet
            || cx.options.exact_sizes
            || small::<()>(&cx.options, Ok(estimated_bytes))
    }

    /// What the file is, for log lines.
    fn what(&self) -> String {
        format!(
            "{} ({:?} as {})",
            self.table.array().uri,
            self.table.selection,
            self.format.extension()
        )
    }

    /// Generates the file whole into the cache.
    fn generate(&self, cx: &FileContext) -> FsResult<()> {
        let what = self.what();
        if self.sized {
            return generate_seekable(cx, &self.key, &what, |out, cx| {
                // The read starts first: its first batches come while the rows are counted.
                let reader = self.read()?;
                let layout = self.layout(cx).map_err(io::Error::other)?;
                self.write_sized(layout, reader, out, cx.generation.as_deref())
            });
        }
        generate(cx, &self.key, &what, |out, cx| {
            let mut reader = self.read()?;
            let schema = reader.schema();
            let generation = cx.generation.as_deref();
            format::write_table(
                self.format,
                schema,
                || counted(&mut reader, generation),
                out,
            )
        })
    }

    /// Starts reading the table on a thread of its own.
    fn read(&self) -> crate::soma::Result<ReadAhead> {
        let table = &self.table;
        let reader = BatchReader::open(table.array(), &table.selection, BATCH_BYTES)?;
        Ok(ReadAhead::start(reader)?)
    }
}

impl FileKind for TableFile {
    fn size(&self, cx: &FileContext) -> FsResult<Option<u64>> {
        let layout = self.layout.get().map(SizedParquet::size);
        Ok(cx.options.cache.size(&self.key).or(layout))
    }

    fn open(&self, cx: &FileContext) -> FsResult<OpenFile> {
        let cache = &cx.options.cache;
        if let Some((file, _)) = cache.open_entry(&self.key) {
            return Ok(OpenFile::Cached(file));
        }
        let what = self.what();
        // Work on the store before the file's generation (over object storage the estimate
        // of a slice loads R-trees, which another file's generation may be loading): in a
        // turn, and shown by `soma-mount status` while it waits.
        let estimated_bytes = as_generation(cx, |_| self.estimated_bytes())?;
        let cx = &cx.expecting(estimated_bytes);
        if self.generated_whole_on_open(cx, estimated_bytes) {
            self.generate(cx)?;
            return open_generated(cache, &self.key, &what);
        }
        // The turn first: the reader starts reading as soon as it is made.
        let (slot, generation) = cx.begin_generation();
        let mut reader = self.read().map_err(|e| FsError::io(&what, e))?;
        let schema = reader.schema();
        let task = cx
            .background
            .begin()
            .ok_or_else(|| FsError::io(&what, "the daemon is ending"))?;
        let format = self.format;
        let stream = Stream::start(
            cache.clone(),
            (self.key.clone(), what.clone()),
            estimated_bytes,
            task,
            (slot, generation.clone()),
            move |out| {
                let counted = || counted(&mut reader, Some(&generation));
                format::write_table(format, schema, counted, out)
            },
        )
        .map_err(|e| FsError::io(&what, e))?;
        Ok(OpenFile::Streaming(stream))
    }

    /// Sized Parquet (its rows are counted); every table with `--exact-sizes`; otherwise
    /// as [`Shown`] says. A listed file whose size cannot be estimated is generated too, so
    /// that the `stat` reports the read's error rather than a size of 0.
    fn sized_on_stat(&self, cx: &FileContext) -> bool {
        self.sized
            || cx.options.exact_sizes
            || match self.shown {
                Shown::Chunk => true,
                Shown::ByName => false,
                Shown::Listed => small(&cx.options, self.estimated_bytes()),
            }
    }

    fn settle_size(&self, cx: &FileContext) -> FsResult<()> {
        match self.sized {
            true => self.layout(cx).map(|_| ()),
            false => self.generate(cx),
        }
    }

    fn settled_by_counting(&self) -> bool {
        self.sized
    }
}

/// The reader's next batch, its rows counted as `generation`'s progress.
fn counted(
    reader: &mut ReadAhead,
    generation: Option<&Progress>,
) -> io::Result<Option<RecordBatch>> {
    let batch = reader.next_batch()?;
    if let (Some(batch), Some(generation)) = (&batch, generation) {
        generation.count_rows(batch.num_rows());
    }
    Ok(batch)
}
