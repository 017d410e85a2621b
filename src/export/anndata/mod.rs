//! What an AnnData container holds and how it is assembled, shared by the `.h5ad`
//! ([`super::h5ad`]) and the Zarr store ([`super::zarr`]): a frame's index and columns as
//! AnnData encodes them, the type a matrix's values are written in, how an uns data frame is
//! indexed and what each uns metadata value becomes (what each uns array is,
//! [`anndata::uns_element`] reads), and about how many bytes each element comes to. Both
//! containers take these from here, so that an `.h5ad` and a Zarr store of one measurement
//! hold the same AnnData. The h5ad's assembly (which elements are read early, on which
//! threads, and the matrices written beside X) is in [`early`] and [`matrices`].

pub mod early;
pub mod matrices;

use std::io;
use std::sync::Arc;

use arrow_array::ArrayRef;
use arrow_schema::DataType;

use crate::format::h5ad::{Categories, ColumnSpec, FrameIndex};
use crate::names::file_name;
use crate::soma::anndata::{
    self, AnnDataExperiment, AnnDataMeasurement, FrameElement, FrameRows, Layout, MatrixElement,
    UnsCollection, UnsMember,
};
use crate::soma::{estimated_cells, ArrayObject, Selection};
use crate::tiledb::{MetadataValue, Value};

/// How a frame of the AnnData is indexed in its container: by the column its element names
/// (see [`anndata::index_column`]), else by the join ids as text (to_anndata's row numbers,
/// which AnnData turns into text, are the join ids of a whole obs written by tiledbsoma).
pub fn frame_index(frame: &FrameElement) -> FrameIndex {
    match &frame.index {
        Some((name, named)) => FrameIndex::Column {
            name: name.clone(),
            named: *named,
        },
        None => FrameIndex::Column {
            name: "soma_joinid".into(),
            named: false,
        },
    }
}

/// The columns of a data frame as AnnData holds them: every column but `soma_joinid` and
/// the index's, in schema order, each with its name in the file (named like members,
/// percent-encoded where HDF5 cannot hold the name).
pub fn frame_columns(
    frame: &ArrayObject,
    rows: &FrameRows,
    index: &FrameIndex,
) -> io::Result<Vec<(ColumnSpec, String)>> {
    let index_column = match index {
        FrameIndex::Column { name, .. } => Some(name.as_str()),
        FrameIndex::RowNumbers => None,
    };
    let dropped = |column: &str| {
        column == "soma_joinid" && frame.soma_type.is_dataframe() || Some(column) == index_column
    };
    frame
        .schema
        .columns
        .iter()
        .filter(|c| !dropped(&c.name))
        .map(|c| {
            let categories =
                anndata::categories(c)?.map(|(labels, ordered)| Categories { labels, ordered });
            let spec = ColumnSpec {
                name: c.name.clone(),
                data_type: c.arrow_type.clone(),
                has_nulls: rows.columns_with_nulls.contains(&c.name),
                categories,
            };
            Ok((spec, file_name(&c.name)))
        })
        .collect()
}

/// The first pass over a data frame's rows (those `rows` selects) that lays it out: their
/// join ids, and which of the columns that [`frame_columns`] lays out by their nulls (those
/// that can hold one and are encoded by whether they do) hold one. No other column is read.
pub fn scan_frame(
    frame: &ArrayObject,
    rows: &Selection,
    index: &FrameIndex,
) -> io::Result<FrameRows> {
    let nullable = |name: &str| {
        frame
            .schema
            .columns
            .iter()
            .any(|c| c.name == name && c.nullable)
    };
    let null_checked: Vec<String> = frame_columns(frame, &FrameRows::default(), index)?
        .into_iter()
        .filter(|(spec, _)| nullable(&spec.name) && spec.encoding_depends_on_nulls())
        .map(|(spec, _)| spec.name)
        .collect();
    Ok(anndata::scan_rows(frame, rows, &null_checked)?)
}

/// The type of a matrix's values as written, and whether it is written dense. Booleans of a
/// dense array are uint8, as tiledbsoma reads them.
pub fn matrix_type(array: &ArrayObject, layout: Layout) -> io::Result<(DataType, bool)> {
    let mut value_type = array
        .schema
        .columns
        .iter()
        .rfind(|c| !c.is_index)
        .map(|c| c.arrow_type.clone())
        .ok_or_else(|| io::Error::other(format!("{}: no values", array.uri)))?;
    let dense = match layout {
        Layout::AsStored => array.schema.dense,
        Layout::Dense => true,
        Layout::Sparse => false,
    };
    if array.schema.dense && value_type == DataType::Boolean {
        value_type = DataType::UInt8;
    }
    Ok((value_type, dense))
}

