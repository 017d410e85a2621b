//! What a read does, decided before it starts: which columns and ranges it reads, in which
//! order its rows come ([`Plan`]), and for a band-sorted read, the runs of bands its queries
//! go through. Pure: computed from the array's description, the selection and the mode,
//! so that a plan can be logged and asserted on.

use std::collections::VecDeque;

use arrow_schema::DataType;

use crate::tiledb::{self, ColumnSpec, Layout, Order, Value};

use super::memory::TileUnit;

use super::condition::label_equality;
use super::condition::Equality;
use super::memory::tiledb_query_memory;
use super::memory::{reader_memory, IN_MEMORY_SORT_BYTES};
use super::spans::SpanReads;
use super::Selection;
use crate::soma::error::Result;
use crate::soma::object::ArrayObject;
use crate::soma::schema::Column;

/// Cells a query of a band-sorted read aims for (its runs of bands are sized to it).
pub(super) const CELLS_PER_QUERY: u64 = 4 << 20;

/// The rows of the first dimension one query of a band-sorted read reads: sorted, disjoint,
/// inclusive ranges, every one after those of the runs before it. Several ranges
/// are read in one query, unordered: libtiledb reads several ranges of a dimension only
/// row-major or unordered, and its unordered read of an array without duplicates is its
/// global-order reader, whose cells arrive in global order all the same (which
/// [`BandSorter`] checks). None: the read holds nothing.
pub(super) type Run = Vec<(i128, i128)>;

/// How a reader gets rows sorted by the index columns.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Plan {
    /// libtiledb returns them sorted in this layout.
    Sorted(Layout),
    /// Global order, sorted band by band: bands of `extent` rows from `origin`.
    Bands { extent: i128, origin: i128 },
}

