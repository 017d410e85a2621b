//! The memory a read holds, decided above libtiledb: what a reader takes from the daemon's
//! memory budget, what libtiledb may hold for each of its queries, and how many cells each
//! batch of a query holds ([`BatchSizing`], which [`ReadQuery`](crate::tiledb::ReadQuery)
//! asks before every submission).

use std::collections::VecDeque;

use crate::tiledb::{self, BatchCells, Value};

use super::ahead::{BATCHES_AHEAD, RUNS_AHEAD};
use super::plan::Run;
use crate::soma::object::ArrayObject;

/// Bytes per batch: the memory one reader holds in TileDB buffers at a time (a batch holds
/// one whole data tile even when it is bigger, up to 64 MiB: see [`tiledb::BatchSizing`]).
/// Reads of X are as fast with 8 MiB as with 16, and a reader holds half as much.
pub const BATCH_BYTES: usize = 8 << 20;

/// What a reader and the encoder it feeds hold, in batches: the query's buffers, the batch
/// handed over (to [`ReadAhead`]), the one being encoded, its text, and libtiledb's tiles
/// behind the query. Measured: a CSV reader of a big sparse array raised the daemon's
/// resident size by 36-50 MiB with 8 MiB batches.
pub(super) const READER_BATCHES: u64 = 6;

/// What a run read ahead holds, in batches: up to [`BATCHES_AHEAD`] read ahead and the batch
/// that took it past that ([`NextRun`](super::ahead::NextRun)), and its query's buffers.
pub(super) const NEXT_RUN_BATCHES: u64 = BATCHES_AHEAD as u64 + 2;

