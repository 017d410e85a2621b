//! Readers that stream Arrow record batches out of TileDB read queries: a slice of an array
//! (ranges on its index columns, optionally a filter on a value column), its columns in
//! schema order, rows sorted by the index columns.

use std::sync::Arc;

use arrow_array::{
    make_array, new_empty_array, Array as _, ArrayRef, BooleanArray, LargeBinaryArray,
    LargeStringArray, RecordBatch,
};
use arrow_buffer::{BooleanBuffer, Buffer, NullBuffer, OffsetBuffer, ScalarBuffer};
use arrow_schema::{DataType, SchemaRef};

use crate::tiledb::{
    self, Array, ColumnData, ColumnSpec, EnumerationInfo, Layout, QueryCondition, ReadQuery, Value,
};

use super::object::ArrayObject;
use super::schema::Column;
use super::Store;

/// What part of an array to read.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Selection {
    /// Per index column, in order: inclusive ranges to read (empty or missing: all of it).
    pub ranges: Vec<Vec<(Value, Value)>>,
    /// Only rows whose column holds this label (`None`: a null), for enumerated columns.
    pub equals: Option<(String, Option<String>)>,
}

/// Bytes per batch: the memory one reader holds in TileDB buffers at a time.
pub const BATCH_BYTES: usize = 16 << 20;

/// A stream of record batches from one read query.
pub struct BatchReader {
    query: ReadQuery,
    schema: SchemaRef,
    columns: Vec<Column>,
    /// Per enumerated column, its labels as an Arrow array (shared by every batch).
    labels: Vec<Option<ArrayRef>>,
}

fn tiledb_err(e: impl std::fmt::Display) -> tiledb::Error {
    tiledb::Error::new(e.to_string())
}

impl BatchReader {
    /// Starts reading `selection` of `array`, as of the store's timestamp.
    pub fn open(
        store: &Store,
        array: &ArrayObject,
        selection: &Selection,
        batch_bytes: usize,
    ) -> tiledb::Result<BatchReader> {
        let handle = Array::open(store.context(), &array.uri, array.read_timestamp_ms)?;
        let columns = array.schema.columns.clone();
        let mut ranges: Vec<Vec<(Value, Value)>> = selection.ranges.clone();
        ranges.resize(array.schema.index_columns().count(), Vec::new());
        if array.schema.dense {
            // Dense reads need a subarray: default to the current domain.
            for (r, c) in ranges.iter_mut().zip(array.schema.index_columns()) {
                if r.is_empty() {
                    if let Some(domain) = &c.domain {
                        r.push(domain.clone());
                    }
                }
            }
        }
        let condition = match &selection.equals {
            Some((name, label)) => Some(QueryCondition::equals(
                &handle,
                name,
                label.as_deref().map(str::as_bytes),
            )?),
            None => None,
        };
        let specs: Vec<ColumnSpec> = columns
            .iter()
            .map(|c| ColumnSpec {
                name: c.name.clone(),
                datatype: c.datatype,
                cell_val_num: c.cell_val_num,
                nullable: c.nullable,
            })
            .collect();
        let query = ReadQuery::new(
            handle,
            Layout::RowMajor,
            &ranges,
            &specs,
            condition.as_ref(),
            batch_bytes,
        )?;
        let labels = columns
            .iter()
            .map(|c| c.enumeration.as_ref().map(labels_array).transpose())
            .collect::<tiledb::Result<Vec<_>>>()?;
        Ok(BatchReader {
            query,
            schema: array.schema.arrow(),
            columns,
            labels,
        })
    }

    pub fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    /// The next batch of rows, `None` at the end.
    pub fn next_batch(&mut self) -> tiledb::Result<Option<RecordBatch>> {
        let Some(batch) = self.query.next_batch()? else {
            return Ok(None);
        };
        let arrays = self
            .columns
            .iter()
            .zip(&batch.columns)
            .zip(&self.labels)
            .map(|((column, data), labels)| to_arrow(column, data, batch.cells, labels.as_ref()))
            .collect::<tiledb::Result<Vec<_>>>()?;
        RecordBatch::try_new(self.schema.clone(), arrays)
            .map(Some)
            .map_err(tiledb_err)
    }
}

