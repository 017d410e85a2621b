//! Readers that stream Arrow record batches out of TileDB read queries: a slice of an array
//! (ranges on its index columns, optionally a filter on a value column), its columns in
//! schema order, rows sorted by the index columns.
//!
//! Sorting is where the time goes: libtiledb's row-major sparse reader is many times slower
//! than its global-order reader. So when an array's tiles and cells are both in row-major
//! order and its index columns are integers (every SOMA ND array, and data frames indexed by
//! `soma_joinid`), the reader reads in global order and sorts one band of tiles (one tile
//! extent of the first dimension) at a time: within a band, cells with the same leading
//! coordinates arrive in increasing order of the last, so a stable sort on the leading
//! coordinates of an almost-sorted band is all it takes. Anything else is read row-major.
//!
//! Bands are counted as libtiledb lays out tiles: from the lower bound of the schema's
//! domain, which tiledbsoma sets far below the current domain (for an int64 column, near
//! the bottom of the int64 range), so a band seldom starts at the current domain's start.
//! The arithmetic is done in `i128`, where no coordinate, bound or extent overflows.
//!
//! Every reader takes its memory from its array's budget ([`ArrayObject::memory_budget`]) when
//! it opens, and gives it back when dropped: a reader that would push the daemon past the
//! budget waits for memory first (see [`reader_memory`]).
//!
//! A read ends only when libtiledb says it has returned everything: a reader thread that
//! dies ([`ReadAhead`]) is an error for its consumer, never an early end, and a dense read
//! that returns fewer or more cells than it selected is an error too.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::Int64Type;
use arrow_array::UInt32Array;
use arrow_array::{
    make_array, new_empty_array, Array as _, ArrayRef, BooleanArray, LargeBinaryArray,
    LargeStringArray, RecordBatch,
};
use arrow_buffer::{BooleanBuffer, Buffer, NullBuffer, OffsetBuffer, ScalarBuffer};
use arrow_data::transform::MutableArrayData;
use arrow_ord::sort::{lexsort_to_indices, SortColumn};
use arrow_schema::{DataType, SchemaRef};

use crate::tiledb::{
    self, Array, Batch, BatchSizing, ColumnData, ColumnSpec, EnumerationInfo, Layout, Order,
    QueryCondition, ReadQuery, TileUnit, Value,
};

use super::error::{Error, Result};
use super::filter::Condition;
use super::object::ArrayObject;
use super::schema::Column;

/// What part of an array to read.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Selection {
    /// Per index column, in order: inclusive ranges to read (empty or missing: all of it).
    pub ranges: Vec<Vec<(Value, Value)>>,
    /// Only rows whose column holds this label (`None`: a null), for enumerated columns.
    pub equals: Option<(String, Option<Value>)>,
    /// Only these value columns (index columns are always read); `None`: every column.
    pub columns: Option<Vec<String>>,
    /// Only rows that satisfy this value filter, which libtiledb applies as it reads.
    pub filter: Option<Arc<Condition>>,
}

/// Bytes per batch: the memory one reader holds in TileDB buffers at a time (a batch holds
/// one whole data tile even when it is bigger, up to 64 MiB: see [`tiledb::BatchSizing`]).
/// Reads of X are as fast with 8 MiB as with 16, and a reader holds half as much.
pub const BATCH_BYTES: usize = 8 << 20;

/// A stream of record batches: one read query, or for band-sorted reads a sequence of
/// queries over consecutive runs of bands of the first dimension (the first run is a few
/// rows, so the first rows come at once; later runs hold about `CELLS_PER_QUERY` cells).
/// Once a run has its first batch, the next [`RUNS_AHEAD`] runs read ahead on threads of
/// their own ([`NextRun`]) while it is handed out, up to a batch's bytes each: over a network
/// their round trips overlap it, on a local disk their tiles are decompressed beside its own,
/// and none delays the first rows of the read.
pub struct BatchReader {
    array: Arc<Array>,
    specs: Vec<ColumnSpec>,
    layout: Layout,
    /// Ranges per index column; the first is replaced by each run's range.
    ranges: Vec<Vec<(Value, Value)>>,
    condition: Option<QueryCondition>,
    batch_bytes: usize,
    /// About this many cells come from one query (sizes its first batch); for runs, per band.
    expected_cells: u64,
    /// What libtiledb decompresses at a time, in cells of this read.
    unit: Option<TileUnit>,
    /// The runs still to read, when reading in runs.
    runs: VecDeque<Run>,
    /// For a band-sorted read whose runs may be read as spans ([`SpanReads`]).
    spans: Option<SpanReads>,
    query: Option<RunQuery>,
    /// What the current query read ahead, when it was a run read ahead.
    ahead: Option<RunAhead>,
    /// The next runs (at most [`RUNS_AHEAD`]), each reading ahead.
    next_runs: VecDeque<NextRun>,
    arrow: Arc<ArrowBatches>,
    /// For global-order reads that need it: the band sorter.
    bands: Option<BandSorter>,
    /// For small reads sorted here ([`IN_MEMORY_SORT_BYTES`]): the batches read so far,
    /// until the last, when they are sorted whole.
    in_memory: Option<Vec<RecordBatch>>,
    /// Sorted batches ready to hand out.
    ready: VecDeque<RecordBatch>,
    /// The rows a dense read selects: it must return exactly these.
    expected_rows: Option<u64>,
    rows_returned: u64,
    /// The columns whose nulls every query counts, and the nulls of the queries ended.
    null_counts: Vec<(String, u64)>,
    /// What libtiledb may hold for each of its global-order and unordered queries
    /// ([`tiledb_query_memory`]; `None`: its default).
    query_memory: Option<u64>,
    /// The reader's share of the memory budget.
    _memory: crate::budget::Permit,
}

/// The memory a reader takes from the budget: [`READER_BATCHES`] times `batch_bytes`, with
/// [`NEXT_RUN_BATCHES`] more for each run it reads ahead when it reads `in_runs`; what
/// libtiledb may hold for each of its queries open at once (`query_memory`, see
/// [`tiledb_query_memory`]); and for a read sorted in memory, everything it reads
/// (`sorted_bytes`, estimated; at most [`IN_MEMORY_SORT_BYTES`]).
fn reader_memory(
    batch_bytes: usize,
    in_runs: bool,
    query_memory: u64,
    sorted_bytes: Option<u64>,
) -> u64 {
    let runs_ahead = if in_runs { RUNS_AHEAD as u64 } else { 0 };
    (READER_BATCHES + runs_ahead * NEXT_RUN_BATCHES) * batch_bytes as u64
        + (1 + runs_ahead) * query_memory
        + sorted_bytes.unwrap_or(0)
}

/// The least libtiledb may hold for one query of a sparse read (see
/// [`tiledb_query_memory`]).
const QUERY_MEMORY_BYTES: u64 = 16 << 20;

/// The memory libtiledb may hold for one query of a sparse read of `cells` cells
/// (`sm.mem.total_budget`), in `runs` (band-sorted) or else in `ranges` of the first
/// dimension, when every column is of fixed width; `None` (dense arrays, columns of text or
/// bytes): libtiledb's default.
///
/// By default libtiledb may hold 10 GB a query, and its sparse readers load as many tiles
/// as fit: a query of 4 Mi cells of X held about 150 MB of tiles, and a reader of X about
/// 240 MB. Bounded, they load tiles as the query goes, as fast (measured on the bench
/// store: X and a query's X as CSV within 2%, at 16 MiB). They need room for a tile of
/// every fragment the query reads at once (the coordinates in half the budget, then the
/// values), and for the offsets of those fragments' tiles in a tenth of it: four times a
/// tile of each fragment a query's rows overlap, and ten times the offsets (two 8-byte
/// numbers a column and tile), at least [`QUERY_MEMORY_BYTES`]. Too little is libtiledb's
/// error, never a short read.
fn tiledb_query_memory(
    array: &ArrayObject,
    cells: u64,
    runs: &VecDeque<Run>,
    ranges: &[(Value, Value)],
) -> Option<u64> {
    let schema = &array.schema;
    let capacity = schema.tile_cells.filter(|_| !schema.dense)?.max(1);
    let cell_bytes = (schema.columns.iter())
        .map(|c| match c.cell_val_num {
            tiledb::VAR_NUM => None,
            n => Some((c.datatype.size() * n.max(1) as usize) as u64 + u64::from(c.nullable)),
        })
        .sum::<Option<u64>>()?;
    let spans: Vec<(i128, i128)> = match runs.is_empty() {
        false => (runs.iter())
            .filter_map(|run| Some((run.first()?.0, run.last()?.1)))
            .collect(),
        true => vec![span_of(ranges)],
    };
    let fragments = (spans.iter())
        .map(|&span| fragments_overlapping(array, span))
        .max()
        .unwrap_or(0)
        .max(1);
    let tiles = cells / capacity + fragments;
    let tiles_memory = 4 * fragments * capacity * cell_bytes;
    let offsets_memory = 10 * tiles * schema.columns.len() as u64 * 16;
    Some(tiles_memory.max(offsets_memory).max(QUERY_MEMORY_BYTES))
}

/// The rows from the lowest of `ranges` to the highest (all rows when there are none, or
/// they are not integers).
fn span_of(ranges: &[(Value, Value)]) -> (i128, i128) {
    let bounds: Vec<(i128, i128)> = (ranges.iter())
        .map(|(lo, hi)| Some((lo.as_i128()?, hi.as_i128()?)))
        .collect::<Option<_>>()
        .unwrap_or_default();
    match (
        bounds.iter().map(|b| b.0).min(),
        bounds.iter().map(|b| b.1).max(),
    ) {
        (Some(lo), Some(hi)) => (lo, hi),
        _ => (i128::MIN, i128::MAX),
    }
}

/// How many of the snapshot's fragments hold rows of the first dimension from `lo` to `hi`:
/// all of them, unless there are more than two and their list is at hand (see
/// [`ArrayObject::fragments_at_hand`]): then those whose rows the list says overlap.
fn fragments_overlapping(array: &ArrayObject, (lo, hi): (i128, i128)) -> u64 {
    let all = array.fragment_count() as u64;
    if all <= 2 {
        return all;
    }
    let Some(fragments) = array.fragments_at_hand() else {
        return all;
    };
    let overlaps = |fragment: &&tiledb::Fragment| match &fragment.first_dimension {
        Some((a, b)) => match (a.as_i128(), b.as_i128()) {
            (Some(a), Some(b)) => a <= hi && lo <= b,
            _ => true,
        },
        None => true,
    };
    fragments.iter().filter(overlaps).count() as u64
}