/// How an uns data frame read whole is indexed in its container: by the column its
/// element names ([`anndata::uns_element`]), else by row numbers.
pub fn uns_frame_index(index: Option<(String, bool)>) -> FrameIndex {
    match index {
        Some((name, named)) => FrameIndex::Column { name, named },
        None => FrameIndex::RowNumbers,
    }
}

/// A metadata value of uns as values, and whether it is a scalar: one string or number is
/// (all in an array of one), several are an array (a blob an array of bytes).
pub fn uns_value(value: &MetadataValue) -> (ArrayRef, bool) {
    use arrow_array::{
        BooleanArray, Float64Array, Int64Array, LargeStringArray, UInt64Array, UInt8Array,
    };
    let values = value.values.as_slice();
    let scalar = matches!(values, [v] if !matches!(v, Value::Bytes(_)));
    let array: ArrayRef = match values.first() {
        Some(Value::UInt(_)) => Arc::new(UInt64Array::from_iter(values.iter().map(|v| match v {
            Value::UInt(n) => Some(*n),
            _ => None,
        }))),
        Some(Value::Float(_)) => {
            Arc::new(Float64Array::from_iter(values.iter().map(|v| match v {
                Value::Float(x) => Some(*x),
                _ => None,
            })))
        }
        Some(Value::Bool(_)) => Arc::new(BooleanArray::from_iter(values.iter().map(|v| match v {
            Value::Bool(b) => Some(*b),
            _ => None,
        }))),
        Some(Value::Text(_)) => Arc::new(LargeStringArray::from_iter(values.iter().map(
            |v| match v {
                Value::Text(s) => Some(s.as_str()),
                _ => None,
            },
        ))),
        Some(Value::Bytes(_)) => Arc::new(UInt8Array::from_iter_values(values.iter().flat_map(
            |v| match v {
                Value::Bytes(b) => b.clone(),
                _ => Vec::new(),
            },
        ))),
        Some(Value::Int(_)) | None => {
            Arc::new(Int64Array::from_iter(values.iter().map(|v| match v {
                Value::Int(n) => Some(*n),
                _ => None,
            })))
        }
    };
    (array, scalar)
}

/// An experiment of obs and the one measurement `m`, as
/// [`anndata::AnnDataElements::of`] takes it.
pub fn experiment_of(obs: &Arc<ArrayObject>, m: &Arc<AnnDataMeasurement>) -> AnnDataExperiment {
    AnnDataExperiment {
        obs: obs.clone(),
        measurements: vec![m.clone()],
    }
}

/// The arrays of an uns collection and of the collections in it.
pub fn uns_arrays<'a>(collection: &'a UnsCollection, into: &mut Vec<&'a ArrayObject>) {
    for (_, member) in collection.members_kept() {
        match member {
            UnsMember::Collection(inner) => uns_arrays(inner, into),
            UnsMember::Array(array) => into.push(array),
        }
    }
}

/// About how many bytes a value and its index take in an h5ad file, to estimate its size.
const H5AD_VALUE_BYTES: u64 = 8;
/// The bytes of a sparse matrix's column index.
const CSR_INDEX_BYTES: u64 = 4;

/// About how many bytes an array comes to in an h5ad file (libtiledb's estimate of its
/// stored cells, or a dense array's domain, at [`value_bytes`] a cell).
pub fn array_bytes(array: &ArrayObject) -> crate::soma::Result<u64> {
    let cells = estimated_cells(array, &Selection::default())?;
    Ok(cells.saturating_mul(value_bytes(array)))
}

/// About how many bytes a cell of an array comes to in an h5ad file: a value and an index
/// per column.
pub fn value_bytes(array: &ArrayObject) -> u64 {
    H5AD_VALUE_BYTES * array.schema.columns.len() as u64
}

