//! Cells counted from fragment metadata, without reading a tile. A sparse fragment's data
//! tiles each hold the schema's capacity in cells, but its last, which holds the rest of
//! the fragment's cell count; each tile's MBR says which rows of the first dimension its
//! cells lie in. So the cells of a range of rows whose edges fall between tiles are the sum
//! of the tiles inside it, exactly, when no two fragments hold the same coordinates: when
//! their boxes (non-empty domains) do not overlap, or the array allows duplicates (every
//! cell is then read, whichever fragment holds it).
//!
//! [`TileCounts`] holds the tiles of a snapshot's fragments; where it cannot be made
//! ([`NotCountable`]: fragments that overlap, cells that may have been deleted, tiles that
//! are not laid out as above, a dimension of text), cells are counted by reading their
//! coordinates.

use std::fmt;

/// A data tile: the rows of the first dimension its cells lie in, and how many it holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Tile {
    first: i128,
    last: i128,
    cells: u64,
}

/// A sparse fragment as its metadata describes it.
#[derive(Debug, Clone, PartialEq)]
pub struct FragmentTiles {
    /// Its cells.
    pub cells: u64,
    /// The box its cells lie in: a range of each dimension.
    pub non_empty_domain: Vec<(i128, i128)>,
    /// Each data tile's range of the first dimension, in the fragment's order.
    pub tiles_first_dimension: Vec<(i128, i128)>,
}

/// Why cells are not counted from fragment metadata.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NotCountable {
    /// Two fragments' boxes overlap (an overwrite): a cell they share is read once.
    Overlapping,
    /// A fragment's cell count and tiles do not follow the capacity, or its metadata cannot
    /// be read.
    Irregular(String),
    /// Cells may have been deleted or updated since they were written (the array has
    /// delete or update conditions, or consolidated commits that may hold some).
    Deletes,
    /// A dimension is not an integer, or the array is dense.
    NotIntegerSparse,
}

impl fmt::Display for NotCountable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NotCountable::Overlapping => write!(f, "fragments overlap"),
            NotCountable::Irregular(why) => write!(f, "{why}"),
            NotCountable::Deletes => write!(f, "cells may have been deleted"),
            NotCountable::NotIntegerSparse => write!(f, "not a sparse array of integer indexes"),
        }
    }
}

/// The data tiles of a snapshot's fragments, sorted by their first row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TileCounts {
    tiles: Vec<Tile>,
}

impl TileCounts {
    /// The tiles of `fragments`, of an array whose tiles hold `capacity` cells, and which
    /// allows duplicates or not.
    pub fn of(
        fragments: &[FragmentTiles],
        capacity: u64,
        allows_duplicates: bool,
    ) -> Result<TileCounts, NotCountable> {
        if !allows_duplicates && any_overlap(fragments) {
            return Err(NotCountable::Overlapping);
        }
        let mut tiles = Vec::new();
        for fragment in fragments {
            let n = fragment.tiles_first_dimension.len() as u64;
            let full = n.saturating_sub(1).saturating_mul(capacity);
            let last = fragment
                .cells
                .checked_sub(full)
                .filter(|&c| c >= 1 && c <= capacity);
            let Some(last) = last.filter(|_| n > 0 && capacity > 0) else {
                return Err(NotCountable::Irregular(format!(
                    "a fragment of {} cells in {n} tiles of {capacity}",
                    fragment.cells
                )));
            };
            let count = |k: usize| if k as u64 + 1 == n { last } else { capacity };
            for (k, &(first, last)) in fragment.tiles_first_dimension.iter().enumerate() {
                tiles.push(Tile {
                    first,
                    last,
                    cells: count(k),
                });
            }
        }
        tiles.sort_unstable_by_key(|t| (t.first, t.last));
        Ok(TileCounts { tiles })
    }

    /// Every cell.
    pub fn total(&self) -> u64 {
        self.tiles.iter().map(|t| t.cells).sum()
    }

    /// The cells in rows `first..=last` of the first dimension, when no tile holds rows on
    /// both sides of an edge of the range; `None` otherwise.
    pub fn cells_in(&self, first: i128, last: i128) -> Option<u64> {
        let mut cells = 0;
        for tile in &self.tiles {
            if tile.last < first || tile.first > last {
                continue;
            }
            if tile.first < first || tile.last > last {
                return None;
            }
            cells += tile.cells;
        }
        Some(cells)
    }

