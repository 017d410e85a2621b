//! `anndata/<measurement>.h5ad` and `anndata/by/<column>/<label>/<measurement>.h5ad`: a
//! measurement of an experiment (all its cells, or one category's) as anndata's h5ad, equal
//! to what tiledbsoma's `to_anndata` reads: obs and var with their index, X from the first
//! layer (`data` when there is one) and every other layer under `layers`, obsm, varm, obsp,
//! varp and uns.
//!
//! An HDF5 file cannot be streamed (libhdf5 writes its metadata last, wherever it likes), so
//! it is generated whole when opened, and by a `stat` when it is estimated below
//! `--materialize-limit` or with `--exact-sizes`, into the cache; its size is known once it
//! is there. Matrices go from the TileDB read into the HDF5
//! datasets batch by batch: what a generation holds is a batch, a chunk or block per dataset,
//! and a few numbers per cell and gene (join ids, positions, entries per row).

use std::io;
use std::path::Path;
use std::sync::Arc;

use arrow_array::{Array as _, ArrayRef, BooleanArray, RecordBatch};
use arrow_schema::DataType;

use crate::format::h5ad::{
    self, Categories, ColumnSpec, CsrWriter, DenseWriter, FrameIndex, FrameWriter, H5ad,
};
use crate::soma::anndata::{
    self, AnnDataExperiment, AnnDataMeasurement, Axis, Category, FrameRows, Named, UnsCollection,
    UnsFrame, UnsMember,
};
use crate::soma::{ArrayObject, Selection, SomaType};
use crate::tiledb::{MetadataValue, Value};

use super::super::cache::CacheKey;
use super::super::data::{content_key, estimated_bytes, generate_whole_at, open_generated, small};
use super::super::error::FsResult;
use super::super::names::file_name;
use super::super::open_file::OpenFile;
use super::{FileContext, FileKind};

type HdfGroup = hdf5_metno::Group;

/// The cache key of content made of a measurement's AnnData (`kind`: which container), or
/// of one category of its cells; `describe` tells which part of it. Made from every array
/// read, the names they are stored under, the uns collections' metadata and members, and
/// the category.
pub(super) fn measurement_key(
    kind: &str,
    experiment: &AnnDataExperiment,
    m: &AnnDataMeasurement,
    category: &Category,
    describe: impl FnOnce(&mut crate::digest::Digest),
) -> CacheKey {
    let arrays = std::iter::once(&*experiment.obs).chain(m.arrays());
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
        let cells = Selection {
            equals: category.clone(),
            ..Selection::default()
        };
        cells.digest_into(digest);
        describe(digest);
    })
}

/// About how many bytes a value and its index take in an h5ad file, to estimate its size.
const H5AD_VALUE_BYTES: u64 = 8;

/// A measurement (or one category of its cells) as an h5ad file.
#[derive(Debug)]
pub struct H5adFile {
    experiment: Arc<AnnDataExperiment>,
    measurement: Arc<AnnDataMeasurement>,
    category: Category,
    key: CacheKey,
}

impl H5adFile {
    pub fn new(
        experiment: Arc<AnnDataExperiment>,
        measurement: Arc<AnnDataMeasurement>,
        category: Category,
    ) -> H5adFile {
        let key = measurement_key("h5ad", &experiment, &measurement, &category, |_| {});
        H5adFile {
            experiment,
            measurement,
            category,
            key,
        }
    }

    fn what(&self) -> String {
        format!(
            "{} measurement {} as h5ad ({:?})",
            self.experiment.obs.uri, self.measurement.name, self.category
        )
    }

    /// About how many bytes the file comes to: every value of every array it is read from,
    /// and an index beside each (a category's cells are not counted before they are read).
    fn estimated_bytes(&self) -> crate::soma::Result<u64> {
        let arrays = std::iter::once(&*self.experiment.obs).chain(self.measurement.arrays());
        arrays
            .map(|a| estimated_bytes(a, H5AD_VALUE_BYTES * a.schema.columns.len() as u64))
            .sum()
    }

