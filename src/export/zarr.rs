//! A measurement of an experiment as an AnnData Zarr store (Zarr format 2), equal to what
//! tiledbsoma's `to_anndata` reads, as the h5ad is: obs and var as data frames, X from the
//! first layer and every other layer under `layers`, obsm and varm dense, obsp and varp as
//! CSR matrices, and uns. The store is a tree of groups and arrays ([`ZarrStore::root`]),
//! made with its `.zgroup`, `.zarray` and `.zattrs` and its consolidated `.zmetadata`; each
//! chunk's bytes are read from TileDB only when asked for ([`ZarrArray::chunk`]), and only
//! the rows behind it are read.
//!
//! What the store holds is decided where the h5ad's is ([`super::anndata`], and
//! [`crate::format::anndata`] for encodings); the bytes are [`crate::format::zarr`]'s. A
//! chunk of numbers or booleans has its exact size from the start (chunks are uncompressed
//! and padded); a chunk of text's size is known once it is made.
//!
//! Making the metadata needs the rows of obs and var (their join ids, and whether the
//! columns encoded by it hold a null: integers, booleans and texts, counted by libtiledb
//! without reading their values where it can; no other column is read), the shape of each
//! uns array (from its schema and cell count: the values of them all are read when a chunk
//! of one is asked for; an uns data frame is read whole) and each CSR matrix's number of
//! entries (the length of `data` and `indices`), which the array's fragments tell for the
//! usual store without reading the matrix ([`anndata::csr`]). A chunk of `indptr` (8,192
//! rows) counts the entries per row of only the blocks of rows it falls in, once per array
//! snapshot (the counts are kept where the store's maker says, [`RowCountsKept`]); a chunk
//! of `data` or `indices` reads only the rows that hold its entries.

use std::io;
use std::ops::Range;
use std::sync::{Arc, OnceLock};

use arrow_array::{Array as _, ArrayRef, Int64Array};
use arrow_schema::DataType;
use log::warn;
use serde_json::{json, Map, Value as Json};

use crate::format::anndata::{is_text, ColumnEncoding, ColumnSpec, Encoding};
use crate::format::h5ad::FrameIndex;
use crate::format::zarr::{self, ArrayMeta, Dtype};
use crate::names::file_name;
use crate::soma::anndata::{
    self, AnnDataElements, AxisRows, ColumnPart, CsrPart, CsrSource, FrameRows, FrameSource,
    MatrixElement, MatrixSource, ObsVarRows, Placed, RowCountsKept, UnsCollection, UnsElement,
    UnsMember, UnsTogether, UnsValues,
};
use crate::soma::ArrayObject;
use crate::sync::{at_once, map_at_once};

use super::anndata::{
    frame_columns, frame_index, matrix_type, scan_frame, uns_frame_index, uns_value,
};

/// A measurement as an AnnData Zarr store; its tree is made when first asked for.
pub struct ZarrStore {
    origin: Arc<Origin>,
    root: OnceLock<Result<Arc<ZarrGroup>, String>>,
}

/// What a store is made from, which its arrays share (an array that held the store would
/// keep it, and the tree that holds the array, alive for ever).
struct Origin {
    elements: AnnDataElements,
    /// Where the entries per row of its CSR matrices are kept.
    counts: Arc<dyn RowCountsKept>,
    /// Its uns arrays laid out from their schemas, read together.
    uns: UnsTogether,
}

impl Origin {
    fn what(&self) -> String {
        let (obs, m) = (
            &self.elements.obs.array.uri,
            &self.elements.measurement.name,
        );
        format!("{obs} measurement {m} as zarr")
    }
}

/// A group of the store: its attributes and members (the root also has the consolidated
/// metadata of the whole store).
#[derive(Debug)]
pub struct ZarrGroup {
    pub attrs: Map<String, Json>,
    pub members: Vec<(String, ZarrNode)>,
    pub consolidated: Option<Arc<[u8]>>,
}

/// A member of a group: a group or an array.
#[derive(Debug, Clone)]
pub enum ZarrNode {
    Group(Arc<ZarrGroup>),
    Array(Arc<ZarrArray>),
}

