//! The seam for data: an array's cells held in memory ([`MemoryCells`]), read as libtiledb's
//! would be. An [`ArrayObject`] whose data is in memory serves every read, count and null
//! count from here, so that everything built on reads (streaming, the cache's commits,
//! AnnData assembly, `where/` joins, failures mid-stream) is unit-tested without libtiledb,
//! as mountpoint-s3 tests its filesystem over a mock client.
//!
//! A read selects as a query does: ranges of the index columns, the label an enumerated
//! column holds, and the value filter, which is evaluated here cell by cell (a null satisfies
//! no comparison and no membership, as in libtiledb's conditions). Sorted reads come sorted by
//! the index columns; a dense array in memory holds every cell of its domain.

use std::cmp::Ordering;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering as AtomicOrdering};

use arrow_array::cast::AsArray;
use arrow_array::types::{Float64Type, Int64Type, UInt64Type};
use arrow_array::{Array as _, ArrayRef, BooleanArray, RecordBatch};
use arrow_ord::sort::{lexsort_to_indices, SortColumn};
use arrow_schema::{DataType, SchemaRef};

use crate::tiledb::{Comparison, Value};

use super::plan::{read_columns, Mode};
use super::Selection;
use crate::soma::error::{Error, Result};
use crate::soma::filter::Condition;
use crate::soma::object::ArrayObject;

/// An array's cells in memory: a column for each column of the array's schema, named as
/// they are, of the Arrow types the schema gives them.
#[derive(Debug)]
pub struct MemoryCells {
    cells: RecordBatch,
    /// The rows a batch of a read holds.
    batch_rows: usize,
    /// A read fails after handing out this many batches (see [`MemoryCells::failing_after`]).
    fails_after: Option<usize>,
    /// The reads and counts served.
    reads: AtomicUsize,
}

impl MemoryCells {
    /// `cells`, read in batches of `batch_rows` rows.
    pub fn new(cells: RecordBatch, batch_rows: usize) -> MemoryCells {
        MemoryCells {
            cells,
            batch_rows: batch_rows.max(1),
            fails_after: None,
            reads: AtomicUsize::new(0),
        }
    }

    /// The same cells, every read of which fails after `batches` batches, as a store that
    /// goes away mid-read.
    pub fn failing_after(self, batches: usize) -> MemoryCells {
        MemoryCells {
            fails_after: Some(batches),
            ..self
        }
    }

    /// How many reads and counts of the cells there have been.
    pub fn reads(&self) -> usize {
        self.reads.load(AtomicOrdering::Relaxed)
    }

    /// A read of `selection` of `array` in `mode`.
    pub(super) fn read(
        &self,
        array: &ArrayObject,
        selection: &Selection,
        mode: Mode,
    ) -> Result<MemoryRead> {
        let (only, null_counted) = match mode {
            Mode::Sorted => (None, &[][..]),
            Mode::Unsorted { only, null_counted } => (Some(only), null_counted),
        };
        let columns = read_columns(array, selection, only);
        let schema = array.schema.arrow_of(&columns);
        let selected = self.selected(array, selection)?;
        let null_counts = (null_counted.iter())
            .map(|name| {
                Ok((
                    (*name).to_owned(),
                    column(&selected, name)?.null_count() as u64,
                ))
            })
            .collect::<Result<Vec<_>>>()?;
        let projected = (columns.iter())
            .map(|c| column(&selected, &c.name).cloned())
            .collect::<Result<Vec<_>>>()?;
        let rows = RecordBatch::try_new(schema.clone(), projected)?;
        let batches = (0..rows.num_rows())
            .step_by(self.batch_rows)
            .map(|start| rows.slice(start, self.batch_rows.min(rows.num_rows() - start)))
            .collect();
        Ok(MemoryRead {
            batches,
            schema,
            null_counts,
            fails_after: self.fails_after,
        })
    }

    /// The cells a read of `selection` returns.
    pub fn count(&self, array: &ArrayObject, selection: &Selection) -> Result<u64> {
        Ok(self.selected(array, selection)?.num_rows() as u64)
    }

    /// The nulls of each column of `names` among all the cells.
    pub fn null_counts(&self, names: &[&str]) -> Result<Vec<(String, u64)>> {
        (names.iter())
            .map(|name| {
                Ok((
                    (*name).to_owned(),
                    column(&self.cells, name)?.null_count() as u64,
                ))
            })
            .collect()
    }

