//! Runs of a band-sorted read read as their span: one range whose cells libtiledb tests in
//! bulk, the rows between the run's ranges dropped here ([`KeptRows`]).

use arrow_array::{make_array, RecordBatch};
use arrow_data::transform::MutableArrayData;

use super::arrow::int64_values;
use super::plan::{stored_cells_per_band, Plan, Run};
use crate::soma::error::Result;
use crate::soma::object::ArrayObject;

/// Whether a run of several ranges is read as one range, its span, and the rows between
/// its ranges dropped here. libtiledb tests each cell of every tile a query of several
/// ranges touches against the ranges (two binary searches a cell, `compute_results_count_sparse`),
/// which costs more than decompressing the tile; a span is one range, whose cells it
/// tests in bulk. Both decompress every tile that holds a selected row, so a span is read
/// when almost every tile of it holds one: when its tiles hold [`SPAN_ROWS_PER_TILE`]
/// selected rows or more, on average.
#[derive(Debug, Clone, Copy)]
pub(super) struct SpanReads {
    /// The rows of the first dimension a data tile holds, on average.
    pub(super) rows_per_tile: f64,
}

/// Selected rows a tile of a span must hold on average for the span to be read whole
/// (a tile is then left without one about e^-4, 2%, of the time).
pub(super) const SPAN_ROWS_PER_TILE: f64 = 4.0;

impl SpanReads {
    /// For a band-sorted read of a sparse array without duplicates (whose several ranges
    /// would be read unordered); `None` otherwise, or when its tiles' rows are unknown.
    pub(super) fn of(array: &ArrayObject, plan: Plan) -> Option<SpanReads> {
        let Plan::Bands { extent, .. } = plan else {
            return None;
        };
        if array.schema.allows_duplicates {
            return None;
        }
        let tile_cells = array.schema.tile_cells? as f64;
        let cells_per_row = stored_cells_per_band(array, extent)? as f64 / extent.max(1) as f64;
        (cells_per_row > 0.0).then(|| SpanReads {
            rows_per_tile: tile_cells / cells_per_row,
        })
    }

    /// The rows `run` keeps of its span, when the span is to be read instead of the run's
    /// ranges.
    pub(super) fn kept_rows(&self, run: &Run) -> Option<KeptRows> {
        let (first, last) = (run.first()?.0, run.last()?.1);
        let span = last - first + 1;
        let selected: i128 = run.iter().map(|(lo, hi)| hi - lo + 1).sum();
        let per_tile = selected as f64 / span as f64 * self.rows_per_tile;
        let worth_it = run.len() > 1 && per_tile >= SPAN_ROWS_PER_TILE;
        // A span of more rows than a bitmap of a few MiB is read as its ranges.
        (worth_it && span <= 1 << 25).then(|| KeptRows::of(run))
    }
}

/// The rows of a span that its run selects: a bit per row of the span.
#[derive(Debug)]
pub(super) struct KeptRows {
    pub(super) first: i128,
    pub(super) rows: usize,
    pub(super) bits: Vec<u64>,
}

impl KeptRows {
    pub(super) fn of(run: &Run) -> KeptRows {
        let first = run[0].0;
        let rows = (run[run.len() - 1].1 - first + 1) as usize;
        let mut bits = vec![0u64; rows.div_ceil(64)];
        for &(lo, hi) in run {
            for row in (lo - first) as usize..=(hi - first) as usize {
                bits[row / 64] |= 1 << (row % 64);
            }
        }
        KeptRows { first, rows, bits }
    }

    pub(super) fn last(&self) -> i128 {
        self.first + self.rows as i128 - 1
    }

    pub(super) fn keeps(&self, row: i64) -> bool {
        // The span's rows are int64 (bands are read of int64 dimensions only).
        let at = (row as i128 - self.first) as u64 as usize;
        at < self.rows && self.bits[at / 64] & (1 << (at % 64)) != 0
    }

