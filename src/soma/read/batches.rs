//! [`BatchReader`]: a read of a selection of an array as a stream of record batches, from
//! wherever its cells are: libtiledb's queries ([`QueryReader`]), or cells held in memory
//! ([`MemoryCells`](super::MemoryCells), the seam the unit tests read through).

use arrow_array::RecordBatch;
use arrow_schema::SchemaRef;

use super::cells::MemoryRead;
use super::plan::{read_columns, read_ranges, row_bytes, Mode};
use super::reader::QueryReader;
use super::{DenseCellOrder, Selection};
use crate::soma::error::Result;
use crate::soma::object::{ArrayData, ArrayObject};

/// A stream of record batches of a selection of an array, its rows sorted by the index
/// columns unless opened unsorted.
pub struct BatchReader(Source);

enum Source {
    Query(Box<QueryReader>),
    Memory(MemoryRead),
}

impl BatchReader {
    /// Starts reading `selection` of `array`, as of the array's snapshot (through the
    /// handle it was opened with).
    pub fn open(
        array: &ArrayObject,
        selection: &Selection,
        batch_bytes: usize,
    ) -> Result<BatchReader> {
        BatchReader::open_in(array, selection, batch_bytes, Mode::Sorted)
    }

    /// Starts reading the columns `only` (index columns among them too, and only those) of
    /// the cells `selection` selects of a sparse array, in no order that means anything
    /// (libtiledb's global order): for counts, which need no sort and no other column.
    /// The nulls of the nullable columns `null_counted` among those cells are counted too,
    /// without reading their values: [`BatchReader::null_counts`] has them at the end.
    pub fn open_unsorted(
        array: &ArrayObject,
        selection: &Selection,
        only: &[&str],
        null_counted: &[&str],
        batch_bytes: usize,
    ) -> Result<BatchReader> {
        let mode = Mode::Unsorted { only, null_counted };
        BatchReader::open_in(array, selection, batch_bytes, mode)
    }

    /// Starts reading the values of a two-dimensional dense array's `selection` without
    /// their coordinates, which [`DenseCellOrder`] tells: when the read selects by ranges
    /// alone, one of them on the second dimension. `None` otherwise.
    pub fn open_dense_values(
        array: &ArrayObject,
        selection: &Selection,
        batch_bytes: usize,
    ) -> Result<Option<(BatchReader, DenseCellOrder)>> {
        let unconditional = selection.equals.is_none() && selection.filter.is_none();
        if !array.schema.dense || !unconditional || array.schema.index_columns().count() != 2 {
            return Ok(None);
        }
        let Some(order) = DenseCellOrder::of(&read_ranges(array, selection)) else {
            return Ok(None);
        };
        let reader = BatchReader::open_values(array, selection, batch_bytes)?;
        Ok(Some((reader, order)))
    }

    /// Starts reading the values of a dense array's `selection` without their coordinates,
    /// in row-major order (a dense array is always read so): its cells in C order when it
    /// selects one range a dimension.
    pub(super) fn open_values(
        array: &ArrayObject,
        selection: &Selection,
        batch_bytes: usize,
    ) -> Result<BatchReader> {
        let values: Vec<&str> = (array.schema.columns.iter())
            .filter(|c| !c.is_index)
            .map(|c| c.name.as_str())
            .collect();
        // As many cells a batch as a read with coordinates: the cells of a query's buffers
        // decide how many tiles libtiledb holds at once.
        let cells_bytes = |only: Option<&[&str]>| row_bytes(&read_columns(array, selection, only));
        let batch_bytes =
            (batch_bytes as u64 * cells_bytes(Some(&values)) / cells_bytes(None)).max(1) as usize;
        let mode = Mode::Unsorted {
            only: &values,
            null_counted: &[],
        };
        BatchReader::open_in(array, selection, batch_bytes, mode)
    }

    /// Starts a read of `selection` of `array` in `mode`, from where its cells are.
    fn open_in(
        array: &ArrayObject,
        selection: &Selection,
        batch_bytes: usize,
        mode: Mode,
    ) -> Result<BatchReader> {
        Ok(BatchReader(match array.data() {
            ArrayData::Memory(cells) => Source::Memory(cells.read(array, selection, mode)?),
            _ => Source::Query(Box::new(QueryReader::open(
                array,
                selection,
                batch_bytes,
                mode,
            )?)),
        }))
    }

    /// The nulls of each column [`BatchReader::open_unsorted`] counts, once the reader has
    /// returned its last batch (`None` before).
    pub fn null_counts(&self) -> Option<&[(String, u64)]> {
        match &self.0 {
            Source::Query(reader) => reader.null_counts(),
            Source::Memory(read) => read.null_counts(),
        }
    }

    pub fn schema(&self) -> SchemaRef {
        match &self.0 {
            Source::Query(reader) => reader.schema(),
            Source::Memory(read) => read.schema(),
        }
    }

    /// The next batch of rows, `None` at the end.
    pub fn next_batch(&mut self) -> Result<Option<RecordBatch>> {
        match &mut self.0 {
            Source::Query(reader) => reader.next_batch(),
            Source::Memory(read) => read.next_batch(),
        }
    }
}
