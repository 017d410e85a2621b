//! Read queries: a subarray, a layout, optional conditions, and per-column buffers of bounded
//! size that libtiledb fills batch by batch until the query completes.

use std::ffi::{c_void, CString};
use std::ptr;
use std::sync::Arc;

use super::array::{Array, VAR_NUM};
use super::condition::QueryCondition;
use super::context::{c_string, tiledb_call};
use super::datatype::{Datatype, Value};
use super::handle::handle;
use super::{ffi, Config, Error, Result};

handle!(
    /// A read query (`tiledb_query_t`).
    Query,
    tiledb_query_t,
    tiledb_query_free
);
handle!(
    /// The ranges a query reads (`tiledb_subarray_t`).
    Subarray,
    tiledb_subarray_t,
    tiledb_subarray_free
);
handle!(
    /// A query's default channel (`tiledb_query_channel_t`), where aggregates are applied.
    Channel,
    tiledb_query_channel_t,
    tiledb_query_channel_free,
    free_args = context
);
handle!(
    /// An aggregate of one column (`tiledb_channel_operation_t`), before a channel takes it.
    Aggregate,
    tiledb_channel_operation_t,
    tiledb_aggregate_free,
    free_args = context
);

// Each `Send` below: libtiledb handles have no thread affinity, and each wrapper
// owns its handle alone, so moving it to another thread moves every use of it there (a read
// is made on one thread and read on another). None is `Sync`: a query is submitted by one
// thread at a time, through `&mut`.
// SAFETY: see above: `Query` owns its handle alone, which has no thread affinity.
unsafe impl Send for Query {}
// SAFETY: see above: `Subarray` owns its handle alone, which has no thread affinity.
unsafe impl Send for Subarray {}
// SAFETY: see above: `Channel` owns its handle alone, which has no thread affinity.
unsafe impl Send for Channel {}
// SAFETY: see above: `Aggregate` owns its handle alone, which has no thread affinity.
unsafe impl Send for Aggregate {}

/// The order of the cells a read returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// Sorted by the first dimension, then the second, …
    RowMajor,
    /// Whatever order is fastest.
    Unordered,
    /// The array's global order: tile by tile in the tile order, cells in the cell order.
    GlobalOrder,
}

/// A column to read: its name and how its values are laid out.
#[derive(Debug, Clone)]
pub struct ColumnSpec {
    pub name: String,
    pub datatype: Datatype,
    pub cell_val_num: u32,
    pub nullable: bool,
}

impl ColumnSpec {
    fn is_var(&self) -> bool {
        self.cell_val_num == VAR_NUM
    }

    /// Bytes of one fixed-size cell.
    fn cell_size(&self) -> usize {
        self.datatype.size() * self.cell_val_num.max(1) as usize
    }
}

/// The buffers of one column for one submission. libtiledb gets their addresses and
/// capacities and writes into their spare capacity; its reported sizes then become their
/// lengths, and the filled vectors are handed out as a batch (fresh ones take their place).
struct ColumnBuffers {
    name: CString,
    spec: ColumnSpec,
    data: Vec<u8>,
    data_size: Box<u64>,
    offsets: Vec<u64>,
    offsets_size: Box<u64>,
    validity: Vec<u8>,
    validity_size: Box<u64>,
    /// Capacities of the next submission's buffers: data bytes, offsets, validity bytes.
    capacity: (usize, usize, usize),
    /// For var-sized columns: the bytes of the cells returned so far.
    var_bytes_returned: u64,
}

impl ColumnBuffers {
    /// Data bytes to allow per cell: a fixed-size cell's size, or for a var-sized column
    /// the average of the `cells_returned` cells read so far and a quarter more (a guess
    /// before any).
    fn data_bytes_per_cell(&self, cells_returned: u64) -> usize {
        if !self.spec.is_var() {
            return self.spec.cell_size();
        }
        if cells_returned == 0 {
            return VAR_CELL_GUESS;
        }
        let average = self.var_bytes_returned.div_ceil(cells_returned) as usize;
        (average + average / 4).max(1)
    }
}

/// One column of a batch, owned: its buffers as libtiledb filled them.
pub struct ColumnData {
    /// Values, fixed-size cells back to back, or the bytes of var-sized cells.
    pub data: Vec<u8>,
    /// For var-sized columns: `cells + 1` byte offsets into `data` (Arrow large offsets).
    pub offsets: Option<Vec<u64>>,
    /// For nullable columns: one byte per cell, non-zero where the cell is valid.
    pub validity: Option<Vec<u8>>,
}

