//! Parts of an array: clipping a selection to the array's domain, and cutting the array into
//! chunks of about N stored cells along its first index column, from fragment metadata alone.

use crate::tiledb::Value;

use super::object::ArrayObject;
use super::reader::Selection;

fn int(v: &Value) -> Option<i128> {
    match v {
        Value::Int(i) => Some(i128::from(*i)),
        Value::UInt(u) => Some(i128::from(*u)),
        _ => None,
    }
}

fn float(v: &Value) -> Option<f64> {
    match v {
        Value::Float(f) => Some(*f),
        Value::Int(i) => Some(*i as f64),
        Value::UInt(u) => Some(*u as f64),
        _ => None,
    }
}

/// `(lo, hi)` narrowed to `domain`; an empty result has `lo > hi`.
fn clip_range(range: &(Value, Value), domain: &(Value, Value)) -> (Value, Value) {
    match (range, domain) {
        ((Value::Int(a), Value::Int(b)), (Value::Int(lo), Value::Int(hi))) => {
            (Value::Int(*a.max(lo)), Value::Int(*b.min(hi)))
        }
        ((Value::UInt(a), Value::UInt(b)), (Value::UInt(lo), Value::UInt(hi))) => {
            (Value::UInt(*a.max(lo)), Value::UInt(*b.min(hi)))
        }
        ((Value::Float(a), Value::Float(b)), (lo, hi)) => match (float(lo), float(hi)) {
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

/// The first index column's ranges of chunks of about `chunk_cells` stored cells each,
/// covering every stored cell; `None` when the first column is not an integer.
///
/// Cells are taken as spread evenly over each fragment's range of the first column (a dense
/// array: over its current domain), which is what fragment metadata tells without reading.
pub fn chunks(array: &ArrayObject, chunk_cells: u64) -> Option<Vec<(i128, i128)>> {
    let first = array.schema.index_columns().next()?;
    if !first.arrow_type.is_integer() {
        return None;
    }
    // Spans of the first column and how many cells each holds.
    let spans: Vec<(i128, i128, f64)> = if array.schema.dense {
        let (lo, hi) = array.non_empty_domain.first()?.as_ref()?;
        let (lo, hi) = (int(lo)?, int(hi)?);
        let rows = (hi - lo + 1) as f64;
        vec![(lo, hi, rows * (array.stored_cells() as f64 / rows))]
    } else {
        array
            .fragments
            .iter()
            .filter(|f| f.cell_num > 0)
            .filter_map(|f| {
                let (lo, hi) = f.first_dimension.as_ref()?;
                Some((int(lo)?, int(hi)?, f.cell_num as f64))
            })
            .collect()
    };
    if spans.is_empty() {
        return Some(Vec::new());
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
    if let Some(start) = chunk_start {
        out.push((start, *points.last()? - 1));
    }
    Some(out)
}