/// An enumeration's labels as an Arrow array of the dictionary's value type.
fn labels_array(e: &EnumerationInfo) -> tiledb::Result<ArrayRef> {
    let array: ArrayRef = if e.datatype.is_string() {
        Arc::new(LargeStringArray::from_iter_values(e.values.iter().map(
            |v| match v {
                Value::Text(s) => s.as_str(),
                _ => "",
            },
        )))
    } else if e.datatype.is_bytes() {
        Arc::new(LargeBinaryArray::from_iter_values(e.values.iter().map(
            |v| match v {
                Value::Bytes(b) => b.as_slice(),
                _ => &[],
            },
        )))
    } else if e.datatype == crate::tiledb::Datatype::Bool {
        Arc::new(BooleanArray::from_iter(
            e.values
                .iter()
                .map(|v| Some(matches!(v, Value::Bool(true)))),
        ))
    } else {
        let dt = super::schema::arrow_type(e.datatype, 1);
        let bytes: Vec<u8> = e
            .values
            .iter()
            .map(|v| v.to_native(e.datatype))
            .collect::<tiledb::Result<Vec<_>>>()?
            .concat();
        make_array(
            arrow_data::ArrayData::builder(dt)
                .len(e.values.len())
                .add_buffer(Buffer::from(bytes))
                .build()
                .map_err(tiledb_err)?,
        )
    };
    Ok(array)
}

fn nulls(data: &ColumnData<'_>, cells: usize) -> Option<NullBuffer> {
    let validity = data.validity?;
    let valid = BooleanBuffer::collect_bool(cells, |i| validity.get(i).is_some_and(|&v| v != 0));
    Some(NullBuffer::new(valid)).filter(|n| n.null_count() > 0)
}

/// One column of a TileDB batch as an Arrow array of the column's type.
fn to_arrow(
    column: &Column,
    data: &ColumnData<'_>,
    cells: usize,
    labels: Option<&ArrayRef>,
) -> tiledb::Result<ArrayRef> {
    if cells == 0 {
        return Ok(new_empty_array(&column.arrow_type));
    }
    let nulls = nulls(data, cells);
    let array: ArrayRef = match &column.arrow_type {
        DataType::Boolean => Arc::new(BooleanArray::new(
            BooleanBuffer::collect_bool(cells, |i| data.data[i] != 0),
            nulls,
        )),
        DataType::LargeUtf8 | DataType::LargeBinary => {
            let offsets = data
                .offsets
                .ok_or_else(|| tiledb::Error::new("var-sized column without offsets"))?;
            let offsets: Vec<i64> = offsets[..=cells].iter().map(|&o| o as i64).collect();
            let offsets = OffsetBuffer::new(ScalarBuffer::from(offsets));
            let values = Buffer::from(data.data);
            if column.arrow_type == DataType::LargeUtf8 {
                Arc::new(LargeStringArray::try_new(offsets, values, nulls).map_err(tiledb_err)?)
            } else {
                Arc::new(LargeBinaryArray::try_new(offsets, values, nulls).map_err(tiledb_err)?)
            }
        }
        DataType::Date32 => {
            // TileDB stores days as int64.
            let days: Vec<i32> = data
                .data
                .chunks_exact(8)
                .map(|c| i64::from_ne_bytes(c.try_into().expect("8 bytes")) as i32)
                .collect();
            Arc::new(arrow_array::Date32Array::new(
                ScalarBuffer::from(days),
                nulls,
            ))
        }
        DataType::Dictionary(_, _) => {
            let labels =
                labels.ok_or_else(|| tiledb::Error::new("enumerated column without labels"))?;
            make_array(
                arrow_data::ArrayData::builder(column.arrow_type.clone())
                    .len(cells)
                    .add_buffer(Buffer::from(data.data))
                    .nulls(nulls)
                    .add_child_data(labels.to_data())
                    .build()
                    .map_err(tiledb_err)?,
            )
        }
        primitive => make_array(
            arrow_data::ArrayData::builder(primitive.clone())
                .len(cells)
                .add_buffer(Buffer::from(data.data))
                .nulls(nulls)
                .build()
                .map_err(tiledb_err)?,
        ),
    };
    Ok(array)
}
