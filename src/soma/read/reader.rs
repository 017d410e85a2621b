//! [`BatchReader`]: a read of a selection of an array as a stream of record batches, its
//! rows sorted by the index columns. It follows its [`ReadPlan`]: it opens the plan's
//! queries (one, or one a run of bands), reads the next runs ahead, and puts the rows in
//! order where libtiledb does not.

use std::collections::VecDeque;
use std::sync::Arc;

use arrow_array::RecordBatch;
use arrow_schema::{DataType, SchemaRef};

use crate::tiledb::{Array, ColumnSpec, Layout, QueryCondition, ReadQuery, Value};

use super::memory::{BatchSizing, TileUnit};

use super::ahead::{NextRun, RunAhead, RunQuery, RUNS_AHEAD};
use super::arrow::{labels_array, ArrowBatches};
use super::condition::{label_equality, read_condition};
use super::memory::tiledb_query_memory;
use super::order::{sort_by_index, BandSorter};
use super::plan::*;
use super::spans::SpanReads;
use super::DenseCellOrder;
use super::Selection;
use crate::soma::error::{Error, Result};
use crate::soma::object::ArrayObject;

/// A stream of record batches: one read query, or for band-sorted reads a sequence of
/// queries over consecutive runs of bands of the first dimension (the first run is a few
/// rows, so the first rows come at once; later runs hold about `CELLS_PER_QUERY` cells).
/// Once a run has its first batch, the next [`RUNS_AHEAD`] runs read ahead on threads of
/// their own ([`NextRun`]) while it is handed out, up to a batch's bytes each: over a network
/// their round trips overlap it, on a local disk their tiles are decompressed beside its own,
/// and none delays the first rows of the read.
pub struct BatchReader {
    pub(super) array: Arc<Array>,
    pub(super) specs: Vec<ColumnSpec>,
    pub(super) layout: Layout,
    /// Ranges per index column; the first is replaced by each run's range.
    pub(super) ranges: Vec<Vec<(Value, Value)>>,
    pub(super) condition: Option<QueryCondition>,
    pub(super) batch_bytes: usize,
    /// About this many cells come from one query (sizes its first batch); for runs, per band.
    pub(super) expected_cells: u64,
    /// What libtiledb decompresses at a time, in cells of this read.
    pub(super) unit: Option<TileUnit>,
    /// The runs still to read, when reading in runs.
    pub(super) runs: VecDeque<Run>,
    /// For a band-sorted read whose runs may be read as spans ([`SpanReads`]).
    pub(super) spans: Option<SpanReads>,
    pub(super) query: Option<RunQuery>,
    /// What the current query read ahead, when it was a run read ahead.
    pub(super) ahead: Option<RunAhead>,
    /// The next runs (at most [`RUNS_AHEAD`]), each reading ahead.
    pub(super) next_runs: VecDeque<NextRun>,
    pub(super) arrow: Arc<ArrowBatches>,
    /// For global-order reads that need it: the band sorter.
    pub(super) bands: Option<BandSorter>,
    /// For small reads sorted here ([`IN_MEMORY_SORT_BYTES`]): the batches read so far,
    /// until the last, when they are sorted whole.
    pub(super) in_memory: Option<Vec<RecordBatch>>,
    /// Sorted batches ready to hand out.
    pub(super) ready: VecDeque<RecordBatch>,
    /// The rows a dense read selects: it must return exactly these.
    pub(super) expected_rows: Option<u64>,
    pub(super) rows_returned: u64,
    /// The columns whose nulls every query counts, and the nulls of the queries ended.
    pub(super) null_counts: Vec<(String, u64)>,
    /// What libtiledb may hold for each of its global-order and unordered queries
    /// ([`tiledb_query_memory`]; `None`: its default).
    pub(super) query_memory: Option<u64>,
    /// The reader's share of the memory budget.
    pub(super) _memory: crate::budget::Permit,
}

impl BatchReader {
    /// Starts reading `selection` of `array`, as of the array's snapshot (through the
    /// handle it was opened with).
    pub fn open(
        array: &ArrayObject,
        selection: &Selection,
        batch_bytes: usize,
    ) -> Result<BatchReader> {
        BatchReader::open_with(array, selection, batch_bytes, None)
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
        BatchReader::open_with(array, selection, batch_bytes, Some((only, null_counted)))
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
        BatchReader::open_with(array, selection, batch_bytes, Some((&values, &[])))
    }

