//! [`QueryReader`]: a read of a selection of an array through libtiledb's queries, as a
//! stream of record batches, its rows sorted by the index columns. It follows its [`ReadPlan`]: it opens the plan's
//! queries (one, or one a run of bands), reads the next runs ahead, and puts the rows in
//! order where libtiledb does not ([`Sorter`]).

use std::collections::VecDeque;
use std::sync::Arc;

use arrow_array::RecordBatch;
use arrow_schema::{DataType, SchemaRef};

use crate::tiledb::{Array, Layout, QueryCondition, ReadQuery, Value};

use super::ahead::{NextRun, RunAhead, RunQuery, RUNS_AHEAD};
use super::arrow::{labels_array, ArrowBatches};
use super::condition::read_condition;
use super::memory::BatchSizing;
use super::order::{Sorter, Step};
use super::plan::{column_specs, Mode, ReadPlan, Run};
use super::Selection;
use crate::soma::error::{Error, Result};
use crate::soma::object::ArrayObject;

/// A stream of record batches: one read query, or for band-sorted reads a sequence of
/// queries over consecutive runs of bands of the first dimension (the first run is a few
/// rows, so the first rows come at once; later runs hold about `CELLS_PER_QUERY` cells).
/// Once a run has its first batch, the next [`RUNS_AHEAD`] runs read ahead on threads of
/// their own ([`NextRun`]) while it is handed out, up to [`BATCHES_AHEAD`](super::ahead::BATCHES_AHEAD) batches each: over a network
/// their round trips overlap it, on a local disk their tiles are decompressed beside its own,
/// and none delays the first rows of the read.
pub(super) struct QueryReader {
    array: Arc<Array>,
    plan: ReadPlan,
    /// What every query tests its cells against (the plan's equalities and the filter).
    condition: Option<QueryCondition>,
    queries: Queries,
    arrow: Arc<ArrowBatches>,
    sorter: Sorter,
    /// Sorted batches ready to hand out.
    ready: VecDeque<RecordBatch>,
    rows_returned: u64,
    /// The nulls each column of the plan's `null_counted` holds, in the queries ended.
    null_counts: Vec<(String, u64)>,
    /// The reader's share of the memory budget.
    _memory: crate::budget::Permit,
}

/// The queries of a read: the current one, and the runs still to read.
#[derive(Default)]
struct Queries {
    current: Option<RunQuery>,
    /// What the current query read ahead, when it was a run read ahead.
    ahead: Option<RunAhead>,
    /// The next runs (at most [`RUNS_AHEAD`]), each reading ahead.
    next: VecDeque<NextRun>,
    /// The runs after those, when reading in runs.
    runs: VecDeque<Run>,
}

impl Queries {
    fn ended(&self) -> bool {
        self.current.is_none() && self.runs.is_empty() && self.next.is_empty()
    }
}

impl QueryReader {
    /// Starts a read of `selection` of `array` in `mode`: its [`ReadPlan`], the memory it
    /// takes, the condition its queries test; then its first query, unless it reads in runs
    /// (their queries start as they are read).
    pub(super) fn open(
        array: &ArrayObject,
        selection: &Selection,
        batch_bytes: usize,
        mode: Mode,
    ) -> Result<QueryReader> {
        let handle = array.handle()?;
        let cells = crate::soma::estimated_cells(array, selection)?;
        let mut plan = ReadPlan::new(array, selection, mode, cells, batch_bytes)?;
        let filter = selection.filter.as_deref();
        let condition = read_condition(&handle, &plan.equalities, filter)?;
        let memory = array.memory_budget().take(plan.memory.reader);
        let labels = (plan.columns.iter())
            .map(|c| c.enumeration.as_ref().map(labels_array).transpose())
            .collect::<Result<Vec<_>>>()?;
        let arrow = Arc::new(ArrowBatches {
            schema: array.schema.arrow_of(&plan.columns),
            columns: plan.columns.clone(),
            labels,
        });
        let distinct = !array.schema.allows_duplicates;
        let sorter = Sorter::of(&plan, arrow.schema.clone(), distinct);
        let queries = Queries {
            runs: std::mem::take(&mut plan.runs),
            ..Queries::default()
        };
        let null_counts = (plan.null_counted.iter()).map(|c| (c.clone(), 0)).collect();
        let mut reader = QueryReader {
            array: handle,
            plan,
            condition,
            queries,
            arrow,
            sorter,
            ready: VecDeque::new(),
            rows_returned: 0,
            null_counts,
            _memory: memory,
        };
        if reader.queries.runs.is_empty() {
            reader.queries.current = Some(reader.new_query(None, true)?);
        }
        Ok(reader)
    }

