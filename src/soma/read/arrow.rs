//! libtiledb's batches as Arrow record batches: each column's buffers taken over without a
//! copy wherever Arrow lays them out as libtiledb does, and enumerated columns as
//! dictionaries over their labels.

use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::Int64Type;
use arrow_array::{
    make_array, new_empty_array, ArrayRef, BooleanArray, LargeBinaryArray, LargeStringArray,
    RecordBatch,
};
use arrow_buffer::{BooleanBuffer, Buffer, NullBuffer, OffsetBuffer, ScalarBuffer};
use arrow_schema::{DataType, SchemaRef};

use crate::tiledb::{self, Batch, ColumnData, EnumerationInfo, Value};

use super::spans::KeptRows;
use crate::soma::error::{Error, Result};
use crate::soma::schema::Column;

/// How the batches of a read's queries become record batches: the read's columns, their
/// schema, and the labels of its enumerated columns (shared by every batch). The threads
/// that read runs ahead share it.
pub(super) struct ArrowBatches {
    pub(super) schema: SchemaRef,
    pub(super) columns: Vec<Column>,
    pub(super) labels: Vec<Option<ArrayRef>>,
}

impl ArrowBatches {
    /// `batch` as a record batch, of the rows `kept` keeps when its query reads a span.
    pub(super) fn record_batch(
        &self,
        batch: Batch,
        kept: Option<&KeptRows>,
    ) -> Result<RecordBatch> {
        let cells = batch.cells;
        let arrays = (self.columns.iter().zip(batch.columns).zip(&self.labels))
            .map(|((column, data), labels)| to_arrow(column, data, cells, labels.as_ref()))
            .collect::<Result<Vec<_>>>()?;
        let batch = RecordBatch::try_new(self.schema.clone(), arrays)?;
        match kept {
            Some(kept) => kept.filter(batch),
            None => Ok(batch),
        }
    }
}

/// The values of an int64 index column (band-sorted reads have only those).
pub(super) fn int64_values(array: &ArrayRef) -> Result<&[i64]> {
    array
        .as_primitive_opt::<Int64Type>()
        .map(|a| a.values().as_ref())
        .ok_or_else(|| Error::invalid("band-sorted reads need int64 index columns"))
}

/// An enumeration's labels as an Arrow array of the dictionary's value type.
pub(crate) fn labels_array(e: &EnumerationInfo) -> Result<ArrayRef> {
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
    } else if e.values.is_empty() {
        // An enumeration without labels (a column of nulls): no buffer to align.
        new_empty_array(&crate::soma::schema::arrow_type(e.datatype, 1))
    } else {
        let dt = crate::soma::schema::arrow_type(e.datatype, 1);
        let bytes: Vec<u8> = e
            .values
            .iter()
            .map(|v| v.to_native(e.datatype))
            .collect::<tiledb::Result<Vec<_>>>()?
            .concat();
        make_array(
            arrow_data::ArrayData::builder(dt)
                .len(e.values.len())
                .add_buffer(values_buffer(bytes))
                .build()?,
        )
    };
    Ok(array)
}

pub(super) fn nulls(data: &ColumnData, cells: usize) -> Option<NullBuffer> {
    let validity = data.validity.as_ref()?;
    let valid = BooleanBuffer::collect_bool(cells, |i| validity.get(i).is_some_and(|&v| v != 0));
    Some(NullBuffer::new(valid)).filter(|n| n.null_count() > 0)
}

/// Arrow large offsets over libtiledb's, taken over without a copy once checked: Arrow
/// requires them to start at or above 0 and never decrease.
pub(super) fn large_offsets(offsets: Vec<u64>, cells: usize) -> Result<OffsetBuffer<i64>> {
    let valid = offsets.len() > cells
        && offsets[0] <= i64::MAX as u64
        && offsets[cells] <= i64::MAX as u64
        && offsets[..=cells].windows(2).all(|w| w[0] <= w[1]);
    if !valid {
        return Err(Error::invalid(
            "libtiledb returned invalid var-sized offsets",
        ));
    }
    let offsets = ScalarBuffer::<i64>::new(Buffer::from_vec(offsets), 0, cells + 1);
    Ok(OffsetBuffer::new(offsets))
}

/// Values as an Arrow buffer: taken over when aligned for any primitive type (as the
/// allocator returns them), else copied into an aligned one.
pub(super) fn values_buffer(bytes: Vec<u8>) -> Buffer {
    if bytes.as_ptr().align_offset(16) == 0 {
        Buffer::from_vec(bytes)
    } else {
        Buffer::from_slice_ref(&bytes)
    }
}

/// One column of a TileDB batch as an Arrow array of the column's type. Values are taken
/// over as they are (no copy) wherever Arrow lays them out as libtiledb does.
pub(super) fn to_arrow(
    column: &Column,
    data: ColumnData,
    cells: usize,
    labels: Option<&ArrayRef>,
) -> Result<ArrayRef> {
    if cells == 0 {
        return Ok(new_empty_array(&column.arrow_type));
    }
    let nulls = nulls(&data, cells);
    let array: ArrayRef = match &column.arrow_type {
        DataType::Boolean => Arc::new(BooleanArray::new(
            BooleanBuffer::collect_bool(cells, |i| data.data[i] != 0),
            nulls,
        )),
        DataType::LargeUtf8 | DataType::LargeBinary => {
            let offsets = data
                .offsets
                .ok_or_else(|| Error::invalid("var-sized column without offsets"))?;
            let offsets = large_offsets(offsets, cells)?;
            let values = values_buffer(data.data);
            if column.arrow_type == DataType::LargeUtf8 {
                Arc::new(LargeStringArray::try_new(offsets, values, nulls)?)
            } else {
                Arc::new(LargeBinaryArray::try_new(offsets, values, nulls)?)
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
                labels.ok_or_else(|| Error::invalid("enumerated column without labels"))?;
            make_array(
                arrow_data::ArrayData::builder(column.arrow_type.clone())
                    .len(cells)
                    .add_buffer(values_buffer(data.data))
                    .nulls(nulls)
                    .add_child_data(labels.to_data())
                    .build()?,
            )
        }
        primitive => make_array(
            arrow_data::ArrayData::builder(primitive.clone())
                .len(cells)
                .add_buffer(values_buffer(data.data))
                .nulls(nulls)
                .build()?,
        ),
    };
    Ok(array)
}
