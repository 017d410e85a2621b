//! The matrices of an AnnData as they are read: a matrix's cells sorted by row then column
//! (all, or those of some rows), placed on the rows and columns the AnnData holds
//! ([`Axis`], [`Placed`]), and what is counted of them without reading their values (the
//! blocks of rows the fragments tell, the entries per row, the width).

use std::ops::Range;

use arrow_array::cast::AsArray;
use arrow_array::types::Int64Type;
use arrow_array::{Array as _, ArrayRef, BooleanArray, RecordBatch};
use arrow_buffer::BooleanBuffer;
use arrow_schema::DataType;
use log::debug;

use crate::tiledb::Value;

use super::super::error::{Error, Result};
use super::super::joinids::Positions;
use super::super::object::ArrayObject;
use super::super::read::{BatchReader, ReadAhead, RowPiece, Selection, BATCH_BYTES};

/// Reads a two-dimensional array's cells, sorted by row then column, and hands each batch to
/// `visit` as (row join ids, column join ids, values): every cell, or those in the rows
/// `rows` (runs of join ids, sorted). A dense array's cells are those of its current domain.
pub fn read_cells(
    array: &ArrayObject,
    rows: Option<&[(i64, i64)]>,
    mut visit: impl FnMut(&[i64], &[i64], &ArrayRef) -> std::io::Result<()>,
) -> Result<()> {
    let mut written_out = (Vec::new(), Vec::new());
    read_matrix(array, rows, |batch, cells| {
        let (row_ids, col_ids) = cells.listed(&mut written_out);
        visit(row_ids, col_ids, batch.column(batch.num_columns() - 1))
    })
}

/// The coordinates of a batch of a matrix's cells: listed cell by cell, or as pieces of
/// rows (a dense read's, whose order tells them).
#[derive(Debug, Clone, Copy)]
enum CellCoordinates<'a> {
    Listed(&'a [i64], &'a [i64]),
    RowPieces(&'a [RowPiece]),
}

impl<'a> CellCoordinates<'a> {
    /// The cells' coordinates, listed: pieces of rows are written out into `written_out`.
    fn listed<'s>(self, written_out: &'s mut (Vec<i64>, Vec<i64>)) -> (&'s [i64], &'s [i64])
    where
        'a: 's,
    {
        match self {
            CellCoordinates::Listed(row_ids, col_ids) => (row_ids, col_ids),
            CellCoordinates::RowPieces(pieces) => {
                let (row_ids, col_ids) = written_out;
                row_ids.clear();
                col_ids.clear();
                RowPiece::coordinates(pieces, row_ids, col_ids);
                (row_ids, col_ids)
            }
        }
    }
}

/// Where a batch's cells go in a matrix: cell by cell, or in runs of a row's cells.
#[derive(Clone, Copy)]
pub enum Placed<'a> {
    Cells(&'a CellPlaces),
    Runs(&'a [RowRun]),
}

/// Reads a two-dimensional array's cells as [`read_cells`] does, and hands each batch to
/// `visit` with their places in a matrix whose rows and columns are `axes`: in runs of a
/// row's cells where a dense read's order tells pieces of rows and the columns are plain
/// indices (obsm's), cell by cell otherwise.
pub fn read_placed(
    array: &ArrayObject,
    rows: Option<&[(i64, i64)]>,
    (row_axis, col_axis): (Axis, Axis),
    mut visit: impl FnMut(Placed, &ArrayRef) -> std::io::Result<()>,
) -> Result<()> {
    let (mut written_out, mut runs) = ((Vec::new(), Vec::new()), Vec::new());
    read_matrix(array, rows, |batch, cells| {
        let values = batch.column(batch.num_columns() - 1);
        if let (CellCoordinates::RowPieces(pieces), Axis::Indices(width)) = (cells, col_axis) {
            runs.clear();
            runs.extend(row_runs(pieces, row_axis, width));
            return visit(Placed::Runs(&runs), values);
        }
        let (row_ids, col_ids) = cells.listed(&mut written_out);
        let places = CellPlaces::of((&row_axis, &col_axis), row_ids, col_ids);
        visit(Placed::Cells(&places), values)
    })
}

/// Cells of a row of a matrix that come together in a batch: `cells` values from
/// `values_at` on go to row `row`, from column `col` on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RowRun {
    pub row: usize,
    pub col: usize,
    pub values_at: usize,
    pub cells: usize,
}

