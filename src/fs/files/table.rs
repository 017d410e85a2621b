//! Tables: an array's rows, or the part a slice or a category selects, in a format
//! (`data.<ext>`, `slices/<name>.<ext>`, `by/<column>/<label>/data.<ext>`).
//!
//! A table is generated from a TileDB read into the cache. Opening one generates it whole
//! first when it is small (estimated below `--materialize-limit`), Parquet (its footer comes
//! last), or with `--exact-sizes`; otherwise it streams while a generator writes it. A
//! `stat` generates an array's whole-array files when they are small, and any table with
//! `--exact-sizes`, for the tools that size from `stat` before they open.

use std::io;
use std::sync::Arc;

use crate::format::{self, TableFormat};
use crate::soma::{estimated_cells, ArrayObject, BatchReader, ReadAhead, Selection, BATCH_BYTES};

use arrow_array::RecordBatch;

use super::super::activity;
use super::super::cache::CacheKey;
use super::super::data::{content_key, generate_whole, open_generated};
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

/// A table in a format.
#[derive(Debug)]
pub struct TableFile {
    table: Table,
    format: TableFormat,
    key: CacheKey,
}

impl TableFile {
    pub fn new(table: Table, format: TableFormat) -> TableFile {
        let key = content_key([table.array()], |digest| {
            digest.text(format.extension());
            table.selection.digest_into(digest);
        });
        TableFile { table, format, key }
    }

    /// About how many bytes the file comes to.
    fn estimated_bytes(&self) -> FsResult<u64> {
        let array = self.table.array();
        let cells = estimated_cells(array, &self.table.selection)
            .map_err(|e| FsError::io(self.what(), e))?;
        Ok(cells.saturating_mul(self.format.estimated_row_bytes(&array.schema.arrow())))
    }

    /// Whether opening a file of about `estimated_bytes` generates it whole first (see the
    /// module's notes).
    fn generated_whole_on_open(&self, cx: &FileContext, estimated_bytes: u64) -> bool {
        self.format == TableFormat::Parquet
            || cx.options.exact_sizes
            || estimated_bytes < cx.options.materialize_limit
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

    /// Starts reading the table on a thread of its own.
    fn read(&self) -> crate::soma::Result<ReadAhead> {
        let table = &self.table;
        let reader = BatchReader::open(table.array(), &table.selection, BATCH_BYTES)?;
        Ok(ReadAhead::start(reader)?)
    }
}

impl FileKind for TableFile {
    fn size(&self, cx: &FileContext) -> FsResult<Option<u64>> {
        Ok(cx.options.cache.size(&self.key))
    }

    fn open(&self, cx: &FileContext) -> FsResult<OpenFile> {
        let cache = &cx.options.cache;
        if let Some((file, _)) = cache.open_entry(&self.key) {
            return Ok(OpenFile::Cached(file));
        }
        let what = self.what();
        let estimated_bytes = self.estimated_bytes()?;
        activity::expect_bytes(estimated_bytes);
        if self.generated_whole_on_open(cx, estimated_bytes) {
            self.generate(cx)?;
            return open_generated(cache, &self.key, &what);
        }
        // The turn first: the reader starts reading as soon as it is made.
        let slot = crate::budget::generations().take(1);
        let mut reader = self.read().map_err(|e| FsError::io(&what, e))?;
        let schema = reader.schema();
        let task = cx
            .background
            .begin()
            .ok_or_else(|| FsError::io(&what, "the daemon is ending"))?;
        let format = self.format;
        let stream = Stream::start(cache.clone(), self.key.clone(), task, slot, move |out| {
            format::write_table(format, schema, || counted(&mut reader), out)
        })
        .map_err(|e| FsError::io(&what, e))?;
        Ok(OpenFile::Streaming(stream))
    }

    /// Every table with `--exact-sizes`; without, an array's whole-array files estimated
    /// below `--materialize-limit`, which tools that size from `stat` (`fread`, `tar`,
    /// `rsync`) read most. Never a slice or a category: `ls -l slices/` would generate every
    /// chunk. A whole-array file whose size cannot be estimated is generated too, so that
    /// the `stat` reports the read's error rather than a size of 0.
    fn generated_on_stat(&self, cx: &FileContext) -> bool {
        cx.options.exact_sizes
            || (self.table.selection == Selection::default()
                && match self.estimated_bytes() {
                    Ok(bytes) => bytes < cx.options.materialize_limit,
                    Err(_) => true,
                })
    }

    fn generate(&self, cx: &FileContext) -> FsResult<()> {
        generate_whole(&cx.options.cache, &self.key, &self.what(), |out| {
            let mut reader = self.read()?;
            let schema = reader.schema();
            format::write_table(self.format, schema, || counted(&mut reader), out)
        })
    }
}

/// The reader's next batch, its rows counted as the generation's progress.
fn counted(reader: &mut ReadAhead) -> io::Result<Option<RecordBatch>> {
    let batch = reader.next_batch()?;
    if let Some(batch) = &batch {
        activity::count_rows(batch.num_rows());
    }
    Ok(batch)
}