/// An array of the store: its `.zarray`, its attributes, and where its chunks come from.
#[derive(Debug)]
pub struct ZarrArray {
    pub meta: ArrayMeta,
    pub attrs: Map<String, Json>,
    content: Content,
    /// Where it is in the store (for cache keys and messages).
    path: String,
    origin: Arc<Origin>,
}

impl std::fmt::Debug for ZarrStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.origin.fmt(f)
    }
}

impl std::fmt::Debug for Origin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.what())
    }
}

impl ZarrStore {
    /// The store of a measurement's AnnData elements (of all its cells), whose CSR
    /// matrices' entries per row are kept in `counts`.
    pub fn new(elements: AnnDataElements, counts: Arc<dyn RowCountsKept>) -> Arc<ZarrStore> {
        Arc::new(ZarrStore {
            origin: Arc::new(Origin {
                elements,
                counts,
                uns: UnsTogether::default(),
            }),
            root: OnceLock::new(),
        })
    }

    /// The root group, made (once) with everything under it.
    pub fn root(self: &Arc<Self>) -> Result<Arc<ZarrGroup>, String> {
        self.root
            .get_or_init(|| {
                let started = std::time::Instant::now();
                let what = self.origin.what();
                let built = build(&self.origin).map(Arc::new).map_err(|e| {
                    warn!("{what}: cannot be made: {e}");
                    format!("{what}: {e}")
                });
                log::debug!("made {what} in {:?}", started.elapsed());
                built
            })
            .clone()
    }
}

// ---------------------------------------------------------------------------------------
// chunks: the element read each needs

/// Rows of a CSR matrix's `indptr` in a chunk (64 KiB): a chunk needs the entries per row
/// of the blocks its rows fall in counted, so that a slice of a few rows counts those of a
/// fragment or two rather than of the whole matrix, as chunks of [`zarr::CHUNK_BYTES`]
/// (131,072 rows) would.
const INDPTR_CHUNK_ROWS: u64 = 1 << 13;

/// Where an array's chunks come from.
#[derive(Debug)]
enum Content {
    /// Values held whole (categories, uns metadata), in C order.
    Values(ArrayRef),
    /// An uns array's values, read whole when first needed.
    Uns(Arc<UnsValues>),
    Column {
        frame: Arc<FrameSource>,
        column: String,
        part: ColumnPart,
    },
    Csr(Arc<CsrSource>, CsrPart),
    /// A dense matrix, cells not stored being 0.
    Dense(Arc<MatrixSource>),
}

impl ZarrArray {
    /// The AnnData elements of the store it is in.
    pub fn elements(&self) -> &AnnDataElements {
        &self.origin.elements
    }

    /// Where it is in the store (`obs/cell_type/codes`).
    pub fn path(&self) -> &str {
        &self.path
    }

    /// What it is, for messages.
    pub fn what(&self) -> String {
        format!("{} {}", self.origin.what(), self.path)
    }

    /// The bytes of chunk `k`.
    pub fn chunk(&self, k: u64) -> io::Result<Vec<u8>> {
        if k >= self.meta.chunk_count() {
            return Err(io::Error::other(format!("no chunk {k}")));
        }
        let rows = self.meta.chunk_rows(k);
        let (start, end) = (rows.start as usize, rows.end as usize);
        // Values held whole, in C order: the chunk's rows of them.
        let rows_of = |values: &ArrayRef| {
            let row_items = self.meta.shape.iter().skip(1).product::<u64>() as usize;
            values.slice(start * row_items, (end - start) * row_items)
        };
        let values = match &self.content {
            Content::Values(values) => rows_of(values),
            Content::Uns(uns) => {
                self.origin.uns.read_all();
                rows_of(&uns.values()?)
            }
            Content::Column {
                frame,
                column,
                part,
            } => frame.column_part(column, part, start..end)?,
            Content::Csr(csr, CsrPart::Indptr) => {
                let pointers = csr.indptr(start..end)?.into_iter().map(|p| p as i64);
                Arc::new(Int64Array::from_iter_values(pointers))
            }
            Content::Csr(csr, part) => {
                let entries = csr.entries_of(rows, *part)?;
                match &self.meta.dtype {
                    Dtype::Number(t) if t != entries.data_type() => {
                        arrow_cast::cast(&entries, t).map_err(io::Error::other)?
                    }
                    _ => entries,
                }
            }
            Content::Dense(matrix) => return self.dense_chunk(matrix, start..end),
        };
        zarr::chunk(&self.meta, &values)
    }

