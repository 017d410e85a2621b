//! Objects made up in memory, for tests of what is built on SOMA objects without
//! libtiledb: groups, data frames and ND arrays described by their schemas (every read of
//! their data fails unless cells in memory are put behind them: [`with_cells`]), and a store
//! that opens them by URI.

use std::sync::Arc;

use arrow_schema::DataType;

use crate::tiledb::{
    self, Datatype, EnumerationInfo, Fragment, Member, Metadata, MetadataValue, ObjectType, Value,
};

use arrow_array::{DictionaryArray, Float32Array, Float64Array, Int64Array, Int8Array};
use arrow_array::{LargeStringArray, RecordBatch};

use super::{
    ArrayObject, Column, GroupObject, MemoryCells, Objects, SomaObject, SomaSchema, SomaType,
};

/// Objects by URI; opening any other URI fails.
pub struct MemoryStore(pub Vec<Arc<SomaObject>>);

impl MemoryStore {
    pub fn of(objects: Vec<SomaObject>) -> MemoryStore {
        MemoryStore(objects.into_iter().map(Arc::new).collect())
    }
}

impl Objects for MemoryStore {
    fn open(&self, uri: &str, _: Option<ObjectType>) -> tiledb::Result<Arc<SomaObject>> {
        let found = self.0.iter().find(|o| o.uri() == uri).cloned();
        found.ok_or_else(|| tiledb::Error::new(format!("no TileDB group or array at {uri}")))
    }
}

pub fn text_metadata(pairs: &[(&str, &str)]) -> Metadata {
    pairs
        .iter()
        .map(|(k, v)| {
            let value = MetadataValue {
                datatype: Datatype::StringUtf8,
                values: vec![Value::Text((*v).to_owned())],
            };
            ((*k).to_owned(), value)
        })
        .collect()
}

pub fn group(uri: &str, soma_type: &str, members: &[(&str, &str, ObjectType)]) -> SomaObject {
    let metadata = text_metadata(&[("soma_object_type", soma_type)]);
    SomaObject::Group(GroupObject {
        uri: uri.to_owned(),
        soma_type: SomaType::recognise(ObjectType::Group, &metadata),
        metadata,
        members: members
            .iter()
            .map(|(name, uri, object_type)| Member {
                name: (*name).to_owned(),
                uri: (*uri).to_owned(),
                object_type: *object_type,
            })
            .collect(),
    })
}

pub fn column(name: &str, datatype: Datatype, arrow_type: DataType, index: bool) -> Column {
    Column {
        name: name.to_owned(),
        datatype,
        cell_val_num: 1,
        arrow_type,
        nullable: !index,
        is_index: index,
        domain: index.then_some((Value::Int(0), Value::Int(99))),
        schema_domain: index.then_some((Value::Int(0), Value::Int(i64::MAX - 100))),
        tile_extent: index.then_some(Value::Int(10)),
        enumeration: None,
    }
}

/// A data frame of 100 rows: soma_joinid, a float, and a categorical with labels a, b/c.
pub fn dataframe(uri: &str, fragment: &str) -> SomaObject {
    let mut category = column(
        "cell_type",
        Datatype::Int8,
        DataType::Dictionary(Box::new(DataType::Int8), Box::new(DataType::LargeUtf8)),
        false,
    );
    category.enumeration = Some(EnumerationInfo {
        datatype: Datatype::StringUtf8,
        ordered: false,
        values: vec![Value::Text("a".into()), Value::Text("b/c".into())],
    });
    let columns = vec![
        column("soma_joinid", Datatype::Int64, DataType::Int64, true),
        column("x", Datatype::Float64, DataType::Float64, false),
        category,
    ];
    frame_of(uri, fragment, columns, 100)
}

/// A data frame of `columns` (`soma_joinid` first) storing join ids `0..rows` in one
/// fragment, described only.
pub fn frame_of(uri: &str, fragment: &str, columns: Vec<Column>, rows: i64) -> SomaObject {
    let stored = (Value::Int(0), Value::Int(rows - 1));
    let fragments = vec![Fragment {
        uri: fragment.to_owned(),
        cell_num: rows as u64,
        first_dimension: Some(stored.clone()),
    }];
    SomaObject::Array(Arc::new(ArrayObject::described(
        uri,
        SomaType::DataFrame,
        text_metadata(&[("soma_object_type", "SOMADataFrame")]),
        SomaSchema::sparse_frame(columns),
        vec![Some(stored)],
        fragments,
    )))
}

/// A dense ND array of 100 x 10 float32 cells, described only (no data behind it).
pub fn dense_array(uri: &str) -> SomaObject {
    let mut data = column("soma_data", Datatype::Float32, DataType::Float32, false);
    data.nullable = false;
    let mut columns = vec![
        column("soma_dim_0", Datatype::Int64, DataType::Int64, true),
        column("soma_dim_1", Datatype::Int64, DataType::Int64, true),
        data,
    ];
    columns[1].domain = Some((Value::Int(0), Value::Int(9)));
    let schema = SomaSchema {
        dense: true,
        shape: Some(vec![100, 10]),
        tile_cells: None,
        ..SomaSchema::sparse_frame(columns)
    };
    SomaObject::Array(Arc::new(ArrayObject::described(
        uri,
        SomaType::DenseNDArray,
        text_metadata(&[("soma_object_type", "SOMADenseNDArray")]),
        schema,
        vec![
            Some((Value::Int(0), Value::Int(99))),
            Some((Value::Int(0), Value::Int(9))),
        ],
        Vec::new(),
    )))
}

