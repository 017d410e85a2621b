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

#[cfg(test)]
mod tests {
    use arrow_array::cast::AsArray;
    use arrow_array::types::{Float32Type, Int64Type};
    use arrow_array::Array as _;

    use super::*;
    use crate::soma::read::test_arrays::*;
    use crate::tiledb::Datatype;

    #[test]
    fn offsets_that_start_at_zero_and_never_decrease_are_taken_for_the_cells_read() {
        let offsets = large_offsets(vec![0, 3, 3, 7, 99], 3).unwrap();
        // `cells + 1` offsets: what lies past them is not the read's.
        assert_eq!(offsets.as_ref(), &[0, 3, 3, 7]);
        let empty = large_offsets(vec![0], 0).unwrap();
        assert_eq!(empty.as_ref(), &[0]);
    }

    #[test]
    fn offsets_that_decrease_or_are_negative_as_arrows_or_too_few_are_an_error() {
        // Arrow's offsets are i64: above i64::MAX is negative to it.
        for (offsets, cells) in [
            (vec![0, 5, 4], 2),
            (vec![u64::MAX, u64::MAX], 1),
            (vec![0, 1 << 63], 1),
            (vec![0, 1], 2),
            (vec![], 0),
        ] {
            assert!(
                large_offsets(offsets.clone(), cells).is_err(),
                "{offsets:?} for {cells} cells"
            );
        }
    }

    #[test]
    fn a_values_buffer_holds_the_bytes_aligned_for_any_primitive() {
        for len in [0, 1, 3, 8, 17, 64, 1000] {
            let bytes: Vec<u8> = (0..len).map(|i| (i * 7) as u8).collect();
            let buffer = values_buffer(bytes.clone());
            assert_eq!(buffer.as_slice(), bytes.as_slice(), "{len}");
            assert_eq!(buffer.as_ptr().align_offset(16), 0, "{len}");
        }
    }

    #[test]
    fn labels_are_an_array_of_the_enumerations_value_type() {
        let text = EnumerationInfo {
            datatype: Datatype::StringUtf8,
            ordered: false,
            values: vec![Value::Text("a".into()), Value::Text("b/c".into())],
        };
        let labels = labels_array(&text).unwrap();
        let labels: Vec<Option<&str>> = labels.as_string::<i64>().iter().collect();
        assert_eq!(labels, [Some("a"), Some("b/c")]);
        let numbers = EnumerationInfo {
            datatype: Datatype::Int64,
            ordered: true,
            values: vec![Value::Int(-3), Value::Int(40)],
        };
        let labels = labels_array(&numbers).unwrap();
        assert_eq!(
            labels.as_primitive::<Int64Type>().values().as_ref(),
            &[-3, 40]
        );
        let none = EnumerationInfo {
            values: Vec::new(),
            ..numbers
        };
        assert_eq!(labels_array(&none).unwrap().len(), 0);
    }

    #[test]
    fn a_nullable_column_is_null_where_its_validity_is_zero() {
        let v = value_column("v");
        let values: Vec<u8> = [1.5f32, 2.5, 3.5]
            .iter()
            .flat_map(|f| f.to_ne_bytes())
            .collect();
        let data = ColumnData {
            data: values,
            offsets: None,
            validity: Some(vec![1, 0, 7]),
        };
        let array = to_arrow(&v, data, 3, None).unwrap();
        let floats: Vec<Option<f32>> = array.as_primitive::<Float32Type>().iter().collect();
        assert_eq!(floats, [Some(1.5), None, Some(3.5)]);
    }

    #[test]
    fn a_text_column_is_cut_at_its_offsets_and_a_bad_one_is_an_error() {
        let name = text_index("name");
        let data = |offsets: Vec<u64>| ColumnData {
            data: b"abcdef".to_vec(),
            offsets: Some(offsets),
            validity: None,
        };
        let array = to_arrow(&name, data(vec![0, 1, 1, 6]), 3, None).unwrap();
        let texts: Vec<Option<&str>> = array.as_string::<i64>().iter().collect();
        assert_eq!(texts, [Some("a"), Some(""), Some("bcdef")]);
        assert!(to_arrow(&name, data(vec![0, 4, 2, 6]), 3, None).is_err());
        let no_offsets = ColumnData {
            offsets: None,
            ..data(vec![])
        };
        assert!(to_arrow(&name, no_offsets, 3, None).is_err());
    }

    #[test]
    fn an_enumerated_column_is_a_dictionary_over_its_labels() {
        let enumeration = EnumerationInfo {
            datatype: Datatype::StringUtf8,
            ordered: false,
            values: vec![Value::Text("a".into()), Value::Text("b/c".into())],
        };
        let column = Column {
            datatype: Datatype::Int8,
            arrow_type: DataType::Dictionary(
                Box::new(DataType::Int8),
                Box::new(DataType::LargeUtf8),
            ),
            enumeration: Some(enumeration.clone()),
            ..value_column("cell_type")
        };
        let labels = labels_array(&enumeration).unwrap();
        let data = ColumnData {
            data: vec![1, 0, 1],
            offsets: None,
            validity: Some(vec![1, 1, 0]),
        };
        let array = to_arrow(&column, data, 3, Some(&labels)).unwrap();
        let plain = arrow_cast::cast(&array, &DataType::LargeUtf8).unwrap();
        let texts: Vec<Option<&str>> = plain.as_string::<i64>().iter().collect();
        assert_eq!(texts, [Some("b/c"), Some("a"), None]);
        let data = ColumnData {
            data: vec![0],
            offsets: None,
            validity: None,
        };
        assert!(
            to_arrow(&column, data, 1, None).is_err(),
            "labels are needed"
        );
    }
}
