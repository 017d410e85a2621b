//! Parts of an array: clipping a selection to the array's domain, and cutting the array into
//! chunks of about N stored cells along its first index column, from fragment metadata alone.

use std::sync::Arc;

use log::info;

use crate::digest::Digest;
use crate::tiledb::{self, Value};

use super::filter::Filter;
use super::object::{ArrayData, ArrayObject, Chunks};
use super::read::Selection;

/// `(lo, hi)` narrowed to `domain`; an empty result has `lo > hi`.
fn clip_range(range: &(Value, Value), domain: &(Value, Value)) -> (Value, Value) {
    match (range, domain) {
        ((Value::Int(a), Value::Int(b)), (Value::Int(lo), Value::Int(hi))) => {
            (Value::Int(*a.max(lo)), Value::Int(*b.min(hi)))
        }
        ((Value::UInt(a), Value::UInt(b)), (Value::UInt(lo), Value::UInt(hi))) => {
            (Value::UInt(*a.max(lo)), Value::UInt(*b.min(hi)))
        }
        ((Value::Float(a), Value::Float(b)), (lo, hi)) => match (lo.as_f64(), hi.as_f64()) {
            (Some(lo), Some(hi)) => (Value::Float(a.max(lo)), Value::Float(b.min(hi))),
            _ => range.clone(),
        },
        _ => range.clone(),
    }
}

/// True when a range selects nothing (`lo > hi`).
pub fn is_reversed(range: &(Value, Value)) -> bool {
    match range {
        (Value::Int(a), Value::Int(b)) => a > b,
        (Value::UInt(a), Value::UInt(b)) => a > b,
        (Value::Float(a), Value::Float(b)) => a > b,
        _ => false,
    }
}

impl Selection {
    /// Every row that satisfies a value filter (every row for `all`).
    pub fn filtered(filter: Filter) -> Selection {
        Selection {
            filter: filter.condition.map(Arc::new),
            ..Selection::default()
        }
    }

    /// Feeds what the selection selects to a digest (for cache keys).
    pub fn digest_into(&self, digest: &mut Digest) {
        digest.number(self.ranges.len() as u64);
        for ranges in &self.ranges {
            digest.number(ranges.len() as u64);
            for (lo, hi) in ranges {
                digest.value(lo);
                digest.value(hi);
            }
        }
        match &self.equals {
            None => {
                digest.mark(b'-');
            }
            Some((column, None)) => {
                digest.mark(b'=').text(column).mark(b'0');
            }
            Some((column, Some(label))) => {
                digest.mark(b'=').text(column).mark(b'1');
                digest.value(label);
            }
        }
        match &self.filter {
            None => {
                digest.mark(b'~');
            }
            Some(filter) => {
                digest.mark(b'w').text(&filter.to_string());
            }
        }
        match &self.columns {
            None => {
                digest.mark(b'*');
            }
            Some(columns) => {
                digest.mark(b'c').number(columns.len() as u64);
                for column in columns {
                    digest.text(column);
                }
            }
        }
    }

    /// The selection with every range clipped to its column's domain (the current domain
    /// where the array has one): a range outside it selects nothing, which is not an error.
    pub fn clipped_to(mut self, array: &ArrayObject) -> Selection {
        for (ranges, column) in self.ranges.iter_mut().zip(array.schema.index_columns()) {
            if let Some(domain) = &column.domain {
                for range in ranges.iter_mut() {
                    *range = clip_range(range, domain);
                }
            }
        }
        self
    }

    /// True when some column's range selects nothing.
    pub fn is_empty(&self) -> bool {
        self.ranges.iter().flatten().any(is_reversed)
    }
}

/// Into how many equal parts of a sparse array's stored rows [`spans`] cuts it to ask
/// libtiledb's estimate of each part's cells.
const DENSITY_PROBES: i128 = 128;