    /// Generates the file whole into the cache.
    fn generate(&self, cx: &FileContext) -> FsResult<()> {
        generate_whole_at(&cx.options.cache, &self.key, &self.what(), |path| {
            self.write(path)
        })
    }

    /// Writes the AnnData to a new HDF5 file at `path`.
    fn write(&self, path: &Path) -> io::Result<()> {
        let file = H5ad::create(path)?;
        let root = file.root();
        let cells = write_frame(root, "obs", &self.experiment.obs, &self.category, "obs_id")?;
        let genes = write_frame(root, "var", &self.measurement.var, &None, "var_id")?;
        // A category's cells: only their rows of the matrices along obs are read.
        let only = self.category.is_some().then(|| cells.joinids.runs());
        let only = only.as_deref();
        let obs = Axis::Joinids(&cells.joinids);
        let var = Axis::Joinids(&genes.joinids);
        let m = &*self.measurement;

        let (x, others) = m
            .layers
            .split_first()
            .ok_or_else(|| io::Error::other("a measurement without layers"))?;
        let as_stored = Layout::AsStored;
        write_matrix(root, "X", &x.array, only, (obs, var), as_stored)?;
        write_matrices(root, "layers", others, only, (obs, var), as_stored)?;
        // obsm and varm are dense, as to_anndata reads them. The width of a sparse one is
        // reckoned from the whole of obs.
        let all_cells = match self.category {
            None => obs.len() as u64,
            Some(_) => self
                .experiment
                .obs
                .stored_cells()
                .map_err(io::Error::other)?,
        };
        for (part, members, rows, along, count) in [
            ("obsm", &m.obsm, obs, only, all_cells),
            ("varm", &m.varm, var, None, var.len() as u64),
        ] {
            let group = h5ad::mapping(root, part)?;
            for member in members {
                let width = anndata::matrix_width(&member.array, count)? as usize;
                let axes = (rows, Axis::Indices(width));
                let name = file_name(&member.name);
                write_matrix(&group, &name, &member.array, along, axes, Layout::Dense)?;
            }
        }
        write_matrices(root, "obsp", &m.obsp, only, (obs, obs), Layout::Sparse)?;
        write_matrices(root, "varp", &m.varp, None, (var, var), Layout::Sparse)?;
        let uns = h5ad::mapping(root, "uns")?;
        if let Some(collection) = &m.uns {
            write_uns(&uns, collection)?;
        }
        drop(uns);
        file.close()
    }
}

/// Writes a data frame (the rows of `category`) as obs or var, and returns what its first
/// pass found.
fn write_frame(
    root: &HdfGroup,
    name: &str,
    frame: &ArrayObject,
    category: &Category,
    id_column: &str,
) -> io::Result<FrameRows> {
    let index = frame_index(frame, id_column);
    let rows = scan_frame(frame, category, &index)?;
    let mut writer = frame_writer(root, name, frame, &rows, index)?;
    anndata::read_rows(frame, category, |batch| writer.append(batch))?;
    writer.finish()?;
    Ok(rows)
}

/// Writes each of `members` into the mapping `part` (see [`write_matrix`]).
fn write_matrices(
    root: &HdfGroup,
    part: &str,
    members: &[Named],
    only: Option<&[(i64, i64)]>,
    axes: (Axis, Axis),
    layout: Layout,
) -> io::Result<()> {
    let group = h5ad::mapping(root, part)?;
    for member in members {
        let name = file_name(&member.name);
        write_matrix(&group, &name, &member.array, only, axes, layout)?;
    }
    Ok(())
}

impl FileKind for H5adFile {
    fn size(&self, cx: &FileContext) -> FsResult<Option<u64>> {
        Ok(cx.options.cache.size(&self.key))
    }

    fn open(&self, cx: &FileContext) -> FsResult<OpenFile> {
        self.generate(cx)?;
        open_generated(&cx.options.cache, &self.key, &self.what())
    }

