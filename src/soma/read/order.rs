//! Rows put in order by the index columns where libtiledb does not return them so: a
//! global-order read sorted band by band ([`BandSorter`]), and a small read sorted whole, in
//! memory ([`sort_by_index`]).

use std::collections::VecDeque;

use arrow_array::{RecordBatch, UInt32Array};
use arrow_ord::sort::{lexsort_to_indices, SortColumn};
use arrow_schema::SchemaRef;

use super::arrow::int64_values;
use super::plan::{Plan, ReadPlan};
use crate::soma::error::{Error, Result};

/// How a reader puts its rows in order, following its plan's [`SortPlan`].
pub(super) enum Sorter {
    /// libtiledb returns them in order (or no order is asked).
    AsRead,
    /// Global order, sorted band by band.
    Bands(BandSorter),
    /// Everything read first, then sorted whole by the first `index_columns` columns.
    InMemory {
        held: Vec<RecordBatch>,
        schema: SchemaRef,
        index_columns: usize,
    },
}

/// What one step of reading gave.
pub(super) enum Step {
    Batch(RecordBatch),
    /// A run's query has returned everything.
    RunEnd,
    End,
}

impl Sorter {
    /// The sorter of a read following `plan`, of rows of `schema`, whose cells are `distinct`
    /// (the array allows no duplicates).
    pub(super) fn of(plan: &ReadPlan, schema: SchemaRef, distinct: bool) -> Sorter {
        let index_columns = plan.columns.iter().filter(|c| c.is_index).count();
        match (plan.sort.sorted_bytes, plan.sort.plan) {
            (Some(_), _) => Sorter::InMemory {
                held: Vec::new(),
                schema,
                index_columns,
            },
            (None, Plan::Bands { extent, origin }) => Sorter::Bands(BandSorter {
                extent,
                origin,
                key_columns: plan.ranges.len() - 1,
                distinct,
                band: None,
                pending: Vec::new(),
            }),
            (None, Plan::Sorted(_)) => Sorter::AsRead,
        }
    }

    /// Takes one step of the read: the batches it puts in order go to `ready`. `true` once
    /// the read has ended and everything is in `ready`.
    pub(super) fn take(&mut self, step: Step, ready: &mut VecDeque<RecordBatch>) -> Result<bool> {
        match (self, step) {
            (Sorter::AsRead, Step::Batch(batch)) => ready.push_back(batch),
            (Sorter::Bands(bands), Step::Batch(batch)) => bands.push(&batch, ready)?,
            // Runs hold whole bands: the band read last is complete.
            (Sorter::Bands(bands), Step::RunEnd) => bands.finish_band(ready)?,
            (Sorter::Bands(bands), Step::End) => {
                bands.finish_band(ready)?;
                return Ok(true);
            }
            (Sorter::InMemory { held, .. }, Step::Batch(batch)) => held.push(batch),
            (
                Sorter::InMemory {
                    held,
                    schema,
                    index_columns,
                },
                Step::End,
            ) => {
                let held = std::mem::take(held);
                ready.extend(sort_by_index(schema, &held, *index_columns)?);
                return Ok(true);
            }
            (_, Step::RunEnd) => {}
            (_, Step::End) => return Ok(true),
        }
        Ok(false)
    }
}

/// `batches` as one batch sorted by its first `index_columns` columns; `None` when empty.
pub(super) fn sort_by_index(
    schema: &SchemaRef,
    batches: &[RecordBatch],
    index_columns: usize,
) -> Result<Option<RecordBatch>> {
    let rows = arrow_select::concat::concat_batches(schema, batches)?;
    if rows.num_rows() == 0 {
        return Ok(None);
    }
    let keys: Vec<SortColumn> = rows.columns()[..index_columns]
        .iter()
        .map(|values| SortColumn {
            values: values.clone(),
            options: None,
        })
        .collect();
    let order = lexsort_to_indices(&keys, None)?;
    Ok(Some(arrow_select::take::take_record_batch(&rows, &order)?))
}