/// Where the cells lie along the first index column: spans `(lo, hi, cells)`, cells spread
/// evenly over each. A dense array has every cell of its current domain. A sparse one's
/// stored range of the column is cut into up to [`DENSITY_PROBES`] equal parts, each with
/// libtiledb's estimate of its cells: the R-trees the estimates need are loaded once, with
/// no listing of the array's fragments. `None` when the column is not an integer.
fn spans(array: &ArrayObject) -> super::Result<Option<Vec<(i128, i128, f64)>>> {
    let mut index = array.schema.index_columns();
    let Some(first) = index.next().filter(|c| c.arrow_type.is_integer()) else {
        return Ok(None);
    };
    if array.schema.dense {
        let Some((lo, hi)) = first.domain.as_ref() else {
            return Ok(None);
        };
        let (Some(lo), Some(hi)) = (lo.as_i128(), hi.as_i128()) else {
            return Ok(None);
        };
        let row_cells: f64 = index
            .map(|c| match &c.domain {
                Some((a, b)) => match (a.as_i128(), b.as_i128()) {
                    (Some(a), Some(b)) => (b - a + 1).max(0) as f64,
                    _ => 1.0,
                },
                None => 1.0,
            })
            .product();
        if hi < lo {
            return Ok(Some(Vec::new()));
        }
        return Ok(Some(vec![(lo, hi, (hi - lo + 1) as f64 * row_cells)]));
    }
    let stored = array.non_empty_domain.first().cloned().flatten();
    let Some((Some(lo), Some(hi))) = stored.map(|(lo, hi)| (lo.as_i128(), hi.as_i128())) else {
        return Ok(Some(Vec::new()));
    };
    let bound = |v: i128| match first.arrow_type {
        arrow_schema::DataType::UInt64 => Value::UInt(v as u64),
        _ => Value::Int(v as i64),
    };
    let estimate = |ranges: &[Vec<(Value, Value)>]| -> super::Result<u64> {
        Ok(match array.data() {
            ArrayData::Memory(cells) => {
                let part = Selection {
                    ranges: ranges.to_vec(),
                    ..Selection::default()
                };
                cells.count(array, &part)?
            }
            _ => tiledb::estimated_cells(&*array.handle()?, ranges)?.cells,
        })
    };
    let rows = hi - lo + 1;
    let parts = rows.clamp(1, DENSITY_PROBES);
    let mut spans = Vec::new();
    for k in 0..parts {
        let (a, b) = (lo + rows * k / parts, lo + rows * (k + 1) / parts - 1);
        let cells = estimate(&[vec![(bound(a), bound(b))]])?;
        if cells > 0 {
            spans.push((a, b, cells as f64));
        }
    }
    Ok(Some(spans))
}

/// The most ranges of a column that a sparse array's estimate asks libtiledb about; more
/// are asked as their hull (see [`estimated_cells`]).
const ESTIMATED_RANGES: usize = 16;

/// The hull of integer ranges, and the share of it they cover (at most 1; overlapping
/// ranges are counted twice); `None` when one is no integer range.
fn hull_of(ranges: &[(Value, Value)]) -> Option<((Value, Value), f64)> {
    let bounds: Option<Vec<(i128, i128)>> = (ranges.iter())
        .map(|(a, b)| Some((a.as_i128()?, b.as_i128()?)))
        .collect();
    let bounds = bounds?;
    let lo = bounds.iter().enumerate().min_by_key(|(_, (a, _))| *a)?.0;
    let hi = bounds.iter().enumerate().max_by_key(|(_, (_, b))| *b)?.0;
    let hull_len = (bounds[hi].1 - bounds[lo].0 + 1).max(1) as f64;
    let covered: i128 = bounds.iter().map(|(a, b)| (b - a + 1).max(0)).sum();
    let hull = (ranges[lo].0.clone(), ranges[hi].1.clone());
    Some((hull, (covered as f64 / hull_len).min(1.0)))
}