/// A batch of cells: every requested column, `cells` long.
pub struct Batch {
    pub cells: usize,
    pub columns: Vec<ColumnData>,
}

/// How many cells each batch of a query holds: the reader above decides (see
/// `soma::read::memory`), and the query asks before every submission.
pub trait BatchCells: Send {
    /// The cells of the next batch, each taking `row_bytes` of buffer, after `returned`
    /// cells in `batches` batches.
    fn next_batch_cells(&self, row_bytes: usize, returned: u64, batches: u32) -> usize;
}

/// A fixed number of cells a batch.
impl BatchCells for usize {
    fn next_batch_cells(&self, _: usize, _: u64, _: u32) -> usize {
        *self
    }
}

/// Whether libtiledb 2.30 can count the nulls of a column of this type in a query
/// ([`ReadQuery::count_nulls`]). It counts a tile the query takes whole from its fragment's
/// metadata, which it fetches with the tile's minimum and maximum, and fails ("tile min
/// metadata that's not present") for the columns whose tiles have none: UTF-8 and other
/// Unicode text, blobs, geometries, `Any`, and var-sized or multi-value cells other than
/// ASCII text.
pub fn nulls_countable(datatype: Datatype, cell_val_num: u32) -> bool {
    let ascii = matches!(datatype, Datatype::Char | Datatype::StringAscii);
    if cell_val_num != 1 && !ascii {
        return false;
    }
    !matches!(
        datatype,
        Datatype::Any
            | Datatype::Blob
            | Datatype::GeomWkb
            | Datatype::GeomWkt
            | Datatype::StringUtf8
            | Datatype::StringUtf16
            | Datatype::StringUtf32
            | Datatype::StringUcs2
            | Datatype::StringUcs4
    )
}

/// A count that libtiledb writes once the query has read everything: a column's nulls, or
/// the cells read (no column).
struct Count {
    column: Option<String>,
    /// The aggregate's output field: a name no column has (TileDB reserves `__`).
    output: CString,
    count: Box<u64>,
    count_size: Box<u64>,
}

/// A read query over an open array that yields batches of at most its buffers' size.
pub struct ReadQuery {
    // Field order matters: the query is freed before the buffers it points into.
    query: Query,
    columns: Vec<ColumnBuffers>,
    counts: Vec<Count>,
    _array: Arc<Array>,
    done: bool,
    sizing: Box<dyn BatchCells>,
    /// The cells of the batches handed out so far.
    cells_returned: u64,
    batches_returned: u32,
}

/// Bytes per cell assumed for var-sized columns before any has been read.
const VAR_CELL_GUESS: usize = 32;