/// Where pieces of rows go in a matrix whose rows are `rows` and whose columns are the
/// indices below `width`: the cells the matrix holds (as [`CellPlaces`] keeps them), a run
/// of each piece, at its values' place in the batch.
fn row_runs<'a>(
    pieces: &'a [RowPiece],
    rows: Axis<'a>,
    width: usize,
) -> impl Iterator<Item = RowRun> + 'a {
    let mut values_at = 0;
    pieces.iter().filter_map(move |piece| {
        let at = values_at;
        values_at += piece.cells;
        // Columns below 0 and from `width` on are not the matrix's.
        let skipped = usize::try_from(piece.first_col.min(0).unsigned_abs()).ok()?;
        let col = usize::try_from(piece.first_col.max(0)).ok()?;
        let cells = (piece.cells.saturating_sub(skipped)).min(width.saturating_sub(col));
        let row = rows.at(piece.row)?;
        (cells > 0).then_some(RowRun {
            row,
            col,
            values_at: at + skipped,
            cells,
        })
    })
}

/// Runs of join ids as ranges of dimension `dim` of `array`: the parts of them inside its
/// domain (the current domain, its shape, where it has one), none when no part is. libtiledb
/// refuses a range outside it, and a matrix may be shorter than the frame its join ids
/// come from (an obsm of the first cells): the cells of the others are simply not there.
pub fn runs_in_domain(array: &ArrayObject, dim: usize, runs: &[(i64, i64)]) -> Vec<(Value, Value)> {
    let domain = (array.schema.index_columns().nth(dim))
        .and_then(|c| c.domain.clone())
        .and_then(|(lo, hi)| Some((lo.as_i128()?, hi.as_i128()?)));
    let (lo, hi) = domain.unwrap_or((i128::MIN, i128::MAX));
    (runs.iter())
        .filter_map(|&(a, b)| {
            let (a, b) = (i128::from(a).max(lo), i128::from(b).min(hi));
            (a <= b).then_some((Value::Int(a as i64), Value::Int(b as i64)))
        })
        .collect()
}

/// Reads a two-dimensional array's cells in the rows `rows` (all when `None`), a batch at
/// a time with its coordinates: a dense array's values alone where their order tells their
/// coordinates ([`DenseCellOrder`](crate::soma::read::DenseCellOrder)), libtiledb filling them
/// in cell by cell otherwise.
fn read_matrix(
    array: &ArrayObject,
    rows: Option<&[(i64, i64)]>,
    mut visit: impl FnMut(&RecordBatch, CellCoordinates) -> std::io::Result<()>,
) -> Result<()> {
    let mut selection = Selection::default();
    if let Some(rows) = rows {
        let runs = runs_in_domain(array, 0, rows);
        if runs.is_empty() {
            return Ok(());
        }
        selection.ranges = vec![runs];
    }
    // Read on a thread of its own, a batch ahead: TileDB reads while the writer writes.
    if let Some((reader, mut order)) =
        BatchReader::open_dense_values(array, &selection, BATCH_BYTES)?
    {
        let mut reader = ReadAhead::start(reader)?;
        let mut pieces = Vec::new();
        while let Some(batch) = reader.next_batch()? {
            pieces.clear();
            order.next_pieces(batch.num_rows(), &mut pieces)?;
            visit(&batch, CellCoordinates::RowPieces(&pieces))?;
        }
        return Ok(());
    }
    let mut reader = ReadAhead::start(BatchReader::open(array, &selection, BATCH_BYTES)?)?;
    while let Some(batch) = reader.next_batch()? {
        let cells =
            CellCoordinates::Listed(dimension(array, &batch, 0)?, dimension(array, &batch, 1)?);
        visit(&batch, cells)?;
    }
    Ok(())
}

/// The coordinates of column `i` of a batch of a matrix's cells (int64).
fn dimension<'a>(array: &ArrayObject, batch: &'a RecordBatch, i: usize) -> Result<&'a [i64]> {
    batch
        .column(i)
        .as_primitive_opt::<Int64Type>()
        .map(|a| a.values().as_ref())
        .ok_or_else(|| Error::invalid(format!("{}: dimensions are not int64", array.uri)))
}

/// How a matrix's coordinates along one dimension map to the rows or columns of the
/// AnnData's matrix.
#[derive(Clone, Copy)]
pub enum Axis<'a> {
    /// Join ids, each at its place among obs's or var's.
    Joinids(&'a Positions),
    /// Indices below this count, as they are (the columns of obsm and varm).
    Indices(usize),
}