/// Sorts a global-order read band by band (see the module's notes).
pub(super) struct BandSorter {
    /// Bands are `extent` rows of the first dimension, counted from `origin`.
    pub(super) extent: i128,
    pub(super) origin: i128,
    /// The leading index columns to sort on: all but the last.
    pub(super) key_columns: usize,
    /// Whether no two cells share their coordinates (the array allows no duplicates).
    pub(super) distinct: bool,
    pub(super) band: Option<i128>,
    pub(super) pending: Vec<RecordBatch>,
}

impl BandSorter {
    /// Takes a batch in global order; every band it completes goes sorted to `ready`.
    pub(super) fn push(
        &mut self,
        batch: &RecordBatch,
        ready: &mut VecDeque<RecordBatch>,
    ) -> Result<()> {
        let first = int64_values(batch.column(0))?;
        let mut start = 0;
        while start < first.len() {
            let band = self.band_of(first[start]);
            if self.band.is_some_and(|current| band < current) {
                return Err(out_of_order());
            }
            if self.band != Some(band) {
                self.finish_band(ready)?;
                self.band = Some(band);
            }
            // Bands never decrease in global order: the band ends where values reach the next.
            let next_band_start = self.band_start(band + 1);
            let end = start + first[start..].partition_point(|&v| i128::from(v) < next_band_start);
            self.pending.push(batch.slice(start, end - start));
            start = end;
        }
        Ok(())
    }

    pub(super) fn band_of(&self, row: i64) -> i128 {
        (i128::from(row) - self.origin).div_euclid(self.extent)
    }

    pub(super) fn band_start(&self, band: i128) -> i128 {
        self.origin + band * self.extent
    }

    /// Sorts the band held so far into `ready`.
    pub(super) fn finish_band(&mut self, ready: &mut VecDeque<RecordBatch>) -> Result<()> {
        let Some(band) = self.band.take() else {
            return Ok(());
        };
        let schema = self.pending[0].schema();
        let rows = arrow_select::concat::concat_batches(&schema, &self.pending)?;
        self.pending.clear();
        let order = if self.key_columns == 1 {
            // Two dimensions: a counting sort on the first coordinate's place in the band.
            let band_start = self.band_start(band);
            let places: Vec<usize> = int64_values(rows.column(0))?
                .iter()
                .map(|&v| (i128::from(v) - band_start) as usize)
                .collect();
            counting_sort(&places, usize::try_from(self.extent).unwrap_or(usize::MAX))
        } else {
            let keys = (0..self.key_columns)
                .map(|i| int64_values(rows.column(i)))
                .collect::<Result<Vec<_>>>()?;
            let mut order: Vec<u32> = (0..rows.num_rows() as u32).collect();
            // Stable: cells with equal leading coordinates keep their (sorted) arrival order.
            order.sort_by(|&a, &b| {
                keys.iter()
                    .map(|k| k[a as usize].cmp(&k[b as usize]))
                    .find(|o| o.is_ne())
                    .unwrap_or(std::cmp::Ordering::Equal)
            });
            order
        };
        let sorted = if order.windows(2).all(|w| w[0] < w[1]) {
            rows
        } else {
            arrow_select::take::take_record_batch(&rows, &UInt32Array::from(order))?
        };
        self.check_increasing(&sorted)?;
        ready.push_back(sorted);
        Ok(())
    }

    /// Checks that the cells of a sorted band increase in all their coordinates, strictly
    /// when they are `distinct`: that libtiledb returned the band in global order, each
    /// cell once.
    pub(super) fn check_increasing(&self, band: &RecordBatch) -> Result<()> {
        let keys = (0..=self.key_columns)
            .map(|i| int64_values(band.column(i)))
            .collect::<Result<Vec<_>>>()?;
        let in_order = |a: std::cmp::Ordering| a.is_lt() || (a.is_eq() && !self.distinct);
        let increasing = match keys.as_slice() {
            [rows, cols] => (1..rows.len())
                .all(|i| in_order((rows[i - 1], cols[i - 1]).cmp(&(rows[i], cols[i])))),
            _ => (1..band.num_rows()).all(|i| {
                let coordinates = |at: usize| keys.iter().map(move |k| k[at]);
                in_order(coordinates(i - 1).cmp(coordinates(i)))
            }),
        };
        if increasing {
            Ok(())
        } else {
            Err(out_of_order())
        }
    }
}