    /// Starts a read of `selection` of `array`, sorted, or `unsorted` with the columns it
    /// names and the columns whose nulls it counts. The steps: the columns it returns, the
    /// ranges it reads, its [`ReadPlan`], the memory it takes, the condition its queries
    /// test, its runs when band-sorted; then its first query.
    pub(super) fn open_with(
        array: &ArrayObject,
        selection: &Selection,
        batch_bytes: usize,
        unsorted: Option<(&[&str], &[&str])>,
    ) -> Result<BatchReader> {
        let handle = array.handle()?;
        let columns = read_columns(array, selection, unsorted.map(|(only, _)| only));
        let mut ranges = read_ranges(array, selection);
        let dense_selected = selected_cells(&ranges);
        let label = label_equality(array, selection)?;
        let cells = crate::soma::estimated_cells(array, selection)?;
        let read_bytes = cells.saturating_mul(row_bytes(&columns));
        let read = ReadPlan::choose(array, &ranges, unsorted.is_some(), read_bytes);
        let mut equalities = Vec::from_iter(label);
        equalities.extend(text_dimension_equalities(array, &read, &mut ranges));
        let filter = selection.filter.as_deref();
        let condition = read_condition(&handle, &equalities, filter)?;
        let (layout, runs, bands, expected_cells) = match read.plan {
            Plan::Sorted(layout) => (layout, VecDeque::new(), None, cells),
            Plan::Bands { extent, origin } => {
                let b = band_runs_of(array, &ranges, extent, origin, cells);
                (
                    Layout::GlobalOrder,
                    b.runs,
                    Some(b.sorter),
                    b.cells_per_band,
                )
            }
        };
        let spans = (bands.is_some() && unsorted.is_none())
            .then(|| SpanReads::of(array, read.plan))
            .flatten();
        let query_memory = tiledb_query_memory(array, cells, &runs, &ranges[0]);
        let memory =
            crate::budget::memory().take(read.memory(batch_bytes, query_memory.unwrap_or(0)));
        let unit = tile_unit(array, &ranges);
        let dense_unconditional = array.schema.dense && condition.is_none();
        let expected_rows = dense_unconditional.then_some(dense_selected).flatten();
        let labels = columns
            .iter()
            .map(|c| c.enumeration.as_ref().map(labels_array).transpose())
            .collect::<Result<Vec<_>>>()?;
        let reader = BatchReader {
            array: handle,
            specs: column_specs(&columns),
            layout,
            ranges,
            condition,
            batch_bytes,
            expected_cells,
            unit,
            runs,
            spans,
            query: None,
            ahead: None,
            next_runs: VecDeque::new(),
            arrow: Arc::new(ArrowBatches {
                schema: array.schema.arrow_of(&columns),
                columns,
                labels,
            }),
            bands,
            in_memory: read.sorted_bytes.is_some().then(Vec::new),
            ready: VecDeque::new(),
            expected_rows,
            rows_returned: 0,
            null_counts: unsorted
                .map(|(_, counted)| counted.iter().map(|c| ((*c).to_owned(), 0)).collect())
                .unwrap_or_default(),
            query_memory,
            _memory: memory,
        };
        reader.start(selection.is_empty())
    }

    /// The reader with its first query started, unless it reads in runs (their queries
    /// start as they are read); when the selection is `empty` (a range outside the
    /// domain), a reader with nothing to read.
    pub(super) fn start(mut self, empty: bool) -> Result<BatchReader> {
        if empty {
            self.runs = VecDeque::from([Run::new()]);
            self.expected_rows = Some(0);
        } else if self.runs.is_empty() {
            self.query = Some(self.new_query(None, true)?);
        }
        Ok(self)
    }

    /// A query over the reader's ranges, with dimension 0 narrowed to `run` when given
    /// (unordered when it holds several ranges: see [`Run`]); its batches `start_small`
    /// when its consumer waits for its first rows.
    pub(super) fn new_query(&self, run: Option<&Run>, start_small: bool) -> Result<RunQuery> {
        let mut ranges = self.ranges.clone();
        let mut expected_cells = self.expected_cells;
        let mut layout = self.layout;
        let mut kept = None;
        if let Some(run) = run {
            if let Some(bands) = &self.bands {
                // Per band: scale to the run's rows.
                let rows: i128 = run.iter().map(|(lo, hi)| hi - lo + 1).sum();
                let scaled =
                    u128::from(expected_cells) * rows as u128 / bands.extent.max(1) as u128;
                expected_cells = scaled.clamp(1, u128::from(u64::MAX)) as u64;
            }
            let bound = |v: i128| match self.arrow.columns[0].arrow_type {
                DataType::UInt64 => Value::UInt(v as u64),
                _ => Value::Int(v as i64),
            };
            match self.spans.as_ref().and_then(|spans| spans.kept_rows(run)) {
                Some(rows) => {
                    ranges[0] = vec![(bound(rows.first), bound(rows.last()))];
                    kept = Some(rows);
                }
                None => {
                    ranges[0] = run.iter().map(|&(lo, hi)| (bound(lo), bound(hi))).collect();
                    if run.len() > 1 {
                        layout = Layout::Unordered;
                    }
                }
            }
        }
        let sizing = BatchSizing {
            bytes: self.batch_bytes,
            expected_cells,
            unit: self.unit,
            starts_small: start_small,
        };
        let mut query = ReadQuery::new(
            self.array.clone(),
            layout,
            &ranges,
            &self.specs,
            self.condition.as_ref(),
            Box::new(sizing),
        )?;
        if !self.null_counts.is_empty() {
            let counted: Vec<&str> = self.null_counts.iter().map(|(c, _)| c.as_str()).collect();
            query.count_nulls(&counted)?;
        }
        if let (Some(bytes), Layout::GlobalOrder | Layout::Unordered) = (self.query_memory, layout)
        {
            query.limit_memory(bytes)?;
        }
        Ok(RunQuery { query, kept })
    }