    /// Every column of the cells `selection` selects of `array`, sorted by its index columns.
    fn selected(&self, array: &ArrayObject, selection: &Selection) -> Result<RecordBatch> {
        self.reads.fetch_add(1, AtomicOrdering::Relaxed);
        let rows = self.cells.num_rows();
        let mut keep = vec![!selection.is_empty(); rows];
        for (ranges, index) in selection.ranges.iter().zip(array.schema.index_columns()) {
            if ranges.is_empty() {
                continue;
            }
            let values = values_of(column(&self.cells, &index.name)?)?;
            for (row, kept) in keep.iter_mut().enumerate() {
                let within = |(lo, hi): &(Value, Value)| {
                    values[row].as_ref().is_some_and(|v| {
                        order(v, lo).is_some_and(Ordering::is_ge)
                            && order(v, hi).is_some_and(Ordering::is_le)
                    })
                };
                *kept &= ranges.iter().any(within);
            }
        }
        if let Some((name, label)) = &selection.equals {
            let values = values_of(column(&self.cells, name)?)?;
            for (kept, value) in keep.iter_mut().zip(&values) {
                *kept &= match (value, label) {
                    (Some(v), Some(label)) => order(v, label) == Some(Ordering::Equal),
                    (None, None) => true,
                    _ => false,
                };
            }
        }
        if let Some(filter) = &selection.filter {
            for (kept, satisfied) in keep.iter_mut().zip(satisfies(filter, &self.cells)?) {
                *kept &= satisfied == Some(true);
            }
        }
        let kept =
            arrow_select::filter::filter_record_batch(&self.cells, &BooleanArray::from(keep))?;
        let keys = (array.schema.index_columns())
            .map(|c| {
                Ok(SortColumn {
                    values: column(&kept, &c.name)?.clone(),
                    options: None,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        if keys.is_empty() || kept.num_rows() == 0 {
            return Ok(kept);
        }
        let order = lexsort_to_indices(&keys, None)?;
        Ok(arrow_select::take::take_record_batch(&kept, &order)?)
    }
}

/// A read of cells in memory: its batches, handed out one at a time.
pub(super) struct MemoryRead {
    batches: VecDeque<RecordBatch>,
    schema: SchemaRef,
    null_counts: Vec<(String, u64)>,
    fails_after: Option<usize>,
}

impl MemoryRead {
    pub(super) fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    pub(super) fn next_batch(&mut self) -> Result<Option<RecordBatch>> {
        if let Some(left) = self.fails_after.as_mut() {
            if *left == 0 {
                return Err(Error::invalid(
                    "the store went away in the middle of a read",
                ));
            }
            *left -= 1;
        }
        Ok(self.batches.pop_front())
    }

    /// The nulls counted, once the last batch is out.
    pub(super) fn null_counts(&self) -> Option<&[(String, u64)]> {
        self.batches
            .is_empty()
            .then_some(self.null_counts.as_slice())
    }
}

fn column<'a>(batch: &'a RecordBatch, name: &str) -> Result<&'a ArrayRef> {
    batch
        .column_by_name(name)
        .ok_or_else(|| Error::invalid(format!("the cells in memory have no column {name}")))
}

/// A column's values, `None` where null; enumerated columns as their labels.
fn values_of(column: &ArrayRef) -> Result<Vec<Option<Value>>> {
    let plain = match column.data_type() {
        DataType::Dictionary(_, values) => arrow_cast::cast(column, values)?,
        _ => column.clone(),
    };
    let values = |i: usize, value: &dyn Fn(usize) -> Value| plain.is_valid(i).then(|| value(i));
    let rows = 0..plain.len();
    let out = match plain.data_type() {
        DataType::Boolean => {
            let b = plain.as_boolean();
            rows.map(|i| values(i, &|i| Value::Bool(b.value(i))))
                .collect()
        }
        DataType::Utf8 | DataType::LargeUtf8 => {
            let text = arrow_cast::cast(&plain, &DataType::LargeUtf8)?;
            let text = text.as_string::<i64>();
            rows.map(|i| values(i, &|i| Value::Text(text.value(i).to_owned())))
                .collect()
        }
        DataType::Binary | DataType::LargeBinary => {
            let bytes = arrow_cast::cast(&plain, &DataType::LargeBinary)?;
            let bytes = bytes.as_binary::<i64>();
            rows.map(|i| values(i, &|i| Value::Bytes(bytes.value(i).to_vec())))
                .collect()
        }
        DataType::UInt8 | DataType::UInt16 | DataType::UInt32 | DataType::UInt64 => {
            let u = arrow_cast::cast(&plain, &DataType::UInt64)?;
            let u = u.as_primitive::<UInt64Type>();
            rows.map(|i| values(i, &|i| Value::UInt(u.value(i))))
                .collect()
        }
        DataType::Float16 | DataType::Float32 | DataType::Float64 => {
            let f = arrow_cast::cast(&plain, &DataType::Float64)?;
            let f = f.as_primitive::<Float64Type>();
            rows.map(|i| values(i, &|i| Value::Float(f.value(i))))
                .collect()
        }
        _ => {
            let n = arrow_cast::cast(&plain, &DataType::Int64)?;
            let n = n.as_primitive::<Int64Type>();
            rows.map(|i| values(i, &|i| Value::Int(n.value(i))))
                .collect()
        }
    };
    Ok(out)
}

/// How `a` compares with `b`: numbers by value, text and bytes by their bytes.
fn order(a: &Value, b: &Value) -> Option<Ordering> {
    match (a, b) {
        (Value::Text(a), Value::Text(b)) => Some(a.cmp(b)),
        (Value::Bytes(a), Value::Bytes(b)) => Some(a.cmp(b)),
        (Value::Bool(a), Value::Bool(b)) => Some(a.cmp(b)),
        _ => match (a.as_i128(), b.as_i128()) {
            (Some(a), Some(b)) => Some(a.cmp(&b)),
            _ => a.as_f64()?.partial_cmp(&b.as_f64()?),
        },
    }
}

/// Whether each row of `cells` satisfies `condition`: `None` where a null leaves it unknown,
/// which no row is kept for (a comparison, `!=` and `not` leave nulls out, as libtiledb
/// does).
fn satisfies(condition: &Condition, cells: &RecordBatch) -> Result<Vec<Option<bool>>> {
    Ok(match condition {
        Condition::Compare {
            column: name,
            op,
            value,
            ..
        } => (values_of(column(cells, name)?)?.iter())
            .map(|v| {
                let o = order(v.as_ref()?, value)?;
                Some(match op {
                    Comparison::Lt => o.is_lt(),
                    Comparison::Le => o.is_le(),
                    Comparison::Gt => o.is_gt(),
                    Comparison::Ge => o.is_ge(),
                    Comparison::Eq => o.is_eq(),
                    Comparison::Ne => o.is_ne(),
                })
            })
            .collect(),
        Condition::Member {
            column: name,
            negated,
            values,
            ..
        } => (values_of(column(cells, name)?)?.iter())
            .map(|v| {
                let v = v.as_ref()?;
                let member = values.iter().any(|m| order(v, m) == Some(Ordering::Equal));
                Some(member != *negated)
            })
            .collect(),
        Condition::And(a, b) => both(satisfies(a, cells)?, satisfies(b, cells)?, |a, b| {
            match (a, b) {
                (Some(false), _) | (_, Some(false)) => Some(false),
                (Some(true), Some(true)) => Some(true),
                _ => None,
            }
        }),
        Condition::Or(a, b) => both(satisfies(a, cells)?, satisfies(b, cells)?, |a, b| {
            match (a, b) {
                (Some(true), _) | (_, Some(true)) => Some(true),
                (Some(false), Some(false)) => Some(false),
                _ => None,
            }
        }),
        Condition::Not(a) => satisfies(a, cells)?
            .into_iter()
            .map(|a| a.map(|a| !a))
            .collect(),
    })
}

fn both(
    a: Vec<Option<bool>>,
    b: Vec<Option<bool>>,
    f: impl Fn(Option<bool>, Option<bool>) -> Option<bool>,
) -> Vec<Option<bool>> {
    a.into_iter().zip(b).map(|(a, b)| f(a, b)).collect()
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow_array::{Float32Array, Int64Array};

    use super::*;
    use crate::soma::read::test_arrays::*;
    use crate::tiledb::Datatype;

    /// A frame of rows 0..10, column `v` = row / 2 (null at row 3), stored out of order.
    fn frame() -> (ArrayObject, MemoryCells) {
        let array = sparse(vec![int_index("soma_joinid"), value_column("v")]);
        let ids: Vec<i64> = (0..10).rev().collect();
        let v: Vec<Option<f32>> = (ids.iter())
            .map(|&i| (i != 3).then_some(i as f32 / 2.0))
            .collect();
        let schema = array.schema.arrow_of(&array.schema.columns);
        let cells = RecordBatch::try_new(
            schema,
            vec![
                Arc::new(Int64Array::from(ids)),
                Arc::new(Float32Array::from(v)),
            ],
        )
        .unwrap();
        (array, MemoryCells::new(cells, 3))
    }

    fn ids(read: &mut MemoryRead) -> Vec<i64> {
        let mut out = Vec::new();
        while let Some(batch) = read.next_batch().unwrap() {
            assert!(batch.num_rows() <= 3, "batches of the rows asked for");
            out.extend(batch.column(0).as_primitive::<Int64Type>().values());
        }
        out
    }

    #[test]
    fn cells_in_memory_are_read_sorted_by_ranges_and_filters_in_batches() {
        let (array, cells) = frame();
        let all = Selection::default();
        let mut read = cells.read(&array, &all, Mode::Sorted).unwrap();
        assert_eq!(ids(&mut read), (0..10).collect::<Vec<_>>());
        let ranges = Selection {
            ranges: vec![vec![range(1, 2), range(7, 20)]],
            ..Selection::default()
        };
        let mut read = cells.read(&array, &ranges, Mode::Sorted).unwrap();
        assert_eq!(ids(&mut read), [1, 2, 7, 8, 9]);
        assert_eq!(cells.count(&array, &ranges).unwrap(), 5);
        // v >= 2 or v in (0.5): a null satisfies neither.
        let filter = Condition::Or(
            Box::new(Condition::Compare {
                column: "v".into(),
                datatype: Datatype::Float32,
                op: Comparison::Ge,
                value: Value::Float(2.0),
            }),
            Box::new(Condition::Member {
                column: "v".into(),
                datatype: Datatype::Float32,
                negated: false,
                values: vec![Value::Float(0.5)],
            }),
        );
        let filtered = Selection {
            filter: Some(Arc::new(filter)),
            ..Selection::default()
        };
        let mut read = cells.read(&array, &filtered, Mode::Sorted).unwrap();
        assert_eq!(ids(&mut read), [1, 4, 5, 6, 7, 8, 9]);
        // `not` leaves the null out too.
        let Some(Condition::Or(at_least_2, _)) = filtered.filter.as_deref().cloned() else {
            unreachable!()
        };
        let not = Selection {
            filter: Some(Arc::new(Condition::Not(at_least_2))),
            ..Selection::default()
        };
        assert_eq!(cells.count(&array, &not).unwrap(), 3);
    }

    #[test]
    fn an_unsorted_read_counts_nulls_and_a_failing_store_fails_mid_read() {
        let (array, cells) = frame();
        let mode = Mode::Unsorted {
            only: &["soma_joinid"],
            null_counted: &["v"],
        };
        let mut read = cells.read(&array, &Selection::default(), mode).unwrap();
        assert_eq!(read.schema().fields().len(), 1);
        assert_eq!(read.null_counts(), None);
        assert_eq!(ids(&mut read).len(), 10);
        assert_eq!(read.null_counts(), Some(&[("v".to_owned(), 1)][..]));
        let failing = cells.failing_after(2);
        let mut read = failing
            .read(&array, &Selection::default(), Mode::Sorted)
            .unwrap();
        assert!(read.next_batch().unwrap().is_some());
        assert!(read.next_batch().unwrap().is_some());
        assert!(read.next_batch().is_err());
    }

    /// The frame of [`crate::soma::fixtures::dataframe`] and its cells.
    fn fixture_frame() -> (ArrayObject, MemoryCells) {
        use crate::soma::fixtures::{dataframe, dataframe_cells};
        let crate::soma::SomaObject::Array(frame) = dataframe("mem://f", "f") else {
            unreachable!("dataframe makes an array")
        };
        let frame = Arc::try_unwrap(frame).expect("not shared");
        (frame, dataframe_cells(7))
    }

    fn labelled(label: Option<&str>) -> Selection {
        Selection {
            equals: Some(("cell_type".into(), label.map(|l| Value::Text(l.into())))),
            ..Selection::default()
        }
    }

    #[test]
    fn a_label_selects_the_rows_that_hold_it_and_no_label_the_nulls() {
        use crate::soma::fixtures::dataframe_nulls;
        let (frame, cells) = fixture_frame();
        let holding = |odd: i64| -> Vec<i64> {
            (0..100)
                .filter(|j| j % 2 == odd && !dataframe_nulls(*j).1)
                .collect()
        };
        let mut read = cells
            .read(&frame, &labelled(Some("b/c")), Mode::Sorted)
            .unwrap();
        let mut got: Vec<i64> = Vec::new();
        while let Some(batch) = read.next_batch().unwrap() {
            got.extend(batch.column(0).as_primitive::<Int64Type>().values());
        }
        assert_eq!(got, holding(1));
        assert_eq!(
            cells.count(&frame, &labelled(Some("a"))).unwrap(),
            holding(0).len() as u64
        );
        assert_eq!(cells.count(&frame, &labelled(None)).unwrap(), 4);
        assert_eq!(cells.count(&frame, &labelled(Some("z"))).unwrap(), 0);
    }

    #[test]
    fn a_dense_array_in_memory_reads_its_ranges_in_c_order() {
        use crate::soma::fixtures::{dense_array, dense_cells, dense_value};
        let crate::soma::SomaObject::Array(dense) = dense_array("mem://d") else {
            unreachable!("dense_array makes an array")
        };
        let cells = dense_cells(4);
        let block = Selection {
            ranges: vec![vec![range(5, 6)], vec![range(7, 9)]],
            ..Selection::default()
        };
        assert_eq!(cells.count(&dense, &block).unwrap(), 6);
        let mut read = cells.read(&dense, &block, Mode::Sorted).unwrap();
        let mut got = Vec::new();
        while let Some(batch) = read.next_batch().unwrap() {
            let (i, j) = (batch.column(0), batch.column(1));
            let v = batch
                .column(2)
                .as_primitive::<arrow_array::types::Float32Type>();
            for n in 0..batch.num_rows() {
                let i = i.as_primitive::<Int64Type>().value(n);
                let j = j.as_primitive::<Int64Type>().value(n);
                got.push((i, j, v.value(n)));
            }
        }
        let c_order: Vec<(i64, i64, f32)> = [5, 6]
            .into_iter()
            .flat_map(|i| (7..=9).map(move |j| (i, j, dense_value(i, j))))
            .collect();
        assert_eq!(got, c_order);
    }

    #[test]
    fn a_column_the_cells_lack_is_an_error_naming_it() {
        let (array, cells) = frame();
        let filter = Condition::Compare {
            column: "nope".into(),
            datatype: Datatype::Float32,
            op: Comparison::Lt,
            value: Value::Float(1.0),
        };
        let selection = Selection {
            filter: Some(Arc::new(filter)),
            ..Selection::default()
        };
        let error = cells.count(&array, &selection).unwrap_err().to_string();
        assert!(error.contains("nope"), "{error}");
        // The frame's schema names columns the cells of another array lack.
        let (frame, _) = fixture_frame();
        let read = cells.read(&frame, &Selection::default(), Mode::Sorted);
        assert!(read.is_err());
    }

    #[test]
    fn a_read_projects_the_columns_asked_for_and_a_reversed_range_selects_nothing() {
        let (frame, cells) = fixture_frame();
        let only_x = Selection {
            columns: Some(vec!["x".into()]),
            ..Selection::default()
        };
        let read = cells.read(&frame, &only_x, Mode::Sorted).unwrap();
        let names: Vec<String> = (read.schema().fields().iter())
            .map(|f| f.name().clone())
            .collect();
        assert_eq!(names, ["soma_joinid", "x"]);
        let reversed = Selection {
            ranges: vec![vec![range(9, 3)]],
            ..Selection::default()
        };
        assert_eq!(cells.count(&frame, &reversed).unwrap(), 0);
        let mut read = cells.read(&frame, &reversed, Mode::Sorted).unwrap();
        assert!(read.next_batch().unwrap().is_none());
    }
}