    /// A query over the plan's ranges, with dimension 0 narrowed to `run` when given
    /// (unordered when it holds several ranges: see [`Run`]); its batches `start_small`
    /// when its consumer waits for its first rows.
    fn new_query(&self, run: Option<&Run>, start_small: bool) -> Result<RunQuery> {
        let plan = &self.plan;
        let mut ranges = plan.ranges.clone();
        let mut expected_cells = plan.expected_cells;
        let mut layout = plan.layout();
        let mut kept = None;
        if let Some(run) = run {
            if let super::plan::Plan::Bands { extent, .. } = plan.sort.plan {
                // Per band: scale to the run's rows.
                let rows: i128 = run.iter().map(|(lo, hi)| hi - lo + 1).sum();
                let scaled = u128::from(expected_cells) * rows as u128 / extent.max(1) as u128;
                expected_cells = scaled.clamp(1, u128::from(u64::MAX)) as u64;
            }
            let bound = |v: i128| match self.arrow.columns[0].arrow_type {
                DataType::UInt64 => Value::UInt(v as u64),
                _ => Value::Int(v as i64),
            };
            match plan.spans.as_ref().and_then(|spans| spans.kept_rows(run)) {
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
            bytes: plan.memory.batch_bytes,
            expected_cells,
            unit: plan.unit,
            starts_small: start_small,
        };
        let specs = column_specs(&plan.columns);
        let condition = self.condition.as_ref();
        let mut query = ReadQuery::new(
            self.array.clone(),
            layout,
            &ranges,
            &specs,
            condition,
            Box::new(sizing),
        )?;
        if !plan.null_counted.is_empty() {
            let counted: Vec<&str> = plan.null_counted.iter().map(String::as_str).collect();
            query.count_nulls(&counted)?;
        }
        if let (Some(bytes), Layout::GlobalOrder | Layout::Unordered) =
            (plan.memory.per_query, layout)
        {
            query.limit_memory(bytes)?;
        }
        Ok(RunQuery { query, kept })
    }

    /// The nulls of each column an unsorted read counts, once the reader has
    /// returned its last batch (`None` before).
    pub(super) fn null_counts(&self) -> Option<&[(String, u64)]> {
        self.queries.ended().then_some(self.null_counts.as_slice())
    }

    pub(super) fn schema(&self) -> SchemaRef {
        self.arrow.schema.clone()
    }

    /// The next batch of rows, `None` at the end.
    pub(super) fn next_batch(&mut self) -> Result<Option<RecordBatch>> {
        let next = self.next_sorted_batch()?;
        match &next {
            Some(batch) => self.rows_returned += batch.num_rows() as u64,
            None => {
                if let Some(expected) = self.plan.expected_rows {
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

    fn next_sorted_batch(&mut self) -> Result<Option<RecordBatch>> {
        loop {
            if let Some(batch) = self.ready.pop_front() {
                return Ok(Some(batch));
            }
            let step = self.next_query_batch()?;
            let ended = self.sorter.take(step, &mut self.ready)?;
            if ended && self.ready.is_empty() {
                return Ok(None);
            }
        }
    }

    /// The next batch as libtiledb returns it (of the rows kept of a span), moving on to the
    /// next run when a query ends.
    fn next_query_batch(&mut self) -> Result<Step> {
        if self.queries.current.is_none() && !self.start_run()? {
            return Ok(Step::End);
        }
        let queries = &mut self.queries;
        let next = match queries.ahead.as_mut() {
            Some(ahead) if !ahead.batches.is_empty() => ahead.batches.pop_front(),
            Some(ahead) if ahead.ended => None,
            _ => {
                let run = queries.current.as_mut().expect("a run was just started");
                match run.query.next_batch()? {
                    Some(batch) => Some(self.arrow.record_batch(batch, run.kept.as_ref())?),
                    None => None,
                }
            }
        };
        // The runs after this one start once it has its first batch: they must not slow
        // down the first rows of the read.
        while self.queries.next.len() < RUNS_AHEAD {
            let Some(run) = self.queries.runs.pop_front().filter(|run| !run.is_empty()) else {
                break;
            };
            let query = self.new_query(Some(&run), false)?;
            let arrow = self.arrow.clone();
            let batch_bytes = self.plan.memory.batch_bytes;
            (self.queries.next).push_back(NextRun::start(query, arrow, batch_bytes)?);
        }
        let Some(batch) = next else {
            self.queries.ahead = None;
            if let Some(ended) = self.queries.current.take() {
                let counts = (ended.query)
                    .null_counts()
                    .ok_or_else(|| Error::invalid("a read query ended without its null counts"))?;
                for ((_, total), (_, count)) in self.null_counts.iter_mut().zip(counts) {
                    *total += count;
                }
            }
            let last = self.queries.runs.is_empty() && self.queries.next.is_empty();
            return Ok(if last { Step::End } else { Step::RunEnd });
        };
        Ok(Step::Batch(batch))
    }

    /// Makes the next run's query the current one (`false` when no run is left), and starts
    /// reading the runs after it.
    fn start_run(&mut self) -> Result<bool> {
        if let Some(next_run) = self.queries.next.pop_front() {
            let (query, ahead) = next_run.join()?;
            self.queries.current = Some(query);
            self.queries.ahead = Some(ahead);
        } else {
            match self.queries.runs.pop_front() {
                Some(run) if !run.is_empty() => {
                    self.queries.current = Some(self.new_query(Some(&run), true)?)
                }
                _ => return Ok(false),
            }
        }
        Ok(true)
    }
}