/// How many bytes a cell of a matrix takes in an h5ad file: its value, and a sparse one's
/// column index (int32, [`crate::format::h5ad::CsrWriter`]).
pub fn matrix_cell_bytes(matrix: &MatrixElement) -> u64 {
    match matrix_type(&matrix.array, matrix.layout) {
        Ok((value_type, dense)) => {
            let value = value_type
                .primitive_width()
                .map_or(H5AD_VALUE_BYTES, |w| w as u64);
            value + if dense { 0 } else { CSR_INDEX_BYTES }
        }
        Err(_) => value_bytes(&matrix.array),
    }
}

#[cfg(test)]
mod tests {
    use arrow_array::cast::AsArray;
    use arrow_array::types::{Int64Type, UInt8Type};

    use super::*;
    use crate::export::fixtures::{array, elements};
    use crate::soma::fixtures::{dense_array, sparse_array};
    use crate::tiledb::Datatype;

    fn metadata(values: Vec<Value>) -> MetadataValue {
        MetadataValue {
            datatype: Datatype::Int64,
            values,
        }
    }

    #[test]
    fn one_uns_value_is_a_scalar_and_several_or_a_blob_an_array() {
        let (text, scalar) = uns_value(&metadata(vec![Value::Text("x".into())]));
        assert!(scalar);
        assert_eq!(text.as_string::<i64>().value(0), "x");
        let (numbers, scalar) = uns_value(&metadata(vec![Value::Int(1), Value::Int(2)]));
        assert!(!scalar);
        assert_eq!(numbers.as_primitive::<Int64Type>().values(), &[1, 2]);
        let (bytes, scalar) = uns_value(&metadata(vec![Value::Bytes(vec![7, 8, 9])]));
        assert!(!scalar, "a blob is an array of its bytes");
        assert_eq!(bytes.as_primitive::<UInt8Type>().values(), &[7, 8, 9]);
    }

    #[test]
    fn a_frame_without_a_recorded_index_is_indexed_by_its_join_ids_unnamed() {
        let e = elements();
        let FrameIndex::Column { name, named } = frame_index(&e.obs) else {
            panic!("obs is indexed by a column")
        };
        assert_eq!((name.as_str(), named), ("soma_joinid", false));
        assert!(matches!(uns_frame_index(None), FrameIndex::RowNumbers));
    }

    #[test]
    fn a_frame_s_columns_leave_out_the_join_ids_and_keep_their_categories() {
        let e = elements();
        let columns = frame_columns(&e.obs.array, &FrameRows::default(), &frame_index(&e.obs))
            .expect("the columns are laid out");
        let names: Vec<&str> = columns.iter().map(|(_, name)| name.as_str()).collect();
        assert_eq!(names, ["x", "cell_type"]);
        let categories = columns[1]
            .0
            .categories
            .as_ref()
            .expect("cell_type is categorical");
        let labels = categories.labels.as_string::<i64>();
        assert_eq!(labels.iter().flatten().collect::<Vec<_>>(), ["a", "b/c"]);
    }

    #[test]
    fn a_matrix_is_written_dense_as_stored_unless_its_layout_says_otherwise() {
        let (dense, sparse) = (array(dense_array("d")), array(sparse_array("s")));
        let written = |array: &ArrayObject, layout| matrix_type(array, layout).unwrap();
        assert_eq!(written(&dense, Layout::AsStored), (DataType::Float32, true));
        assert_eq!(
            written(&sparse, Layout::AsStored),
            (DataType::Float32, false)
        );
        assert_eq!(written(&sparse, Layout::Dense), (DataType::Float32, true));
        assert_eq!(written(&dense, Layout::Sparse), (DataType::Float32, false));
    }

    #[test]
    fn a_sparse_matrix_s_cell_counts_its_column_index_too() {
        let e = elements();
        assert_eq!(matrix_cell_bytes(&e.x), 4 + 4, "float32 and an int32 index");
        let obsm = &e
            .mappings
            .iter()
            .find(|m| m.name == "obsm")
            .unwrap()
            .members[0];
        assert_eq!(matrix_cell_bytes(obsm), 4, "dense float32");
        assert_eq!(value_bytes(&e.obs.array), 3 * 8, "three columns");
    }

    #[test]
    fn a_measurement_s_experiment_is_obs_and_it_alone() {
        let e = elements();
        let experiment = experiment_of(&e.obs.array, &e.measurement);
        assert_eq!(experiment.obs.uri, "obs");
        assert_eq!(experiment.measurements.len(), 1);
        assert_eq!(experiment.measurements[0].name, "RNA");
    }
}