/// What a reader and the encoder it feeds hold, in batches: the query's buffers, the batch
/// handed over (to [`ReadAhead`]), the one being encoded, its text, and libtiledb's tiles
/// behind the query. Measured: a CSV reader of a big sparse array raised the daemon's
/// resident size by 36-50 MiB with 8 MiB batches.
const READER_BATCHES: u64 = 6;

/// What a run read ahead holds, in batches: up to a batch read ahead and the batch that took
/// it past that ([`NextRun`]), and its query's buffers.
const NEXT_RUN_BATCHES: u64 = 3;

/// Runs of a band-sorted read that read ahead while an earlier run is handed out.
const RUNS_AHEAD: usize = 2;

/// Cells a query of a band-sorted read aims for (its runs of bands are sized to it).
const CELLS_PER_QUERY: u64 = 4 << 20;

/// The rows of the first dimension one query of a band-sorted read reads: sorted, disjoint,
/// inclusive ranges, every one after those of the runs before it. Several ranges
/// are read in one query, unordered: libtiledb reads several ranges of a dimension only
/// row-major or unordered, and its unordered read of an array without duplicates is its
/// global-order reader, whose cells arrive in global order all the same (which
/// [`BandSorter`] checks). None: the read holds nothing.
type Run = Vec<(i128, i128)>;

/// How a reader gets rows sorted by the index columns.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Plan {
    /// libtiledb returns them sorted in this layout.
    Sorted(Layout),
    /// Global order, sorted band by band: bands of `extent` rows from `origin`.
    Bands { extent: i128, origin: i128 },
}

/// Chooses how to read `array` sorted (see the module's notes).
fn plan(array: &ArrayObject) -> Plan {
    let schema = &array.schema;
    if schema.dense {
        return Plan::Sorted(Layout::RowMajor);
    }
    let index: Vec<&Column> = schema.index_columns().collect();
    let row_major = schema.tile_order == Order::RowMajor && schema.cell_order == Order::RowMajor;
    if !row_major {
        return Plan::Sorted(Layout::RowMajor);
    }
    if index.len() == 1 {
        // One dimension, of any type: global order is sorted order.
        return Plan::Sorted(Layout::GlobalOrder);
    }
    if !index.iter().all(|c| c.arrow_type == DataType::Int64) {
        return Plan::Sorted(Layout::RowMajor);
    }
    let origin = index[0]
        .schema_domain
        .as_ref()
        .and_then(|(lo, _)| lo.as_i128());
    match (schema.first_tile_extent(), origin) {
        (Some(extent), Some(origin)) => Plan::Bands { extent, origin },
        _ => Plan::Sorted(Layout::RowMajor),
    }
}

/// Reads of at most this many bytes (estimated) that libtiledb would sort row-major are read
/// unordered and sorted in memory (see [`BatchReader::open`]).
const IN_MEMORY_SORT_BYTES: u64 = 64 << 20;

/// About how many bytes a row of `columns` holds as read (var-sized cells guessed).
fn row_bytes(columns: &[Column]) -> u64 {
    columns
        .iter()
        .map(|c| match c.cell_val_num {
            tiledb::VAR_NUM => 32,
            n => (c.datatype.size() * n.max(1) as usize) as u64,
        })
        .sum::<u64>()
        .max(1)
}

/// `batches` as one batch sorted by its first `index_columns` columns; `None` when empty.
fn sort_by_index(
    schema: &SchemaRef,
    batches: &[RecordBatch],
    index_columns: usize,
) -> Result<Option<RecordBatch>> {
    let rows = arrow_select::concat::concat_batches(schema, batches)?;
    if rows.num_rows() == 0 {
        return Ok(None);
    }
    let keys: Vec<SortColumn> = rows.columns()[..index_columns]
        .iter()
        .map(|values| SortColumn {
            values: values.clone(),
            options: None,
        })
        .collect();
    let order = lexsort_to_indices(&keys, None)?;
    Ok(Some(arrow_select::take::take_record_batch(&rows, &order)?))
}

/// The layout a sorted plan reads in (`None` for band-sorted reads).
fn plan_layout(plan: &Plan) -> Option<Layout> {
    match plan {
        Plan::Sorted(layout) => Some(*layout),
        Plan::Bands { .. } => None,
    }
}

/// Cells the first run of a band-sorted read aims for: a few rows, so that the first rows
/// are sorted and handed out before the rest of their band is read.
const FIRST_RUN_CELLS: u64 = 8192;

/// What libtiledb decompresses at a time when reading `ranges` (one list per index column,
/// a dense array's filled in with its current domain): a sparse array's data tile, or a
/// band of a dense read, one tile extent of the first dimension across the ranges of the
/// others.
fn tile_unit(array: &ArrayObject, ranges: &[Vec<(Value, Value)>]) -> Option<TileUnit> {
    let schema = &array.schema;
    if !schema.dense {
        return schema.tile_cells.map(TileUnit::SparseTile);
    }
    let mut cells = u128::try_from(schema.first_tile_extent()?).ok()?;
    for dim_ranges in ranges.iter().skip(1) {
        let width: i128 = dim_ranges
            .iter()
            .map(|(lo, hi)| Some(hi.as_i128()? - lo.as_i128()? + 1))
            .sum::<Option<i128>>()?;
        cells = cells.checked_mul(u128::try_from(width).ok()?)?;
    }
    u64::try_from(cells).ok().map(TileUnit::DenseBand)
}

/// The ranges a read of `selection` reads, one list per index column: a dense array's
/// empty ones filled in with the current domain (a dense read needs a subarray).
fn read_ranges(array: &ArrayObject, selection: &Selection) -> Vec<Vec<(Value, Value)>> {
    let mut ranges = selection.ranges.clone();
    ranges.resize(array.schema.index_columns().count(), Vec::new());
    if array.schema.dense {
        for (r, c) in ranges.iter_mut().zip(array.schema.index_columns()) {
            if r.is_empty() {
                if let Some(domain) = &c.domain {
                    r.push(domain.clone());
                }
            }
        }
    }
    ranges
}

/// The rows a read of `selection` of a dense array returns, without a condition: every
/// cell of its ranges. `None` for a sparse array, or when they cannot be counted.
pub fn dense_rows(array: &ArrayObject, selection: &Selection) -> Option<u64> {
    let unconditional = selection.equals.is_none();
    (array.schema.dense && unconditional).then(|| selected_cells(&read_ranges(array, selection)))?
}

/// The cells that integer ranges select (one list per dimension, each filled), if countable.
fn selected_cells(ranges: &[Vec<(Value, Value)>]) -> Option<u64> {
    let mut cells: u128 = 1;
    for dim_ranges in ranges {
        let width: i128 = dim_ranges
            .iter()
            .map(|(lo, hi)| Some((hi.as_i128()? - lo.as_i128()? + 1).max(0)))
            .sum::<Option<i128>>()?;
        cells = cells.checked_mul(u128::try_from(width).ok()?)?;
    }
    u64::try_from(cells).ok()
}

/// The runs of rows a band-sorted read of `range` (inclusive, on the first dimension) goes
/// through, for bands of `extent` rows from `origin`. When `first`, it opens with a run of
/// the few rows that hold about `FIRST_RUN_CELLS` cells and the rest of their band; then
/// come runs of whole bands of about `CELLS_PER_QUERY` cells. Every run ends at a band's end
/// or at the range's.
fn band_runs(
    range: (i128, i128),
    extent: i128,
    origin: i128,
    cells_per_band: u64,
    first: bool,
) -> VecDeque<(i128, i128)> {
    let bands_per_run = (CELLS_PER_QUERY / cells_per_band.max(1)).clamp(1, 1 << 20) as i128;
    let band_end = |row: i128, bands: i128| {
        let band = (row - origin).div_euclid(extent);
        (origin + (band + bands) * extent - 1).min(range.1)
    };
    let mut runs = VecDeque::new();
    let mut start = range.0;
    if first && start <= range.1 {
        let head_rows = (FIRST_RUN_CELLS as u128 * extent as u128)
            .div_ceil(u128::from(cells_per_band.max(1)))
            .max(1) as i128;
        let end = (start + head_rows - 1).min(band_end(start, 1));
        runs.push_back((start, end));
        if end < band_end(start, 1) {
            runs.push_back((end + 1, band_end(start, 1)));
        }
        start = band_end(start, 1) + 1;
    }
    while start <= range.1 {
        let end = band_end(start, bands_per_run);
        runs.push_back((start, end));
        start = end + 1;
    }
    runs
}

/// The columns a read returns, in schema order: those named in `only` for an unsorted read
/// ([`BatchReader::open_unsorted`]); else the index columns and the value columns
/// `selection` asks for.
fn read_columns(array: &ArrayObject, selection: &Selection, only: Option<&[&str]>) -> Vec<Column> {
    array
        .schema
        .columns
        .iter()
        .filter(|c| match only {
            Some(only) => only.contains(&c.name.as_str()),
            None => {
                c.is_index
                    || selection
                        .columns
                        .as_ref()
                        .is_none_or(|wanted| wanted.contains(&c.name))
            }
        })
        .cloned()
        .collect()
}

/// What a query reads of each of `columns`: its name and how its values are laid out.
fn column_specs(columns: &[Column]) -> Vec<ColumnSpec> {
    columns
        .iter()
        .map(|c| ColumnSpec {
            name: c.name.clone(),
            datatype: c.datatype,
            cell_val_num: c.cell_val_num,
            nullable: c.nullable,
        })
        .collect()
}

/// One test of a read's condition: the column holds `value`, in its native bytes (`None`:
/// the column is null).
#[derive(Debug, Clone, PartialEq)]
struct Equality {
    column: String,
    value: Option<Vec<u8>>,
}

/// The equality `selection.equals` asks for: its column holds the label, in the
/// enumeration's own type (text, or a native value). An error when the column is not
/// enumerated.
fn label_equality(array: &ArrayObject, selection: &Selection) -> Result<Option<Equality>> {
    let Some((name, label)) = &selection.equals else {
        return Ok(None);
    };
    let datatype = array
        .schema
        .columns
        .iter()
        .find(|c| &c.name == name)
        .and_then(|c| c.enumeration.as_ref())
        .map(|e| e.datatype)
        .ok_or_else(|| Error::invalid(format!("{name} is not enumerated")))?;
    let value = label.as_ref().map(|v| v.to_native(datatype)).transpose()?;
    Ok(Some(Equality {
        column: name.clone(),
        value,
    }))
}

