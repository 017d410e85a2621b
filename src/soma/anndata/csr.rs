//! A CSR matrix element read in blocks of rows: the entries of rows a..b (`data` and
//! `indices`) and `indptr` at a range of rows, each reading only the rows it needs. A block
//! is a fragment's rows, whose entries its fragment metadata tells ([`super::row_blocks`]);
//! a matrix whose fragments cannot tell is one block of every row, counted when it is made.
//! A block's entries per row are counted when first needed ([`super::row_counts`]), once,
//! and kept where the caller keeps them ([`RowCountsKept`]); the arithmetic of where each
//! row starts and which row holds an entry asks for the counts of only the blocks it needs.

use std::collections::VecDeque;
use std::io;
use std::ops::Range;
use std::sync::{Arc, Mutex};

use arrow_array::{Array as _, ArrayRef, Int64Array};

use crate::sync::{Recover, SingleFlight};

use super::reads::MatrixSource;
use super::{row_blocks, row_counts};

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
fn row_offsets(start: u64, counts: Vec<u64>) -> Vec<u64> {
    let mut total = start;
    let mut offsets = Vec::with_capacity(counts.len() + 1);
    offsets.push(start);
    offsets.extend(counts.into_iter().map(|count| {
        total += count;
        total
    }));
    offsets
}

/// Where the entries per row of a CSR matrix's blocks are kept once counted, so that a
/// block is counted once per array snapshot (and, where they outlive the daemon, once
/// across daemons). A block's counts are named by parts of text: what they are, the
/// array's snapshot, the rows and columns the matrix is placed on, and which of its rows.
pub trait RowCountsKept: Send + Sync + std::fmt::Debug {
    /// The counts kept under `name`, if any.
    fn kept(&self, name: &[&str]) -> io::Result<Option<Vec<u64>>>;

    /// Keeps `counts` under `name`; `what` says what they are, for messages. Counts that
    /// cannot be kept are counted again when next needed.
    fn keep(&self, name: &[&str], what: &str, counts: &[u64]);
}

/// The parts of a CSR matrix in AnnData: the entries' values and column positions, and
/// where each row's entries start.
#[derive(Debug, Clone, Copy)]
pub enum CsrPart {
    Data,
    Indices,
    Indptr,
}

/// How many reads of entries a CSR matrix keeps: a reader that reads pieces of `data` and
/// `indices` on several threads asks for a few ranges in turn, each twice.
const HELD_READS: usize = 4;

/// A CSR matrix: its source, its rows in blocks of known entries, and its entries read last.
#[derive(Debug)]
pub struct CsrSource {
    pub matrix: MatrixSource,
    /// Its rows in blocks, in order.
    blocks: EntryBlocks,
    /// Where the entries per row are kept.
    kept: Arc<dyn RowCountsKept>,
    /// The entries read last, the latest first ([`HELD_READS`] at most).
    last: Mutex<VecDeque<Arc<HeldEntries>>>,
    /// Reads under way, by range: a reader of the same entries (`indices` after `data`)
    /// waits for the one reading them and takes its read.
    reading: SingleFlight<Range<u64>, Result<Arc<HeldEntries>, String>>,
}

/// The entries of a CSR matrix read once: their range, values and column positions.
#[derive(Debug)]
struct HeldEntries {
    entries: Range<u64>,
    values: ArrayRef,
    columns: ArrayRef,
}