    /// A chunk of a dense matrix: its rows' cells placed in a chunk of zeros.
    fn dense_chunk(&self, matrix: &MatrixSource, rows: Range<usize>) -> io::Result<Vec<u8>> {
        let size = self.meta.chunk_size().unwrap_or(0) as usize;
        let item = self.meta.dtype.item_size().unwrap_or(1) as usize;
        let width = self.meta.shape.get(1).copied().unwrap_or(1) as usize;
        let mut chunk = vec![0u8; size];
        let first = rows.start;
        let mut bytes = Vec::new();
        // Copies `cells` values from the `from`th of the batch's to row `row`, column `col`.
        let mut place = |bytes: &[u8], (row, col): (usize, usize), from: usize, cells: usize| {
            let at = ((row - first) * width + col) * item;
            let to = chunk.get_mut(at..at + cells * item);
            let from = bytes.get(from * item..(from + cells) * item);
            match (to, from) {
                (Some(to), Some(from)) => {
                    to.copy_from_slice(from);
                    Ok(())
                }
                _ => Err(io::Error::other(format!(
                    "cells ({row}, {col}..) are outside the chunk of rows {first}.."
                ))),
            }
        };
        matrix.placed(rows, |placed, values| {
            let values = match placed {
                Placed::Runs(_) => anndata::values_as(values, &matrix.value_type)?,
                Placed::Cells(places) => matrix.values(values, places)?,
            };
            bytes.clear();
            zarr::put_fixed(values.as_ref(), &mut bytes)?;
            match placed {
                Placed::Runs(runs) => (runs.iter()).try_for_each(|run| {
                    place(&bytes, (run.row, run.col), run.values_at, run.cells)
                }),
                Placed::Cells(places) => (places.rows.iter().zip(&places.cols).enumerate())
                    .try_for_each(|(i, (&row, &col))| place(&bytes, (row, col), i, 1)),
            }
        })?;
        Ok(chunk)
    }
}

// ---------------------------------------------------------------------------------------
// the tree

fn encoding_attrs(encoding: Encoding) -> Map<String, Json> {
    let (kind, version) = encoding.type_and_version();
    let mut attrs = Map::new();
    attrs.insert("encoding-type".into(), json!(kind));
    attrs.insert("encoding-version".into(), json!(version));
    attrs
}

/// A column's values as numbers or booleans of type `t`, or as text (as they are read).
fn values_as(t: DataType) -> ColumnPart {
    ColumnPart::Values((!is_text(&t)).then_some(t))
}

/// Makes the members of groups, each at its path.
struct Builder<'a> {
    origin: &'a Arc<Origin>,
}