    /// The nulls of each column [`BatchReader::open_unsorted`] counts, once the reader has
    /// returned its last batch (`None` before).
    pub fn null_counts(&self) -> Option<&[(String, u64)]> {
        let ended = self.query.is_none() && self.runs.is_empty() && self.next_runs.is_empty();
        ended.then_some(self.null_counts.as_slice())
    }

    pub fn schema(&self) -> SchemaRef {
        self.arrow.schema.clone()
    }

    /// The next batch of rows, `None` at the end.
    pub fn next_batch(&mut self) -> Result<Option<RecordBatch>> {
        let next = self.next_sorted_batch()?;
        match &next {
            Some(batch) => self.rows_returned += batch.num_rows() as u64,
            None => {
                if let Some(expected) = self.expected_rows {
                    if expected != self.rows_returned {
                        return Err(Error::invalid(format!(
                            "a dense read returned {} cells of the {expected} it selects",
                            self.rows_returned
                        )));
                    }
                }
            }
        }
        Ok(next)
    }

    pub(super) fn next_sorted_batch(&mut self) -> Result<Option<RecordBatch>> {
        if let Some(mut held) = self.in_memory.take() {
            // Everything first, then sorted whole.
            loop {
                match self.next_query_batch()? {
                    Step::Batch(batch) => held.push(batch),
                    Step::RunEnd => {}
                    Step::End => break,
                }
            }
            let index_columns = self.arrow.columns.iter().filter(|c| c.is_index).count();
            if let Some(sorted) = sort_by_index(&self.arrow.schema, &held, index_columns)? {
                self.ready.push_back(sorted);
            }
        }
        loop {
            if let Some(batch) = self.ready.pop_front() {
                return Ok(Some(batch));
            }
            let step = self.next_query_batch()?;
            let Some(bands) = &mut self.bands else {
                return Ok(match step {
                    Step::Batch(batch) => Some(batch),
                    Step::RunEnd => continue,
                    Step::End => None,
                });
            };
            match step {
                Step::Batch(batch) => bands.push(&batch, &mut self.ready)?,
                // Runs hold whole bands: the band read last is complete.
                Step::RunEnd => bands.finish_band(&mut self.ready)?,
                Step::End => {
                    bands.finish_band(&mut self.ready)?;
                    return Ok(self.ready.pop_front());
                }
            }
        }
    }

    /// The next batch as libtiledb returns it (of the rows kept of a span), moving on to the
    /// next run when a query ends.
    pub(super) fn next_query_batch(&mut self) -> Result<Step> {
        if self.query.is_none() && !self.start_run()? {
            return Ok(Step::End);
        }
        let next = match self.ahead.as_mut() {
            Some(ahead) if !ahead.batches.is_empty() => ahead.batches.pop_front(),
            Some(ahead) if ahead.ended => None,
            _ => {
                let run = self.query.as_mut().expect("a run was just started");
                match run.query.next_batch()? {
                    Some(batch) => Some(self.arrow.record_batch(batch, run.kept.as_ref())?),
                    None => None,
                }
            }
        };
        // The runs after this one start once it has its first batch: they must not slow
        // down the first rows of the read.
        while self.next_runs.len() < RUNS_AHEAD {
            let Some(run) = self.runs.pop_front().filter(|run| !run.is_empty()) else {
                break;
            };
            let query = self.new_query(Some(&run), false)?;
            let arrow = self.arrow.clone();
            self.next_runs
                .push_back(NextRun::start(query, arrow, self.batch_bytes)?);
        }
        let Some(batch) = next else {
            self.ahead = None;
            if let Some(ended) = self.query.take() {
                let counts = (ended.query)
                    .null_counts()
                    .ok_or_else(|| Error::invalid("a read query ended without its null counts"))?;
                for ((_, total), (_, count)) in self.null_counts.iter_mut().zip(counts) {
                    *total += count;
                }
            }
            return Ok(if self.runs.is_empty() && self.next_runs.is_empty() {
                Step::End
            } else {
                Step::RunEnd
            });
        };
        Ok(Step::Batch(batch))
    }

    /// Makes the next run's query the current one (`false` when no run is left), and starts
    /// reading the runs after it.
    pub(super) fn start_run(&mut self) -> Result<bool> {
        if let Some(next_run) = self.next_runs.pop_front() {
            let (query, ahead) = next_run.join()?;
            self.query = Some(query);
            self.ahead = Some(ahead);
        } else {
            match self.runs.pop_front() {
                Some(run) if !run.is_empty() => {
                    self.query = Some(self.new_query(Some(&run), true)?)
                }
                _ => return Ok(false),
            }
        }
        Ok(true)
    }
}

/// What one step of reading gave.
pub(super) enum Step {
    Batch(RecordBatch),
    /// A run's query has returned everything.
    RunEnd,
    End,
}