impl CsrSource {
    /// A CSR matrix of `matrix`: in the blocks of rows its fragments tell the entries of,
    /// else in one block of every row, counted now. Counts are kept in `kept`.
    pub fn new(matrix: MatrixSource, kept: Arc<dyn RowCountsKept>) -> io::Result<CsrSource> {
        let (rows, _) = matrix.axes();
        let place = |joinid: i64| rows.at(joinid);
        let told = row_blocks(&matrix.array, matrix.axes())?.and_then(|blocks| {
            let mut before = 0;
            blocks
                .into_iter()
                .map(|block| {
                    let (lo, hi) = block.joinids;
                    let places = place(lo)?..place(hi)? + 1;
                    let told = EntryBlock {
                        joinids: Some(block.joinids),
                        places,
                        before,
                        entries: block.entries,
                        offsets: Mutex::new(None),
                    };
                    before += block.entries;
                    Some(told)
                })
                .collect::<Option<Vec<EntryBlock>>>()
        });
        let blocks = match told {
            Some(blocks) => blocks,
            None => {
                let mut every_row = EntryBlock {
                    joinids: None,
                    places: 0..rows.len(),
                    before: 0,
                    entries: 0,
                    offsets: Mutex::new(None),
                };
                let offsets = row_offsets(0, block_counts(&*kept, &matrix, &every_row)?);
                every_row.entries = offsets.last().copied().unwrap_or(0);
                every_row.offsets = Mutex::new(Some(offsets.into()));
                vec![every_row]
            }
        };
        Ok(CsrSource {
            matrix,
            blocks: EntryBlocks(blocks),
            kept,
            last: Mutex::new(VecDeque::new()),
            reading: SingleFlight::default(),
        })
    }

    /// The length of `data` and `indices`.
    pub fn entries(&self) -> u64 {
        self.blocks.entries()
    }

    /// Where each row of block `b` starts, then where its last ends: counted once, and the
    /// count kept ([`block_counts`]).
    fn offsets(&self, b: usize) -> io::Result<Arc<[u64]>> {
        let block = &self.blocks.0[b];
        let mut offsets = block.offsets.lock().recover();
        if let Some(known) = &*offsets {
            return Ok(known.clone());
        }
        let counts = block_counts(&*self.kept, &self.matrix, block)?;
        let counted = row_offsets(block.before, counts);
        let end = block.before + block.entries;
        if counted.last() != Some(&end) {
            return Err(io::Error::other(format!(
                "{}: {} entries counted in {:?}, {} in its fragments",
                self.matrix.array.uri,
                counted.last().unwrap_or(&0) - block.before,
                block.joinids,
                block.entries
            )));
        }
        Ok(offsets.insert(counted.into()).clone())
    }

    /// `indptr` at the places `places`: counts only the blocks they fall in.
    pub fn indptr(&self, places: Range<usize>) -> io::Result<Vec<u64>> {
        // Blocks are counted on this thread, one after the other: keeping a count may be
        // nested in what the caller is doing (the filesystem keeps it as a generation
        // nested in the chunk's, which holds a generation slot); on other threads each
        // would wait for a slot of its own, which the callers waiting for them may all hold.
        self.blocks.indptr(places, |b| self.offsets(b))
    }

    /// The place of the row that holds entry `entry` (below [`Self::entries`]).
    fn place_of(&self, entry: u64) -> io::Result<usize> {
        self.blocks
            .place_of(entry, |b| self.offsets(b))?
            .ok_or_else(|| io::Error::other(format!("{}: no entry {entry}", self.matrix.array.uri)))
    }

    /// The values (`Data`) or column positions (`Indices`, as int64) of the entries
    /// `entries`. Both are read at once and kept: a reader that wants one wants the other
    /// next.
    pub fn entries_of(&self, entries: Range<u64>, part: CsrPart) -> io::Result<ArrayRef> {
        let held = || -> Option<Arc<HeldEntries>> {
            let last = self.last.lock().recover();
            last.iter().find(|held| held.entries == entries).cloned()
        };
        let read = match held() {
            Some(read) => read,
            None => self
                .reading
                .run(entries.clone(), || {
                    // A read that ended just before this one's flight began is as good.
                    if let Some(read) = held() {
                        return Ok(read);
                    }
                    let read = Arc::new(
                        self.read_entries(entries.clone())
                            .map_err(|e| e.to_string())?,
                    );
                    let mut last = self.last.lock().recover();
                    last.truncate(HELD_READS - 1);
                    last.push_front(read.clone());
                    Ok(read)
                })
                .map_err(io::Error::other)?,
        };
        Ok(match part {
            CsrPart::Data => read.values.clone(),
            _ => read.columns.clone(),
        })
    }

