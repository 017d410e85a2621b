//! Objects made up in memory, for tests of what is built on SOMA objects without
//! libtiledb: groups, data frames and ND arrays described by their schemas (every read of
//! their data fails), and a store that opens them by URI.

use std::sync::Arc;

use arrow_schema::DataType;

use crate::tiledb::{
    self, Datatype, EnumerationInfo, Fragment, Member, Metadata, MetadataValue, ObjectType, Value,
};

use super::{ArrayObject, Column, GroupObject, Objects, SomaObject, SomaSchema, SomaType};

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
    let schema = SomaSchema::sparse_frame(vec![
        column("soma_joinid", Datatype::Int64, DataType::Int64, true),
        column("x", Datatype::Float64, DataType::Float64, false),
        category,
    ]);
    let fragments = vec![Fragment {
        uri: fragment.to_owned(),
        cell_num: 100,
        first_dimension: Some((Value::Int(0), Value::Int(99))),
    }];
    SomaObject::Array(Arc::new(ArrayObject::described(
        uri,
        SomaType::DataFrame,
        text_metadata(&[("soma_object_type", "SOMADataFrame")]),
        schema,
        vec![Some((Value::Int(0), Value::Int(99)))],
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