/// The plan for reading `ranges` (one list per index column): libtiledb reads several ranges
/// of one dimension only in row-major order, so a read of several ranges of a dimension
/// after the first, or of the one dimension read in global order, is row-major. Several
/// ranges of the first dimension of a band-sorted read keep its plan: they become its runs.
fn multi_range_plan(plan: Plan, ranges: &[Vec<(Value, Value)>]) -> Plan {
    let multi_range = |r: &Vec<(Value, Value)>| r.len() > 1;
    if ranges.iter().skip(1).any(multi_range)
        || (matches!(plan, Plan::Sorted(Layout::GlobalOrder)) && multi_range(&ranges[0]))
    {
        return Plan::Sorted(Layout::RowMajor);
    }
    plan
}

/// The plan for reading `array` in no order that means anything: a sparse array is read in
/// global order, which needs no sort. Not unordered, as tiledbsoma reads: libtiledb 2.30's
/// unordered reader loses rows of slices of arrays with overwritten cells (the differential
/// test shows it). A dense array keeps `plan`.
fn unsorted_plan(array: &ArrayObject, plan: Plan) -> Plan {
    if array.schema.dense {
        plan
    } else {
        Plan::Sorted(Layout::GlobalOrder)
    }
}

/// Whether a read following `plan`, of about `read_bytes`, is sorted here, in memory: a
/// sparse read that libtiledb would sort (row-major) of at most [`IN_MEMORY_SORT_BYTES`].
/// Such a read is read in global order (not unordered: see [`unsorted_plan`]) and sorted
/// whole: libtiledb's row-major reader is hundreds of times slower on some layouts
/// (column-major cells with a float dimension and a domain near the end of int64: 4 s for a
/// slice of 2,280 rows that tiledbsoma reads in 10 ms).
fn sorts_in_memory(array: &ArrayObject, plan: &Plan, read_bytes: u64) -> bool {
    !array.schema.dense
        && plan_layout(plan) == Some(Layout::RowMajor)
        && read_bytes <= IN_MEMORY_SORT_BYTES
}

/// How a read gets its rows in order: the [`Plan`] its queries follow, and whether it sorts
/// them here, in memory.
#[derive(Debug, Clone, Copy, PartialEq)]
struct ReadPlan {
    plan: Plan,
    /// For a read sorted in memory: the bytes it reads (estimated), all held until sorted.
    sorted_bytes: Option<u64>,
}

impl ReadPlan {
    /// The plan for reading `ranges` (one list per index column) of `array`, sorted or not
    /// (`unsorted`), about `read_bytes` in all: the array's [`plan`], unless several ranges
    /// of a dimension ([`multi_range_plan`]), no order ([`unsorted_plan`]) or a small read
    /// ([`sorts_in_memory`]) decide otherwise, in that order.
    fn choose(
        array: &ArrayObject,
        ranges: &[Vec<(Value, Value)>],
        unsorted: bool,
        read_bytes: u64,
    ) -> ReadPlan {
        let mut plan = multi_range_plan(plan(array), ranges);
        // Several ranges of a dimension read in one query are read in row-major order only:
        // such a read is neither unsorted nor sorted here.
        let several = |r: &Vec<(Value, Value)>| r.len() > 1;
        let row_major_only = !matches!(plan, Plan::Bands { .. }) && ranges.iter().any(several);
        if unsorted && !row_major_only {
            plan = unsorted_plan(array, plan);
        }
        let in_memory = !row_major_only && sorts_in_memory(array, &plan, read_bytes);
        let sorted_bytes = in_memory.then_some(read_bytes);
        if sorted_bytes.is_some() {
            plan = Plan::Sorted(Layout::GlobalOrder);
        }
        ReadPlan { plan, sorted_bytes }
    }

    /// The memory the reader takes from the budget (see [`reader_memory`]), its queries
    /// each holding up to `query_memory` in libtiledb.
    fn memory(&self, batch_bytes: usize, query_memory: u64) -> u64 {
        let in_runs = matches!(self.plan, Plan::Bands { .. });
        reader_memory(batch_bytes, in_runs, query_memory, self.sorted_bytes)
    }

    /// Whether the read tests an exact value of a string dimension as a condition rather
    /// than reading it as a range (see [`text_dimension_equalities`]): when libtiledb sorts
    /// it row-major, or when it is sorted here.
    fn tests_exact_text(&self) -> bool {
        self.sorted_bytes.is_some() || plan_layout(&self.plan) == Some(Layout::RowMajor)
    }
}

/// The exact values of string dimensions that a read following `read` tests as a condition,
/// each one's range cleared from `ranges`: libtiledb 2.30's row-major reader crashes
/// (SIGSEGV in its tile overlap ratio) on a range of a string dimension when a tile holds
/// only empty strings there, and its global-order reader loses a row of such a range on an
/// array of several index columns. None unless `read` [`ReadPlan::tests_exact_text`].
fn text_dimension_equalities(
    array: &ArrayObject,
    read: &ReadPlan,
    ranges: &mut [Vec<(Value, Value)>],
) -> Vec<Equality> {
    let mut equalities = Vec::new();
    if !read.tests_exact_text() {
        return equalities;
    }
    for (dim_ranges, column) in ranges.iter_mut().zip(array.schema.index_columns()) {
        let [(Value::Text(lo), Value::Text(hi))] = dim_ranges.as_slice() else {
            continue;
        };
        if lo != hi {
            continue;
        }
        equalities.push(Equality {
            column: column.name.clone(),
            value: Some(lo.as_bytes().to_vec()),
        });
        dim_ranges.clear();
    }
    equalities
}

/// The condition a read's queries test each selected cell against: every one of
/// `equalities`, combined with `and` in order. `None` when there is none: every selected
/// cell is read.
fn read_condition(
    array: &Array,
    equalities: &[Equality],
    filter: Option<&Condition>,
) -> Result<Option<QueryCondition>> {
    let mut condition = filter.map(|f| filter_condition(array, f)).transpose()?;
    for equality in equalities {
        let equals = QueryCondition::equals(array, &equality.column, equality.value.as_deref())?;
        condition = Some(match condition {
            Some(other) => other.and(&equals)?,
            None => equals,
        });
    }
    Ok(condition)
}

/// A value filter as libtiledb's condition, each value in its column's native bytes.
fn filter_condition(array: &Array, filter: &Condition) -> Result<QueryCondition> {
    Ok(match filter {
        Condition::Compare {
            column,
            datatype,
            op,
            value,
        } => QueryCondition::compare(array, column, *op, &value.to_native(*datatype)?)?,
        Condition::Member {
            column,
            datatype,
            negated,
            values,
        } => {
            let native = (values.iter())
                .map(|v| v.to_native(*datatype))
                .collect::<tiledb::Result<Vec<_>>>()?;
            QueryCondition::member(array, column, &native, *negated)?
        }
        Condition::And(a, b) => filter_condition(array, a)?.and(&filter_condition(array, b)?)?,
        Condition::Or(a, b) => filter_condition(array, a)?.or(&filter_condition(array, b)?)?,
        Condition::Not(a) => filter_condition(array, a)?.negated()?,
    })
}

/// The rows of the first dimension a band-sorted read of `ranges` (all of it when empty)
/// goes through: each range narrowed to the rows `array` stores, in order; none of those
/// that hold no stored row.
fn stored_rows(array: &ArrayObject, ranges: &[(Value, Value)]) -> Vec<(i128, i128)> {
    let stored = array.non_empty_domain.first().cloned().flatten();
    let stored = stored.and_then(|(a, b)| Some((a.as_i128()?, b.as_i128()?)));
    let mut selected: Vec<(i128, i128)> = match ranges {
        [] => stored.into_iter().collect(),
        many => many
            .iter()
            .filter_map(|(a, b)| {
                let (s, a, b) = (stored?, a.as_i128()?, b.as_i128()?);
                Some((s.0.max(a), s.1.min(b)))
            })
            .filter(|r| r.0 <= r.1)
            .collect(),
    };
    selected.sort_unstable();
    selected
}

/// How a band-sorted read goes through its rows.
struct BandRuns {
    /// The runs its queries read, in order.
    runs: VecDeque<Run>,
    sorter: BandSorter,
    /// The cells of a band of the selected rows, taken as spread evenly.
    cells_per_band: u64,
}

/// The runs of a band-sorted read of `ranges` (one list per index column) of `array`, in
/// bands of `extent` rows from `origin`, about `expected_cells` cells in all: [`band_runs`]
/// of each range of [`stored_rows`], the first opening with a few rows, gathered into runs
/// of several ranges ([`gather_runs`]) unless the array allows duplicates; one empty run
/// when nothing is stored in the selected ranges.
fn band_runs_of(
    array: &ArrayObject,
    ranges: &[Vec<(Value, Value)>],
    extent: i128,
    origin: i128,
    expected_cells: u64,
) -> BandRuns {
    let selected = stored_rows(array, &ranges[0]);
    let selected_rows: i128 = selected.iter().map(|(a, b)| b - a + 1).sum();
    let cells_per_band = (u128::from(expected_cells) * extent.max(1) as u128
        / selected_rows.max(1) as u128)
        .min(u128::from(u64::MAX)) as u64;
    let mut pieces = VecDeque::new();
    for (i, range) in selected.into_iter().enumerate() {
        pieces.extend(band_runs(range, extent, origin, cells_per_band, i == 0));
    }
    let mut runs = if array.schema.allows_duplicates {
        // libtiledb reads several ranges of such an array unordered indeed: a range a run.
        pieces.into_iter().map(|piece| vec![piece]).collect()
    } else {
        let stored_per_band = stored_cells_per_band(array, extent);
        gather_runs(pieces, (extent, origin), cells_per_band, stored_per_band)
    };
    if runs.is_empty() {
        // Nothing stored in the selected ranges: an empty read.
        runs.push_back(Run::new());
    }
    let sorter = BandSorter {
        extent,
        origin,
        key_columns: ranges.len() - 1,
        distinct: !array.schema.allows_duplicates,
        band: None,
        pending: Vec::new(),
    };
    BandRuns {
        runs,
        sorter,
        cells_per_band,
    }
}

/// The cells `array` stores in a band of `extent` rows, taken as spread evenly over the rows
/// it stores; `None` when its fragments do not say.
fn stored_cells_per_band(array: &ArrayObject, extent: i128) -> Option<u64> {
    let (lo, hi) = array.non_empty_domain.first().cloned().flatten()?;
    let rows = hi.as_i128()? - lo.as_i128()? + 1;
    let cells = array.stored_cells().ok()?;
    let per_band = u128::from(cells) * extent.max(1) as u128 / rows.max(1) as u128;
    Some(per_band.min(u128::from(u64::MAX)) as u64)
}