impl ReadQuery {
    /// A query reading `columns` of `array` in `layout`, within `ranges` (one list of
    /// inclusive ranges per dimension; an empty list means the whole dimension) and, when
    /// given, only the cells matching `condition`, in batches sized by `sizing`.
    pub fn new(
        array: Arc<Array>,
        layout: Layout,
        ranges: &[Vec<(Value, Value)>],
        columns: &[ColumnSpec],
        condition: Option<&QueryCondition>,
        sizing: Box<dyn BatchCells>,
    ) -> Result<ReadQuery> {
        let query = Query::over(&array, layout, ranges)?;
        if let Some(condition) = condition {
            // SAFETY: both handles are live; libtiledb copies the condition into the query.
            unsafe {
                tiledb_call!(
                    query.context(),
                    tiledb_query_set_condition(query.as_ptr(), condition.as_ptr())
                )
            }?;
        }

        let columns = columns
            .iter()
            .map(|spec| {
                Ok(ColumnBuffers {
                    name: c_string(&spec.name)?,
                    data: Vec::new(),
                    data_size: Box::new(0),
                    offsets: Vec::new(),
                    offsets_size: Box::new(0),
                    validity: Vec::new(),
                    validity_size: Box::new(0),
                    spec: spec.clone(),
                    capacity: (0, 0, 0),
                    var_bytes_returned: 0,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let mut query = ReadQuery {
            query,
            columns,
            counts: Vec::new(),
            _array: array,
            done: false,
            sizing,
            cells_returned: 0,
            batches_returned: 0,
        };
        let first = query.sizing.next_batch_cells(query.row_bytes(), 0, 0);
        query.size_buffers(first);
        Ok(query)
    }

    /// Buffer bytes of one cell of every column: its data, offset and validity.
    fn row_bytes(&self) -> usize {
        self.columns
            .iter()
            .map(|c| {
                c.data_bytes_per_cell(self.cells_returned)
                    + 8 * usize::from(c.spec.is_var())
                    + usize::from(c.spec.nullable)
            })
            .sum::<usize>()
            .max(1)
    }

    /// Sets every column's capacities for a batch of `cells`.
    fn size_buffers(&mut self, cells: usize) {
        let cells_returned = self.cells_returned;
        for c in &mut self.columns {
            let data = cells.saturating_mul(c.data_bytes_per_cell(cells_returned));
            // A var-sized batch of empty cells still gets a buffer.
            let data = if c.spec.is_var() { data.max(64) } else { data };
            let offsets = if c.spec.is_var() { cells + 1 } else { 0 };
            let validity = if c.spec.nullable { cells } else { 0 };
            c.capacity = (data, offsets, validity);
        }
    }

    /// Gives every column empty buffers of its capacities and points libtiledb at them.
    fn set_buffers(&mut self) -> Result<()> {
        let ctx = self.query.context().clone();
        let q = self.query.as_ptr();
        for c in &mut self.columns {
            let (data, offsets, validity) = c.capacity;
            c.data = Vec::with_capacity(data);
            c.offsets = Vec::with_capacity(offsets);
            c.validity = Vec::with_capacity(validity);
            *c.data_size = c.data.capacity() as u64;
            *c.offsets_size = (c.offsets.capacity() * 8) as u64;
            *c.validity_size = c.validity.capacity() as u64;
            // SAFETY: `q` is the live query `self` owns. libtiledb keeps these pointers and,
            // on submission, writes at most the given sizes (the vectors' capacities) through
            // them and its sizes to the boxes. The name, vectors and boxed sizes stay in
            // `self.columns`, untouched, until the submission returns, and the query is freed
            // before them (field order) or gets new buffers before its next submission.
            unsafe {
                tiledb_call!(
                    &ctx,
                    tiledb_query_set_data_buffer(
                        q,
                        c.name.as_ptr(),
                        c.data.as_mut_ptr() as *mut c_void,
                        &mut *c.data_size
                    )
                )?;
                if c.spec.is_var() {
                    tiledb_call!(
                        &ctx,
                        tiledb_query_set_offsets_buffer(
                            q,
                            c.name.as_ptr(),
                            c.offsets.as_mut_ptr(),
                            &mut *c.offsets_size
                        )
                    )?;
                }
                if c.spec.nullable {
                    tiledb_call!(
                        &ctx,
                        tiledb_query_set_validity_buffer(
                            q,
                            c.name.as_ptr(),
                            c.validity.as_mut_ptr(),
                            &mut *c.validity_size
                        )
                    )?;
                }
            }
        }
        for n in &mut self.counts {
            *n.count_size = 8;
            // SAFETY: as for the columns: the name and the boxed count and size live in
            // `self.counts` until the query is freed; libtiledb writes at most 8 bytes.
            unsafe {
                tiledb_call!(
                    &ctx,
                    tiledb_query_set_data_buffer(
                        q,
                        n.output.as_ptr(),
                        &mut *n.count as *mut u64 as *mut c_void,
                        &mut *n.count_size
                    )
                )?;
            }
        }
        Ok(())
    }

    /// Counts the nulls of the nullable columns `names` among the cells the query reads,
    /// for [`ReadQuery::null_counts`] once it has read them all. Called before the first
    /// batch, with columns whose type [`nulls_countable`] allows. libtiledb counts the nulls
    /// of a data tile the query takes whole from its fragment's metadata, and reads only the
    /// validity of the others: the values of these columns are never read.
    pub fn count_nulls(&mut self, names: &[&str]) -> Result<()> {
        let ctx = self.query.context().clone();
        let mut operator = ptr::null();
        // SAFETY: `operator` is a local; the operator is a constant of libtiledb (never
        // freed).
        unsafe { tiledb_call!(&ctx, tiledb_channel_operator_null_count_get(&mut operator)) }?;
        let channel = self.default_channel()?;
        for name in names {
            let column = c_string(name)?;
            let output = c_string(&format!("__null_count_{name}"))?;
            let mut raw = ptr::null_mut();
            // SAFETY: the query, channel and operator are live; the names outlive the calls;
            // the channel keeps its own reference to the aggregate, which the wrapper frees.
            unsafe {
                tiledb_call!(
                    &ctx,
                    tiledb_create_unary_aggregate(
                        self.query.as_ptr(),
                        operator,
                        column.as_ptr(),
                        &mut raw
                    )
                )?;
                let aggregate = Aggregate::from_raw(&ctx, raw)?;
                tiledb_call!(
                    &ctx,
                    tiledb_channel_apply_aggregate(
                        channel.as_ptr(),
                        output.as_ptr(),
                        aggregate.as_ptr()
                    )
                )?;
            }
            self.counts.push(Count {
                column: Some((*name).to_owned()),
                output,
                count: Box::new(0),
                count_size: Box::new(8),
            });
        }
        Ok(())
    }

    /// Bounds the memory libtiledb's reader holds for the query (`sm.mem.total_budget`).
    pub fn limit_memory(&mut self, bytes: u64) -> Result<()> {
        let mut config = Config::new()?;
        config.set(
            crate::libtiledb_settings::QUERY_MEMORY_BUDGET,
            &bytes.to_string(),
        )?;
        // SAFETY: the query and the config are live; libtiledb copies the config.
        unsafe {
            tiledb_call!(
                self.query.context(),
                tiledb_query_set_config(self.query.as_ptr(), config.as_ptr())
            )
        }
    }

    /// Counts the cells the query reads, for [`ReadQuery::cell_count`] once it has read
    /// them all. Called before the first batch.
    pub fn count_cells(&mut self) -> Result<()> {
        let ctx = self.query.context().clone();
        let channel = self.default_channel()?;
        let output = c_string("__count")?;
        let mut operation = ptr::null();
        // SAFETY: `operation` is a local; the COUNT operation is a constant of libtiledb
        // (never freed); the channel is live and the output name outlives the call.
        unsafe {
            tiledb_call!(&ctx, tiledb_aggregate_count_get(&mut operation))?;
            tiledb_call!(
                &ctx,
                tiledb_channel_apply_aggregate(channel.as_ptr(), output.as_ptr(), operation)
            )?;
        }
        self.counts.push(Count {
            column: None,
            output,
            count: Box::new(0),
            count_size: Box::new(8),
        });
        Ok(())
    }

    /// The query's default channel, where aggregates are applied.
    fn default_channel(&self) -> Result<Channel> {
        let ctx = self.query.context();
        let mut raw = ptr::null_mut();
        // SAFETY: the query is live; the channel handle stored in `raw` is taken over by the
        // wrapper.
        unsafe {
            tiledb_call!(
                ctx,
                tiledb_query_get_default_channel(self.query.as_ptr(), &mut raw)
            )?;
            Channel::from_raw(ctx, raw)
        }
    }

    /// The null count of each column [`ReadQuery::count_nulls`] named, once the query has
    /// returned everything (`None` before).
    pub fn null_counts(&self) -> Option<Vec<(String, u64)>> {
        self.done.then(|| {
            (self.counts.iter())
                .filter_map(|n| Some((n.column.clone()?, *n.count)))
                .collect()
        })
    }

    /// The cells read, when [`ReadQuery::count_cells`] asked for them, once the query has
    /// returned everything (`None` before).
    pub fn cell_count(&self) -> Option<u64> {
        let counted = self.counts.iter().find(|n| n.column.is_none());
        counted.filter(|_| self.done).map(|n| *n.count)
    }

    /// Doubles every capacity: a batch did not fit even one cell.
    fn grow(&mut self) -> Result<()> {
        for c in &mut self.columns {
            let (data, offsets, validity) = c.capacity;
            if data > (1 << 31) {
                return Err(Error::new(format!(
                    "a single cell of {} does not fit in 2 GiB",
                    c.spec.name
                )));
            }
            c.capacity = (data * 2, offsets * 2, validity * 2);
        }
        Ok(())
    }

    /// Reads the next batch; `None` once the query has returned everything.
    pub fn next_batch(&mut self) -> Result<Option<Batch>> {
        loop {
            if self.done {
                return Ok(None);
            }
            self.set_buffers()?;
            let ctx = self.query.context().clone();
            let mut status = 0;
            // SAFETY: the query is live and every buffer `set_buffers` just gave it is alive
            // and unaliased until this returns (see there); `status` is a local.
            unsafe {
                tiledb_call!(&ctx, tiledb_query_submit(self.query.as_ptr()))?;
                tiledb_call!(
                    &ctx,
                    tiledb_query_get_status(self.query.as_ptr(), &mut status)
                )?;
            }
            self.take_results()?;
            let cells = self.result_cells();
            match status {
                ffi::TILEDB_COMPLETED => self.done = true,
                ffi::TILEDB_INCOMPLETE if self.columns.is_empty() => {
                    return Err(Error::new("a read of null counts alone did not complete"));
                }
                ffi::TILEDB_INCOMPLETE if cells == 0 => {
                    self.grow()?;
                    continue;
                }
                ffi::TILEDB_INCOMPLETE => {}
                other => return Err(Error::new(format!("read query ended with status {other}"))),
            }
            if cells == 0 && self.done {
                return Ok(None);
            }
            let batch = self.batch(cells);
            self.cells_returned += cells as u64;
            self.batches_returned += 1;
            let next = self.sizing.next_batch_cells(
                self.row_bytes(),
                self.cells_returned,
                self.batches_returned,
            );
            self.size_buffers(next);
            return Ok(Some(batch));
        }
    }

    /// Makes the sizes libtiledb reported the lengths of the buffers it wrote into.
    fn take_results(&mut self) -> Result<()> {
        for c in &mut self.columns {
            let data = *c.data_size as usize;
            let offsets = *c.offsets_size as usize / 8;
            let validity = *c.validity_size as usize;
            if data > c.data.capacity()
                || offsets > c.offsets.capacity()
                || validity > c.validity.capacity()
            {
                return Err(Error::new(format!(
                    "libtiledb reported more results for {} than its buffers hold",
                    c.spec.name
                )));
            }
            // SAFETY: libtiledb initialised the first `size` elements of each buffer it was
            // given (the sizes it reports), and each is within the capacity (checked above).
            unsafe {
                c.data.set_len(data);
                c.offsets.set_len(offsets);
                c.validity.set_len(validity);
            }
        }
        Ok(())
    }

    /// The number of cells the last submission returned.
    fn result_cells(&self) -> usize {
        let Some(c) = self.columns.first() else {
            return 0;
        };
        if c.spec.is_var() {
            // With the extra element, a batch of n cells has n + 1 offsets (none when empty).
            c.offsets.len().saturating_sub(1)
        } else {
            c.data.len() / c.spec.cell_size()
        }
    }

    /// Hands out the filled buffers (the next submission gets new ones).
    fn batch(&mut self, cells: usize) -> Batch {
        let columns = self
            .columns
            .iter_mut()
            .map(|c| {
                if c.spec.is_var() {
                    c.var_bytes_returned += c.data.len() as u64;
                }
                let mut offsets = std::mem::take(&mut c.offsets);
                if offsets.is_empty() {
                    offsets.push(0);
                }
                ColumnData {
                    data: std::mem::take(&mut c.data),
                    offsets: c.spec.is_var().then_some(offsets),
                    validity: c.spec.nullable.then(|| std::mem::take(&mut c.validity)),
                }
            })
            .collect();
        Batch { cells, columns }
    }
}

impl Query {
    /// A read query of `array` in `layout` over `ranges` (one list of inclusive ranges per
    /// dimension; an empty list means the whole dimension).
    fn over(array: &Array, layout: Layout, ranges: &[Vec<(Value, Value)>]) -> Result<Query> {
        let ctx = array.context().clone();
        let mut raw = ptr::null_mut();
        let layout = match layout {
            Layout::RowMajor => ffi::TILEDB_ROW_MAJOR,
            Layout::Unordered => ffi::TILEDB_UNORDERED,
            Layout::GlobalOrder => ffi::TILEDB_GLOBAL_ORDER,
        };
        // SAFETY: `array` is an open array, which the caller keeps open while the query lives
        // (a `ReadQuery` holds it; an estimate drops the query first); the new query handle
        // stored in `raw` is taken over by the wrapper.
        let query = unsafe {
            tiledb_call!(
                &ctx,
                tiledb_query_alloc(array.as_ptr(), ffi::TILEDB_READ, &mut raw)
            )?;
            let query = Query::from_raw(&ctx, raw)?;
            tiledb_call!(&ctx, tiledb_query_set_layout(query.as_ptr(), layout))?;
            query
        };

        if ranges.iter().any(|r| !r.is_empty()) {
            let dimensions = array.schema()?.info()?.dimensions;
            let mut raw = ptr::null_mut();
            // SAFETY: `array` is open; the new subarray handle stored in `raw` is taken over by
            // the wrapper.
            let subarray = unsafe {
                tiledb_call!(&ctx, tiledb_subarray_alloc(array.as_ptr(), &mut raw))?;
                Subarray::from_raw(&ctx, raw)?
            };
            for (dim, (dim_ranges, info)) in ranges.iter().zip(&dimensions).enumerate() {
                for (lo, hi) in dim_ranges {
                    // SAFETY: `info` is dimension `dim` of the schema of `array`, from which
                    // the subarray was made.
                    unsafe { subarray.add_range(dim as u32, info.datatype, lo, hi) }?;
                }
            }
            // SAFETY: both handles are live; libtiledb copies the subarray into the query.
            unsafe {
                tiledb_call!(
                    &ctx,
                    tiledb_query_set_subarray_t(query.as_ptr(), subarray.as_ptr())
                )
            }?;
        }
        Ok(query)
    }

    /// libtiledb's estimate of the bytes a read of the fixed-size column `name` returns.
    fn estimated_bytes(&self, name: &str) -> Result<u64> {
        let name = c_string(name)?;
        let mut size = 0u64;
        // SAFETY: `self` is a live query; `name` outlives the call; `size` is a local.
        unsafe {
            tiledb_call!(
                self.context(),
                tiledb_query_get_est_result_size(self.as_ptr(), name.as_ptr(), &mut size)
            )
        }?;
        Ok(size)
    }

    /// libtiledb's estimate of the offsets and value bytes a read of the var-sized column
    /// `name` returns.
    fn estimated_var_bytes(&self, name: &str) -> Result<(u64, u64)> {
        let name = c_string(name)?;
        let (mut offsets, mut values) = (0u64, 0u64);
        // SAFETY: as in `estimated_bytes`, with two locals.
        unsafe {
            tiledb_call!(
                self.context(),
                tiledb_query_get_est_result_size_var(
                    self.as_ptr(),
                    name.as_ptr(),
                    &mut offsets,
                    &mut values
                )
            )
        }?;
        Ok((offsets, values))
    }
}

/// The nulls of each nullable column `names` (of types [`nulls_countable`] allows) among
/// every cell of the sparse `array`: a query of those counts alone. It reads no tile of
/// those columns where libtiledb takes a tile's count from its fragment's metadata (see
/// [`ReadQuery::count_nulls`]); the global-order reader still reads the coordinate tiles.
pub fn null_counts(array: Arc<Array>, names: &[&str]) -> Result<Vec<(String, u64)>> {
    // No column is read: the buffers hold nothing.
    let sizing = Box::new(1024);
    let mut query = ReadQuery::new(array, Layout::GlobalOrder, &[], &[], None, sizing)?;
    query.count_nulls(names)?;
    while query.next_batch()?.is_some() {}
    query
        .null_counts()
        .ok_or_else(|| Error::new("a read of null counts ended early"))
}

/// The memory libtiledb's reader may hold for a count (its coordinate tiles): with none
/// set, it loads the coordinates of as many cells as its default budget (10 GB) holds,
/// 400 MB for a 20-million-cell matrix.
pub const COUNT_MEMORY_BYTES: u64 = 64 << 20;

/// The cells of the sparse `array` within `ranges` (one list per dimension, empty for all
/// of it), exactly as a read returns them: each once however many fragments hold it, and
/// deleted cells left out. A query of a COUNT aggregate alone: libtiledb takes the count
/// of a data tile the ranges cover whole from its fragment's metadata, but its
/// global-order reader still reads the coordinate tiles; it reads no attribute.
pub fn count_cells(array: Arc<Array>, ranges: &[Vec<(Value, Value)>]) -> Result<u64> {
    // No column is read: the buffers hold nothing.
    let sizing = Box::new(1024);
    let mut query = ReadQuery::new(array, Layout::GlobalOrder, ranges, &[], None, sizing)?;
    query.limit_memory(COUNT_MEMORY_BYTES)?;
    query.count_cells()?;
    while query.next_batch()?.is_some() {}
    query
        .cell_count()
        .ok_or_else(|| Error::new("a count of cells ended early"))
}

/// An estimate of the cells of a read: how many, and whether exactly.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CellEstimate {
    pub cells: u64,
    /// The read selects whole data tiles only (no ranges) and the cells were counted on a
    /// fixed-size column: the count is the fragments' cell count, exactly.
    pub exact: bool,
}

/// About how many cells of `array` lie in `ranges` (one list per dimension, empty for all
/// of it), as libtiledb estimates a read of them: for a sparse array, from the bounding
/// boxes of the data tiles that each fragment's R-tree holds, tiles the ranges cut counted
/// by the share of their box inside, and whole tiles by their cells as their fragment's
/// metadata counts them (`FragmentMetadata::tile_size`, the count the fragment list adds
/// up too). Loading the R-trees is what a read over the ranges would do first; the open
/// array keeps them for it.
///
/// Counted on the first fixed-size dimension, else the first fixed-size attribute that is
/// not nullable (libtiledb estimates nullable ones apart), else the offsets of the first
/// dimension, which libtiledb counts one short per tile.
pub fn estimated_cells(array: &Array, ranges: &[Vec<(Value, Value)>]) -> Result<CellEstimate> {
    let query = Query::over(array, Layout::Unordered, ranges)?;
    let info = array.schema()?.info()?;
    let fixed = info
        .dimensions
        .iter()
        .map(|d| (&d.name, d.datatype, d.cell_val_num))
        .chain(
            info.attributes
                .iter()
                .filter(|a| !a.nullable)
                .map(|a| (&a.name, a.datatype, a.cell_val_num)),
        )
        .find(|&(_, _, cell_val_num)| cell_val_num != VAR_NUM);
    let whole = ranges.iter().all(Vec::is_empty);
    if let Some((name, datatype, cell_val_num)) = fixed {
        let cell_bytes = datatype.size() as u64 * u64::from(cell_val_num.max(1));
        return Ok(CellEstimate {
            cells: query.estimated_bytes(name)? / cell_bytes.max(1),
            exact: whole,
        });
    }
    let first = info
        .dimensions
        .first()
        .ok_or_else(|| Error::new("an array without dimensions"))?;
    // One 64-bit offset per cell.
    let (offsets, _) = query.estimated_var_bytes(&first.name)?;
    Ok(CellEstimate {
        cells: offsets / 8,
        exact: false,
    })
}

impl Subarray {
    /// Adds the inclusive range `lo..=hi` on dimension `dim` of type `datatype`.
    ///
    /// # Safety
    /// `datatype` is the type of dimension `dim` of this subarray's array: libtiledb reads one
    /// value of its own type for that dimension from each fixed-size bound, with no size given.
    unsafe fn add_range(&self, dim: u32, datatype: Datatype, lo: &Value, hi: &Value) -> Result<()> {
        let ctx = self.context();
        match (lo, hi) {
            // SAFETY: `self` is live; the bounds are `len()` bytes each, alive for the call,
            // which copies them.
            (Value::Text(lo), Value::Text(hi)) => unsafe {
                tiledb_call!(
                    ctx,
                    tiledb_subarray_add_range_var(
                        self.as_ptr(),
                        dim,
                        lo.as_ptr() as *const c_void,
                        lo.len() as u64,
                        hi.as_ptr() as *const c_void,
                        hi.len() as u64
                    )
                )
            },
            _ => {
                let (lo, hi) = (lo.to_native(datatype)?, hi.to_native(datatype)?);
                // SAFETY: `self` is live. libtiledb refuses a var-sized dimension, else reads
                // one value of dimension `dim`'s type, `datatype` (the caller's contract), from
                // each bound: `to_native` made each one such value. The stride is null (none).
                unsafe {
                    tiledb_call!(
                        ctx,
                        tiledb_subarray_add_range(
                            self.as_ptr(),
                            dim,
                            lo.as_ptr() as *const c_void,
                            hi.as_ptr() as *const c_void,
                            ptr::null()
                        )
                    )
                }
            }
        }
    }
}