/// A sparse ND array of 100 x 10 float32 cells, described only (no data behind it).
pub fn sparse_array(uri: &str) -> SomaObject {
    let SomaObject::Array(dense) = dense_array(uri) else {
        unreachable!("dense_array makes an array")
    };
    let schema = SomaSchema {
        dense: false,
        ..dense.schema.clone()
    };
    let fragments = vec![Fragment {
        uri: format!("{uri}/frag"),
        cell_num: 300,
        first_dimension: Some((Value::Int(0), Value::Int(99))),
    }];
    SomaObject::Array(Arc::new(ArrayObject::described(
        uri,
        SomaType::SparseNDArray,
        text_metadata(&[("soma_object_type", "SOMASparseNDArray")]),
        schema,
        dense.non_empty_domain.clone(),
        fragments,
    )))
}

/// `object`, an array made here, with `cells` behind it.
pub fn with_cells(object: SomaObject, cells: MemoryCells) -> SomaObject {
    let SomaObject::Array(array) = object else {
        panic!("cells go behind an array")
    };
    let array = Arc::try_unwrap(array).expect("an array made here, not shared yet");
    SomaObject::Array(Arc::new(array.with_cells(cells)))
}

/// Whether row `joinid` of [`dataframe_cells`] holds a null `x`, and a null `cell_type`.
pub fn dataframe_nulls(joinid: i64) -> (bool, bool) {
    (joinid % 10 == 7, joinid % 25 == 24)
}

/// The cells of [`dataframe`], in batches of `batch_rows`: row `j` holds `x = j / 2 + 0.25`
/// and `cell_type` "a" when `j` is even, "b/c" when odd; nulls where [`dataframe_nulls`]
/// says.
pub fn dataframe_cells(batch_rows: usize) -> MemoryCells {
    let SomaObject::Array(frame) = dataframe("mem://cells", "f") else {
        unreachable!("dataframe makes an array")
    };
    let ids: Vec<i64> = (0..100).collect();
    let x = ids
        .iter()
        .map(|&j| (!dataframe_nulls(j).0).then_some(j as f64 / 2.0 + 0.25));
    let codes = (ids.iter()).map(|&j| (!dataframe_nulls(j).1).then_some((j % 2) as i8));
    let labels = LargeStringArray::from_iter_values(["a", "b/c"]);
    let cell_type = DictionaryArray::try_new(Int8Array::from_iter(codes), Arc::new(labels));
    let cells = RecordBatch::try_new(
        frame.schema.arrow_of(&frame.schema.columns),
        vec![
            Arc::new(Int64Array::from(ids.clone())),
            Arc::new(Float64Array::from_iter(x)),
            Arc::new(cell_type.expect("codes within the labels")),
        ],
    );
    MemoryCells::new(cells.expect("the frame's schema"), batch_rows)
}

/// The columns of row `i`'s cells in [`sparse_cells`].
pub fn sparse_row_columns(i: i64) -> [i64; 3] {
    let mut columns = [i % 10, (i + 3) % 10, (i + 7) % 10];
    columns.sort();
    columns
}

/// The value of cell `(i, j)` of [`sparse_cells`].
pub fn sparse_value(i: i64, j: i64) -> f32 {
    (i * 10 + j) as f32 + 0.5
}

/// The 300 cells of [`sparse_array`], in batches of `batch_rows`: three a row, at the
/// columns [`sparse_row_columns`] says, holding [`sparse_value`].
pub fn sparse_cells(batch_rows: usize) -> MemoryCells {
    let SomaObject::Array(matrix) = sparse_array("mem://cells") else {
        unreachable!("sparse_array makes an array")
    };
    let cells: Vec<(i64, i64)> = (0..100)
        .flat_map(|i| sparse_row_columns(i).map(|j| (i, j)))
        .collect();
    let batch = RecordBatch::try_new(
        matrix.schema.arrow_of(&matrix.schema.columns),
        vec![
            Arc::new(Int64Array::from_iter_values(cells.iter().map(|c| c.0))),
            Arc::new(Int64Array::from_iter_values(cells.iter().map(|c| c.1))),
            Arc::new(Float32Array::from_iter_values(
                cells.iter().map(|&(i, j)| sparse_value(i, j)),
            )),
        ],
    );
    MemoryCells::new(batch.expect("the matrix's schema"), batch_rows)
}

/// The value of cell `(i, j)` of [`dense_cells`].
pub fn dense_value(i: i64, j: i64) -> f32 {
    (i * 10 + j) as f32 - 0.75
}

/// Every cell of [`dense_array`]'s 100 x 10 domain, in batches of `batch_rows`, holding
/// [`dense_value`].
pub fn dense_cells(batch_rows: usize) -> MemoryCells {
    let SomaObject::Array(matrix) = dense_array("mem://cells") else {
        unreachable!("dense_array makes an array")
    };
    let cells: Vec<(i64, i64)> = (0..100)
        .flat_map(|i| (0..10).map(move |j| (i, j)))
        .collect();
    let batch = RecordBatch::try_new(
        matrix.schema.arrow_of(&matrix.schema.columns),
        vec![
            Arc::new(Int64Array::from_iter_values(cells.iter().map(|c| c.0))),
            Arc::new(Int64Array::from_iter_values(cells.iter().map(|c| c.1))),
            Arc::new(Float32Array::from_iter_values(
                cells.iter().map(|&(i, j)| dense_value(i, j)),
            )),
        ],
    );
    MemoryCells::new(batch.expect("the matrix's schema"), batch_rows)
}