    /// Reads the entries `entries`: only the rows that hold them.
    fn read_entries(&self, entries: Range<u64>) -> io::Result<HeldEntries> {
        let rows = if entries.is_empty() {
            0..0
        } else {
            self.place_of(entries.start)?..self.place_of(entries.end - 1)? + 1
        };
        let mut at = match rows.is_empty() {
            true => entries.start,
            false => self.indptr(rows.start..rows.start + 1)?[0],
        };
        let mut pieces: Vec<ArrayRef> = Vec::new();
        let mut columns: Vec<i64> = Vec::new();
        self.matrix.cells(rows, |places, values| {
            // The kept entries of this batch that fall in `entries`.
            let kept = places.cols.len() as u64;
            let first = entries.start.saturating_sub(at).min(kept) as usize;
            let last = entries.end.saturating_sub(at).min(kept) as usize;
            at += kept;
            if first >= last {
                return Ok(());
            }
            let values = self.matrix.values(values, places)?;
            pieces.push(values.slice(first, last - first));
            columns.extend(places.cols[first..last].iter().map(|&c| c as i64));
            Ok(())
        })?;
        let pieces: Vec<&dyn arrow_array::Array> = pieces.iter().map(|p| p.as_ref()).collect();
        let values = if pieces.is_empty() {
            arrow_array::new_empty_array(&self.matrix.value_type)
        } else {
            arrow_select::concat::concat(&pieces).map_err(io::Error::other)?
        };
        if values.len() as u64 != entries.end - entries.start {
            return Err(io::Error::other(format!(
                "{}: {} entries read of the {} counted",
                self.matrix.array.uri,
                values.len(),
                entries.end - entries.start
            )));
        }
        Ok(HeldEntries {
            entries,
            values,
            columns: Arc::new(Int64Array::from(columns)),
        })
    }
}

/// The entries per row of `block` of a matrix: those kept in `kept`, named by the array
/// snapshot, obs's and var's, and the block's rows; else counted, and kept there.
fn block_counts(
    kept: &dyn RowCountsKept,
    source: &MatrixSource,
    block: &EntryBlock,
) -> io::Result<Vec<u64>> {
    let axes_id = source.axes_id();
    let which = match block.joinids {
        Some((lo, hi)) => format!("rows {lo}-{hi}"),
        None => "every row".to_owned(),
    };
    let name = [
        "entries per row",
        source.array.content_id.as_str(),
        &axes_id,
        &which,
    ];
    if let Some(counts) = kept.kept(&name)? {
        if counts.len() == block.places.len() {
            return Ok(counts);
        }
    }
    let counts = row_counts(
        &source.array,
        source.axes(),
        block.joinids,
        block.places.clone(),
    )?;
    let what = format!("{}: entries per row of {which}", source.array.uri);
    kept.keep(&name, &what, &counts);
    Ok(counts)
}

#[cfg(test)]
mod tests {
    use super::super::reads::{AxisRows, Columns};
    use super::*;
    use crate::soma::fixtures::{dense_array, sparse_array};
    use crate::soma::joinids::Positions;
    use crate::soma::SomaObject;

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

    /// Counts kept in memory: every name asked for is answered with `counts` (none when
    /// `None`); the names asked for and the counts kept are recorded.
    #[derive(Debug, Default)]
    struct KeptInMemory {
        counts: Option<Vec<u64>>,
        asked: Mutex<Vec<Vec<String>>>,
        kept: Mutex<Vec<Vec<u64>>>,
    }

    impl KeptInMemory {
        fn with(counts: Vec<u64>) -> Arc<KeptInMemory> {
            Arc::new(KeptInMemory {
                counts: Some(counts),
                ..KeptInMemory::default()
            })
        }
    }

    impl RowCountsKept for KeptInMemory {
        fn kept(&self, name: &[&str]) -> io::Result<Option<Vec<u64>>> {
            let name = name.iter().map(|&part| part.to_owned()).collect();
            self.asked.lock().unwrap().push(name);
            Ok(self.counts.clone())
        }

        fn keep(&self, _name: &[&str], _what: &str, counts: &[u64]) {
            self.kept.lock().unwrap().push(counts.to_vec());
        }
    }