impl Builder<'_> {
    fn array(
        &self,
        path: &str,
        meta: ArrayMeta,
        attrs: Map<String, Json>,
        content: Content,
    ) -> ZarrNode {
        ZarrNode::Array(Arc::new(ZarrArray {
            meta,
            attrs,
            content,
            path: path.to_owned(),
            origin: self.origin.clone(),
        }))
    }

    /// An array of values of `data_type` read whole (held, or an uns array's), of
    /// `shape`: numbers and booleans as an `array`, anything else as a `string-array` (or,
    /// for a scalar, a `numeric-scalar` or `string`).
    fn values_of(
        &self,
        path: &str,
        shape: Vec<u64>,
        data_type: &DataType,
        content: Content,
    ) -> ZarrNode {
        let dtype = if is_text(data_type) {
            Dtype::Text
        } else {
            Dtype::of(data_type)
        };
        let encoding = match (shape.is_empty(), &dtype) {
            (true, Dtype::Text) => Encoding::String,
            (true, _) => Encoding::NumericScalar,
            (false, Dtype::Text) => Encoding::StringArray,
            (false, _) => Encoding::Array,
        };
        let meta = ArrayMeta::new(shape, dtype);
        self.array(path, meta, encoding_attrs(encoding), content)
    }

    /// An array of values held whole (see [`Builder::values_of`]).
    fn values(&self, path: &str, shape: Vec<u64>, values: ArrayRef) -> ZarrNode {
        let data_type = values.data_type().clone();
        self.values_of(path, shape, &data_type, Content::Values(values))
    }

    fn column(
        &self,
        path: &str,
        frame: &Arc<FrameSource>,
        (column, part): (&str, ColumnPart),
        dtype: Dtype,
        encoding: Encoding,
    ) -> ZarrNode {
        let meta = ArrayMeta::new(vec![frame.len() as u64], dtype);
        let content = Content::Column {
            frame: frame.clone(),
            column: column.to_owned(),
            part,
        };
        self.array(path, meta, encoding_attrs(encoding), content)
    }

    /// A data frame: its index, then its columns, each as anndata encodes it.
    fn frame(
        &self,
        path: &str,
        frame: Arc<FrameSource>,
        rows: &FrameRows,
        index: FrameIndex,
    ) -> io::Result<ZarrNode> {
        let columns = frame_columns(&frame.frame, rows, &index)?;
        let mut attrs = encoding_attrs(Encoding::DataFrame);
        let index_name = match &index {
            FrameIndex::Column { name, named: true } => name.clone(),
            _ => "_index".to_owned(),
        };
        attrs.insert("_index".into(), json!(index_name));
        let order: Vec<&str> = columns.iter().map(|(_, name)| name.as_str()).collect();
        attrs.insert("column-order".into(), json!(order));
        let mut members = Vec::new();
        let index_path = format!("{path}/{index_name}");
        let (column, part, dtype, encoding) = match &index {
            FrameIndex::Column { name, .. } => (
                name.as_str(),
                ColumnPart::Values(None),
                Dtype::Text,
                Encoding::StringArray,
            ),
            FrameIndex::RowNumbers => (
                "",
                ColumnPart::RowNumbers,
                Dtype::Number(DataType::Int64),
                Encoding::Array,
            ),
        };
        let index_array = self.column(&index_path, &frame, (column, part), dtype, encoding);
        members.push((index_name, index_array));
        for (spec, name) in &columns {
            let at = format!("{path}/{name}");
            members.push((name.clone(), self.frame_column(&at, &frame, spec)?));
        }
        Ok(group(attrs, members))
    }

    fn frame_column(
        &self,
        path: &str,
        frame: &Arc<FrameSource>,
        spec: &ColumnSpec,
    ) -> io::Result<ZarrNode> {
        let name = spec.name.as_str();
        let array =
            |at: &str, part, dtype, encoding| self.column(at, frame, (name, part), dtype, encoding);
        let masked = |values: Dtype, values_encoding: Encoding, encoding: Encoding| {
            let values_part = values_as(spec.data_type.clone());
            let values = array(
                &format!("{path}/values"),
                values_part,
                values,
                values_encoding,
            );
            let mask = array(
                &format!("{path}/mask"),
                ColumnPart::Mask,
                Dtype::Bool,
                Encoding::Array,
            );
            group(
                encoding_attrs(encoding),
                vec![("values".into(), values), ("mask".into(), mask)],
            )
        };
        let booleans = ColumnPart::Values(Some(DataType::Boolean));
        Ok(match spec.encoding() {
            ColumnEncoding::Numbers(t) => array(
                path,
                values_as(t.clone()),
                Dtype::Number(t),
                Encoding::Array,
            ),
            ColumnEncoding::Booleans { nullable: false } => {
                array(path, booleans, Dtype::Bool, Encoding::Array)
            }
            ColumnEncoding::Booleans { nullable: true } => {
                masked(Dtype::Bool, Encoding::Array, Encoding::NullableBoolean)
            }
            ColumnEncoding::Texts { nullable: false } => {
                let texts = ColumnPart::Values(None);
                array(path, texts, Dtype::Text, Encoding::StringArray)
            }
            ColumnEncoding::Texts { nullable: true } => {
                masked(Dtype::Text, Encoding::StringArray, Encoding::NullableString)
            }
            ColumnEncoding::Categorical { code_type } => {
                let categories = spec
                    .categories
                    .as_ref()
                    .ok_or_else(|| io::Error::other(format!("column {name} has no categories")))?;
                let mut attrs = encoding_attrs(Encoding::Categorical);
                attrs.insert("ordered".into(), json!(categories.ordered));
                let labels = categories.labels.clone();
                let shape = vec![labels.len() as u64];
                let categories = self.values(&format!("{path}/categories"), shape, labels);
                let codes_part = ColumnPart::Codes(code_type.clone());
                let codes = array(
                    &format!("{path}/codes"),
                    codes_part,
                    Dtype::Number(code_type),
                    Encoding::Array,
                );
                group(
                    attrs,
                    vec![("categories".into(), categories), ("codes".into(), codes)],
                )
            }
        })
    }

    /// A matrix placed on `rows`: CSR or dense, as its layout and its array say.
    fn matrix(
        &self,
        path: &str,
        matrix: &MatrixElement,
        rows: &ObsVarRows,
    ) -> io::Result<ZarrNode> {
        let (value_type, dense) = matrix_type(&matrix.array, matrix.layout)?;
        let source = rows.matrix(&self.origin.elements, matrix, value_type)?;
        let (rows, cols) = source.axes();
        let shape = vec![rows.len() as u64, cols.len() as u64];
        if dense {
            let meta = ArrayMeta::new(shape, Dtype::of(&source.value_type));
            let attrs = encoding_attrs(Encoding::Array);
            return Ok(self.array(path, meta, attrs, Content::Dense(Arc::new(source))));
        }
        let csr = Arc::new(CsrSource::new(source, self.origin.counts.clone())?);
        let total = csr.entries();
        let index_dtype = Dtype::Number(match shape[1] <= i32::MAX as u64 {
            true => DataType::Int32,
            false => DataType::Int64,
        });
        let (value_dtype, pointers) = (Dtype::of(&csr.matrix.value_type), shape[0] + 1);
        let mut attrs = encoding_attrs(Encoding::CsrMatrix);
        attrs.insert("shape".into(), json!(shape));
        let parts = [
            ("data", value_dtype, total, CsrPart::Data),
            ("indices", index_dtype, total, CsrPart::Indices),
            (
                "indptr",
                Dtype::Number(DataType::Int64),
                pointers,
                CsrPart::Indptr,
            ),
        ];
        let members = parts
            .into_iter()
            .map(|(name, dtype, len, part)| {
                let meta = match part {
                    CsrPart::Indptr => {
                        ArrayMeta::with_chunk_rows(vec![len], dtype, INDPTR_CHUNK_ROWS)
                    }
                    _ => ArrayMeta::new(vec![len], dtype),
                };
                let content = Content::Csr(csr.clone(), part);
                let array = self.array(&format!("{path}/{name}"), meta, Map::new(), content);
                (name.to_owned(), array)
            })
            .collect();
        Ok(group(attrs, members))
    }

    /// A mapping of matrices (`layers`, `obsm`, …).
    fn matrices(
        &self,
        path: &str,
        members: &[MatrixElement],
        rows: &ObsVarRows,
    ) -> io::Result<ZarrNode> {
        // At once: a sparse matrix's entries may be counted from its fragment list, a few
        // round trips of its own.
        let members = map_at_once(members, anndata::AT_ONCE, |member| {
            let name = file_name(&member.name);
            let at = format!("{path}/{name}");
            let matrix = self.matrix(&at, member, rows)?;
            Ok((name, matrix))
        })
        .into_iter()
        .collect::<io::Result<Vec<_>>>()?;
        Ok(group(encoding_attrs(Encoding::Dict), members))
    }

    /// An uns collection: each member kept, then each metadata value.
    fn uns(&self, path: &str, collection: &UnsCollection) -> io::Result<ZarrNode> {
        // Each member's arrays are read whole: all at once.
        let kept: Vec<_> = collection.members_kept().collect();
        let members = map_at_once(&kept, anndata::AT_ONCE, |(name, member)| {
            let key = file_name(name);
            let at = format!("{path}/{key}");
            let node = match member {
                UnsMember::Collection(inner) => self.uns(&at, inner)?,
                UnsMember::Array(array) => match anndata::uns_array_layout(array)? {
                    // Laid out from its schema, read when a chunk is opened.
                    Some((shape, data_type)) => {
                        let values = Arc::new(UnsValues::new(array.clone(), shape.clone()));
                        self.origin.uns.add(&values);
                        let shape = shape.iter().map(|&n| n as u64).collect();
                        self.values_of(&at, shape, &data_type, Content::Uns(values))
                    }
                    None => self.uns_frame(&at, array)?,
                },
            };
            Ok((key, node))
        });
        let mut members = members.into_iter().collect::<io::Result<Vec<_>>>()?;
        for (name, value) in collection.values() {
            let key = file_name(name);
            let (values, scalar) = uns_value(value);
            let shape = if scalar {
                Vec::new()
            } else {
                vec![values.len() as u64]
            };
            let at = format!("{path}/{key}");
            members.push((key, self.values(&at, shape, values)));
        }
        Ok(group(encoding_attrs(Encoding::Dict), members))
    }

    /// An uns array that is a data frame, read whole.
    fn uns_frame(&self, path: &str, array: &Arc<ArrayObject>) -> io::Result<ZarrNode> {
        Ok(match anndata::uns_element(array)? {
            UnsElement::Array { shape, values } => {
                let shape = shape.into_iter().map(|n| n as u64).collect();
                self.values(path, shape, values)
            }
            UnsElement::Frame { batches, index } => {
                let (frame, rows) = FrameSource::read(array, batches);
                self.frame(path, Arc::new(frame), &rows, uns_frame_index(index))?
            }
        })
    }
}

