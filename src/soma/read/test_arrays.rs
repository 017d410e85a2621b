//! Arrays described for the read planner's unit tests (no data behind them).

use crate::soma::object::ArrayObject;
use crate::soma::schema::Column;
use crate::tiledb::{self, Value};
use arrow_schema::DataType;

/// An int64 index column with a current domain of 0..=999 and tiles of 100 rows, laid
/// out from 0.
pub(super) fn int_index(name: &str) -> Column {
    Column {
        name: name.to_owned(),
        datatype: tiledb::Datatype::Int64,
        cell_val_num: 1,
        arrow_type: DataType::Int64,
        nullable: false,
        is_index: true,
        domain: Some((Value::Int(0), Value::Int(999))),
        schema_domain: Some((Value::Int(0), Value::Int(i64::MAX - 100))),
        tile_extent: Some(Value::Int(100)),
        enumeration: None,
    }
}

/// A string index column.
pub(super) fn text_index(name: &str) -> Column {
    Column {
        datatype: tiledb::Datatype::StringAscii,
        cell_val_num: tiledb::VAR_NUM,
        arrow_type: DataType::LargeUtf8,
        domain: None,
        schema_domain: None,
        tile_extent: None,
        ..int_index(name)
    }
}

/// A nullable float32 value column.
pub(super) fn value_column(name: &str) -> Column {
    Column {
        datatype: tiledb::Datatype::Float32,
        arrow_type: DataType::Float32,
        nullable: true,
        is_index: false,
        domain: None,
        schema_domain: None,
        tile_extent: None,
        ..int_index(name)
    }
}

/// A sparse array of `columns`, row-major, described only, its first index column
/// storing rows 0..=999.
pub(super) fn sparse(columns: Vec<Column>) -> ArrayObject {
    let index = columns.iter().filter(|c| c.is_index).count();
    let mut stored = vec![None; index];
    stored[0] = Some((Value::Int(0), Value::Int(999)));
    ArrayObject::described(
        "mem://array",
        crate::soma::SomaType::SparseNDArray,
        tiledb::Metadata::new(),
        crate::soma::SomaSchema::sparse_frame(columns),
        stored,
        Vec::new(),
    )
}

pub(super) fn range(lo: i64, hi: i64) -> (Value, Value) {
    (Value::Int(lo), Value::Int(hi))
}

pub(super) fn text(value: &str) -> (Value, Value) {
    (Value::Text(value.into()), Value::Text(value.into()))
}
