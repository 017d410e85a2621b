//! The adapter between the AnnData elements of [`crate::soma::anndata`] and the containers
//! that hold them ([`super::h5ad`] and [`super::zarr`]): the cache key of a measurement's
//! AnnData, a frame's index and columns as AnnData encodes them, the type a matrix's values
//! are written in, how an uns data frame is indexed and what each uns metadata value
//! becomes (what each uns array is, [`anndata::uns_element`] reads), and where the entries
//! per row of CSR matrices read in blocks are kept (the content cache). Both containers take
//! these from here, so that an `.h5ad` and a Zarr store of one measurement hold the same
//! AnnData.

use std::io;
use std::sync::Arc;

use arrow_array::ArrayRef;
use arrow_schema::DataType;

use crate::format::h5ad::{Categories, ColumnSpec, FrameIndex};
use log::warn;

use crate::soma::anndata::RowCountsKept;
use crate::soma::anndata::{self, AnnDataElements, FrameElement, FrameRows, Layout};
use crate::soma::{ArrayObject, Selection};
use crate::tiledb::{MetadataValue, Value};

use super::super::cache::{CacheKey, ContentCache};
use super::super::data::{content_key, generate_whole};
use crate::names::file_name;

/// The cache key of content made of a measurement's AnnData elements (`kind`: which
/// container); `describe` tells which part of it. Made from every array read, the names they
/// are stored under, the uns collections' metadata and members, and the cells selected.
pub(super) fn measurement_key(
    kind: &str,
    elements: &AnnDataElements,
    describe: impl FnOnce(&mut crate::digest::Digest),
) -> CacheKey {
    let m = &elements.measurement;
    let arrays = std::iter::once(&*elements.obs.array).chain(m.arrays());
    content_key(arrays, |digest| {
        digest.text(kind).text(&m.name);
        for (part, members) in [
            ("X", &m.layers),
            ("obsm", &m.obsm),
            ("varm", &m.varm),
            ("obsp", &m.obsp),
            ("varp", &m.varp),
        ] {
            digest.text(part).number(members.len() as u64);
            for member in members {
                digest.text(&member.name);
            }
        }
        if let Some(uns) = &m.uns {
            uns.fingerprints(&mut |fingerprint| {
                digest.text(fingerprint);
            });
        }
        elements.obs.rows.digest_into(digest);
        elements.var.rows.digest_into(digest);
        describe(digest);
    })
}

/// How a frame of the AnnData is indexed in its container: by the column its element names
/// (see [`anndata::index_column`]), else by the join ids as text (to_anndata's row numbers,
/// which AnnData turns into text, are the join ids of a whole obs written by tiledbsoma).
pub(super) fn frame_index(frame: &FrameElement) -> FrameIndex {
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
pub(super) fn frame_columns(
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
pub(super) fn scan_frame(
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
pub(super) fn matrix_type(array: &ArrayObject, layout: Layout) -> io::Result<(DataType, bool)> {
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
pub(super) fn uns_frame_index(index: Option<(String, bool)>) -> FrameIndex {
    match index {
        Some((name, named)) => FrameIndex::Column { name, named },
        None => FrameIndex::RowNumbers,
    }
}

/// A metadata value of uns as values, and whether it is a scalar: one string or number is
/// (all in an array of one), several are an array (a blob an array of bytes).
pub(super) fn uns_value(value: &MetadataValue) -> (ArrayRef, bool) {
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

/// Where the entries per row of a container's CSR matrices are kept: in the content cache,
/// with the files, as little-endian u64s.
pub(super) struct CountsInCache(pub Arc<ContentCache>);

impl std::fmt::Debug for CountsInCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("entries per row in the content cache")
    }
}

impl RowCountsKept for CountsInCache {
    fn kept(&self, name: &[&str]) -> io::Result<Option<Vec<u64>>> {
        let key = CacheKey::new(name.iter().copied());
        let Some((file, size)) = self.0.open_entry(&key) else {
            return Ok(None);
        };
        let mut bytes = Vec::with_capacity(size as usize);
        io::Read::read_to_end(&mut &file, &mut bytes)?;
        let counts = bytes
            .chunks_exact(8)
            .map(|b| u64::from_le_bytes(b.try_into().expect("8 bytes")))
            .collect();
        Ok(Some(counts))
    }

    fn keep(&self, name: &[&str], what: &str, counts: &[u64]) {
        let key = CacheKey::new(name.iter().copied());
        let kept = generate_whole(&self.0, &key, what, |out| {
            counts
                .iter()
                .try_for_each(|count| out.write_all(&count.to_le_bytes()))
        });
        if let Err(e) = kept {
            warn!("{what} cannot be kept in the cache: {e:?}");
        }
    }
}