/// About how many cells a selection holds.
///
/// A sparse array's are libtiledb's estimate of a read of the selection's ranges
/// ([`tiledb::estimated_cells`]): it loads the R-trees the read would load first, where the
/// fragment list would cost round trips of its own on object storage. libtiledb tests each
/// range against each tile's bounding rectangle, so a column of many ranges (a query's
/// scattered join ids: 10,111 ranges of the bench's X took 70 ms, asked by the `stat`, the
/// open and the read each) is asked as their hull, the estimate scaled by the share of the
/// hull they cover, as if the cells were spread evenly over it. A dense array's are
/// the cells of its ranges on the first index column, times the share of each other
/// column's stored range it keeps.
pub fn estimated_cells(array: &ArrayObject, selection: &Selection) -> super::Result<u64> {
    if selection.is_empty() {
        return Ok(0);
    }
    if let ArrayData::Memory(cells) = array.data() {
        return cells.count(array, selection);
    }
    if !array.schema.dense {
        // The ranges of integer columns only, the others taken whole: libtiledb 2.30 crashes
        // (SIGSEGV in its tile overlap ratio) on a range of a string dimension where a tile
        // holds only empty strings (see the reader), and an estimate may be over.
        let mut ranges: Vec<Vec<(Value, Value)>> = selection
            .ranges
            .iter()
            .zip(array.schema.index_columns())
            .map(|(ranges, column)| match column.arrow_type.is_integer() {
                true => ranges.clone(),
                false => Vec::new(),
            })
            .collect();
        if let (true, Some(estimate)) = (
            ranges.iter().all(Vec::is_empty),
            array.stored_cells_estimate,
        ) {
            return Ok(estimate.cells);
        }
        let mut share = 1.0;
        for column in ranges.iter_mut().filter(|r| r.len() > ESTIMATED_RANGES) {
            if let Some((hull, covered)) = hull_of(column) {
                share *= covered;
                *column = vec![hull];
            }
        }
        let handle = array.handle()?;
        let cells = tiledb::estimated_cells(&handle, &ranges)?.cells;
        return Ok((cells as f64 * share).ceil() as u64);
    }
    let all = array.stored_cells()? as f64;
    let mut estimate = all;
    let first_ranges = selection.ranges.first().filter(|r| !r.is_empty());
    if let (Some(ranges), Some(spans)) = (first_ranges, spans(array)?) {
        estimate = spans
            .iter()
            .map(|&(lo, hi, cells)| {
                let covered: i128 = ranges
                    .iter()
                    .filter_map(|(a, b)| Some((a.as_i128()?.max(lo), b.as_i128()?.min(hi))))
                    .map(|(a, b)| (b - a + 1).max(0))
                    .sum();
                cells * covered as f64 / (hi - lo + 1) as f64
            })
            .sum();
    }
    for (ranges, stored) in selection.ranges.iter().zip(&array.non_empty_domain).skip(1) {
        let (Some((lo, hi)), false) = (stored.as_ref(), ranges.is_empty()) else {
            continue;
        };
        let (Some(lo), Some(hi)) = (lo.as_f64(), hi.as_f64()) else {
            continue;
        };
        let kept: f64 = ranges
            .iter()
            .filter_map(|(a, b)| Some((a.as_f64()?.max(lo), b.as_f64()?.min(hi))))
            .map(|(a, b)| (b - a + 1.0).max(0.0))
            .sum();
        estimate *= (kept / (hi - lo + 1.0)).min(1.0);
    }
    Ok(estimate.min(all).ceil() as u64)
}

/// Exactly how many rows a read of `selection` of an ND array returns, without reading a
/// cell value: a dense array's, every cell of its ranges; a sparse array's, counted by
/// libtiledb from the coordinates ([`tiledb::count_cells`]). `None` for other arrays.
pub fn counted_cells(array: &ArrayObject, selection: &Selection) -> super::Result<Option<u64>> {
    use super::SomaType::{DenseNDArray, SparseNDArray};
    if selection.equals.is_some() {
        return Ok(None);
    }
    match array.soma_type {
        DenseNDArray => Ok(super::read::dense_rows(array, selection)),
        SparseNDArray if selection.is_empty() => Ok(Some(0)),
        SparseNDArray => {
            // libtiledb's reader holds up to its bound in coordinate tiles.
            if let ArrayData::Memory(cells) = array.data() {
                return Ok(Some(cells.count(array, selection)?));
            }
            match counted_from_tiles(array, selection) {
                Ok(cells) => {
                    info!(
                        "{}: {cells} cells, counted from fragment metadata",
                        array.uri
                    );
                    return Ok(Some(cells));
                }
                Err(why) => info!(
                    "{}: cells counted by reading their coordinates ({why})",
                    array.uri
                ),
            }
            let _memory = array.memory_budget().take(tiledb::COUNT_MEMORY_BYTES);
            let handle = array.handle()?;
            Ok(Some(tiledb::count_cells(handle, &selection.ranges)?))
        }
        _ => Ok(None),
    }
}

/// The cells a read of `selection` (ranges, nothing else) of a sparse array returns, from
/// its fragments' tiles ([`ArrayObject::tile_counts`]): when the ranges of the first index
/// column fall between tiles, and the other columns are taken whole.
fn counted_from_tiles(array: &ArrayObject, selection: &Selection) -> Result<u64, String> {
    if selection.ranges.iter().skip(1).any(|r| !r.is_empty()) {
        return Err("a range of a column after the first".into());
    }
    let tiles = array.tile_counts().map_err(|why| why.to_string())?;
    let Some(first) = selection.ranges.first().filter(|r| !r.is_empty()) else {
        return Ok(tiles.total());
    };
    let ranges: Option<Vec<(i128, i128)>> = (first.iter())
        .map(|(lo, hi)| Some((lo.as_i128()?, hi.as_i128()?)))
        .collect();
    let mut ranges = ranges.ok_or("ranges that are not integers")?;
    ranges.sort_unstable();
    // Overlapping ranges select their rows once.
    let mut merged: Vec<(i128, i128)> = Vec::new();
    for (lo, hi) in ranges {
        match merged.last_mut() {
            Some(last) if lo <= last.1.saturating_add(1) => last.1 = last.1.max(hi),
            _ => merged.push((lo, hi)),
        }
    }
    (merged.iter())
        .map(|&(lo, hi)| tiles.cells_in(lo, hi))
        .sum::<Option<u64>>()
        .ok_or_else(|| "a range's edge inside a tile".into())
}