/// The error of a band-sorted read whose cells did not come in global order, or came twice.
pub(super) fn out_of_order() -> Error {
    Error::invalid("libtiledb returned the cells of a band-sorted read out of global order")
}

/// The stable order that sorts `places` (each below `buckets`), by counting.
pub(super) fn counting_sort(places: &[usize], buckets: usize) -> Vec<u32> {
    if buckets > 1 << 24 {
        let mut order: Vec<u32> = (0..places.len() as u32).collect();
        order.sort_by_key(|&i| places[i as usize]);
        return order;
    }
    let mut starts = vec![0u32; buckets + 1];
    for &p in places {
        starts[p + 1] += 1;
    }
    for i in 1..starts.len() {
        starts[i] += starts[i - 1];
    }
    let mut order = vec![0u32; places.len()];
    for (i, &p) in places.iter().enumerate() {
        order[starts[p] as usize] = i as u32;
        starts[p] += 1;
    }
    order
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow_array::ArrayRef;
    use arrow_schema::DataType;

    use super::*;

    #[test]
    fn a_global_order_read_is_sorted_band_by_band_from_any_origin() {
        // Two dimensions, bands of 3 rows from i64::MIN, tiles of one column of the second:
        // global order is band by band, in a band column by column, in a column by row.
        let origin = i128::from(i64::MIN);
        let band_of = |a: i64| (i128::from(a) - origin).div_euclid(3);
        let mut cells: Vec<(i64, i64)> = (-5..10).flat_map(|a| [(a, 0), (a, 1)]).collect();
        cells.sort_by_key(|&(a, b)| (band_of(a), b, a));
        let schema = Arc::new(arrow_schema::Schema::new(vec![
            arrow_schema::Field::new("a", DataType::Int64, false),
            arrow_schema::Field::new("b", DataType::Int64, false),
        ]));
        let column = |f: fn(&(i64, i64)) -> i64| -> ArrayRef {
            Arc::new(arrow_array::Int64Array::from_iter_values(
                cells.iter().map(f),
            ))
        };
        let batch = RecordBatch::try_new(schema, vec![column(|c| c.0), column(|c| c.1)]).unwrap();
        let sorter = || BandSorter {
            extent: 3,
            origin,
            key_columns: 1,
            distinct: true,
            band: None,
            pending: Vec::new(),
        };
        let sort = |batch: &RecordBatch| -> Result<Vec<(i64, i64)>> {
            let (mut sorter, mut ready) = (sorter(), VecDeque::new());
            // Batches end anywhere: feed it in pieces of 4 rows.
            for start in (0..batch.num_rows()).step_by(4) {
                let len = 4.min(batch.num_rows() - start);
                sorter.push(&batch.slice(start, len), &mut ready)?;
            }
            sorter.finish_band(&mut ready)?;
            let mut out = Vec::new();
            for b in &ready {
                let a = int64_values(b.column(0))?;
                let c = int64_values(b.column(1))?;
                out.extend(a.iter().copied().zip(c.iter().copied()));
            }
            Ok(out)
        };
        let mut sorted = cells.clone();
        sorted.sort();
        assert_eq!(sort(&batch).unwrap(), sorted);
        // Not global order: a band after a later one, or a row's cells out of order, or a
        // cell twice, is an error, never a wrong order.
        let later_band_first = arrow_select::concat::concat_batches(
            &batch.schema(),
            &[batch.slice(12, 18), batch.slice(0, 12)],
        )
        .unwrap();
        assert!(sort(&later_band_first).is_err());
        let at = |cell: (i64, i64)| cells.iter().position(|&c| c == cell).unwrap();
        let mut swapped: Vec<u32> = (0..batch.num_rows() as u32).collect();
        swapped.swap(at((0, 0)), at((0, 1)));
        let swapped = arrow_select::take::take_record_batch(&batch, &UInt32Array::from(swapped));
        assert!(sort(&swapped.unwrap()).is_err());
        let twice: Vec<u32> = [0].into_iter().chain(0..batch.num_rows() as u32).collect();
        let twice = arrow_select::take::take_record_batch(&batch, &UInt32Array::from(twice));
        assert!(sort(&twice.unwrap()).is_err());
    }

    fn int64_batch(values: &[(i64, i64)]) -> RecordBatch {
        let schema = Arc::new(arrow_schema::Schema::new(vec![
            arrow_schema::Field::new("a", DataType::Int64, false),
            arrow_schema::Field::new("b", DataType::Int64, false),
        ]));
        let column = |f: fn(&(i64, i64)) -> i64| -> ArrayRef {
            Arc::new(arrow_array::Int64Array::from_iter_values(
                values.iter().map(f),
            ))
        };
        RecordBatch::try_new(schema, vec![column(|c| c.0), column(|c| c.1)]).unwrap()
    }

    fn pairs(batches: &VecDeque<RecordBatch>) -> Vec<(i64, i64)> {
        let mut out = Vec::new();
        for b in batches {
            let a = int64_values(b.column(0)).unwrap();
            let c = int64_values(b.column(1)).unwrap();
            out.extend(a.iter().copied().zip(c.iter().copied()));
        }
        out
    }

    #[test]
    fn a_read_sorted_in_memory_hands_out_nothing_before_its_end() {
        let first = int64_batch(&[(3, 0), (1, 1)]);
        let second = int64_batch(&[(2, 5), (1, 0)]);
        let mut sorter = Sorter::InMemory {
            held: Vec::new(),
            schema: first.schema(),
            index_columns: 2,
        };
        let mut ready = VecDeque::new();
        assert!(!sorter.take(Step::Batch(first), &mut ready).unwrap());
        assert!(!sorter.take(Step::RunEnd, &mut ready).unwrap());
        assert!(!sorter.take(Step::Batch(second), &mut ready).unwrap());
        assert!(ready.is_empty());
        assert!(sorter.take(Step::End, &mut ready).unwrap());
        assert_eq!(pairs(&ready), [(1, 0), (1, 1), (2, 5), (3, 0)]);
        // Nothing read: nothing handed out.
        let mut empty = Sorter::InMemory {
            held: Vec::new(),
            schema: int64_batch(&[]).schema(),
            index_columns: 2,
        };
        let mut ready = VecDeque::new();
        assert!(empty.take(Step::End, &mut ready).unwrap() && ready.is_empty());
    }

    #[test]
    fn a_band_sorter_hands_out_each_band_as_a_run_ends_and_the_last_at_the_end() {
        let mut sorter = Sorter::Bands(BandSorter {
            extent: 10,
            origin: 0,
            key_columns: 1,
            distinct: true,
            band: None,
            pending: Vec::new(),
        });
        let mut ready = VecDeque::new();
        // Global order of a band: by column, then row.
        let band = int64_batch(&[(2, 0), (5, 0), (1, 1), (2, 1)]);
        assert!(!sorter.take(Step::Batch(band), &mut ready).unwrap());
        assert!(ready.is_empty(), "a band is held until it ends");
        assert!(!sorter.take(Step::RunEnd, &mut ready).unwrap());
        assert_eq!(pairs(&ready), [(1, 1), (2, 0), (2, 1), (5, 0)]);
        ready.clear();
        let next = int64_batch(&[(15, 0), (12, 3)]);
        assert!(!sorter.take(Step::Batch(next), &mut ready).unwrap());
        assert!(sorter.take(Step::End, &mut ready).unwrap());
        assert_eq!(pairs(&ready), [(12, 3), (15, 0)]);
        // As read: batches pass through as they come.
        let mut as_read = Sorter::AsRead;
        let mut ready = VecDeque::new();
        let batch = int64_batch(&[(9, 9), (1, 1)]);
        assert!(!as_read.take(Step::Batch(batch), &mut ready).unwrap());
        assert_eq!(pairs(&ready), [(9, 9), (1, 1)]);
        assert!(as_read.take(Step::End, &mut ready).unwrap());
    }
}