/// Chooses how to read `array` sorted (see the module's notes).
pub(super) fn plan(array: &ArrayObject) -> Plan {
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

/// About how many bytes a row of `columns` holds as read (var-sized cells guessed).
pub(super) fn row_bytes(columns: &[Column]) -> u64 {
    columns
        .iter()
        .map(|c| match c.cell_val_num {
            tiledb::VAR_NUM => 32,
            n => (c.datatype.size() * n.max(1) as usize) as u64,
        })
        .sum::<u64>()
        .max(1)
}

/// The layout a sorted plan reads in (`None` for band-sorted reads).
pub(super) fn plan_layout(plan: &Plan) -> Option<Layout> {
    match plan {
        Plan::Sorted(layout) => Some(*layout),
        Plan::Bands { .. } => None,
    }
}

/// Cells the first run of a band-sorted read aims for: a few rows, so that the first rows
/// are sorted and handed out before the rest of their band is read.
pub(super) const FIRST_RUN_CELLS: u64 = 8192;

/// What libtiledb decompresses at a time when reading `ranges` (one list per index column,
/// a dense array's filled in with its current domain): a sparse array's data tile, or a
/// band of a dense read, one tile extent of the first dimension across the ranges of the
/// others.
pub(super) fn tile_unit(array: &ArrayObject, ranges: &[Vec<(Value, Value)>]) -> Option<TileUnit> {
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
pub(super) fn read_ranges(array: &ArrayObject, selection: &Selection) -> Vec<Vec<(Value, Value)>> {
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
pub(super) fn selected_cells(ranges: &[Vec<(Value, Value)>]) -> Option<u64> {
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
pub(super) fn band_runs(
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
pub(super) fn read_columns(
    array: &ArrayObject,
    selection: &Selection,
    only: Option<&[&str]>,
) -> Vec<Column> {
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
pub(super) fn column_specs(columns: &[Column]) -> Vec<ColumnSpec> {
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

/// The plan for reading `ranges` (one list per index column): libtiledb reads several ranges
/// of one dimension only in row-major order, so a read of several ranges of a dimension
/// after the first, or of the one dimension read in global order, is row-major. Several
/// ranges of the first dimension of a band-sorted read keep its plan: they become its runs.
pub(super) fn multi_range_plan(plan: Plan, ranges: &[Vec<(Value, Value)>]) -> Plan {
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
pub(super) fn unsorted_plan(array: &ArrayObject, plan: Plan) -> Plan {
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
pub(super) fn sorts_in_memory(array: &ArrayObject, plan: &Plan, read_bytes: u64) -> bool {
    !array.schema.dense
        && plan_layout(plan) == Some(Layout::RowMajor)
        && read_bytes <= IN_MEMORY_SORT_BYTES
}

/// How a read gets its rows in order: the [`Plan`] its queries follow, and whether it sorts
/// them here, in memory (the reader's [`Sorter`](super::order::Sorter) follows it).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct SortPlan {
    pub(super) plan: Plan,
    /// For a read sorted in memory: the bytes it reads (estimated), all held until sorted.
    pub(super) sorted_bytes: Option<u64>,
}

impl SortPlan {
    /// The plan for reading `ranges` (one list per index column) of `array`, sorted or not
    /// (`unsorted`), about `read_bytes` in all: the array's [`plan`], unless several ranges
    /// of a dimension ([`multi_range_plan`]), no order ([`unsorted_plan`]) or a small read
    /// ([`sorts_in_memory`]) decide otherwise, in that order.
    pub(super) fn choose(
        array: &ArrayObject,
        ranges: &[Vec<(Value, Value)>],
        unsorted: bool,
        read_bytes: u64,
    ) -> SortPlan {
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
        SortPlan { plan, sorted_bytes }
    }

    /// The memory the reader takes from the budget (see [`reader_memory`]), its queries
    /// each holding up to `query_memory` in libtiledb.
    pub(super) fn memory(&self, batch_bytes: usize, query_memory: u64) -> u64 {
        let in_runs = matches!(self.plan, Plan::Bands { .. });
        reader_memory(batch_bytes, in_runs, query_memory, self.sorted_bytes)
    }

    /// Whether the read tests an exact value of a string dimension as a condition rather
    /// than reading it as a range (see [`text_dimension_equalities`]): when libtiledb sorts
    /// it row-major, or when it is sorted here.
    pub(super) fn tests_exact_text(&self) -> bool {
        self.sorted_bytes.is_some() || plan_layout(&self.plan) == Some(Layout::RowMajor)
    }
}

/// What a read returns: sorted rows of the index columns and the columns the selection asks
/// for, or the columns `only` in no order that means anything, the nulls of the columns
/// `null_counted` counted.
#[derive(Debug, Clone, Copy)]
pub(super) enum Mode<'a> {
    Sorted,
    Unsorted {
        only: &'a [&'a str],
        null_counted: &'a [&'a str],
    },
}

/// What a read does, decided before its first query: everything its queries are made of.
#[derive(Debug)]
pub(super) struct ReadPlan {
    /// The columns it returns, in schema order.
    pub(super) columns: Vec<Column>,
    /// Ranges per index column as its queries read them (a run's replace the first).
    pub(super) ranges: Vec<Vec<(Value, Value)>>,
    /// The exact values its queries test cells for: a label, exact text values.
    pub(super) equalities: Vec<Equality>,
    /// How its rows come in order.
    pub(super) sort: SortPlan,
    /// The runs of a band-sorted read, in order (none otherwise).
    pub(super) runs: VecDeque<Run>,
    /// For a band-sorted read whose runs may be read as their spans.
    pub(super) spans: Option<SpanReads>,
    /// About how many cells one query returns (for runs, per band): sizes its first batch.
    pub(super) expected_cells: u64,
    /// What libtiledb decompresses at a time, in cells of this read.
    pub(super) unit: Option<TileUnit>,
    /// The rows a dense read selects: it must return exactly these.
    pub(super) expected_rows: Option<u64>,
    /// The columns whose nulls every query counts.
    pub(super) null_counted: Vec<String>,
    /// The memory it holds.
    pub(super) memory: ReadMemory,
}

/// The memory a read holds (see [`super::memory`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct ReadMemory {
    /// The buffer bytes a batch aims for.
    pub(super) batch_bytes: usize,
    /// What libtiledb may hold for each global-order or unordered query (`None`: its
    /// default).
    pub(super) per_query: Option<u64>,
    /// What the reader takes from the memory budget.
    pub(super) reader: u64,
}

impl ReadPlan {
    /// The plan for reading `selection` of `array` in `mode`, about `cells` cells, in
    /// batches of about `batch_bytes`. The steps: the columns it returns, the ranges it
    /// reads, its [`SortPlan`], the conditions its queries test, its runs when band-sorted,
    /// the memory it holds.
    pub(super) fn new(
        array: &ArrayObject,
        selection: &Selection,
        mode: Mode,
        cells: u64,
        batch_bytes: usize,
    ) -> Result<ReadPlan> {
        let (only, null_counted) = match mode {
            Mode::Sorted => (None, &[][..]),
            Mode::Unsorted { only, null_counted } => (Some(only), null_counted),
        };
        let columns = read_columns(array, selection, only);
        let mut ranges = read_ranges(array, selection);
        let dense_selected = selected_cells(&ranges);
        let read_bytes = cells.saturating_mul(row_bytes(&columns));
        let sort = SortPlan::choose(array, &ranges, only.is_some(), read_bytes);
        let mut equalities = Vec::from_iter(label_equality(array, selection)?);
        equalities.extend(text_dimension_equalities(array, &sort, &mut ranges));
        let (mut runs, expected_cells) = match sort.plan {
            Plan::Sorted(_) => (VecDeque::new(), cells),
            Plan::Bands { extent, origin } => {
                let b = band_runs_of(array, &ranges, extent, origin, cells);
                (b.runs, b.cells_per_band)
            }
        };
        let spans = match only {
            None => SpanReads::of(array, sort.plan),
            Some(_) => None,
        };
        let per_query = tiledb_query_memory(array, cells, &runs, &ranges[0]);
        let memory = ReadMemory {
            batch_bytes,
            per_query,
            reader: sort.memory(batch_bytes, per_query.unwrap_or(0)),
        };
        let unconditional = equalities.is_empty() && selection.filter.is_none();
        let mut expected_rows = (array.schema.dense && unconditional)
            .then_some(dense_selected)
            .flatten();
        if selection.is_empty() {
            // A range outside the domain: nothing to read.
            runs = VecDeque::from([Run::new()]);
            expected_rows = Some(0);
        }
        Ok(ReadPlan {
            unit: tile_unit(array, &ranges),
            columns,
            ranges,
            equalities,
            sort,
            runs,
            spans,
            expected_cells,
            expected_rows,
            null_counted: null_counted.iter().map(|c| (*c).to_owned()).collect(),
            memory,
        })
    }

    /// The layout of the read's queries (a run of several ranges is read unordered).
    pub(super) fn layout(&self) -> Layout {
        plan_layout(&self.sort.plan).unwrap_or(Layout::GlobalOrder)
    }
}

/// The exact values of string dimensions that a read following `read` tests as a condition,
/// each one's range cleared from `ranges`: libtiledb 2.30's row-major reader crashes
/// (SIGSEGV in its tile overlap ratio) on a range of a string dimension when a tile holds
/// only empty strings there, and its global-order reader loses a row of such a range on an
/// array of several index columns. None unless `read` [`SortPlan::tests_exact_text`].
pub(super) fn text_dimension_equalities(
    array: &ArrayObject,
    read: &SortPlan,
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

/// The rows of the first dimension a band-sorted read of `ranges` (all of it when empty)
/// goes through: each range narrowed to the rows `array` stores, in order; none of those
/// that hold no stored row.
pub(super) fn stored_rows(array: &ArrayObject, ranges: &[(Value, Value)]) -> Vec<(i128, i128)> {
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
pub(super) struct BandRuns {
    /// The runs its queries read, in order.
    pub(super) runs: VecDeque<Run>,
    /// The cells of a band of the selected rows, taken as spread evenly.
    pub(super) cells_per_band: u64,
}

/// The runs of a band-sorted read of `ranges` (one list per index column) of `array`, in
/// bands of `extent` rows from `origin`, about `expected_cells` cells in all: [`band_runs`]
/// of each range of [`stored_rows`], the first opening with a few rows, gathered into runs
/// of several ranges ([`gather_runs`]) unless the array allows duplicates; one empty run
/// when nothing is stored in the selected ranges.
pub(super) fn band_runs_of(
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
    if let Some(mut runs) = tile_runs(array, &selected, extent, cells_per_band) {
        if runs.is_empty() {
            runs.push_back(Run::new());
        }
        return BandRuns {
            runs,
            cells_per_band,
        };
    }
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
    BandRuns {
        runs,
        cells_per_band,
    }
}

/// The runs of a band-sorted read of one range of rows, `selected` (as [`stored_rows`]
/// gives it), cut between the array's data tiles ([`ArrayObject::tile_counts`]): each run
/// reads its tiles whole and no other run reads them, and its batches of whole tiles end at
/// tile edges, so no tile is fetched twice, but for the first rows: the first run is the
/// few rows that hold about [`FIRST_RUN_CELLS`] cells (`cells_per_band` in a band of
/// `extent` rows), so that they come at once. `None` for several ranges, or where the tiles
/// are not known or one holds rows on both sides of an edge of the range.
fn tile_runs(
    array: &ArrayObject,
    selected: &[(i128, i128)],
    extent: i128,
    cells_per_band: u64,
) -> Option<VecDeque<Run>> {
    let [(first, last)] = selected else {
        return None;
    };
    let tiles = array.tile_counts().ok()?;
    let mut chunks = VecDeque::from(tiles.chunks_within(*first, *last, CELLS_PER_QUERY)?);
    let head_rows = (FIRST_RUN_CELLS as u128 * extent.max(1) as u128)
        .div_ceil(u128::from(cells_per_band.max(1)))
        .max(1) as i128;
    if let Some(chunk) = chunks.front_mut() {
        if chunk.1 - chunk.0 + 1 > head_rows {
            let head = (chunk.0, chunk.0 + head_rows - 1);
            chunk.0 = head.1 + 1;
            chunks.push_front(head);
        }
    }
    Some(chunks.into_iter().map(|chunk| vec![chunk]).collect())
}

/// The cells `array` stores in a band of `extent` rows, taken as spread evenly over the rows
/// it stores; `None` when its fragments do not say.
pub(super) fn stored_cells_per_band(array: &ArrayObject, extent: i128) -> Option<u64> {
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
pub(super) fn gather_runs(
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::soma::read::memory::{BATCH_BYTES, READER_BATCHES};
    use crate::soma::read::test_arrays::*;

    /// Reads far over the in-memory sort's limit, which libtiledb sorts.
    const BIG: u64 = IN_MEMORY_SORT_BYTES + 1;

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
    fn runs_follow_the_domain_start() {
        let runs: Vec<_> = band_runs((-10, 25), 10, -10, 10, true).into();
        assert_eq!(runs[0], (-10, -1));
        assert_eq!(runs.last(), Some(&(0, 25)));
    }

    #[test]
    fn several_ranges_of_a_dimension_are_read_row_major_except_on_a_banded_first() {
        let matrix = sparse(vec![int_index("d0"), int_index("d1"), value_column("v")]);
        let bands = Plan::Bands {
            extent: 100,
            origin: 0,
        };
        let chosen = |array: &ArrayObject, ranges: &[Vec<(Value, Value)>]| {
            SortPlan::choose(array, ranges, false, BIG).plan
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
            let small = SortPlan::choose(&matrix, &columns, unsorted, 1);
            assert_eq!(small.plan, Plan::Sorted(Layout::RowMajor), "{unsorted}");
            assert_eq!(small.sorted_bytes, None);
        }
    }

    #[test]
    fn a_sparse_read_libtiledb_would_sort_is_sorted_in_memory_up_to_the_limit() {
        // Indexed by a string and an integer: libtiledb sorts it row-major.
        let frame = sparse(vec![text_index("name"), int_index("id"), value_column("v")]);
        let ranges = [vec![], vec![]];
        let small = SortPlan::choose(&frame, &ranges, false, IN_MEMORY_SORT_BYTES);
        assert_eq!(small.plan, Plan::Sorted(Layout::GlobalOrder));
        assert_eq!(small.sorted_bytes, Some(IN_MEMORY_SORT_BYTES));
        // What it reads is held until sorted: the budget counts it.
        assert_eq!(
            small.memory(BATCH_BYTES, 0),
            READER_BATCHES * BATCH_BYTES as u64 + IN_MEMORY_SORT_BYTES
        );
        let big = SortPlan::choose(&frame, &ranges, false, BIG);
        assert_eq!(big.plan, Plan::Sorted(Layout::RowMajor));
        assert_eq!(big.sorted_bytes, None);
        assert_eq!(
            big.memory(BATCH_BYTES, 0),
            READER_BATCHES * BATCH_BYTES as u64
        );
        // An unsorted read needs no sort: global order, nothing held.
        let unsorted = SortPlan::choose(&frame, &ranges, true, 1);
        assert_eq!(unsorted.plan, Plan::Sorted(Layout::GlobalOrder));
        assert_eq!(unsorted.sorted_bytes, None);
        // A dense read is row-major, sorted by libtiledb, however small.
        let mut dense = sparse(vec![int_index("d0"), int_index("d1"), value_column("v")]);
        dense.schema.dense = true;
        for unsorted in [false, true] {
            let read = SortPlan::choose(&dense, &ranges, unsorted, 1);
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
            let read = SortPlan::choose(&frame, &selected(), false, read_bytes);
            let mut ranges = selected();
            let equalities = text_dimension_equalities(&frame, &read, &mut ranges);
            assert_eq!(equalities, expected);
            // The value is tested, not read as a range; the other ranges stay.
            assert_eq!(ranges, [vec![], vec![range(0, 9)]]);
        }
        // A range of several values is read as one.
        let read = SortPlan::choose(&frame, &selected(), false, BIG);
        let between = (Value::Text("a".into()), Value::Text("c".into()));
        let mut ranges = vec![vec![between.clone()], vec![]];
        assert_eq!(text_dimension_equalities(&frame, &read, &mut ranges), []);
        assert_eq!(ranges, [vec![between], vec![]]);
        // An unsorted read (global order, no sort here) reads the value as a range.
        let read = SortPlan::choose(&frame, &selected(), true, 1);
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

    #[test]
    fn a_plan_holds_what_its_queries_are_made_of() {
        let matrix = sparse(vec![int_index("d0"), int_index("d1"), value_column("v")]);
        let rows = Selection {
            ranges: vec![vec![range(0, 9), range(500, 509)], vec![]],
            ..Selection::default()
        };
        let plan = ReadPlan::new(&matrix, &rows, Mode::Sorted, 3_000_000, BATCH_BYTES).unwrap();
        let names: Vec<&str> = plan.columns.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["d0", "d1", "v"]);
        // Band-sorted, in global order, through runs of its two ranges.
        assert_eq!(
            plan.sort.plan,
            Plan::Bands {
                extent: 100,
                origin: 0
            }
        );
        assert_eq!(plan.layout(), Layout::GlobalOrder);
        let covered: Vec<(i128, i128)> = plan.runs.iter().flatten().copied().collect();
        assert_eq!(covered.first(), Some(&(0, 0)));
        assert_eq!(covered.last(), Some(&(500, 509)));
        // A sparse read: no condition, no count of its rows, memory for its runs read ahead.
        assert!(plan.equalities.is_empty() && plan.expected_rows.is_none());
        let per_query = plan.memory.per_query.expect("fixed-width columns");
        assert_eq!(plan.memory.reader, plan.sort.memory(BATCH_BYTES, per_query));
        assert!(plan.memory.reader > READER_BATCHES * BATCH_BYTES as u64);

        // Unsorted: the columns it names, nulls counted, no spans, in one query.
        let mode = Mode::Unsorted {
            only: &["v"],
            null_counted: &["v"],
        };
        let plan = ReadPlan::new(&matrix, &Selection::default(), mode, 10, BATCH_BYTES).unwrap();
        assert_eq!(plan.columns.len(), 1);
        assert_eq!(plan.null_counted, ["v"]);
        assert!(plan.spans.is_none() && plan.runs.is_empty());
        assert_eq!(plan.layout(), Layout::GlobalOrder);
    }

    #[test]
    fn a_dense_plan_expects_every_cell_of_its_ranges_unless_a_condition_tests_them() {
        let mut dense = sparse(vec![int_index("d0"), int_index("d1"), value_column("v")]);
        dense.schema.dense = true;
        let rows = Selection {
            ranges: vec![vec![range(0, 9), range(20, 24)], vec![range(0, 99)]],
            ..Selection::default()
        };
        let plan = ReadPlan::new(&dense, &rows, Mode::Sorted, 1500, BATCH_BYTES).unwrap();
        assert_eq!(plan.expected_rows, Some(15 * 100));
        assert_eq!(plan.layout(), Layout::RowMajor);
        // Its columns' current domains fill the ranges it leaves open.
        let open = Selection::default();
        let plan = ReadPlan::new(&dense, &open, Mode::Sorted, 0, BATCH_BYTES).unwrap();
        assert_eq!(plan.ranges, [vec![range(0, 999)], vec![range(0, 999)]]);
        assert_eq!(plan.expected_rows, Some(1000 * 1000));
        // A range outside the domain: one empty run, no rows.
        let outside = Selection {
            ranges: vec![vec![range(5, 1)]],
            ..Selection::default()
        };
        let plan = ReadPlan::new(&dense, &outside, Mode::Sorted, 0, BATCH_BYTES).unwrap();
        assert_eq!(Vec::from(plan.runs), [Run::new()]);
        assert_eq!(plan.expected_rows, Some(0));
    }

    #[test]
    fn selected_cells_are_the_product_of_each_dimensions_widths() {
        assert_eq!(selected_cells(&[vec![range(0, 9)]]), Some(10));
        assert_eq!(
            selected_cells(&[vec![range(0, 9), range(20, 24)], vec![range(3, 5)]]),
            Some(15 * 3)
        );
        // A reversed range selects nothing; text cannot be counted; nor can more than u64.
        assert_eq!(
            selected_cells(&[vec![range(5, 1)], vec![range(0, 9)]]),
            Some(0)
        );
        assert_eq!(selected_cells(&[vec![text("a")]]), None);
        let huge = vec![range(0, i64::MAX - 1)];
        assert_eq!(selected_cells(&[huge.clone(), huge]), None);
    }

    #[test]
    fn a_tile_unit_is_a_sparse_tile_or_a_dense_band_across_the_other_ranges() {
        let mut matrix = sparse(vec![int_index("d0"), int_index("d1"), value_column("v")]);
        matrix.schema.tile_cells = Some(5000);
        let ranges = [vec![range(0, 999)], vec![range(0, 9), range(20, 29)]];
        assert_eq!(
            tile_unit(&matrix, &ranges),
            Some(TileUnit::SparseTile(5000))
        );
        matrix.schema.tile_cells = None;
        assert_eq!(tile_unit(&matrix, &ranges), None);
        // Dense: one tile extent of rows (100) across the 20 columns read.
        matrix.schema.dense = true;
        assert_eq!(
            tile_unit(&matrix, &ranges),
            Some(TileUnit::DenseBand(100 * 20))
        );
        matrix.schema.columns[0].tile_extent = None;
        assert_eq!(tile_unit(&matrix, &ranges), None);
    }

    #[test]
    fn a_dense_read_fills_the_ranges_it_leaves_open_with_the_domain_and_a_sparse_does_not() {
        let mut matrix = sparse(vec![int_index("d0"), int_index("d1"), value_column("v")]);
        let rows = Selection {
            ranges: vec![vec![range(3, 4)]],
            ..Selection::default()
        };
        assert_eq!(read_ranges(&matrix, &rows), [vec![range(3, 4)], vec![]]);
        assert_eq!(
            dense_rows(&matrix, &rows),
            None,
            "a sparse array's rows are read"
        );
        matrix.schema.dense = true;
        assert_eq!(
            read_ranges(&matrix, &rows),
            [vec![range(3, 4)], vec![range(0, 999)]]
        );
        assert_eq!(dense_rows(&matrix, &rows), Some(2 * 1000));
        // A label to equal is a condition: the cells it keeps are not known.
        let labelled = Selection {
            equals: Some(("v".into(), None)),
            ..rows
        };
        assert_eq!(dense_rows(&matrix, &labelled), None);
    }

    #[test]
    fn column_specs_describe_each_column_read_and_index_columns_are_always_read() {
        let frame = sparse(vec![int_index("id"), value_column("a"), value_column("b")]);
        let only_b = Selection {
            columns: Some(vec!["b".into()]),
            ..Selection::default()
        };
        let columns = read_columns(&frame, &only_b, None);
        let specs = column_specs(&columns);
        let described: Vec<(&str, bool)> = specs
            .iter()
            .map(|s| (s.name.as_str(), s.nullable))
            .collect();
        assert_eq!(described, [("id", false), ("b", true)]);
        assert_eq!(specs[1].datatype, tiledb::Datatype::Float32);
        assert_eq!(specs[1].cell_val_num, 1);
        // `only` names every column read, index columns too.
        let names =
            |columns: Vec<Column>| -> Vec<String> { columns.into_iter().map(|c| c.name).collect() };
        assert_eq!(names(read_columns(&frame, &only_b, Some(&["a"]))), ["a"]);
        assert_eq!(
            names(read_columns(&frame, &Selection::default(), None)),
            ["id", "a", "b"]
        );
    }
}