fn group(attrs: Map<String, Json>, members: Vec<(String, ZarrNode)>) -> ZarrNode {
    ZarrNode::Group(Arc::new(ZarrGroup {
        attrs,
        members,
        consolidated: None,
    }))
}

/// Makes the whole tree of a store, and its consolidated metadata.
fn build(origin: &Arc<Origin>) -> io::Result<ZarrGroup> {
    let b = Builder { origin };
    // uns is read while obs's and var's rows are, and the matrices made from them.
    let (members, uns) = at_once(
        || frames_and_matrices(&b),
        || match origin.elements.uns() {
            Some(collection) => b.uns("uns", collection),
            None => Ok(group(encoding_attrs(Encoding::Dict), Vec::new())),
        },
    );
    let mut members = members?;
    members.push(("uns".into(), uns?));

    let attrs = encoding_attrs(Encoding::AnnData);
    let mut metadata = Map::new();
    metadata.insert(".zgroup".into(), zarr::zgroup());
    metadata.insert(".zattrs".into(), Json::Object(attrs.clone()));
    for (name, member) in &members {
        add_metadata(&mut metadata, name, member);
    }
    let consolidated = zarr::document(&zarr::consolidated(metadata)).into();
    Ok(ZarrGroup {
        attrs,
        members,
        consolidated: Some(consolidated),
    })
}