    /// The fixture's 100 x 10 matrix (one fragment of 300 cells over rows 0-99) on 100
    /// rows and 10 columns; dense when `dense`. Its data cannot be read.
    fn matrix(dense: bool) -> MatrixSource {
        let uri = "x/data";
        let object = if dense {
            dense_array(uri)
        } else {
            sparse_array(uri)
        };
        let SomaObject::Array(array) = object else {
            unreachable!("an array")
        };
        let axis = |n: i64, id: &str| {
            Arc::new(AxisRows {
                positions: Positions::range(0..=n - 1),
                id: id.to_owned(),
            })
        };
        MatrixSource {
            array,
            rows: axis(100, "obs"),
            cols: Columns::Rows(axis(10, "var")),
            value_type: arrow_schema::DataType::Float32,
        }
    }

    #[test]
    fn a_matrix_whose_fragments_tell_its_entries_is_made_without_a_count() {
        let kept = KeptInMemory::with(vec![3; 100]);
        let csr = CsrSource::new(matrix(false), kept.clone()).unwrap();
        assert_eq!(csr.entries(), 300);
        assert!(kept.asked.lock().unwrap().is_empty(), "nothing counted yet");
    }

    #[test]
    fn indptr_and_the_rows_of_entries_come_from_the_kept_counts_asked_for_once() {
        let kept = KeptInMemory::with(vec![3; 100]);
        let csr = CsrSource::new(matrix(false), kept.clone()).unwrap();
        let want: Vec<u64> = (0..=100).map(|row| row * 3).collect();
        assert_eq!(csr.indptr(0..101).unwrap(), want);
        assert_eq!(csr.indptr(40..42).unwrap(), want[40..42]);
        assert_eq!(csr.place_of(0).unwrap(), 0);
        assert_eq!(csr.place_of(5).unwrap(), 1);
        assert_eq!(csr.place_of(299).unwrap(), 99);
        assert!(csr.place_of(300).is_err(), "past the last entry");
        let asked = kept.asked.lock().unwrap();
        let array_id = csr.matrix.array.content_id.as_str();
        assert_eq!(
            *asked,
            [["entries per row", array_id, "obs\nvar", "rows 0-99"]],
            "the block's counts are asked for once, by snapshot, axes and rows"
        );
        assert!(
            kept.kept.lock().unwrap().is_empty(),
            "none counted, none kept"
        );
    }

    #[test]
    fn kept_counts_that_are_not_the_fragments_entries_are_an_error() {
        let kept = KeptInMemory::with(vec![2; 100]);
        let csr = CsrSource::new(matrix(false), kept).unwrap();
        let error = csr.indptr(0..1).unwrap_err().to_string();
        assert!(
            error.contains("200 entries counted") && error.contains("300 in its fragments"),
            "{error}"
        );
    }

    #[test]
    fn kept_counts_of_other_rows_are_counted_again() {
        // 50 counts for a block of 100 rows: counted again, which reads the array.
        let kept = KeptInMemory::with(vec![6; 50]);
        let csr = CsrSource::new(matrix(false), kept.clone()).unwrap();
        let error = csr.indptr(0..1).unwrap_err().to_string();
        assert!(error.contains("no data to read"), "{error}");
        assert!(kept.kept.lock().unwrap().is_empty());
    }

    #[test]
    fn a_matrix_whose_fragments_cannot_tell_is_one_block_of_every_row_counted_when_made() {
        // A dense array's fragments do not tell its entries: every row is counted at once.
        let counts: Vec<u64> = (0..100).map(|row| row % 3).collect();
        let kept = KeptInMemory::with(counts.clone());
        let csr = CsrSource::new(matrix(true), kept.clone()).unwrap();
        assert_eq!(csr.entries(), counts.iter().sum::<u64>());
        assert_eq!(csr.indptr(0..101).unwrap(), running_sums(0, &counts));
        let asked = kept.asked.lock().unwrap();
        assert_eq!(asked.len(), 1, "counted once, when made");
        assert_eq!(asked[0][3], "every row");
    }
}