/// `pieces` (runs of one range each, in order, from [`band_runs`]) gathered into runs of
/// several: the first piece alone (the read's first rows), then as many pieces as lie in
/// bands that store about [`CELLS_PER_QUERY`] cells (`stored_per_band` in a band of
/// `extent` rows from `origin`; when unknown, the `cells_per_band` selected). A query of
/// scattered rows decompresses every tile that holds one of them, so its bands are what it
/// costs; and a query costs about as much fixed work as reading 100,000 cells of X, so a
/// query for each of many scattered rows is many times slower than one for all of them.
fn gather_runs(
    pieces: VecDeque<(i128, i128)>,
    (extent, origin): (i128, i128),
    cells_per_band: u64,
    stored_per_band: Option<u64>,
) -> VecDeque<Run> {
    let extent = extent.max(1);
    let band = |row: i128| (row - origin).div_euclid(extent);
    let band_cells = u128::from(stored_per_band.unwrap_or(cells_per_band));
    let span_cells = |lo: i128, hi: i128| band_cells * (band(hi) - band(lo) + 1) as u128;
    let mut runs: VecDeque<Run> = VecDeque::new();
    for (i, piece) in pieces.into_iter().enumerate() {
        match runs.back_mut() {
            Some(run) if i > 1 && span_cells(run[0].0, piece.1) <= u128::from(CELLS_PER_QUERY) => {
                run.push(piece)
            }
            _ => runs.push_back(vec![piece]),
        }
    }
    runs
}

/// Whether a run of several ranges is read as one range, its span, and the rows between
/// its ranges dropped here. libtiledb tests each cell of every tile a query of several
/// ranges touches against the ranges (two binary searches a cell, `compute_results_count_sparse`),
/// which costs more than decompressing the tile; a span is one range, whose cells it
/// tests in bulk. Both decompress every tile that holds a selected row, so a span is read
/// when almost every tile of it holds one: when its tiles hold [`SPAN_ROWS_PER_TILE`]
/// selected rows or more, on average.
#[derive(Debug, Clone, Copy)]
struct SpanReads {
    /// The rows of the first dimension a data tile holds, on average.
    rows_per_tile: f64,
}

/// Selected rows a tile of a span must hold on average for the span to be read whole
/// (a tile is then left without one about e^-4, 2%, of the time).
const SPAN_ROWS_PER_TILE: f64 = 4.0;

impl SpanReads {
    /// For a band-sorted read of a sparse array without duplicates (whose several ranges
    /// would be read unordered); `None` otherwise, or when its tiles' rows are unknown.
    fn of(array: &ArrayObject, plan: Plan) -> Option<SpanReads> {
        let Plan::Bands { extent, .. } = plan else {
            return None;
        };
        if array.schema.allows_duplicates {
            return None;
        }
        let tile_cells = array.schema.tile_cells? as f64;
        let cells_per_row = stored_cells_per_band(array, extent)? as f64 / extent.max(1) as f64;
        (cells_per_row > 0.0).then(|| SpanReads {
            rows_per_tile: tile_cells / cells_per_row,
        })
    }

    /// The rows `run` keeps of its span, when the span is to be read instead of the run's
    /// ranges.
    fn kept_rows(&self, run: &Run) -> Option<KeptRows> {
        let (first, last) = (run.first()?.0, run.last()?.1);
        let span = last - first + 1;
        let selected: i128 = run.iter().map(|(lo, hi)| hi - lo + 1).sum();
        let per_tile = selected as f64 / span as f64 * self.rows_per_tile;
        let worth_it = run.len() > 1 && per_tile >= SPAN_ROWS_PER_TILE;
        // A span of more rows than a bitmap of a few MiB is read as its ranges.
        (worth_it && span <= 1 << 25).then(|| KeptRows::of(run))
    }
}

/// The rows of a span that its run selects: a bit per row of the span.
#[derive(Debug)]
struct KeptRows {
    first: i128,
    rows: usize,
    bits: Vec<u64>,
}

impl KeptRows {
    fn of(run: &Run) -> KeptRows {
        let first = run[0].0;
        let rows = (run[run.len() - 1].1 - first + 1) as usize;
        let mut bits = vec![0u64; rows.div_ceil(64)];
        for &(lo, hi) in run {
            for row in (lo - first) as usize..=(hi - first) as usize {
                bits[row / 64] |= 1 << (row % 64);
            }
        }
        KeptRows { first, rows, bits }
    }

    fn last(&self) -> i128 {
        self.first + self.rows as i128 - 1
    }

    fn keeps(&self, row: i64) -> bool {
        // The span's rows are int64 (bands are read of int64 dimensions only).
        let at = (row as i128 - self.first) as u64 as usize;
        at < self.rows && self.bits[at / 64] & (1 << (at % 64)) != 0
    }

