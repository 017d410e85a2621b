//! The arithmetic of a CSR matrix read in blocks of rows: where each row's entries start
//! (`indptr`) and which row holds an entry, from the entries per row of only the blocks
//! asked about. A block is a fragment's rows, whose entries its fragment metadata tells
//! ([`super::row_blocks`]); its entries per row are counted when first needed
//! ([`super::row_counts`]).

use std::io;
use std::ops::Range;
use std::sync::{Arc, Mutex};

/// Rows of a CSR matrix whose entries are known before they are counted one by one (a
/// fragment's rows, or every row), and where each of them starts, counted when first needed.
#[derive(Debug)]
pub struct EntryBlock {
    /// Their join ids (inclusive); `None`: every row of the matrix.
    pub joinids: Option<(i64, i64)>,
    /// Their places in the matrix.
    pub places: Range<usize>,
    /// The entries of the blocks before it.
    pub before: u64,
    /// Its entries.
    pub entries: u64,
    /// Where each of its rows' entries start (from `before`), then where the last one's
    /// end.
    pub offsets: Mutex<Option<Arc<[u64]>>>,
}

/// A CSR matrix's rows in blocks, in order: where a row's or an entry's block is, and what
/// `indptr` holds, given each block's offsets (counted by the caller, when first needed).
#[derive(Debug)]
pub struct EntryBlocks(pub Vec<EntryBlock>);

impl EntryBlocks {
    /// The entries of every block.
    pub fn entries(&self) -> u64 {
        self.0.last().map_or(0, |b| b.before + b.entries)
    }

    /// `indptr` at the places `places` (of the matrix's rows, and the one past the last):
    /// where the entries of each of those rows start. Asks `offsets` for only the blocks
    /// the places fall in, each once.
    pub fn indptr(
        &self,
        places: Range<usize>,
        offsets: impl Fn(usize) -> io::Result<Arc<[u64]>>,
    ) -> io::Result<Vec<u64>> {
        let mut indptr = Vec::with_capacity(places.len());
        let mut held: Option<(usize, Arc<[u64]>)> = None;
        for place in places {
            // The first block that ends after the place; rows between blocks hold nothing.
            let b = self.0.partition_point(|block| block.places.end <= place);
            let Some(block) = self.0.get(b) else {
                indptr.push(self.entries());
                continue;
            };
            if place < block.places.start {
                indptr.push(block.before);
                continue;
            }
            if held.as_ref().is_none_or(|(at, _)| *at != b) {
                held = Some((b, offsets(b)?));
            }
            let (_, offsets) = held.as_ref().expect("just held");
            indptr.push(offsets[place - block.places.start]);
        }
        Ok(indptr)
    }

    /// The place of the row that holds entry `entry`; `None` past the last entry. Asks
    /// `offsets` for the entry's block only.
    pub fn place_of(
        &self,
        entry: u64,
        offsets: impl Fn(usize) -> io::Result<Arc<[u64]>>,
    ) -> io::Result<Option<usize>> {
        let b = self
            .0
            .partition_point(|block| block.before + block.entries <= entry);
        let Some(block) = self.0.get(b) else {
            return Ok(None);
        };
        let offsets = offsets(b)?;
        Ok(Some(
            block.places.start + offsets.partition_point(|&o| o <= entry) - 1,
        ))
    }
}

/// Entries per row as offsets from `start`: where each row's start, then where the last
/// one's end.
pub fn offsets(start: u64, counts: Vec<u64>) -> Vec<u64> {
    let mut total = start;
    let mut offsets = Vec::with_capacity(counts.len() + 1);
    offsets.push(start);
    offsets.extend(counts.into_iter().map(|count| {
        total += count;
        total
    }));
    offsets
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Entries per row of a matrix of 100 rows: rows 10-19 two each, the even rows of 40-59
    /// two each, rows 80-89 two each, and none elsewhere; in blocks as its fragments would
    /// tell them (10-19, 40-59, 80-89), with each block's offsets.
    fn gapped() -> (Vec<u64>, EntryBlocks, Vec<Arc<[u64]>>) {
        let counts: Vec<u64> = (0..100u64)
            .map(|row| match row {
                10..=19 | 80..=89 => 2,
                40..=59 if row % 2 == 0 => 2,
                _ => 0,
            })
            .collect();
        let mut before = 0;
        let mut blocks = Vec::new();
        let mut block_offsets = Vec::new();
        for places in [10..20usize, 40..60, 80..90] {
            let offsets = running_sums(before, &counts[places.clone()]);
            let entries = offsets.last().unwrap() - before;
            blocks.push(EntryBlock {
                joinids: Some((places.start as i64, places.end as i64 - 1)),
                places,
                before,
                entries,
                offsets: Mutex::new(None),
            });
            block_offsets.push(offsets.into());
            before += entries;
        }
        (counts, EntryBlocks(blocks), block_offsets)
    }

    #[test]
    fn indptr_holds_each_rows_start_across_blocks_and_the_rows_between() {
        let (counts, blocks, block_offsets) = gapped();
        let asked = Mutex::new(Vec::new());
        let offsets = |b: usize| {
            asked.lock().unwrap().push(b);
            Ok(block_offsets[b].clone())
        };
        let want = running_sums(0, &counts);
        assert_eq!(blocks.entries(), 60);
        assert_eq!(blocks.indptr(0..101, offsets).unwrap(), want);
        assert_eq!(
            *asked.lock().unwrap(),
            vec![0, 1, 2],
            "each block asked once"
        );
        // Rows in no block need no count; rows of one block count only that one.
        asked.lock().unwrap().clear();
        assert_eq!(blocks.indptr(20..40, offsets).unwrap(), want[20..40]);
        assert_eq!(blocks.indptr(95..101, offsets).unwrap(), want[95..101]);
        assert_eq!(blocks.indptr(45..50, offsets).unwrap(), want[45..50]);
        assert_eq!(*asked.lock().unwrap(), vec![1]);
    }

    #[test]
    fn every_entry_is_placed_in_the_row_that_holds_it() {
        let (counts, blocks, block_offsets) = gapped();
        let offsets = |b: usize| Ok(block_offsets[b].clone());
        let rows: Vec<usize> = counts
            .iter()
            .enumerate()
            .flat_map(|(row, &n)| std::iter::repeat_n(row, n as usize))
            .collect();
        for (entry, &row) in rows.iter().enumerate() {
            assert_eq!(blocks.place_of(entry as u64, offsets).unwrap(), Some(row));
        }
        assert_eq!(blocks.place_of(60, offsets).unwrap(), None);
    }

    /// `start`, then `start` plus each running sum of `counts`.
    fn running_sums(start: u64, counts: &[u64]) -> Vec<u64> {
        let mut sums = vec![start];
        for &count in counts {
            sums.push(sums.last().unwrap() + count);
        }
        sums
    }
}