impl Axis<'_> {
    pub fn len(&self) -> usize {
        match self {
            Axis::Joinids(positions) => positions.len(),
            Axis::Indices(count) => *count,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The place of coordinate `id` along the axis; `None`: the cell is left out.
    pub fn at(&self, id: i64) -> Option<usize> {
        match self {
            Axis::Joinids(positions) => positions.get(id).map(|p| p as usize - 1),
            Axis::Indices(count) => usize::try_from(id).ok().filter(|i| i < count),
        }
    }
}

/// The places of a batch's cells in a matrix whose rows and columns are `axes`: where
/// each cell both axes hold goes (row, column), in the batch's order, and which cells those
/// are (the others are left out). Cells come row by row, so a row's place is looked up once
/// for all its cells.
pub struct CellPlaces {
    pub rows: Vec<usize>,
    pub cols: Vec<usize>,
    pub keep: Vec<bool>,
}

impl CellPlaces {
    pub fn of((rows, cols): (&Axis, &Axis), row_ids: &[i64], col_ids: &[i64]) -> CellPlaces {
        let cells = row_ids.len();
        let mut places = CellPlaces {
            rows: Vec::with_capacity(cells),
            cols: Vec::with_capacity(cells),
            keep: Vec::with_capacity(cells),
        };
        let mut row: Option<(i64, Option<usize>)> = None;
        for (&r, &c) in row_ids.iter().zip(col_ids) {
            let row_place = match row {
                Some((id, place)) if id == r => place,
                _ => {
                    let place = rows.at(r);
                    row = Some((r, place));
                    place
                }
            };
            let place = row_place.zip(cols.at(c));
            places.keep.push(place.is_some());
            if let Some((r, c)) = place {
                places.rows.push(r);
                places.cols.push(c);
            }
        }
        places
    }

    /// Whether every cell of the batch is kept.
    pub fn keeps_all(&self) -> bool {
        self.rows.len() == self.keep.len()
    }

    /// The batch's `values` of the cells kept, as `value_type`.
    pub fn values(&self, values: &ArrayRef, value_type: &DataType) -> std::io::Result<ArrayRef> {
        if self.keeps_all() {
            return values_as(values, value_type);
        }
        let keep = BooleanBuffer::collect_bool(self.keep.len(), |i| self.keep[i]);
        let kept = arrow_select::filter::filter(values, &BooleanArray::new(keep, None))
            .map_err(std::io::Error::other)?;
        values_as(&kept, value_type)
    }
}

/// A matrix's `values` as `value_type`.
pub fn values_as(values: &ArrayRef, value_type: &DataType) -> std::io::Result<ArrayRef> {
    match values.data_type() == value_type {
        true => Ok(values.clone()),
        false => arrow_cast::cast(values, value_type).map_err(std::io::Error::other),
    }
}

/// Whether every coordinate of dimension `dim` that `array` stores is on `axis`: those of its
/// non-empty domain from lo to hi are when both ends are, as many places apart.
fn holds_stored(axis: Axis, array: &ArrayObject, dim: usize) -> bool {
    let Some((lo, hi)) = array.non_empty_domain.get(dim).cloned().flatten() else {
        return true;
    };
    match (lo.as_i128(), hi.as_i128()) {
        (Some(lo), Some(hi)) => match (axis.at(lo as i64), axis.at(hi as i64)) {
            (Some(first), Some(last)) => (last - first) as i128 == hi - lo,
            _ => false,
        },
        _ => false,
    }
}

/// The rows of a sparse matrix on `rows` and `cols` in blocks whose entries its fragments
/// tell without a read: each fragment's range of join ids on the first dimension (inclusive)
/// and its cells, in row order. They tell when every stored cell is on both axes and no two
/// fragments hold cells of a row in common, so that none can hold a cell another holds too
/// (which a read would show once). `None`: count the entries ([`row_counts`]).
pub fn row_blocks(
    array: &ArrayObject,
    (rows, cols): (Axis, Axis),
) -> Result<Option<Vec<RowBlock>>> {
    if array.schema.dense || !holds_stored(rows, array, 0) || !holds_stored(cols, array, 1) {
        return Ok(None);
    }
    let joinid = |value: &Value| i64::try_from(value.as_i128()?).ok();
    let Some(mut blocks) = array
        .fragments()?
        .iter()
        .map(|f| {
            let (lo, hi) = f.first_dimension.as_ref()?;
            Some(RowBlock {
                joinids: (joinid(lo)?, joinid(hi)?),
                entries: f.cell_num,
            })
        })
        .collect::<Option<Vec<RowBlock>>>()
    else {
        return Ok(None);
    };
    blocks.sort_unstable_by_key(|block| block.joinids);
    let apart = blocks
        .windows(2)
        .all(|pair| pair[0].joinids.1 < pair[1].joinids.0);
    Ok(apart.then_some(blocks))
}

/// Rows of a matrix whose entries are known: their join ids (inclusive) and their entries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RowBlock {
    pub joinids: (i64, i64),
    pub entries: u64,
}