    /// The cells of `batch` in the kept rows (its first column is the first dimension). A
    /// global-order batch holds a row's cells of a tile together, so the row is looked up
    /// once a stretch of them, and the kept stretches are copied whole.
    pub(super) fn filter(&self, batch: RecordBatch) -> Result<RecordBatch> {
        let rows = int64_values(batch.column(0))?;
        let mut kept: Vec<(usize, usize)> = Vec::new();
        let mut start = 0;
        while start < rows.len() {
            let row = rows[start];
            let end = start + rows[start..].iter().take_while(|&&r| r == row).count();
            if self.keeps(row) {
                match kept.last_mut() {
                    Some((_, last_end)) if *last_end == start => *last_end = end,
                    _ => kept.push((start, end)),
                }
            }
            start = end;
        }
        if kept == [(0, rows.len())] || rows.is_empty() {
            return Ok(batch);
        }
        let cells = kept.iter().map(|(a, b)| b - a).sum();
        let columns = (batch.columns().iter())
            .map(|column| {
                let data = column.to_data();
                let mut out = MutableArrayData::new(vec![&data], data.null_count() > 0, cells);
                for &(a, b) in &kept {
                    out.try_extend(0, a, b)?;
                }
                Ok(make_array(out.freeze()))
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(RecordBatch::try_new(batch.schema(), columns)?)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow_schema::DataType;

    use super::*;
    use crate::soma::read::test_arrays::*;
    use crate::tiledb::{self, Value};

    #[test]
    fn a_run_is_read_as_its_span_when_its_tiles_hold_several_selected_rows() {
        // 1,000,000 cells over rows 0..=999 (1,000 a row), tiles of 10,000 cells: 10 rows.
        let matrix = |allows_duplicates| {
            let mut schema = crate::soma::SomaSchema::sparse_frame(vec![
                int_index("d0"),
                int_index("d1"),
                value_column("v"),
            ]);
            schema.tile_cells = Some(10_000);
            schema.allows_duplicates = allows_duplicates;
            ArrayObject::described(
                "mem://array",
                crate::soma::SomaType::SparseNDArray,
                tiledb::Metadata::new(),
                schema,
                vec![Some((Value::Int(0), Value::Int(999))), None],
                vec![tiledb::Fragment {
                    uri: "mem://array/f".into(),
                    cell_num: 1_000_000,
                    first_dimension: Some(range(0, 999)),
                }],
            )
        };
        let bands = Plan::Bands {
            extent: 10,
            origin: 0,
        };
        assert!(SpanReads::of(&matrix(true), bands).is_none());
        let spans = SpanReads::of(&matrix(false), bands).expect("a sparse matrix's spans");
        // Every other row of 100: 5 selected rows a tile, read as the span.
        let every_other: Run = (0..50).map(|i| (100 + 2 * i, 100 + 2 * i)).collect();
        let kept = spans.kept_rows(&every_other).expect("a span read");
        assert_eq!((kept.first, kept.last()), (100, 198));
        // Two rows of 100: most tiles would hold none, read as ranges.
        assert!(spans.kept_rows(&vec![(100, 100), (199, 199)]).is_none());
        // One range is read as it is.
        assert!(spans.kept_rows(&vec![(100, 199)]).is_none());

        // The span's cells in the run's rows are kept, in their order.
        let rows = arrow_array::Int64Array::from_iter_values([
            99, 100, 101, 150, 150, 151, 198, 199, 5000,
        ]);
        let values = arrow_array::Int64Array::from_iter_values(0..rows.len() as i64);
        let schema = Arc::new(arrow_schema::Schema::new(vec![
            arrow_schema::Field::new("d0", DataType::Int64, false),
            arrow_schema::Field::new("v", DataType::Int64, false),
        ]));
        let batch = RecordBatch::try_new(schema, vec![Arc::new(rows), Arc::new(values)]).unwrap();
        let filtered = kept.filter(batch).unwrap();
        let column = |i: usize| int64_values(filtered.column(i)).unwrap().to_vec();
        assert_eq!(column(0), [100, 150, 150, 198]);
        assert_eq!(column(1), [1, 3, 4, 6]);
    }
}