/// obs, var, X, layers, obsm, varm, obsp and varp: the rows of obs and var first, then every
/// matrix at once.
fn frames_and_matrices(b: &Builder) -> io::Result<Vec<(String, ZarrNode)>> {
    let e = &b.origin.elements;
    let (obs_index, var_index) = (frame_index(&e.obs), frame_index(&e.var));
    let (obs_rows, var_rows) = at_once(
        || scan_frame(&e.obs.array, &e.obs.rows, &obs_index),
        || scan_frame(&e.var.array, &e.var.rows, &var_index),
    );
    let (mut obs_rows, mut var_rows) = (obs_rows?, var_rows?);
    let rows = ObsVarRows {
        obs: AxisRows::new(&e.obs.array, &mut obs_rows),
        var: AxisRows::new(&e.var.array, &mut var_rows),
    };
    let obs_frame = FrameSource::of_rows(&e.obs.array, &rows.obs);
    let obs_frame = b.frame("obs", Arc::new(obs_frame), &obs_rows, obs_index)?;
    let var_frame = FrameSource::of_rows(&e.var.array, &rows.var);
    let var_frame = b.frame("var", Arc::new(var_frame), &var_rows, var_index)?;

    type Make<'a> = Box<dyn Fn() -> io::Result<ZarrNode> + Sync + 'a>;
    let x: Make = Box::new(|| b.matrix("X", &e.x, &rows));
    let mappings = e.mappings.iter().map(|mapping| -> (&str, Make) {
        let make = || b.matrices(mapping.name, &mapping.members, &rows);
        (mapping.name, Box::new(make))
    });
    let parts: Vec<(&str, Make)> = std::iter::once(("X", x)).chain(mappings).collect();
    let matrices = map_at_once(&parts, parts.len(), |(_, make)| make());
    let mut members = vec![("obs".to_owned(), obs_frame), ("var".to_owned(), var_frame)];
    for ((part, _), matrix) in parts.into_iter().zip(matrices) {
        members.push((part.to_owned(), matrix?));
    }
    Ok(members)
}