    /// Ranges of rows, in order, that cover every tile, each of at most `chunk_cells` cells
    /// (unless tiles that share rows hold more) and holding whole tiles only: cut where no
    /// tile holds rows on both sides. Each reaches to where the next begins.
    pub fn chunks(&self, chunk_cells: u64) -> Vec<(i128, i128)> {
        let mut chunks: Vec<(i128, i128)> = Vec::new();
        let mut filled = 0;
        for block in self.blocks() {
            match chunks.last_mut() {
                Some(chunk) if filled + block.cells <= chunk_cells.max(1) => chunk.1 = block.last,
                _ => {
                    if let Some(chunk) = chunks.last_mut() {
                        chunk.1 = block.first - 1;
                    }
                    chunks.push((block.first, block.last));
                    filled = 0;
                }
            }
            filled += block.cells;
        }
        chunks
    }

    /// The most cells that tiles sharing rows hold together: the smallest a chunk between
    /// tiles can be made.
    pub fn largest_block(&self) -> u64 {
        self.blocks().iter().map(|b| b.cells).max().unwrap_or(0)
    }

    /// The [`chunks`](TileCounts::chunks) of about `cells` cells of the tiles in rows
    /// `first..=last`, the first from `first`, the last to `last`; `None` when a tile holds
    /// rows on both sides of an edge of the range.
    pub fn chunks_within(&self, first: i128, last: i128, cells: u64) -> Option<Vec<(i128, i128)>> {
        self.cells_in(first, last)?;
        let inside = TileCounts {
            tiles: (self.tiles.iter())
                .filter(|t| t.last >= first && t.first <= last)
                .copied()
                .collect(),
        };
        let mut chunks = inside.chunks(cells);
        if let Some(chunk) = chunks.first_mut() {
            chunk.0 = first;
        }
        if let Some(chunk) = chunks.last_mut() {
            chunk.1 = last;
        }
        Some(chunks)
    }

    /// Runs of tiles that share rows, which a cut between tiles cannot part.
    fn blocks(&self) -> Vec<Tile> {
        let mut blocks: Vec<Tile> = Vec::new();
        for tile in &self.tiles {
            match blocks.last_mut() {
                Some(block) if tile.first <= block.last => {
                    block.last = block.last.max(tile.last);
                    block.cells += tile.cells;
                }
                _ => blocks.push(*tile),
            }
        }
        blocks
    }
}

/// Whether the entries of an array's `__commits/` directory say that cells may have been
/// deleted or updated: a delete (`.del`) or update (`.upd`) condition, or consolidated
/// commits (`.con`), which may hold such conditions.
pub fn commits_may_delete(commits: &[String]) -> bool {
    (commits.iter()).any(|uri| {
        [".del", ".upd", ".con"]
            .iter()
            .any(|end| uri.ends_with(end))
    })
}