/// Entries per row of a matrix (those whose row and column are on `rows` and `cols`) in the
/// rows whose join ids are in `joinids` (inclusive; every row when `None`), counted from the
/// coordinates alone: the first dimension's, and the second's only when some columns may be
/// off the axis; read in no particular order. One count per place of `places`, the places
/// on `rows` of the rows counted.
pub fn row_counts(
    array: &ArrayObject,
    (rows, cols): (Axis, Axis),
    joinids: Option<(i64, i64)>,
    places: Range<usize>,
) -> Result<Vec<u64>> {
    let started = std::time::Instant::now();
    let mut counts = vec![0u64; places.len()];
    let index: Vec<&str> = array
        .schema
        .index_columns()
        .map(|c| c.name.as_str())
        .collect();
    let [row_dim, col_dim] = index.as_slice() else {
        return Err(Error::invalid(format!(
            "{}: not two-dimensional",
            array.uri
        )));
    };
    // The column of a cell is only looked at when some could be off the axis.
    let all_columns = holds_stored(cols, array, 1);
    let only: Vec<&str> = if all_columns {
        vec![row_dim]
    } else {
        vec![row_dim, col_dim]
    };
    let selection = Selection {
        ranges: joinids
            .map(|(lo, hi)| vec![vec![(Value::Int(lo), Value::Int(hi))]])
            .unwrap_or_default(),
        ..Selection::default()
    };
    let mut count = |row: i64| -> Result<()> {
        if let Some(place) = rows.at(row) {
            let counted = place
                .checked_sub(places.start)
                .and_then(|i| counts.get_mut(i))
                .ok_or_else(|| {
                    Error::invalid(format!(
                        "{}: row {row} is at place {place}, outside {places:?}",
                        array.uri
                    ))
                })?;
            *counted += 1;
        }
        Ok(())
    };
    let reader = BatchReader::open_unsorted(array, &selection, &only, &[], BATCH_BYTES)?;
    let mut reader = ReadAhead::start(reader)?;
    while let Some(batch) = reader.next_batch()? {
        let row_ids = dimension(array, &batch, 0)?;
        if all_columns {
            row_ids.iter().try_for_each(|&r| count(r))?;
        } else {
            for (&r, &c) in row_ids.iter().zip(dimension(array, &batch, 1)?) {
                if cols.at(c).is_some() {
                    count(r)?;
                }
            }
        }
    }
    let which = match joinids {
        Some((lo, hi)) => format!("rows {lo}-{hi}"),
        None => "every row".to_owned(),
    };
    debug!(
        "{}: entries per row counted in {:?} ({which})",
        array.uri,
        started.elapsed()
    );
    Ok(counts)
}

/// The number of columns tiledbsoma's `to_anndata` gives an obsm or varm array read as
/// dense, for `rows` rows in all: its current domain's (dense arrays and arrays with a
/// shape); else, for a sparse array stored whole, its cells over the rows; else past the
/// last stored column.
pub fn matrix_width(array: &ArrayObject, rows: u64) -> Result<u64> {
    let second = array.schema.index_columns().nth(1);
    let has_shape = second.is_some_and(|c| c.domain != c.schema_domain);
    let shape = array.schema.shape.as_ref().and_then(|s| s.get(1).copied());
    if array.schema.dense || has_shape {
        return Ok(shape.unwrap_or(0));
    }
    let cells = array.stored_cells()?;
    if rows > 0 && cells.is_multiple_of(rows) {
        return Ok(cells / rows);
    }
    Ok(match array.non_empty_domain.get(1).cloned().flatten() {
        Some((_, hi)) => hi.as_i128().map_or(0, |hi| (hi + 1).max(0) as u64),
        None => 0,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pieces_of_rows_go_where_the_matrix_holds_their_cells() {
        // The matrix's rows are join ids 10, 11 and 20; its columns the indices below 3.
        let positions = Positions::new(vec![10, 11, 20]);
        let rows = Axis::Joinids(&positions);
        let piece = |row, first_col, cells| RowPiece {
            row,
            first_col,
            cells,
        };
        let run = |row, col, values_at, cells| RowRun {
            row,
            col,
            values_at,
            cells,
        };
        let pieces = [
            piece(10, 1, 4),  // columns 1-4: 3 and 4 are not the matrix's
            piece(12, 0, 5),  // a row the matrix does not hold
            piece(20, -2, 4), // columns -2-1: -2 and -1 are not the matrix's
            piece(11, 5, 2),  // beyond its columns
        ];
        let runs: Vec<RowRun> = row_runs(&pieces, rows, 3).collect();
        assert_eq!(runs, [run(0, 1, 0, 2), run(2, 0, 11, 2)]);
    }
}