/// The memory a reader takes from the budget: [`READER_BATCHES`] times `batch_bytes`, with
/// [`NEXT_RUN_BATCHES`] more for each run it reads ahead when it reads `in_runs`; what
/// libtiledb may hold for each of its queries open at once (`query_memory`, see
/// [`tiledb_query_memory`]); and for a read sorted in memory, everything it reads
/// (`sorted_bytes`, estimated; at most [`IN_MEMORY_SORT_BYTES`]).
pub(super) fn reader_memory(
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
pub(super) const QUERY_MEMORY_BYTES: u64 = 16 << 20;

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
pub(super) fn tiledb_query_memory(
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
pub(super) fn span_of(ranges: &[(Value, Value)]) -> (i128, i128) {
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
pub(super) fn fragments_overlapping(array: &ArrayObject, (lo, hi): (i128, i128)) -> u64 {
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

/// Reads of at most this many bytes (estimated) that libtiledb would sort row-major are read
/// unordered and sorted in memory (see [`BatchReader::open`]).
pub(super) const IN_MEMORY_SORT_BYTES: u64 = 64 << 20;

/// What libtiledb decompresses at a time, in cells of a query's result.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum TileUnit {
    /// A data tile of a sparse array: this many cells (the schema's capacity).
    SparseTile(u64),
    /// A row of tiles of a dense read: one tile extent of the first dimension across all
    /// that the read selects of the others, this many cells.
    DenseBand(u64),
}

/// How a query sizes its batches.
///
/// libtiledb decompresses whole tiles, and a submission whose buffers fill inside a tile
/// leaves the rest to the next submission, which decompresses that tile again. Batches
/// that end inside tiles cost up to twice the decompression: a data frame of a million rows
/// and 28 columns (tiles of about 20 MB) read in 16 MiB batches takes 1.3 s, and in batches
/// of one tile each 0.45 s. So batches hold whole tiles (or bands of a dense read), as many
/// as fit in `bytes` and at least one (up to `TILE_BATCH_MAX_BYTES` for one bigger than
/// `bytes`), counted from the query's first cell: tile boundaries exactly when the query
/// reads a whole sparse array written at once, or whole bands of a dense one, and batches
/// at least a tile long otherwise.
///
/// Sparse reads whose first rows someone waits for (`starts_small`) start with one tile and
/// double (two, four…), so that short reads hold little; a first batch smaller than a tile
/// would bring its first rows no sooner, since libtiledb decompresses the whole tile for it
/// all the same. A query read ahead of its consumer starts full: each batch is a submission,
/// and a submission a round trip for its tiles. Dense reads do not grow:
/// libtiledb's dense reader keeps the cell count its first submission's buffers held for
/// every later one (a read that started with 8,192 cells went on 8,000 at a time, six
/// times slower than in whole bands), so a dense read's first batch is a full one.
#[derive(Debug, Clone, Copy)]
pub(super) struct BatchSizing {
    /// The buffer bytes a batch aims for.
    pub bytes: usize,
    /// About how many cells the query returns: when they fit in `bytes`, the first batch is
    /// sized for all of them.
    pub expected_cells: u64,
    /// What libtiledb decompresses at a time, when known.
    pub unit: Option<TileUnit>,
    /// Whether a sparse read's batches start at one tile and double (see above).
    pub starts_small: bool,
}

impl BatchSizing {
    /// The cells that fill `bytes` with rows of `row_bytes`.
    pub(super) fn target_cells(&self, row_bytes: usize) -> usize {
        (self.bytes / row_bytes.max(1)).max(1)
    }

    /// The cells of a query's first batch.
    pub(super) fn first_batch_cells(&self, row_bytes: usize) -> usize {
        let target = self.target_cells(row_bytes);
        // A quarter more than expected: estimates are averages.
        let expected = self.expected_cells.saturating_add(self.expected_cells / 4);
        if expected < target as u64 {
            (expected as usize).max(1024)
        } else {
            self.later_batch_cells(row_bytes, 0, 0)
        }
    }

    /// The cells of the batch after `batches` batches of `cells` cells in all: up to a tile
    /// boundary (see above).
    pub(super) fn later_batch_cells(&self, row_bytes: usize, cells: u64, batches: u32) -> usize {
        let target = self.target_cells(row_bytes);
        let (tile, most_tiles) = match self.unit {
            None => return target,
            Some(TileUnit::SparseTile(tile)) if self.starts_small => (tile, 1 << batches.min(20)),
            Some(TileUnit::SparseTile(tile)) => (tile, usize::MAX),
            Some(TileUnit::DenseBand(band)) => (band, usize::MAX),
        };
        let tile = tile.max(1) as usize;
        let whole_tiles = if target >= tile {
            (target / tile).min(most_tiles) * tile
        } else if tile.saturating_mul(row_bytes) <= TILE_BATCH_MAX_BYTES {
            tile
        } else {
            // Not even one tile fits: as much of one as may be.
            return (TILE_BATCH_MAX_BYTES / row_bytes.max(1)).max(1);
        };
        whole_tiles - (cells % tile as u64) as usize
    }
}

impl BatchCells for BatchSizing {
    fn next_batch_cells(&self, row_bytes: usize, returned: u64, batches: u32) -> usize {
        match batches {
            0 => self.first_batch_cells(row_bytes),
            _ => self.later_batch_cells(row_bytes, returned, batches),
        }
    }
}

/// The most a batch may grow to, past its target bytes, to hold one whole data tile.
pub(super) const TILE_BATCH_MAX_BYTES: usize = 64 << 20;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::soma::read::test_arrays::*;

    const MIB: usize = 1 << 20;

    fn sizing(expected_cells: u64, unit: TileUnit) -> BatchSizing {
        BatchSizing {
            bytes: 8 * MIB,
            expected_cells,
            unit: Some(unit),
            starts_small: true,
        }
    }

    #[test]
    fn a_read_that_fits_comes_in_one_batch() {
        let tile = TileUnit::SparseTile(100_000);
        assert_eq!(sizing(100_000, tile).first_batch_cells(60), 125_000);
        assert_eq!(sizing(10, tile).first_batch_cells(60), 1024);
    }

    #[test]
    fn sparse_batches_grow_from_one_tile_to_whole_tiles_of_the_target() {
        // 20-byte rows: 8 MiB hold 419,430 cells, four tiles of 100,000.
        let s = sizing(20_000_000, TileUnit::SparseTile(100_000));
        assert_eq!(s.first_batch_cells(20), 100_000);
        assert_eq!(s.later_batch_cells(20, 100_000, 1), 200_000);
        assert_eq!(s.later_batch_cells(20, 300_000, 2), 400_000);
        assert_eq!(s.later_batch_cells(20, 700_000, 3), 400_000);
        // A batch cut short (its var-sized buffers filled) is followed by one that
        // finishes the tile it stopped in.
        assert_eq!(s.later_batch_cells(20, 750_000, 4), 350_000);
    }

    #[test]
    fn a_sparse_read_read_ahead_starts_with_whole_tiles_of_the_target() {
        let s = BatchSizing {
            starts_small: false,
            ..sizing(20_000_000, TileUnit::SparseTile(100_000))
        };
        assert_eq!(s.first_batch_cells(20), 400_000);
        assert_eq!(s.later_batch_cells(20, 400_000, 1), 400_000);
    }

    #[test]
    fn a_tile_bigger_than_the_target_is_one_batch_up_to_the_limit() {
        // 210-byte rows: a tile of 100,000 is 21 MB, over 8 MiB but within 64 MiB.
        let s = sizing(1_000_000, TileUnit::SparseTile(100_000));
        assert_eq!(s.first_batch_cells(210), 100_000);
        assert_eq!(s.later_batch_cells(210, 100_000, 1), 100_000);
        assert_eq!(s.later_batch_cells(210, 900_000, 9), 100_000);
        // 1 KB rows: a tile is 100 MB, over the limit: batches fill the limit.
        assert_eq!(s.later_batch_cells(1000, 0, 3), 64 * MIB / 1000);
    }

    #[test]
    fn dense_reads_start_full_in_whole_bands() {
        // Bands of 512 rows x 1,000 columns (10 MB of 20-byte rows): one a batch.
        let s = sizing(50_000_000, TileUnit::DenseBand(512_000));
        assert_eq!(s.first_batch_cells(20), 512_000);
        assert_eq!(s.later_batch_cells(20, 512_000, 1), 512_000);
        // Bands of 64 rows x 1,000: six of them fill 8 MiB, from the first batch on.
        let s = sizing(50_000_000, TileUnit::DenseBand(64_000));
        assert_eq!(s.first_batch_cells(20), 384_000);
        assert_eq!(s.later_batch_cells(20, 384_000, 1), 384_000);
    }

    #[test]
    fn without_tiles_batches_fill_the_target() {
        let s = BatchSizing {
            bytes: 8 * MIB,
            expected_cells: 20_000_000,
            unit: None,
            starts_small: true,
        };
        assert_eq!(s.first_batch_cells(4), 2 * MIB);
        assert_eq!(s.later_batch_cells(4, 2 * MIB as u64, 1), 2 * MIB);
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
    fn as_batch_cells_the_first_batch_is_sized_as_a_first_and_later_ones_as_later() {
        let s = sizing(20_000_000, TileUnit::SparseTile(100_000));
        let cells: &dyn BatchCells = &s;
        assert_eq!(cells.next_batch_cells(20, 0, 0), s.first_batch_cells(20));
        assert_eq!(
            cells.next_batch_cells(20, 0, 0),
            100_000,
            "one tile to start"
        );
        assert_eq!(cells.next_batch_cells(20, 100_000, 1), 200_000);
        assert_eq!(cells.next_batch_cells(20, 750_000, 4), 350_000);
        // A read expected to fit: its first batch holds it all, a quarter more.
        let small = sizing(2000, TileUnit::SparseTile(100_000));
        assert_eq!((&small as &dyn BatchCells).next_batch_cells(20, 0, 0), 2500);
    }

    #[test]
    fn a_reader_takes_its_batches_each_querys_memory_and_what_it_sorts() {
        let batch = 8 * MIB;
        let query = 16 << 20;
        assert_eq!(
            reader_memory(batch, false, query, None),
            READER_BATCHES * batch as u64 + query
        );
        // Reading ahead in runs: three batches and a query's memory for each run ahead.
        let ahead = RUNS_AHEAD as u64;
        assert_eq!(
            reader_memory(batch, true, query, Some(1000)),
            (READER_BATCHES + ahead * NEXT_RUN_BATCHES) * batch as u64 + (1 + ahead) * query + 1000
        );
        assert_eq!(
            reader_memory(batch, false, 0, Some(5)),
            READER_BATCHES * batch as u64 + 5
        );
    }

    #[test]
    fn the_span_of_ranges_is_from_the_lowest_to_the_highest_or_every_row() {
        let int = |lo, hi| (Value::Int(lo), Value::Int(hi));
        assert_eq!(span_of(&[int(50, 60), int(3, 4), int(90, 95)]), (3, 95));
        assert_eq!(span_of(&[]), (i128::MIN, i128::MAX));
        let text = (Value::Text("a".into()), Value::Text("b".into()));
        assert_eq!(span_of(&[int(1, 2), text]), (i128::MIN, i128::MAX));
    }
}