/// The first index column's ranges of chunks of about `chunk_cells` stored cells each,
/// covering every stored cell; `None` when the first column is not an integer. Cut once
/// per snapshot (see [`cut_chunks`]).
pub fn chunks(array: &ArrayObject, chunk_cells: u64) -> super::Result<Chunks> {
    array.chunks_of(chunk_cells, || cut_chunks(array, chunk_cells))
}

/// How many times `--chunk-cells` a chunk cut between tiles may hold: where tiles that
/// share rows hold more (a fragment whose tiles cross every band, say), chunks are cut from
/// estimates, and counted from the coordinates.
const TILE_CHUNK_SPREAD: u64 = 4;

/// The chunks of [`chunks`]: cut between the data tiles where fragment metadata tells
/// them and they lie close enough; otherwise cells are taken as spread evenly over each of the [`spans`]
/// of the first column, which fragment metadata tells without reading.
fn cut_chunks(array: &ArrayObject, chunk_cells: u64) -> super::Result<Option<Vec<(i128, i128)>>> {
    if !array.schema.dense && !matches!(array.data(), ArrayData::Memory(_)) {
        match array.tile_counts() {
            // Between tiles: every chunk's cells are counted from fragment metadata.
            Ok(tiles) if tiles.largest_block() <= TILE_CHUNK_SPREAD * chunk_cells => {
                return Ok(Some(tiles.chunks(chunk_cells)))
            }
            Ok(tiles) => info!(
                "{}: chunks cut from estimates (tiles that share rows hold {} cells)",
                array.uri,
                tiles.largest_block()
            ),
            Err(why) => info!("{}: chunks cut from estimates ({why})", array.uri),
        }
    }
    // Spans of the first column and how many cells each holds.
    let Some(spans) = spans(array)? else {
        return Ok(None);
    };
    if spans.is_empty() {
        return Ok(Some(Vec::new()));
    }
    // Cut points where the density changes, then walk them filling chunks.
    let mut points: Vec<i128> = spans.iter().flat_map(|s| [s.0, s.1 + 1]).collect();
    points.sort_unstable();
    points.dedup();
    let target = chunk_cells.max(1) as f64;
    let mut out = Vec::new();
    let mut chunk_start: Option<i128> = None;
    let mut filled = 0.0;
    for window in points.windows(2) {
        let (seg_lo, seg_end) = (window[0], window[1]);
        let density: f64 = spans
            .iter()
            .filter(|s| s.0 <= seg_lo && seg_lo <= s.1)
            .map(|s| s.2 / (s.1 - s.0 + 1) as f64)
            .sum();
        if density == 0.0 {
            continue;
        }
        let mut pos = seg_lo;
        while pos < seg_end {
            let start = *chunk_start.get_or_insert(pos);
            let rows_left = ((target - filled) / density).ceil().max(1.0) as i128;
            let end = (pos + rows_left).min(seg_end);
            filled += (end - pos) as f64 * density;
            pos = end;
            if filled >= target - 0.5 {
                out.push((start, end - 1));
                chunk_start = None;
                filled = 0.0;
            }
        }
    }
    if let (Some(start), Some(&end)) = (chunk_start, points.last()) {
        out.push((start, end - 1));
    }
    Ok(Some(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn many_ranges_are_asked_as_their_hull_and_the_share_they_cover() {
        let ranges = [
            (Value::Int(10), Value::Int(19)),
            (Value::Int(90), Value::Int(109)),
        ];
        let (hull, share) = hull_of(&ranges).unwrap();
        assert_eq!(hull, (Value::Int(10), Value::Int(109)));
        assert_eq!(share, 0.3, "30 of the hull's 100 ids");
        let unsigned = [(Value::UInt(5), Value::UInt(5))];
        assert_eq!(
            hull_of(&unsigned).unwrap(),
            ((Value::UInt(5), Value::UInt(5)), 1.0)
        );
        let overlapping = [
            (Value::Int(0), Value::Int(9)),
            (Value::Int(0), Value::Int(9)),
        ];
        assert_eq!(hull_of(&overlapping).unwrap().1, 1.0, "at most the hull");
        let text = [(Value::Text("a".into()), Value::Text("b".into()))];
        assert!(hull_of(&text).is_none());
    }
}