/// Whether two of `fragments` have boxes that overlap in every dimension.
fn any_overlap(fragments: &[FragmentTiles]) -> bool {
    let overlap = |a: &FragmentTiles, b: &FragmentTiles| {
        (a.non_empty_domain.iter().zip(&b.non_empty_domain)).all(|(x, y)| x.0 <= y.1 && y.0 <= x.1)
    };
    (0..fragments.len())
        .any(|i| (i + 1..fragments.len()).any(|j| overlap(&fragments[i], &fragments[j])))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fragment of `cells` in tiles covering `tiles` rows, in a box of those rows and
    /// columns 0..=9.
    fn fragment(cells: u64, tiles: &[(i128, i128)]) -> FragmentTiles {
        let first = tiles.iter().map(|t| t.0).min().unwrap_or(0);
        let last = tiles.iter().map(|t| t.1).max().unwrap_or(0);
        FragmentTiles {
            cells,
            non_empty_domain: vec![(first, last), (0, 9)],
            tiles_first_dimension: tiles.to_vec(),
        }
    }

    #[test]
    fn a_range_between_tiles_is_counted_from_the_tiles_inside_it() {
        // Tiles of 100 cells: rows 0-9, 10-19, 20-24 (the last holds the other 50).
        let counts =
            TileCounts::of(&[fragment(250, &[(0, 9), (10, 19), (20, 24)])], 100, false).unwrap();
        assert_eq!(counts.total(), 250);
        assert_eq!(counts.cells_in(0, 24), Some(250));
        assert_eq!(counts.cells_in(10, 19), Some(100));
        assert_eq!(counts.cells_in(-5, 9), Some(100));
        assert_eq!(counts.cells_in(20, 1000), Some(50));
        assert_eq!(counts.cells_in(30, 40), Some(0));
        // An edge inside a tile: not countable from metadata.
        assert_eq!(counts.cells_in(5, 19), None);
        assert_eq!(counts.cells_in(0, 22), None);
    }

    #[test]
    fn fragments_side_by_side_count_together_and_overlapping_ones_do_not() {
        let a = fragment(150, &[(0, 9), (10, 14)]);
        let b = fragment(30, &[(15, 20)]);
        let counts = TileCounts::of(&[b.clone(), a.clone()], 100, false).unwrap();
        assert_eq!(counts.total(), 180);
        assert_eq!(counts.cells_in(10, 20), Some(80));
        // An overwrite: boxes that overlap. Unless duplicates are allowed, not countable.
        let over = fragment(100, &[(5, 12)]);
        let both = [a.clone(), over.clone()];
        assert_eq!(
            TileCounts::of(&both, 100, false),
            Err(NotCountable::Overlapping)
        );
        assert_eq!(TileCounts::of(&both, 100, true).unwrap().total(), 250);
        // Boxes apart in the second dimension do not overlap.
        let mut beside = over;
        beside.non_empty_domain[1] = (10, 19);
        assert!(TileCounts::of(&[a, beside], 100, false).is_ok());
    }

    #[test]
    fn tiles_that_do_not_follow_the_capacity_are_not_counted() {
        // 3 tiles of 100 hold 201 to 300 cells.
        for cells in [200, 301, 0] {
            let f = fragment(cells, &[(0, 1), (2, 3), (4, 5)]);
            assert!(matches!(
                TileCounts::of(&[f], 100, false),
                Err(NotCountable::Irregular(_))
            ));
        }
        assert!(TileCounts::of(&[fragment(201, &[(0, 1), (2, 3), (4, 5)])], 100, false).is_ok());
    }

    #[test]
    fn commits_that_may_delete_cells_are_told_by_their_names() {
        let commits = |names: &[&str]| -> Vec<String> {
            names
                .iter()
                .map(|n| format!("file:///a/__commits/{n}"))
                .collect()
        };
        assert!(!commits_may_delete(&commits(&[
            "__1_1_a_22.wrt",
            "__2_2_b_22.wrt"
        ])));
        assert!(!commits_may_delete(&commits(&[])));
        for deleting in ["__3_3_c_22.del", "__3_3_c_22.upd", "__1_3_d_22.con"] {
            assert!(commits_may_delete(&commits(&["__1_1_a_22.wrt", deleting])));
        }
    }

    #[test]
    fn chunks_are_cut_between_tiles_only_and_cover_every_row() {
        // Tiles of 10 cells; rows 20-29 are held by two tiles that share row 25.
        let tiles = [(0, 4), (5, 9), (10, 14), (20, 25), (25, 29), (40, 44)];
        let counts = TileCounts::of(&[fragment(60, &tiles)], 10, false).unwrap();
        let chunks = counts.chunks(20);
        assert_eq!(chunks, [(0, 9), (10, 19), (20, 39), (40, 44)]);
        for &(first, last) in &chunks {
            let cells = counts
                .cells_in(first, last)
                .expect("a chunk holds whole tiles");
            assert!((10..=20).contains(&cells));
        }
        let total: u64 = chunks
            .iter()
            .map(|&(a, b)| counts.cells_in(a, b).unwrap())
            .sum();
        assert_eq!(total, 60);
        // Tiles that share rows stay in one chunk, however small the chunk asked.
        assert_eq!(
            counts.chunks(1),
            [(0, 4), (5, 9), (10, 19), (20, 39), (40, 44)]
        );
        assert_eq!(counts.chunks(15), counts.chunks(1));
        assert_eq!(counts.largest_block(), 20);
        // Within a range between tiles: from its first row to its last.
        assert_eq!(
            counts.chunks_within(-3, 19, 20),
            Some(vec![(-3, 9), (10, 19)])
        );
        assert_eq!(counts.chunks_within(15, 100, 1000), Some(vec![(15, 100)]));
        assert_eq!(counts.chunks_within(30, 35, 1000), Some(vec![]));
        assert_eq!(counts.chunks_within(0, 22, 20), None);
        assert_eq!(counts.chunks(1000), [(0, 44)]);
    }
}