/// Adds the metadata of `node` at `path`, and of everything under it.
fn add_metadata(metadata: &mut Map<String, Json>, path: &str, node: &ZarrNode) {
    match node {
        ZarrNode::Group(group) => {
            metadata.insert(format!("{path}/.zgroup"), zarr::zgroup());
            metadata.insert(format!("{path}/.zattrs"), Json::Object(group.attrs.clone()));
            for (name, member) in &group.members {
                add_metadata(metadata, &format!("{path}/{name}"), member);
            }
        }
        ZarrNode::Array(array) => {
            metadata.insert(format!("{path}/.zarray"), array.meta.zarray());
            metadata.insert(format!("{path}/.zattrs"), Json::Object(array.attrs.clone()));
        }
    }
}

#[cfg(test)]
mod tests {
    use arrow_array::Int32Array;

    use super::*;
    use crate::export::fixtures::elements;

    /// Counts kept nowhere: every block is counted when needed.
    #[derive(Debug)]
    struct NotKept;

    impl RowCountsKept for NotKept {
        fn kept(&self, _name: &[&str]) -> io::Result<Option<Vec<u64>>> {
            Ok(None)
        }

        fn keep(&self, _name: &[&str], _what: &str, _counts: &[u64]) {}
    }

    fn origin() -> Arc<Origin> {
        Arc::new(Origin {
            elements: elements(),
            counts: Arc::new(NotKept),
            uns: UnsTogether::default(),
        })
    }

    #[test]
    fn values_held_whole_are_an_array_cut_into_chunks_of_rows() {
        let origin = origin();
        let b = Builder { origin: &origin };
        let values: ArrayRef = Arc::new(Int32Array::from_iter_values(0..6));
        let ZarrNode::Array(array) = b.values("uns/m", vec![3, 2], values) else {
            panic!("values are an array")
        };
        assert_eq!(array.attrs["encoding-type"], json!("array"));
        assert_eq!(array.path(), "uns/m");
        assert_eq!(array.meta.chunk_count(), 1);
        let chunk = array.chunk(0).expect("a chunk of values held");
        let expected: Vec<u8> = (0..6i32).flat_map(i32::to_le_bytes).collect();
        assert_eq!(&chunk[..expected.len()], expected, "the values in C order");
        assert_eq!(
            chunk.len() as u64,
            array.meta.chunk_size().unwrap(),
            "padded"
        );
        assert!(array.chunk(1).is_err(), "there is one chunk");
        assert!(array.what().ends_with("as zarr uns/m"));
    }

    #[test]
    fn text_scalars_and_arrays_are_encoded_as_anndata_reads_them() {
        let origin = origin();
        let b = Builder { origin: &origin };
        let encoding = |shape: Vec<u64>, t: &DataType| match b.values_of(
            "u",
            shape,
            t,
            Content::Values(Arc::new(Int32Array::from(vec![0]))),
        ) {
            ZarrNode::Array(array) => array.attrs["encoding-type"].clone(),
            ZarrNode::Group(_) => unreachable!("values are an array"),
        };
        assert_eq!(encoding(Vec::new(), &DataType::LargeUtf8), json!("string"));
        assert_eq!(
            encoding(Vec::new(), &DataType::Int32),
            json!("numeric-scalar")
        );
        assert_eq!(
            encoding(vec![1], &DataType::LargeUtf8),
            json!("string-array")
        );
        assert_eq!(encoding(vec![1], &DataType::Int32), json!("array"));
    }

    #[test]
    fn a_store_whose_reads_fail_says_which_measurement_it_is() {
        let store = ZarrStore::new(elements(), Arc::new(NotKept));
        let error = store.root().expect_err("a fixture's rows cannot be read");
        assert!(
            error.starts_with("obs measurement RNA as zarr: "),
            "{error}"
        );
    }
}
