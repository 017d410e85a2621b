//! Dense arrays read without their coordinates: the order of a dense read's cells tells
//! them ([`DenseCellOrder`]), and [`dense_values`] reads an array's values in C order.

use arrow_array::{Array as _, BooleanArray};

use crate::tiledb::Value;

use super::batches::BatchReader;
use super::memory::BATCH_BYTES;
use super::Selection;
use crate::soma::error::{Error, Result};
use crate::soma::object::ArrayObject;

/// The coordinates of the cells a row-major read of a two-dimensional dense array returns,
/// in their order: the ranges of the first dimension in turn, each of their rows whole along
/// the one range of the second. A dense read returns every cell of its ranges, so their
/// order tells their coordinates, which libtiledb would otherwise fill in cell by cell.
#[derive(Debug)]
pub struct DenseCellOrder {
    pub(super) rows: Vec<(i64, i64)>,
    pub(super) cols: (i64, i64),
    /// The next cell: the index of its range of rows, its row, its column.
    pub(super) next: (usize, i64, i64),
}

impl DenseCellOrder {
    /// The order of a read of `ranges` (one list per dimension, each filled); `None` unless
    /// there are two dimensions of integer ranges, one range on the second.
    pub(super) fn of(ranges: &[Vec<(Value, Value)>]) -> Option<DenseCellOrder> {
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

    fn int(lo: i64, hi: i64) -> (Value, Value) {
        (Value::Int(lo), Value::Int(hi))
    }

    /// The coordinates of the next `n` cells of `order`.
    fn next(order: &mut DenseCellOrder, n: usize) -> Vec<(i64, i64)> {
        let mut pieces = Vec::new();
        order.next_pieces(n, &mut pieces).unwrap();
        let (mut rows, mut cols) = (Vec::new(), Vec::new());
        RowPiece::coordinates(&pieces, &mut rows, &mut cols);
        rows.into_iter().zip(cols).collect()
    }

    #[test]
    fn cells_of_several_ranges_of_rows_come_row_by_row_through_each_range_in_turn() {
        let ranges = [vec![int(0, 0), int(5, 6), int(9, 9)], vec![int(1, 3)]];
        let c_order: Vec<(i64, i64)> = [0, 5, 6, 9]
            .into_iter()
            .flat_map(|i| (1..=3).map(move |j| (i, j)))
            .collect();
        // All at once, a row a batch, and in batches that cut rows and ranges.
        for batches in [vec![12], vec![3, 3, 3, 3], vec![4, 1, 5, 2], vec![1; 12]] {
            let mut order = DenseCellOrder::of(&ranges).unwrap();
            let cells: Vec<(i64, i64)> = (batches.iter())
                .flat_map(|&n| next(&mut order, n))
                .collect();
            assert_eq!(cells, c_order, "{batches:?}");
        }
    }

    #[test]
    fn a_read_that_returns_more_cells_than_its_ranges_hold_is_an_error() {
        let ranges = [vec![int(2, 3)], vec![int(0, 1)]];
        let mut order = DenseCellOrder::of(&ranges).unwrap();
        let mut pieces = Vec::new();
        assert!(
            order.next_pieces(5, &mut pieces).is_err(),
            "4 cells selected"
        );
        let mut order = DenseCellOrder::of(&ranges).unwrap();
        order.next_pieces(4, &mut pieces).unwrap();
        assert!(order.next_pieces(1, &mut pieces).is_err());
        // A reversed range of columns selects no cell.
        let mut none = DenseCellOrder::of(&[vec![int(0, 9)], vec![int(5, 4)]]).unwrap();
        assert!(none.next_pieces(1, &mut Vec::new()).is_err());
    }

    #[test]
    fn only_integer_ranges_of_two_dimensions_tell_an_order() {
        let text = (Value::Text("a".into()), Value::Text("b".into()));
        assert!(DenseCellOrder::of(&[vec![int(0, 9)]]).is_none());
        assert!(DenseCellOrder::of(&[vec![int(0, 9)], vec![int(0, 9)], vec![int(0, 1)]]).is_none());
        assert!(DenseCellOrder::of(&[vec![text], vec![int(0, 9)]]).is_none());
        assert!(DenseCellOrder::of(&[vec![int(0, 9)], vec![]]).is_none());
        assert!(DenseCellOrder::of(&[vec![int(0, 9)], vec![int(0, 9)]]).is_some());
    }
}
