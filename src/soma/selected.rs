//! The rows of obs or var that a category or a query selects, with their join ids read
//! once, and the estimate of an array's cells in them: what the size of a category's or a
//! query's file is estimated from, so that a part of an array is sized like a whole one.

use std::sync::{Arc, OnceLock};

use super::anndata::{runs_in_domain, scan_rows};
use super::error::{Error, Result};
use super::object::ArrayObject;
use super::read::Selection;
use super::slice::estimated_cells;

/// The rows of a data frame (obs or var) that a selection keeps: all of them, a category's
/// (`equals`) or a filter's. Their join ids are read (with the selection's condition,
/// join ids alone) the first time they are asked for, and kept.
#[derive(Debug)]
pub struct SelectedRows {
    pub frame: Arc<ArrayObject>,
    pub rows: Selection,
    runs: OnceLock<std::result::Result<Vec<(i64, i64)>, String>>,
}

impl SelectedRows {
    pub fn new(frame: &Arc<ArrayObject>, rows: Selection) -> SelectedRows {
        SelectedRows {
            frame: frame.clone(),
            rows,
            runs: OnceLock::new(),
        }
    }

    /// Every row of `frame`.
    pub fn all(frame: &Arc<ArrayObject>) -> SelectedRows {
        SelectedRows::new(frame, Selection::default())
    }

    /// Whether it keeps every row.
    pub fn is_all(&self) -> bool {
        self.rows == Selection::default()
    }

    /// The selected rows' join ids, as runs of consecutive ids (read once).
    pub fn runs(&self) -> std::result::Result<&[(i64, i64)], String> {
        let runs = self.runs.get_or_init(|| {
            let scanned = scan_rows(&self.frame, &self.rows, &[]);
            let scanned = scanned.map_err(|e| format!("{}: {e}", self.frame.uri))?;
            Ok(scanned.joinids.runs())
        });
        runs.as_deref().map_err(Clone::clone)
    }

    /// How many rows it keeps (their join ids read once).
    pub fn count(&self) -> Result<u64> {
        let runs = self.runs().map_err(Error::invalid)?;
        Ok(runs.iter().map(|&(a, b)| (b - a + 1) as u64).sum())
    }
}

/// About how many of `array`'s stored cells lie in the rows `along` selects of each of its
/// dimensions, in order (`None`, or a selection of every row: the whole dimension):
/// libtiledb's estimate of a read of those join ids ([`estimated_cells`]). A dimension
/// whose selection keeps no row has no cell.
pub fn estimated_cells_along(array: &ArrayObject, along: &[Option<&SelectedRows>]) -> Result<u64> {
    let mut ranges = Vec::with_capacity(along.len());
    for (dim, rows) in along.iter().enumerate() {
        match rows.filter(|rows| !rows.is_all()) {
            None => ranges.push(Vec::new()),
            Some(rows) => {
                let runs = rows.runs().map_err(Error::invalid)?;
                let kept = runs_in_domain(array, dim, runs);
                if kept.is_empty() {
                    return Ok(0);
                }
                ranges.push(kept);
            }
        }
    }
    let selection = Selection {
        ranges,
        ..Selection::default()
    };
    estimated_cells(array, &selection)
}