    /// The cells of `batch` in the kept rows (its first column is the first dimension). A
    /// global-order batch holds a row's cells of a tile together, so the row is looked up
    /// once a stretch of them, and the kept stretches are copied whole.
    fn filter(&self, batch: RecordBatch) -> Result<RecordBatch> {
        let rows = int64_values(batch.column(0))?;
        let mut kept: Vec<(usize, usize)> = Vec::new();
        let mut start = 0;
        while start < rows.len() {
            let row = rows[start];
            let end = start + rows[start..].iter().take_while(|&&r| r == row).count();
            if self.keeps(row) {
                match kept.last_mut() {
                    Some((_, last_end)) if *last_end == start => *last_end = end,
                    _ => kept.push((start, end)),
                }
            }
            start = end;
        }
        if kept == [(0, rows.len())] || rows.is_empty() {
            return Ok(batch);
        }
        let cells = kept.iter().map(|(a, b)| b - a).sum();
        let columns = (batch.columns().iter())
            .map(|column| {
                let data = column.to_data();
                let mut out = MutableArrayData::new(vec![&data], data.null_count() > 0, cells);
                for &(a, b) in &kept {
                    out.try_extend(0, a, b)?;
                }
                Ok(make_array(out.freeze()))
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(RecordBatch::try_new(batch.schema(), columns)?)
    }
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
    fn open_values(
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
    fn open_with(
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
        let cells = super::estimated_cells(array, selection)?;
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
            (array.memory_budget()).take(read.memory(batch_bytes, query_memory.unwrap_or(0)));
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
    fn start(mut self, empty: bool) -> Result<BatchReader> {
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
    fn new_query(&self, run: Option<&Run>, start_small: bool) -> Result<RunQuery> {
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
            sizing,
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

    fn next_sorted_batch(&mut self) -> Result<Option<RecordBatch>> {
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
    fn next_query_batch(&mut self) -> Result<Step> {
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
    fn start_run(&mut self) -> Result<bool> {
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

/// A query of a read, and the rows of its span it keeps when it reads its run's span.
struct RunQuery {
    query: ReadQuery,
    kept: Option<KeptRows>,
}

/// How the batches of a read's queries become record batches: the read's columns, their
/// schema, and the labels of its enumerated columns (shared by every batch). The threads
/// that read runs ahead share it.
struct ArrowBatches {
    schema: SchemaRef,
    columns: Vec<Column>,
    labels: Vec<Option<ArrayRef>>,
}

impl ArrowBatches {
    /// `batch` as a record batch, of the rows `kept` keeps when its query reads a span.
    fn record_batch(&self, batch: Batch, kept: Option<&KeptRows>) -> Result<RecordBatch> {
        let cells = batch.cells;
        let arrays = (self.columns.iter().zip(batch.columns).zip(&self.labels))
            .map(|((column, data), labels)| to_arrow(column, data, cells, labels.as_ref()))
            .collect::<Result<Vec<_>>>()?;
        let batch = RecordBatch::try_new(self.schema.clone(), arrays)?;
        match kept {
            Some(kept) => kept.filter(batch),
            None => Ok(batch),
        }
    }
}

/// What a run read ahead holds when its turn comes: its first batches, and whether its
/// query returned everything.
struct RunAhead {
    batches: VecDeque<RecordBatch>,
    ended: bool,
}

/// A run's query reading ahead on a thread of its own: its batches, as record batches of
/// the rows it keeps, until they hold a batch's bytes (a run that reads a span keeps a few
/// of its rows, so it reads on for many batches of libtiledb's, and two runs' queries
/// decompress tiles at once; otherwise it stops at its first batch). Dropping it stops the
/// thread at its next batch and waits for it: no query outlives its reader.
struct NextRun {
    reading: Option<std::thread::JoinHandle<(RunQuery, Result<RunAhead>)>>,
    /// Set when the reader goes away before the run's turn.
    stop: Arc<AtomicBool>,
}

impl NextRun {
    fn start(
        mut query: RunQuery,
        arrow: Arc<ArrowBatches>,
        batch_bytes: usize,
    ) -> std::io::Result<NextRun> {
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = stop.clone();
        let reading = std::thread::Builder::new()
            .name("soma-read-next".into())
            .spawn(move || {
                let ahead = crate::sync::catch_panic(|| {
                    let mut ahead = RunAhead {
                        batches: VecDeque::new(),
                        ended: false,
                    };
                    let mut held = 0;
                    while held < batch_bytes && !stopped.load(Ordering::Relaxed) {
                        let Some(batch) = query.query.next_batch()? else {
                            ahead.ended = true;
                            break;
                        };
                        let batch = arrow.record_batch(batch, query.kept.as_ref())?;
                        held += batch.get_array_memory_size();
                        ahead.batches.push_back(batch);
                    }
                    Ok(ahead)
                })
                .unwrap_or_else(|panic| Err(Error::from(tiledb::Error::new(panic))));
                (query, ahead)
            })?;
        Ok(NextRun {
            reading: Some(reading),
            stop,
        })
    }

    /// The query and what it read ahead.
    fn join(mut self) -> Result<(RunQuery, RunAhead)> {
        let reading = self.reading.take().expect("joined once");
        let (query, ahead) = reading
            .join()
            .map_err(|_| Error::invalid("the thread reading the next run died"))?;
        Ok((query, ahead?))
    }
}

impl Drop for NextRun {
    fn drop(&mut self) {
        if let Some(reading) = self.reading.take() {
            self.stop.store(true, Ordering::Relaxed);
            let _ = reading.join();
        }
    }
}

/// What one step of reading gave.
enum Step {
    Batch(RecordBatch),
    /// A run's query has returned everything.
    RunEnd,
    End,
}

/// Sorts a global-order read band by band (see the module's notes).
struct BandSorter {
    /// Bands are `extent` rows of the first dimension, counted from `origin`.
    extent: i128,
    origin: i128,
    /// The leading index columns to sort on: all but the last.
    key_columns: usize,
    /// Whether no two cells share their coordinates (the array allows no duplicates).
    distinct: bool,
    band: Option<i128>,
    pending: Vec<RecordBatch>,
}

/// The values of an int64 index column (band-sorted reads have only those).
fn int64_values(array: &ArrayRef) -> Result<&[i64]> {
    array
        .as_primitive_opt::<Int64Type>()
        .map(|a| a.values().as_ref())
        .ok_or_else(|| Error::invalid("band-sorted reads need int64 index columns"))
}

impl BandSorter {
    /// Takes a batch in global order; every band it completes goes sorted to `ready`.
    fn push(&mut self, batch: &RecordBatch, ready: &mut VecDeque<RecordBatch>) -> Result<()> {
        let first = int64_values(batch.column(0))?;
        let mut start = 0;
        while start < first.len() {
            let band = self.band_of(first[start]);
            if self.band.is_some_and(|current| band < current) {
                return Err(out_of_order());
            }
            if self.band != Some(band) {
                self.finish_band(ready)?;
                self.band = Some(band);
            }
            // Bands never decrease in global order: the band ends where values reach the next.
            let next_band_start = self.band_start(band + 1);
            let end = start + first[start..].partition_point(|&v| i128::from(v) < next_band_start);
            self.pending.push(batch.slice(start, end - start));
            start = end;
        }
        Ok(())
    }

    fn band_of(&self, row: i64) -> i128 {
        (i128::from(row) - self.origin).div_euclid(self.extent)
    }

    fn band_start(&self, band: i128) -> i128 {
        self.origin + band * self.extent
    }

    /// Sorts the band held so far into `ready`.
    fn finish_band(&mut self, ready: &mut VecDeque<RecordBatch>) -> Result<()> {
        let Some(band) = self.band.take() else {
            return Ok(());
        };
        let schema = self.pending[0].schema();
        let rows = arrow_select::concat::concat_batches(&schema, &self.pending)?;
        self.pending.clear();
        let order = if self.key_columns == 1 {
            // Two dimensions: a counting sort on the first coordinate's place in the band.
            let band_start = self.band_start(band);
            let places: Vec<usize> = int64_values(rows.column(0))?
                .iter()
                .map(|&v| (i128::from(v) - band_start) as usize)
                .collect();
            counting_sort(&places, usize::try_from(self.extent).unwrap_or(usize::MAX))
        } else {
            let keys = (0..self.key_columns)
                .map(|i| int64_values(rows.column(i)))
                .collect::<Result<Vec<_>>>()?;
            let mut order: Vec<u32> = (0..rows.num_rows() as u32).collect();
            // Stable: cells with equal leading coordinates keep their (sorted) arrival order.
            order.sort_by(|&a, &b| {
                keys.iter()
                    .map(|k| k[a as usize].cmp(&k[b as usize]))
                    .find(|o| o.is_ne())
                    .unwrap_or(std::cmp::Ordering::Equal)
            });
            order
        };
        let sorted = if order.windows(2).all(|w| w[0] < w[1]) {
            rows
        } else {
            arrow_select::take::take_record_batch(&rows, &UInt32Array::from(order))?
        };
        self.check_increasing(&sorted)?;
        ready.push_back(sorted);
        Ok(())
    }

    /// Checks that the cells of a sorted band increase in all their coordinates, strictly
    /// when they are `distinct`: that libtiledb returned the band in global order, each
    /// cell once.
    fn check_increasing(&self, band: &RecordBatch) -> Result<()> {
        let keys = (0..=self.key_columns)
            .map(|i| int64_values(band.column(i)))
            .collect::<Result<Vec<_>>>()?;
        let in_order = |a: std::cmp::Ordering| a.is_lt() || (a.is_eq() && !self.distinct);
        let increasing = match keys.as_slice() {
            [rows, cols] => (1..rows.len())
                .all(|i| in_order((rows[i - 1], cols[i - 1]).cmp(&(rows[i], cols[i])))),
            _ => (1..band.num_rows()).all(|i| {
                let coordinates = |at: usize| keys.iter().map(move |k| k[at]);
                in_order(coordinates(i - 1).cmp(coordinates(i)))
            }),
        };
        if increasing {
            Ok(())
        } else {
            Err(out_of_order())
        }
    }
}

/// The error of a band-sorted read whose cells did not come in global order, or came twice.
fn out_of_order() -> Error {
    Error::invalid("libtiledb returned the cells of a band-sorted read out of global order")
}

/// The stable order that sorts `places` (each below `buckets`), by counting.
fn counting_sort(places: &[usize], buckets: usize) -> Vec<u32> {
    if buckets > 1 << 24 {
        let mut order: Vec<u32> = (0..places.len() as u32).collect();
        order.sort_by_key(|&i| places[i as usize]);
        return order;
    }
    let mut starts = vec![0u32; buckets + 1];
    for &p in places {
        starts[p + 1] += 1;
    }
    for i in 1..starts.len() {
        starts[i] += starts[i - 1];
    }
    let mut order = vec![0u32; places.len()];
    for (i, &p) in places.iter().enumerate() {
        order[starts[p] as usize] = i as u32;
        starts[p] += 1;
    }
    order
}

/// A reader running on its own thread, one batch ahead of its consumer: reading and
/// encoding overlap. Dropping it stops the reader at its next batch and waits for that (a
/// query under way finishes its batch first): whoever drops it knows the read is over.
///
/// The thread says where the read ends: its last message is the end or an error. A thread
/// that panics sends its panic as an error, and a channel that closes without either (a
/// thread that died some other way) is an error for the consumer too, never the end.
pub struct ReadAhead {
    batches: mpsc::Receiver<Result<Option<RecordBatch>>>,
    schema: SchemaRef,
    reader: Option<std::thread::JoinHandle<()>>,
    ended: bool,
}

impl ReadAhead {
    pub fn start(mut reader: BatchReader) -> std::io::Result<ReadAhead> {
        let schema = reader.schema();
        let (tx, rx) = mpsc::sync_channel(1);
        let reader = std::thread::Builder::new()
            .name("soma-read".into())
            .spawn(move || loop {
                let next = crate::sync::catch_panic(|| {
                    let next = reader.next_batch();
                    crate::fault::pass(crate::fault::Point::Read);
                    next
                })
                .unwrap_or_else(|panic| Err(Error::invalid(panic)));
                let last = !matches!(next, Ok(Some(_)));
                if tx.send(next).is_err() || last {
                    return;
                }
            })?;
        Ok(ReadAhead {
            batches: rx,
            schema,
            reader: Some(reader),
            ended: false,
        })
    }

    pub fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    /// The next batch, `None` at the end.
    pub fn next_batch(&mut self) -> Result<Option<RecordBatch>> {
        if self.ended {
            return Ok(None);
        }
        let next = self.batches.recv().unwrap_or_else(|_| {
            Err(Error::invalid(
                "the read thread stopped before the end of the data",
            ))
        });
        self.ended = !matches!(next, Ok(Some(_)));
        next
    }
}

impl Drop for ReadAhead {
    fn drop(&mut self) {
        // The receiving end goes first: a reader waiting to hand over a batch, or done with
        // the one it reads, finds no one to take it and returns.
        let (_, nobody) = mpsc::sync_channel(0);
        drop(std::mem::replace(&mut self.batches, nobody));
        if let Some(reader) = self.reader.take() {
            let _ = reader.join();
        }
    }
}

/// The coordinates of the cells a row-major read of a two-dimensional dense array returns,
/// in their order: the ranges of the first dimension in turn, each of their rows whole along
/// the one range of the second. A dense read returns every cell of its ranges, so their
/// order tells their coordinates, which libtiledb would otherwise fill in cell by cell.
#[derive(Debug)]
pub struct DenseCellOrder {
    rows: Vec<(i64, i64)>,
    cols: (i64, i64),
    /// The next cell: the index of its range of rows, its row, its column.
    next: (usize, i64, i64),
}

impl DenseCellOrder {
    /// The order of a read of `ranges` (one list per dimension, each filled); `None` unless
    /// there are two dimensions of integer ranges, one range on the second.
    fn of(ranges: &[Vec<(Value, Value)>]) -> Option<DenseCellOrder> {
        let int = |(lo, hi): &(Value, Value)| -> Option<(i64, i64)> {
            Some((
                lo.as_i128()?.try_into().ok()?,
                hi.as_i128()?.try_into().ok()?,
            ))
        };
        let [rows, cols] = ranges else { return None };
        let rows: Vec<(i64, i64)> = rows.iter().map(int).collect::<Option<_>>()?;
        let cols = match cols.as_slice() {
            [one] => int(one)?,
            _ => return None,
        };
        let first_row = rows.first().map_or(0, |r| r.0);
        Some(DenseCellOrder {
            rows,
            cols,
            next: (0, first_row, cols.0),
        })
    }

    /// Appends the next `n` cells to `pieces`, as pieces of rows; an error when the read
    /// returned more cells than its ranges hold.
    pub fn next_pieces(&mut self, mut n: usize, pieces: &mut Vec<RowPiece>) -> Result<()> {
        let (lo, hi) = self.cols;
        while n > 0 {
            let (range, row, col) = self.next;
            if range >= self.rows.len() || lo > hi {
                return Err(Error::invalid(
                    "a dense read returned more cells than it selects",
                ));
            }
            let cells = usize::try_from(hi - col + 1).map_or(n, |left| left.min(n));
            pieces.push(RowPiece {
                row,
                first_col: col,
                cells,
            });
            n -= cells;
            self.next = if col + (cells as i64) <= hi {
                (range, row, col + cells as i64)
            } else if row < self.rows[range].1 {
                (range, row + 1, lo)
            } else {
                let start = self.rows.get(range + 1).map_or(0, |r| r.0);
                (range + 1, start, lo)
            };
        }
        Ok(())
    }
}

/// Cells of one row of a matrix that come one after another: `cells` of them from column
/// `first_col` on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RowPiece {
    pub row: i64,
    pub first_col: i64,
    pub cells: usize,
}

impl RowPiece {
    /// The coordinates of `pieces`' cells, appended to `row_ids` and `col_ids`.
    pub fn coordinates(pieces: &[RowPiece], row_ids: &mut Vec<i64>, col_ids: &mut Vec<i64>) {
        for piece in pieces {
            row_ids.extend(std::iter::repeat_n(piece.row, piece.cells));
            col_ids.extend(piece.first_col..piece.first_col + piece.cells as i64);
        }
    }
}

/// The values of a dense array in C order, as native bytes (bool as one byte each): all of
/// it, or rows `first..=last` of its first dimension (counted from the domain's start).
pub fn dense_values(array: &ArrayObject, rows: Option<(u64, u64)>) -> Result<Vec<u8>> {
    let mut selection = Selection::default();
    if let Some((first, last)) = rows {
        let lo = match array
            .schema
            .index_columns()
            .next()
            .and_then(|c| c.domain.clone())
        {
            Some((Value::Int(lo), _)) => lo,
            _ => 0,
        };
        selection.ranges = vec![vec![(
            Value::Int(lo + first as i64),
            Value::Int(lo + last as i64),
        )]];
    }
    let mut reader = match array.schema.dense {
        true => BatchReader::open_values(array, &selection, BATCH_BYTES)?,
        false => BatchReader::open(array, &selection, BATCH_BYTES)?,
    };
    let mut out = Vec::new();
    while let Some(batch) = reader.next_batch()? {
        let values = batch.column(batch.num_columns() - 1);
        if let Some(bools) = values.as_any().downcast_ref::<BooleanArray>() {
            out.extend(bools.values().iter().map(u8::from));
        } else {
            let data = values.to_data();
            let width = data.data_type().primitive_width().unwrap_or(1);
            let start = data.offset() * width;
            out.extend_from_slice(&data.buffers()[0][start..start + data.len() * width]);
        }
    }
    Ok(out)
}

/// An enumeration's labels as an Arrow array of the dictionary's value type.
pub(super) fn labels_array(e: &EnumerationInfo) -> Result<ArrayRef> {
    let array: ArrayRef = if e.datatype.is_string() {
        Arc::new(LargeStringArray::from_iter_values(e.values.iter().map(
            |v| match v {
                Value::Text(s) => s.as_str(),
                _ => "",
            },
        )))
    } else if e.datatype.is_bytes() {
        Arc::new(LargeBinaryArray::from_iter_values(e.values.iter().map(
            |v| match v {
                Value::Bytes(b) => b.as_slice(),
                _ => &[],
            },
        )))
    } else if e.datatype == crate::tiledb::Datatype::Bool {
        Arc::new(BooleanArray::from_iter(
            e.values
                .iter()
                .map(|v| Some(matches!(v, Value::Bool(true)))),
        ))
    } else if e.values.is_empty() {
        // An enumeration without labels (a column of nulls): no buffer to align.
        new_empty_array(&super::schema::arrow_type(e.datatype, 1))
    } else {
        let dt = super::schema::arrow_type(e.datatype, 1);
        let bytes: Vec<u8> = e
            .values
            .iter()
            .map(|v| v.to_native(e.datatype))
            .collect::<tiledb::Result<Vec<_>>>()?
            .concat();
        make_array(
            arrow_data::ArrayData::builder(dt)
                .len(e.values.len())
                .add_buffer(values_buffer(bytes))
                .build()?,
        )
    };
    Ok(array)
}

fn nulls(data: &ColumnData, cells: usize) -> Option<NullBuffer> {
    let validity = data.validity.as_ref()?;
    let valid = BooleanBuffer::collect_bool(cells, |i| validity.get(i).is_some_and(|&v| v != 0));
    Some(NullBuffer::new(valid)).filter(|n| n.null_count() > 0)
}

/// Arrow large offsets over libtiledb's, taken over without a copy once checked: Arrow
/// requires them to start at or above 0 and never decrease.
fn large_offsets(offsets: Vec<u64>, cells: usize) -> Result<OffsetBuffer<i64>> {
    let valid = offsets.len() > cells
        && offsets[0] <= i64::MAX as u64
        && offsets[cells] <= i64::MAX as u64
        && offsets[..=cells].windows(2).all(|w| w[0] <= w[1]);
    if !valid {
        return Err(Error::invalid(
            "libtiledb returned invalid var-sized offsets",
        ));
    }
    let offsets = ScalarBuffer::<i64>::new(Buffer::from_vec(offsets), 0, cells + 1);
    Ok(OffsetBuffer::new(offsets))
}

/// Values as an Arrow buffer: taken over when aligned for any primitive type (as the
/// allocator returns them), else copied into an aligned one.
fn values_buffer(bytes: Vec<u8>) -> Buffer {
    if bytes.as_ptr().align_offset(16) == 0 {
        Buffer::from_vec(bytes)
    } else {
        Buffer::from_slice_ref(&bytes)
    }
}

/// One column of a TileDB batch as an Arrow array of the column's type. Values are taken
/// over as they are (no copy) wherever Arrow lays them out as libtiledb does.
fn to_arrow(
    column: &Column,
    data: ColumnData,
    cells: usize,
    labels: Option<&ArrayRef>,
) -> Result<ArrayRef> {
    if cells == 0 {
        return Ok(new_empty_array(&column.arrow_type));
    }
    let nulls = nulls(&data, cells);
    let array: ArrayRef = match &column.arrow_type {
        DataType::Boolean => Arc::new(BooleanArray::new(
            BooleanBuffer::collect_bool(cells, |i| data.data[i] != 0),
            nulls,
        )),
        DataType::LargeUtf8 | DataType::LargeBinary => {
            let offsets = data
                .offsets
                .ok_or_else(|| Error::invalid("var-sized column without offsets"))?;
            let offsets = large_offsets(offsets, cells)?;
            let values = values_buffer(data.data);
            if column.arrow_type == DataType::LargeUtf8 {
                Arc::new(LargeStringArray::try_new(offsets, values, nulls)?)
            } else {
                Arc::new(LargeBinaryArray::try_new(offsets, values, nulls)?)
            }
        }
        DataType::Date32 => {
            // TileDB stores days as int64.
            let days: Vec<i32> = data
                .data
                .chunks_exact(8)
                .map(|c| i64::from_ne_bytes(c.try_into().expect("8 bytes")) as i32)
                .collect();
            Arc::new(arrow_array::Date32Array::new(
                ScalarBuffer::from(days),
                nulls,
            ))
        }
        DataType::Dictionary(_, _) => {
            let labels =
                labels.ok_or_else(|| Error::invalid("enumerated column without labels"))?;
            make_array(
                arrow_data::ArrayData::builder(column.arrow_type.clone())
                    .len(cells)
                    .add_buffer(values_buffer(data.data))
                    .nulls(nulls)
                    .add_child_data(labels.to_data())
                    .build()?,
            )
        }
        primitive => make_array(
            arrow_data::ArrayData::builder(primitive.clone())
                .len(cells)
                .add_buffer(values_buffer(data.data))
                .nulls(nulls)
                .build()?,
        ),
    };
    Ok(array)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dense_read_tells_its_cells_by_their_order() {
        let int = |lo: i64, hi: i64| (Value::Int(lo), Value::Int(hi));
        // Rows 2..=3 and 7, columns 10..=12: row by row, in batches that end mid-row.
        let mut order = DenseCellOrder::of(&[vec![int(2, 3), int(7, 7)], vec![int(10, 12)]])
            .expect("integer ranges, one on the second dimension");
        let mut pieces = Vec::new();
        for n in [2, 5, 2] {
            order.next_pieces(n, &mut pieces).unwrap();
        }
        let piece = |row, first_col, cells| RowPiece {
            row,
            first_col,
            cells,
        };
        assert_eq!(
            pieces,
            [
                piece(2, 10, 2),
                piece(2, 12, 1),
                piece(3, 10, 3),
                piece(7, 10, 1),
                piece(7, 11, 2)
            ]
        );
        let (mut rows, mut cols) = (Vec::new(), Vec::new());
        RowPiece::coordinates(&pieces, &mut rows, &mut cols);
        assert_eq!(rows, [2, 2, 2, 3, 3, 3, 7, 7, 7]);
        assert_eq!(cols, [10, 11, 12, 10, 11, 12, 10, 11, 12]);
        assert!(order.next_pieces(1, &mut pieces).is_err());
        // Several ranges of the second dimension: the order is libtiledb's to tell.
        assert!(DenseCellOrder::of(&[vec![int(0, 1)], vec![int(0, 1), int(3, 4)]]).is_none());
    }

    #[test]
    fn a_read_opens_with_a_few_rows_then_the_rest_of_their_band_then_whole_bands() {
        // Bands of 100 rows from 0, 1000 cells a band (10 a row): 8192 cells are 820 rows.
        let runs: Vec<_> = band_runs((0, 999), 100, 0, 1000, true).into();
        assert_eq!(runs[0], (0, 99));
        // 100 000 cells a band: the first run is 9 rows; runs of 41 bands follow.
        let runs: Vec<_> = band_runs((5, 9000), 100, 0, 100_000, true).into();
        assert_eq!(runs[..4], [(5, 13), (14, 99), (100, 4199), (4200, 8299)]);
        assert_eq!(runs.last(), Some(&(8300, 9000)));
        // Runs cover the range, in order, without gaps; all but the first end with a band.
        for w in runs.windows(2) {
            assert_eq!(w[0].1 + 1, w[1].0);
        }
        for &(_, end) in &runs[1..] {
            assert!((end + 1) % 100 == 0 || end == 9000);
        }
        // Later ranges of a read start with whole bands (here a band a run).
        let runs: Vec<_> = band_runs((250, 420), 100, 0, 5_000_000, false).into();
        assert_eq!(runs, [(250, 299), (300, 399), (400, 420)]);
    }

    #[test]
    fn bands_are_counted_from_the_schema_domain() {
        // tiledbsoma's int64 domains start at i64::MIN, which is 1 modulo 3: with an extent
        // of 3, tiles start at -2, 1, 4, 7…, not at the current domain's 0.
        let origin = i128::from(i64::MIN);
        let runs: Vec<_> = band_runs((0, 10), 3, origin, CELLS_PER_QUERY, false).into();
        assert_eq!(runs, [(0, 0), (1, 3), (4, 6), (7, 9), (10, 10)]);
    }

    #[test]
    fn a_global_order_read_is_sorted_band_by_band_from_any_origin() {
        // Two dimensions, bands of 3 rows from i64::MIN, tiles of one column of the second:
        // global order is band by band, in a band column by column, in a column by row.
        let origin = i128::from(i64::MIN);
        let band_of = |a: i64| (i128::from(a) - origin).div_euclid(3);
        let mut cells: Vec<(i64, i64)> = (-5..10).flat_map(|a| [(a, 0), (a, 1)]).collect();
        cells.sort_by_key(|&(a, b)| (band_of(a), b, a));
        let schema = Arc::new(arrow_schema::Schema::new(vec![
            arrow_schema::Field::new("a", DataType::Int64, false),
            arrow_schema::Field::new("b", DataType::Int64, false),
        ]));
        let column = |f: fn(&(i64, i64)) -> i64| -> ArrayRef {
            Arc::new(arrow_array::Int64Array::from_iter_values(
                cells.iter().map(f),
            ))
        };
        let batch = RecordBatch::try_new(schema, vec![column(|c| c.0), column(|c| c.1)]).unwrap();
        let sorter = || BandSorter {
            extent: 3,
            origin,
            key_columns: 1,
            distinct: true,
            band: None,
            pending: Vec::new(),
        };
        let sort = |batch: &RecordBatch| -> Result<Vec<(i64, i64)>> {
            let (mut sorter, mut ready) = (sorter(), VecDeque::new());
            // Batches end anywhere: feed it in pieces of 4 rows.
            for start in (0..batch.num_rows()).step_by(4) {
                let len = 4.min(batch.num_rows() - start);
                sorter.push(&batch.slice(start, len), &mut ready)?;
            }
            sorter.finish_band(&mut ready)?;
            let mut out = Vec::new();
            for b in &ready {
                let a = int64_values(b.column(0))?;
                let c = int64_values(b.column(1))?;
                out.extend(a.iter().copied().zip(c.iter().copied()));
            }
            Ok(out)
        };
        let mut sorted = cells.clone();
        sorted.sort();
        assert_eq!(sort(&batch).unwrap(), sorted);
        // Not global order: a band after a later one, or a row's cells out of order, or a
        // cell twice, is an error, never a wrong order.
        let later_band_first = arrow_select::concat::concat_batches(
            &batch.schema(),
            &[batch.slice(12, 18), batch.slice(0, 12)],
        )
        .unwrap();
        assert!(sort(&later_band_first).is_err());
        let at = |cell: (i64, i64)| cells.iter().position(|&c| c == cell).unwrap();
        let mut swapped: Vec<u32> = (0..batch.num_rows() as u32).collect();
        swapped.swap(at((0, 0)), at((0, 1)));
        let swapped = arrow_select::take::take_record_batch(&batch, &UInt32Array::from(swapped));
        assert!(sort(&swapped.unwrap()).is_err());
        let twice: Vec<u32> = [0].into_iter().chain(0..batch.num_rows() as u32).collect();
        let twice = arrow_select::take::take_record_batch(&batch, &UInt32Array::from(twice));
        assert!(sort(&twice.unwrap()).is_err());
    }

    #[test]
    fn runs_follow_the_domain_start() {
        let runs: Vec<_> = band_runs((-10, 25), 10, -10, 10, true).into();
        assert_eq!(runs[0], (-10, -1));
        assert_eq!(runs.last(), Some(&(0, 25)));
    }

    /// An int64 index column with a current domain of 0..=999 and tiles of 100 rows, laid
    /// out from 0.
    fn int_index(name: &str) -> Column {
        Column {
            name: name.to_owned(),
            datatype: tiledb::Datatype::Int64,
            cell_val_num: 1,
            arrow_type: DataType::Int64,
            nullable: false,
            is_index: true,
            domain: Some((Value::Int(0), Value::Int(999))),
            schema_domain: Some((Value::Int(0), Value::Int(i64::MAX - 100))),
            tile_extent: Some(Value::Int(100)),
            enumeration: None,
        }
    }

    /// A string index column.
    fn text_index(name: &str) -> Column {
        Column {
            datatype: tiledb::Datatype::StringAscii,
            cell_val_num: tiledb::VAR_NUM,
            arrow_type: DataType::LargeUtf8,
            domain: None,
            schema_domain: None,
            tile_extent: None,
            ..int_index(name)
        }
    }

    /// A nullable float32 value column.
    fn value_column(name: &str) -> Column {
        Column {
            datatype: tiledb::Datatype::Float32,
            arrow_type: DataType::Float32,
            nullable: true,
            is_index: false,
            domain: None,
            schema_domain: None,
            tile_extent: None,
            ..int_index(name)
        }
    }

    /// A sparse array of `columns`, row-major, described only, its first index column
    /// storing rows 0..=999.
    fn sparse(columns: Vec<Column>) -> ArrayObject {
        let index = columns.iter().filter(|c| c.is_index).count();
        let mut stored = vec![None; index];
        stored[0] = Some((Value::Int(0), Value::Int(999)));
        ArrayObject::described(
            "mem://array",
            crate::soma::SomaType::SparseNDArray,
            tiledb::Metadata::new(),
            crate::soma::SomaSchema::sparse_frame(columns),
            stored,
            Vec::new(),
        )
    }

    fn range(lo: i64, hi: i64) -> (Value, Value) {
        (Value::Int(lo), Value::Int(hi))
    }

    fn text(value: &str) -> (Value, Value) {
        (Value::Text(value.into()), Value::Text(value.into()))
    }

    /// Reads far over the in-memory sort's limit, which libtiledb sorts.
    const BIG: u64 = IN_MEMORY_SORT_BYTES + 1;

    #[test]
    fn several_ranges_of_a_dimension_are_read_row_major_except_on_a_banded_first() {
        let matrix = sparse(vec![int_index("d0"), int_index("d1"), value_column("v")]);
        let bands = Plan::Bands {
            extent: 100,
            origin: 0,
        };
        let chosen = |array: &ArrayObject, ranges: &[Vec<(Value, Value)>]| {
            ReadPlan::choose(array, ranges, false, BIG).plan
        };
        assert_eq!(chosen(&matrix, &[vec![], vec![]]), bands);
        // Several ranges of the first dimension become runs of bands.
        let rows = [vec![range(0, 9), range(500, 509)], vec![range(3, 3)]];
        assert_eq!(chosen(&matrix, &rows), bands);
        // Several of the second: libtiledb reads those only row-major.
        let columns = [vec![range(0, 9)], vec![range(1, 1), range(7, 8)]];
        assert_eq!(chosen(&matrix, &columns), Plan::Sorted(Layout::RowMajor));
        // One dimension read in global order: several of its ranges are row-major too.
        let frame = sparse(vec![int_index("soma_joinid"), value_column("v")]);
        assert_eq!(
            chosen(&frame, &[vec![range(0, 9)]]),
            Plan::Sorted(Layout::GlobalOrder)
        );
        let two = [vec![range(0, 9), range(20, 29)]];
        assert_eq!(chosen(&frame, &two), Plan::Sorted(Layout::RowMajor));
        // However small, or unsorted: global order cannot read several ranges.
        for unsorted in [false, true] {
            let small = ReadPlan::choose(&matrix, &columns, unsorted, 1);
            assert_eq!(small.plan, Plan::Sorted(Layout::RowMajor), "{unsorted}");
            assert_eq!(small.sorted_bytes, None);
        }
    }

    #[test]
    fn libtiledb_holds_four_tiles_of_each_fragment_a_query_reads_at_least_16_mib() {
        let mut matrix = sparse(vec![int_index("d0"), int_index("d1"), value_column("v")]);
        let whole = [(Value::Int(0), Value::Int(999))];
        let none = VecDeque::new();
        // 100,000 cells of 8 + 8 + 4 bytes and a validity byte a tile: 8.4 MB for four.
        matrix.schema.tile_cells = Some(100_000);
        assert_eq!(
            tiledb_query_memory(&matrix, 1_000_000, &none, &whole),
            Some(QUERY_MEMORY_BYTES)
        );
        matrix.schema.tile_cells = Some(1_000_000);
        assert_eq!(
            tiledb_query_memory(&matrix, 1_000_000, &none, &whole),
            Some(4 * 1_000_000 * 21)
        );
        // Many tiles: ten times their offsets, two 8-byte numbers a column and tile.
        matrix.schema.tile_cells = Some(10);
        let tiles = 1_000_000_000 / 10 + 1;
        assert_eq!(
            tiledb_query_memory(&matrix, 1_000_000_000, &none, &whole),
            Some(10 * tiles * 3 * 16)
        );
        // Tiles of text, or dense: libtiledb's default.
        let frame = sparse(vec![int_index("id"), text_index("name")]);
        assert_eq!(tiledb_query_memory(&frame, 1, &none, &whole), None);
        matrix.schema.dense = true;
        assert_eq!(tiledb_query_memory(&matrix, 1, &none, &whole), None);
    }

    #[test]
    fn a_sparse_read_libtiledb_would_sort_is_sorted_in_memory_up_to_the_limit() {
        // Indexed by a string and an integer: libtiledb sorts it row-major.
        let frame = sparse(vec![text_index("name"), int_index("id"), value_column("v")]);
        let ranges = [vec![], vec![]];
        let small = ReadPlan::choose(&frame, &ranges, false, IN_MEMORY_SORT_BYTES);
        assert_eq!(small.plan, Plan::Sorted(Layout::GlobalOrder));
        assert_eq!(small.sorted_bytes, Some(IN_MEMORY_SORT_BYTES));
        // What it reads is held until sorted: the budget counts it.
        assert_eq!(
            small.memory(BATCH_BYTES, 0),
            READER_BATCHES * BATCH_BYTES as u64 + IN_MEMORY_SORT_BYTES
        );
        let big = ReadPlan::choose(&frame, &ranges, false, BIG);
        assert_eq!(big.plan, Plan::Sorted(Layout::RowMajor));
        assert_eq!(big.sorted_bytes, None);
        assert_eq!(
            big.memory(BATCH_BYTES, 0),
            READER_BATCHES * BATCH_BYTES as u64
        );
        // An unsorted read needs no sort: global order, nothing held.
        let unsorted = ReadPlan::choose(&frame, &ranges, true, 1);
        assert_eq!(unsorted.plan, Plan::Sorted(Layout::GlobalOrder));
        assert_eq!(unsorted.sorted_bytes, None);
        // A dense read is row-major, sorted by libtiledb, however small.
        let mut dense = sparse(vec![int_index("d0"), int_index("d1"), value_column("v")]);
        dense.schema.dense = true;
        for unsorted in [false, true] {
            let read = ReadPlan::choose(&dense, &ranges, unsorted, 1);
            assert_eq!(read.plan, Plan::Sorted(Layout::RowMajor));
            assert_eq!(read.sorted_bytes, None);
        }
    }

    #[test]
    fn an_exact_text_value_is_a_condition_in_reads_sorted_row_major_or_here() {
        let frame = sparse(vec![text_index("name"), int_index("id"), value_column("v")]);
        let selected = || vec![vec![text("b")], vec![range(0, 9)]];
        let expected = vec![Equality {
            column: "name".into(),
            value: Some(b"b".to_vec()),
        }];
        for read_bytes in [1, BIG] {
            let read = ReadPlan::choose(&frame, &selected(), false, read_bytes);
            let mut ranges = selected();
            let equalities = text_dimension_equalities(&frame, &read, &mut ranges);
            assert_eq!(equalities, expected);
            // The value is tested, not read as a range; the other ranges stay.
            assert_eq!(ranges, [vec![], vec![range(0, 9)]]);
        }
        // A range of several values is read as one.
        let read = ReadPlan::choose(&frame, &selected(), false, BIG);
        let between = (Value::Text("a".into()), Value::Text("c".into()));
        let mut ranges = vec![vec![between.clone()], vec![]];
        assert_eq!(text_dimension_equalities(&frame, &read, &mut ranges), []);
        assert_eq!(ranges, [vec![between], vec![]]);
        // An unsorted read (global order, no sort here) reads the value as a range.
        let read = ReadPlan::choose(&frame, &selected(), true, 1);
        let mut ranges = selected();
        assert_eq!(text_dimension_equalities(&frame, &read, &mut ranges), []);
        assert_eq!(ranges, selected());
    }

    #[test]
    fn band_runs_cover_the_stored_rows_of_each_range_in_order() {
        let matrix = sparse(vec![int_index("d0"), int_index("d1"), value_column("v")]);
        // Rows 0..=999 are stored; ranges out of order, partly outside.
        let ranges = [vec![range(950, 2000), range(-50, 249)], vec![]];
        assert_eq!(stored_rows(&matrix, &ranges[0]), [(0, 249), (950, 999)]);
        // 3 000 000 cells over 300 rows: 1 000 000 cells a band of 100 rows. The first
        // range opens with one row, then the rest of its band; later ranges have no head.
        let b = band_runs_of(&matrix, &ranges, 100, 0, 3_000_000);
        assert_eq!(b.cells_per_band, 1_000_000);
        // Its fragments tell no cells: after the first row, one run of three ranges.
        let runs = [vec![(0, 0)], vec![(1, 99), (100, 249), (950, 999)]];
        assert_eq!(Vec::from(b.runs), runs);
        assert_eq!((b.sorter.extent, b.sorter.key_columns), (100, 1));
        // No range: everything stored.
        assert_eq!(stored_rows(&matrix, &[]), [(0, 999)]);
        // Nothing stored in the ranges: one empty run.
        let outside = [vec![range(1000, 2000)], vec![]];
        let b = band_runs_of(&matrix, &outside, 100, 0, 0);
        assert_eq!(Vec::from(b.runs), [Run::new()]);
    }

    #[test]
    fn scattered_rows_are_gathered_into_runs_of_several_ranges() {
        // 1,000,000 cells over rows 0..=999, bands of 10 rows (10,000 cells each); two rows
        // in every 90 selected.
        let mut matrix = sparse(vec![int_index("d0"), int_index("d1"), value_column("v")]);
        matrix = ArrayObject::described(
            "mem://array",
            crate::soma::SomaType::SparseNDArray,
            tiledb::Metadata::new(),
            matrix.schema.clone(),
            matrix.non_empty_domain.clone(),
            vec![tiledb::Fragment {
                uri: "mem://array/f".into(),
                cell_num: 1_000_000,
                first_dimension: Some(range(0, 999)),
            }],
        );
        assert_eq!(stored_cells_per_band(&matrix, 10), Some(10_000));
        let rows: Vec<_> = (0..11).map(|i| range(i * 90, i * 90 + 1)).collect();
        let b = band_runs_of(&matrix, &[rows, vec![]], 10, 0, 22_000);
        assert_eq!(b.cells_per_band, 10_000);
        // The first rows alone, then all the others in one run: 20,000 cells selected in
        // bands of 100,000 stored.
        let rest: Run = (1..11).map(|i| (i * 90, i * 90 + 1)).collect();
        assert_eq!(Vec::from(b.runs), [vec![(0, 1)], rest]);

        // A run gathers pieces in bands that store up to CELLS_PER_QUERY cells.
        let per_band = CELLS_PER_QUERY / 4;
        let pieces =
            |rows: &[i128]| -> Run { rows.iter().map(|&r| (r * 10, r * 10 + 9)).collect() };
        let runs =
            |rows: &[i128], stored| Vec::from(gather_runs(pieces(rows).into(), (10, 0), 1, stored));
        // Four bands to a run (the first piece is always alone).
        let expected = [vec![(0, 9)], pieces(&[1, 2, 3, 4]), pieces(&[5, 6])];
        assert_eq!(runs(&[0, 1, 2, 3, 4, 5, 6], Some(per_band)), expected);
        // Bands apart count as the bands between them.
        let expected = [vec![(0, 9)], pieces(&[1, 3]), pieces(&[5])];
        assert_eq!(runs(&[0, 1, 3, 5], Some(per_band)), expected);
        // Stored cells unknown: the selected cells count instead.
        let selected = gather_runs(pieces(&[0, 1, 2, 3]).into(), (10, 0), per_band * 2, None);
        let expected = [vec![(0, 9)], pieces(&[1, 2]), pieces(&[3])];
        assert_eq!(Vec::from(selected), expected);
        // Bands count from the origin: rows 5..=14 are one band from 5, two from 0.
        let stored = Some(CELLS_PER_QUERY * 2 / 3);
        let from = |origin| {
            Vec::from(gather_runs(
                [(0, 0), (5, 9), (10, 14)].into(),
                (10, origin),
                1,
                stored,
            ))
        };
        assert_eq!(from(5), [vec![(0, 0)], vec![(5, 9), (10, 14)]]);
        assert_eq!(from(0), [vec![(0, 0)], vec![(5, 9)], vec![(10, 14)]]);
    }

    #[test]
    fn a_run_is_read_as_its_span_when_its_tiles_hold_several_selected_rows() {
        // 1,000,000 cells over rows 0..=999 (1,000 a row), tiles of 10,000 cells: 10 rows.
        let matrix = |allows_duplicates| {
            let mut schema = crate::soma::SomaSchema::sparse_frame(vec![
                int_index("d0"),
                int_index("d1"),
                value_column("v"),
            ]);
            schema.tile_cells = Some(10_000);
            schema.allows_duplicates = allows_duplicates;
            ArrayObject::described(
                "mem://array",
                crate::soma::SomaType::SparseNDArray,
                tiledb::Metadata::new(),
                schema,
                vec![Some((Value::Int(0), Value::Int(999))), None],
                vec![tiledb::Fragment {
                    uri: "mem://array/f".into(),
                    cell_num: 1_000_000,
                    first_dimension: Some(range(0, 999)),
                }],
            )
        };
        let bands = Plan::Bands {
            extent: 10,
            origin: 0,
        };
        assert!(SpanReads::of(&matrix(true), bands).is_none());
        let spans = SpanReads::of(&matrix(false), bands).expect("a sparse matrix's spans");
        // Every other row of 100: 5 selected rows a tile, read as the span.
        let every_other: Run = (0..50).map(|i| (100 + 2 * i, 100 + 2 * i)).collect();
        let kept = spans.kept_rows(&every_other).expect("a span read");
        assert_eq!((kept.first, kept.last()), (100, 198));
        // Two rows of 100: most tiles would hold none, read as ranges.
        assert!(spans.kept_rows(&vec![(100, 100), (199, 199)]).is_none());
        // One range is read as it is.
        assert!(spans.kept_rows(&vec![(100, 199)]).is_none());

        // The span's cells in the run's rows are kept, in their order.
        let rows = arrow_array::Int64Array::from_iter_values([
            99, 100, 101, 150, 150, 151, 198, 199, 5000,
        ]);
        let values = arrow_array::Int64Array::from_iter_values(0..rows.len() as i64);
        let schema = Arc::new(arrow_schema::Schema::new(vec![
            arrow_schema::Field::new("d0", DataType::Int64, false),
            arrow_schema::Field::new("v", DataType::Int64, false),
        ]));
        let batch = RecordBatch::try_new(schema, vec![Arc::new(rows), Arc::new(values)]).unwrap();
        let filtered = kept.filter(batch).unwrap();
        let column = |i: usize| int64_values(filtered.column(i)).unwrap().to_vec();
        assert_eq!(column(0), [100, 150, 150, 198]);
        assert_eq!(column(1), [1, 3, 4, 6]);
    }

    #[test]
    fn a_label_is_an_equality_in_its_enumerations_type() {
        let mut category = value_column("cell_type");
        category.enumeration = Some(EnumerationInfo {
            datatype: tiledb::Datatype::StringUtf8,
            ordered: false,
            values: vec![Value::Text("B cell".into())],
        });
        let frame = sparse(vec![int_index("soma_joinid"), value_column("x"), category]);
        let equals = |column: &str, label: Option<Value>| Selection {
            equals: Some((column.to_owned(), label)),
            ..Selection::default()
        };
        let label = Some(Value::Text("B cell".into()));
        assert_eq!(
            label_equality(&frame, &equals("cell_type", label)).unwrap(),
            Some(Equality {
                column: "cell_type".into(),
                value: Some(b"B cell".to_vec())
            })
        );
        // A null label matches nulls.
        let null = label_equality(&frame, &equals("cell_type", None)).unwrap();
        assert_eq!(null.map(|e| e.value), Some(None));
        assert!(label_equality(&frame, &equals("x", Some(Value::Float(1.0)))).is_err());
        assert_eq!(label_equality(&frame, &Selection::default()).unwrap(), None);
    }

    #[test]
    fn a_sorted_read_returns_the_index_columns_and_the_columns_asked_for() {
        let frame = sparse(vec![
            int_index("soma_joinid"),
            value_column("x"),
            value_column("y"),
        ]);
        let names = |columns: Vec<Column>| columns.into_iter().map(|c| c.name).collect::<Vec<_>>();
        let only_y = Selection {
            columns: Some(vec!["y".into()]),
            ..Selection::default()
        };
        assert_eq!(
            names(read_columns(&frame, &only_y, None)),
            ["soma_joinid", "y"]
        );
        let all = Selection::default();
        assert_eq!(
            names(read_columns(&frame, &all, None)),
            ["soma_joinid", "x", "y"]
        );
        // An unsorted read returns only the columns it names, index columns too.
        assert_eq!(names(read_columns(&frame, &all, Some(&["x"]))), ["x"]);
    }
}