    /// A small file, or any with `--exact-sizes`: `ls -l anndata/` generates the small
    /// measurements and leaves the large ones for their first open.
    fn sized_on_stat(&self, cx: &FileContext) -> bool {
        cx.options.exact_sizes || small(&cx.options, self.estimated_bytes())
    }

    fn settle_size(&self, cx: &FileContext) -> FsResult<()> {
        self.generate(cx)
    }
}

/// What a data frame's index is: the column to_anndata takes (see
/// [`anndata::index_column`]), else the join ids as text (to_anndata's row numbers, which
/// AnnData turns into text, are the join ids of a whole obs written by tiledbsoma).
pub(super) fn frame_index(frame: &ArrayObject, fallback: &str) -> FrameIndex {
    match anndata::index_column(frame, fallback) {
        Some((name, named)) => FrameIndex::Column { name, named },
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

/// The first pass over a data frame's rows (those of `category`) that lays it out: their
/// join ids, and which of the columns that [`frame_columns`] lays out by their nulls (those
/// that can hold one and are encoded by whether they do) hold one. No other column is read.
pub(super) fn scan_frame(
    frame: &ArrayObject,
    category: &Category,
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
    Ok(anndata::scan_rows(frame, category, &null_checked)?)
}

/// A writer of a data frame's rows (see [`frame_columns`]).
fn frame_writer(
    parent: &HdfGroup,
    name: &str,
    frame: &ArrayObject,
    rows: &FrameRows,
    index: FrameIndex,
) -> io::Result<FrameWriter> {
    let columns = frame_columns(frame, rows, &index)?;
    FrameWriter::create(parent, name, rows.count, index, &columns)
}

/// How a matrix is written: as it is stored (a sparse array as CSR, a dense one dense), or
/// always dense, or always CSR.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Layout {
    AsStored,
    Dense,
    Sparse,
}

/// The writer of one matrix.
enum Matrix {
    Csr(CsrWriter),
    Dense(DenseWriter),
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

/// Writes a two-dimensional array as a matrix: its cells in the rows `only` (runs of join ids; all
/// when `None`), placed along `axes`. Cells outside the axes are left out. Booleans of a
/// dense array are written as uint8, as tiledbsoma reads them.
fn write_matrix(
    parent: &HdfGroup,
    name: &str,
    array: &ArrayObject,
    only: Option<&[(i64, i64)]>,
    (rows, cols): (Axis, Axis),
    layout: Layout,
) -> io::Result<()> {
    let (value_type, dense) = matrix_type(array, layout)?;
    let shape = [rows.len(), cols.len()];
    let mut matrix = if dense {
        Matrix::Dense(DenseWriter::create(parent, name, shape, &value_type)?)
    } else {
        let expected = array.stored_cells().map_err(io::Error::other)?;
        Matrix::Csr(CsrWriter::create(
            parent,
            name,
            shape,
            &value_type,
            expected,
        )?)
    };
    anndata::read_cells(array, only, |row_ids, col_ids, values| {
        let mut keep = Vec::with_capacity(row_ids.len());
        let (mut at_rows, mut at_cols) = (Vec::new(), Vec::new());
        for (&r, &c) in row_ids.iter().zip(col_ids) {
            let place = rows.at(r).zip(cols.at(c));
            keep.push(place.is_some());
            if let Some((r, c)) = place {
                at_rows.push(r);
                at_cols.push(c);
            }
        }
        let mut values = if at_rows.len() == values.len() {
            values.clone()
        } else {
            arrow_select::filter::filter(values, &BooleanArray::from(keep))
                .map_err(io::Error::other)?
        };
        if values.data_type() != &value_type {
            values = arrow_cast::cast(&values, &value_type).map_err(io::Error::other)?;
        }
        match &mut matrix {
            Matrix::Csr(csr) => csr.append(&at_rows, &at_cols, &values),
            Matrix::Dense(block) => block.put(&at_rows, &at_cols, &values),
        }
    })?;
    match matrix {
        Matrix::Csr(csr) => csr.finish(),
        Matrix::Dense(block) => block.finish(),
    }
}

/// Writes an uns collection as to_anndata reads it: each member (a collection as a mapping,
/// an array as below), then each metadata value not starting with `soma_` (a value wins over
/// a member of the same name).
fn write_uns(group: &HdfGroup, collection: &UnsCollection) -> io::Result<()> {
    for (name, member) in collection.members_kept() {
        let key = file_name(name);
        match member {
            UnsMember::Collection(inner) => write_uns(&h5ad::mapping(group, &key)?, inner)?,
            UnsMember::Array(array) => write_uns_array(group, &key, array)?,
        }
    }
    for (name, value) in collection.values() {
        write_uns_value(group, &file_name(name), value)?;
    }
    Ok(())
}

/// What an uns array is in the AnnData.
pub(super) enum UnsElement {
    /// An array of this shape, its values in C order.
    Array { shape: Vec<usize>, values: ArrayRef },
    /// A data frame, its rows read whole.
    Frame {
        batches: Vec<RecordBatch>,
        index: FrameIndex,
    },
}

fn write_uns_array(group: &HdfGroup, key: &str, array: &ArrayObject) -> io::Result<()> {
    match uns_element(array)? {
        UnsElement::Array { shape, values } => h5ad::write_array(group, key, &shape, &values),
        UnsElement::Frame { batches, index } => {
            write_frame_rows(group, key, array, &batches, index)
        }
    }
}

/// The shape and value type of an uns array that [`uns_element`] makes an array of, as its
/// schema and cell count tell without reading it: a dense array, or a data frame hinted as
/// strings (one row per stored cell). `None` for what becomes a data frame.
pub(super) fn uns_array_layout(array: &ArrayObject) -> io::Result<Option<(Vec<usize>, DataType)>> {
    match array.soma_type {
        SomaType::DenseNDArray => {
            let Some(value) = array.schema.columns.iter().rfind(|c| !c.is_index) else {
                return Ok(None);
            };
            let data_type = match &value.arrow_type {
                DataType::Boolean => DataType::UInt8,
                other => other.clone(),
            };
            Ok(Some((dense_shape(array), data_type)))
        }
        SomaType::SparseNDArray => Ok(None),
        _ => {
            let (first_column, columns) = match UnsFrame::of(array) {
                UnsFrame::Strings1d => ("values", None),
                UnsFrame::Strings2d => ("values_0", Some(strings_2d_columns(array).len())),
                UnsFrame::Frame => return Ok(None),
            };
            let Some(first) = array.schema.columns.iter().find(|c| c.name == first_column) else {
                return Ok(None);
            };
            let rows = array.stored_cells().map_err(crate::soma::Error::from)? as usize;
            let shape = [rows].into_iter().chain(columns).collect();
            Ok(Some((shape, first.arrow_type.clone())))
        }
    }
}

/// The shape of a dense uns array: its current domain.
fn dense_shape(array: &ArrayObject) -> Vec<usize> {
    (array.schema.shape.iter().flatten())
        .map(|&n| n as usize)
        .collect()
}

/// The columns of an uns data frame of strings in two dimensions: `values_0`, `values_1`, …
fn strings_2d_columns(array: &ArrayObject) -> Vec<String> {
    (0..)
        .map(|i| format!("values_{i}"))
        .take_while(|name| array.schema.columns.iter().any(|c| &c.name == name))
        .collect()
}

/// An uns array: a dense array as an array of its shape; a sparse one as the data frame of
/// its cells (`soma_dim_0`, `soma_dim_1`, …, `soma_data`); a data frame hinted as strings as
/// an array of strings (one or two dimensions); any other data frame as a data frame.
pub(super) fn uns_element(array: &ArrayObject) -> io::Result<UnsElement> {
    let batches = anndata::read_all(array)?;
    let column = |name: &str| -> io::Result<ArrayRef> {
        let pieces = batches
            .iter()
            .map(|b| {
                b.column_by_name(name)
                    .map(|c| c.as_ref())
                    .ok_or_else(|| io::Error::other(format!("{}: no column {name}", array.uri)))
            })
            .collect::<io::Result<Vec<_>>>()?;
        if pieces.is_empty() {
            let field = array.schema.arrow().field_with_name(name).cloned();
            let data_type = field.map_or(DataType::LargeUtf8, |f| f.data_type().clone());
            return Ok(arrow_array::new_empty_array(&data_type));
        }
        arrow_select::concat::concat(&pieces).map_err(io::Error::other)
    };
    match array.soma_type {
        SomaType::DenseNDArray => {
            let value = array.schema.columns.iter().rfind(|c| !c.is_index);
            let mut values = column(value.map_or("soma_data", |c| c.name.as_str()))?;
            if values.data_type() == &DataType::Boolean {
                values = arrow_cast::cast(&values, &DataType::UInt8).map_err(io::Error::other)?;
            }
            Ok(UnsElement::Array {
                shape: dense_shape(array),
                values,
            })
        }
        SomaType::SparseNDArray => Ok(UnsElement::Frame {
            batches,
            index: FrameIndex::RowNumbers,
        }),
        _ => match UnsFrame::of(array) {
            UnsFrame::Strings1d => {
                let values = column("values")?;
                Ok(UnsElement::Array {
                    shape: vec![values.len()],
                    values,
                })
            }
            UnsFrame::Strings2d => {
                let columns = strings_2d_columns(array)
                    .iter()
                    .map(|name| column(name))
                    .collect::<io::Result<Vec<_>>>()?;
                let rows = columns.first().map_or(0, |c| c.len());
                // Row by row: row i holds values_0[i], values_1[i], …
                let order: Vec<(usize, usize)> = (0..rows)
                    .flat_map(|i| (0..columns.len()).map(move |j| (j, i)))
                    .collect();
                let parts: Vec<&dyn arrow_array::Array> =
                    columns.iter().map(|c| c.as_ref()).collect();
                let values = arrow_select::interleave::interleave(&parts, &order)
                    .map_err(io::Error::other)?;
                Ok(UnsElement::Array {
                    shape: vec![rows, columns.len()],
                    values,
                })
            }
            UnsFrame::Frame => {
                let index = match anndata::index_column(array, "index") {
                    Some((name, named)) => FrameIndex::Column { name, named },
                    None => FrameIndex::RowNumbers,
                };
                Ok(UnsElement::Frame { batches, index })
            }
        },
    }
}

/// Writes rows read whole as a data frame.
fn write_frame_rows(
    group: &HdfGroup,
    key: &str,
    frame: &ArrayObject,
    batches: &[RecordBatch],
    index: FrameIndex,
) -> io::Result<()> {
    let mut rows = FrameRows::default();
    for batch in batches {
        rows.add(batch);
    }
    let mut writer = frame_writer(group, key, frame, &rows, index)?;
    for batch in batches {
        writer.append(batch)?;
    }
    writer.finish()
}

/// A metadata value of uns: one string or number as a scalar, several as an array (a blob
/// as an array of bytes).
fn write_uns_value(group: &HdfGroup, key: &str, value: &MetadataValue) -> io::Result<()> {
    match value.values.as_slice() {
        [Value::Text(text)] => return h5ad::write_text_scalar(group, key, text),
        [Value::Int(n)] => return h5ad::write_numeric_scalar(group, key, *n),
        [Value::UInt(n)] => return h5ad::write_numeric_scalar(group, key, *n),
        [Value::Float(x)] => return h5ad::write_numeric_scalar(group, key, *x),
        [Value::Bool(b)] => return h5ad::write_numeric_scalar(group, key, *b),
        _ => {}
    }
    let (array, _) = uns_value(value);
    h5ad::write_array(group, key, &[array.len()], &array)
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
