//! What each inode stands for, and what each directory lists: the filesystem's decisions,
//! made from SOMA objects alone, with no inode bookkeeping.

use std::sync::Arc;

use log::warn;

use crate::format::png::ImageAxis;
use crate::format::text::float_text;
use crate::format::TableFormat;

use crate::soma::anndata::{self, AnnDataExperiment, Category};
use crate::soma::tenx::TenxLayer;
use crate::soma::{self, spatial, ArrayObject, Objects, Selection, SomaObject, SomaType};
use crate::tiledb::{Datatype, Member, ObjectType, Value};

use super::files::{
    Document, FileKind, H5adFile, NpyFile, PngFile, Shown, SpatialDoc, Table, TableFile, TenxFile,
    TenxPart, ZarrArray, ZarrChunk, ZarrDocument, ZarrGroup, ZarrNode, ZarrStore,
};
use super::names::file_name;
use super::slice_name::{self, ColumnKind, SliceName, SliceRange};

/// What an inode stands for.
#[derive(Debug, Clone)]
pub enum NodeKind {
    /// The directory of the object at `uri` (a group, an array, or a member that fails to open).
    /// `obs` is the enclosing experiment's obs, for the measurements under its `ms`.
    Object {
        uri: String,
        /// What the group that lists it records it as (`None`: the root, which is probed).
        recorded: Option<ObjectType>,
        obs: Option<Arc<str>>,
        /// The URIs of the enclosing object directories, to stop at cycles.
        ancestors: Arc<[String]>,
    },
    /// A member that cannot be shown as itself: a directory holding only `error.txt`.
    Broken(Arc<str>),
    /// `10x/` of a measurement: its layers.
    Tenx {
        measurement: Arc<SomaObject>,
        obs: Arc<str>,
    },
    /// `10x/<layer>/` (or a category of it): a Cell Ranger matrix directory.
    TenxLayer(Arc<TenxLayer>),
    /// `10x/<layer>/by/`: the obs columns to split the cells by.
    TenxBy(Arc<TenxLayer>),
    /// `10x/<layer>/by/<column>/`: the column's labels.
    TenxByColumn(Arc<TenxLayer>, String),
    /// `slices/` of a table (no format): a directory per format, and any slice by name;
    /// `slices/<format>/`: the table's chunks in that format (a dataset), and any slice of
    /// that format by name.
    Slices(Table, Option<TableFormat>),
    /// `by/` of a data frame: its enumerated columns.
    By(Arc<ArrayObject>),
    /// `by/<column>/`: the column's labels.
    ByColumn(Arc<ArrayObject>, String),
    /// `by/<column>/<label>/`: the rows holding the label.
    ByValue(Table),
    /// `anndata/` of an experiment, or a directory under its `by/`.
    AnnData(AnnDataDir),
    /// `anndata/<measurement>.zarr/` and the groups and arrays in it.
    Zarr(ZarrDir),
    File(Arc<dyn FileKind>),
}

/// The directories of an AnnData Zarr store.
#[derive(Debug, Clone)]
pub enum ZarrDir {
    /// The store's root: its metadata (made on the first listing) and its groups.
    Store(Arc<ZarrStore>),
    Group(Arc<ZarrGroup>),
    /// An array: its metadata and a file per chunk.
    Array(Arc<ZarrArray>),
}

/// The directories of AnnData views.
#[derive(Debug, Clone)]
pub enum AnnDataDir {
    /// `anndata/`: `<measurement>.h5ad` and `<measurement>.zarr/` for each measurement,
    /// and `by/` (opening obs and every part of each measurement).
    Experiment(Arc<SomaObject>),
    /// `anndata/by/`: obs's enumerated columns.
    By(Arc<AnnDataExperiment>),
    /// `anndata/by/<column>/`: the column's labels.
    ByColumn(Arc<AnnDataExperiment>, String),
    /// `anndata/by/<column>/<label>/`: `<measurement>.h5ad` of the label's cells.
    Category(Arc<AnnDataExperiment>, Category),
}

impl NodeKind {
    pub fn is_dir(&self) -> bool {
        !matches!(self, NodeKind::File(_))
    }
}

/// A file of a kind.
fn file(kind: impl FileKind + 'static) -> NodeKind {
    NodeKind::File(Arc::new(kind))
}

/// A directory's entries: names and what each stands for, in listing order.
pub type Entries = Vec<(String, NodeKind)>;

/// The name under which null is listed among a column's labels.
pub const NULL_LABEL: &str = "__null__";

/// The listing of an object's directory, from the object opened, with the fingerprint of
/// what it was made from; or, when the object cannot be opened, the error's listing.
pub fn object_entries(
    store: &dyn Objects,
    uri: &str,
    recorded: Option<ObjectType>,
    obs: Option<&Arc<str>>,
    ancestors: &[String],
) -> Result<(String, Entries), Entries> {
    match store.open(uri, recorded) {
        Ok(object) => {
            let mut ancestors = ancestors.to_vec();
            ancestors.push(same_object(uri));
            Ok((
                object.fingerprint(),
                object_files(store, object, obs, ancestors.into()),
            ))
        }
        Err(e) => {
            warn!("cannot open {uri}: {e}");
            Err(error_entries(&format!("cannot open {uri}: {e}")))
        }
    }
}

/// The name of a group member's entry in the group's directory.
fn member_entry(member: &Member) -> String {
    file_name(&member.name)
}

/// The member of a group whose entry in the group's directory is `name`.
pub fn member_named<'a>(members: &'a [Member], name: &str) -> Option<&'a Member> {
    members.iter().find(|m| member_entry(m) == name)
}

/// The listing of a directory that only says what is wrong.
pub fn error_entries(message: &str) -> Entries {
    vec![(
        "error.txt".into(),
        file(Document::error_text(message.into())),
    )]
}

/// A URI as compared for cycles: without `file://` and trailing slashes.
fn same_object(uri: &str) -> String {
    uri.strip_prefix("file://")
        .unwrap_or(uri)
        .trim_end_matches('/')
        .to_owned()
}

/// The entries of an opened object's directory.
fn object_files(
    store: &dyn Objects,
    object: Arc<SomaObject>,
    obs: Option<&Arc<str>>,
    ancestors: Arc<[String]>,
) -> Entries {
    let mut named: Entries = Vec::new();
    if let SomaObject::Group(group) = object.as_ref() {
        // An experiment's obs is what the measurements under its `ms` describe cells with.
        let experiment_obs = (group.soma_type == SomaType::Experiment)
            .then(|| group.members.iter().find(|m| m.name == "obs"))
            .flatten()
            .map(|m| Arc::<str>::from(m.uri.as_str()));
        for member in &group.members {
            let obs = match (&experiment_obs, group.soma_type) {
                (Some(obs), _) if member.name == "ms" => Some(obs.clone()),
                (None, SomaType::Collection) => obs.cloned(),
                _ => None,
            };
            let uri = member.uri.clone();
            let kind = if ancestors.contains(&same_object(&uri)) {
                // A group that contains itself (or an ancestor) would be an endless tree.
                warn!(
                    "{}: member {:?} is an enclosing group",
                    group.uri, member.name
                );
                NodeKind::Broken(
                    format!("{uri} is a group that encloses this directory (a cycle)").into(),
                )
            } else {
                let ancestors = ancestors.clone();
                NodeKind::Object {
                    uri,
                    recorded: Some(member.object_type),
                    obs,
                    ancestors,
                }
            };
            named.push((member_entry(member), kind));
        }
        if let (SomaType::Measurement, Some(obs)) = (group.soma_type, obs) {
            let measurement = object.clone();
            let obs = obs.clone();
            named.push(("10x".into(), NodeKind::Tenx { measurement, obs }));
        }
        if group.soma_type == SomaType::Experiment && anndata::has_anndata(group) {
            let experiment = AnnDataDir::Experiment(object.clone());
            named.push(("anndata".into(), NodeKind::AnnData(experiment)));
        }
    }
    named.push((
        "metadata.json".into(),
        file(Document::metadata(object.clone())),
    ));
    named.extend(spatial_entries(store, &object));
    if let SomaObject::Array(array) = object.as_ref() {
        named.push(("schema.json".into(), file(Document::schema(object.clone()))));
        let table = Table {
            array: array.clone(),
            selection: Selection::default(),
        };
        named.extend(table_entries(&table));
        if let Some(npy) = NpyFile::of(array) {
            named.push(("data.npy".into(), file(npy)));
        }
        if array.soma_type.is_dataframe() && enumerated_columns(array).next().is_some() {
            named.push(("by".into(), NodeKind::By(array.clone())));
        }
    }
    named
}

/// The spatial documents of an object, and the PNG of each level of an image.
fn spatial_entries(store: &dyn Objects, object: &Arc<SomaObject>) -> Entries {
    let metadata = object.metadata();
    let mut named = Vec::new();
    let doc = |d| file(Document::spatial(object.clone(), d));
    if spatial::coordinate_space(metadata).is_some() {
        named.push((
            "coordinate_space.json".into(),
            doc(SpatialDoc::CoordinateSpace),
        ));
    }
    if spatial::transforms(metadata).is_some() {
        named.push(("transforms.json".into(), doc(SpatialDoc::Transforms)));
    }
    let (SomaObject::Group(group), Some(image)) =
        (object.as_ref(), spatial::image_schema(metadata))
    else {
        return named;
    };
    named.push(("image.json".into(), doc(SpatialDoc::Image)));
    let Ok(image) = image else {
        return named;
    };
    let Some(axes) = image_axes(&image) else {
        return named;
    };
    for (n, level) in image.levels.iter().enumerate() {
        let Some(member) = group.members.iter().find(|m| m.name == level.name) else {
            continue;
        };
        match store.open(&member.uri, Some(member.object_type)) {
            Ok(level) => match level.as_ref() {
                SomaObject::Array(array) => match PngFile::of(array, axes.clone()) {
                    Some(png) => named.push((format!("level_{n}.png"), file(png))),
                    None => warn!("{}: image level {} cannot be drawn", group.uri, member.name),
                },
                SomaObject::Group(_) => {
                    warn!("{}: image level {} is not an array", group.uri, member.name)
                }
            },
            Err(e) => warn!(
                "{}: cannot open image level {}: {e}",
                group.uri, member.name
            ),
        }
    }
    named
}

/// What each dimension of an image's levels holds, from the image schema: 2 spatial axes
/// (x, y) and maybe a channel axis. Images of other shapes are not drawn.
fn image_axes(image: &spatial::ImageSchema) -> Option<Vec<ImageAxis>> {
    let spatial_axes = 2;
    let permutation = match image.axis_permutation() {
        Some(p) => p,
        // No permutation: (y, x), or (channel, y, x) as the spec stores them by default.
        None if image.has_channel_axis() => vec![spatial_axes, 1, 0],
        None => vec![1, 0],
    };
    let expected = spatial_axes + usize::from(image.has_channel_axis());
    if permutation.len() != expected {
        return None;
    }
    permutation
        .iter()
        .map(|&axis| match axis {
            0 => Some(ImageAxis::X),
            1 => Some(ImageAxis::Y),
            a if a == spatial_axes && image.has_channel_axis() => Some(ImageAxis::Channel),
            _ => None,
        })
        .collect()
}

/// The files of a table: `data.<ext>` in every format, and `slices/`.
pub fn table_entries(table: &Table) -> Entries {
    let mut named: Entries = TableFormat::ALL
        .into_iter()
        .map(|format| {
            (
                format!("data.{}", format.extension()),
                file(TableFile::new(table.clone(), format, Shown::Listed)),
            )
        })
        .collect();
    named.push(("slices".into(), NodeKind::Slices(table.clone(), None)));
    named
}

fn enumerated_columns(array: &ArrayObject) -> impl Iterator<Item = &soma::Column> {
    array
        .schema
        .columns
        .iter()
        .filter(|c| c.enumeration.is_some())
}

/// `slices/`: a directory per format.
pub fn slices_entries(table: &Table) -> Entries {
    TableFormat::ALL
        .into_iter()
        .map(|format| {
            let dir = NodeKind::Slices(table.clone(), Some(format));
            (format.extension().to_owned(), dir)
        })
        .collect()
}

/// The fewest cells a chunk of `slices/` is cut to so that it stays below
/// `--materialize-limit`: a lower limit leaves chunks of `--chunk-cells`, above the limit.
const MIN_CHUNK_CELLS: u64 = 4096;

/// `slices/<format>/`: the table cut along its first index column into chunks of about
/// `chunk_cells` stored cells, and fewer where a chunk in the format with the widest rows
/// would be estimated at `materialize_limit` or more. Every format's directory lists the
/// same chunks, and each chunk is small enough that a `stat` generates it, unless the limit
/// would cut chunks below [`MIN_CHUNK_CELLS`] or the first index column is not an integer
/// (the whole table is then one chunk, which only an estimate below the limit generates).
pub fn slices_format_entries(
    table: &Table,
    format: TableFormat,
    chunk_cells: u64,
    materialize_limit: u64,
) -> Entries {
    let array = table.array();
    let kinds = column_kinds(array);
    let schema = array.schema.arrow();
    let widest_row = (TableFormat::ALL.into_iter())
        .map(|f| f.estimated_row_bytes(&schema))
        .max()
        .unwrap_or(1);
    let below_limit = materialize_limit / widest_row;
    let (chunk_cells, shown) = match below_limit >= MIN_CHUNK_CELLS {
        true => (chunk_cells.min(below_limit), Shown::Chunk),
        false => (chunk_cells, Shown::Listed),
    };
    let chunks: Vec<SliceRange> = match soma::chunks(array, chunk_cells) {
        Err(e) => return error_entries(&e.to_string()),
        Ok(Some(chunks)) => chunks
            .iter()
            .map(|&(lo, hi)| match kinds[0] {
                ColumnKind::UInt => SliceRange::UInt(lo as u64, hi as u64),
                _ => SliceRange::Int(lo as i64, hi as i64),
            })
            .collect(),
        // Not an integer column: the whole table is one chunk, unless it has no cells.
        Ok(None) if array.non_empty_domain.iter().any(Option::is_none) => Vec::new(),
        Ok(None) => vec![SliceRange::All],
    };
    chunks
        .into_iter()
        .map(|chunk| {
            let shown = if chunk == SliceRange::All {
                Shown::Listed
            } else {
                shown
            };
            let mut ranges = vec![SliceRange::All; kinds.len()];
            ranges[0] = chunk;
            let slice = SliceName { ranges, format };
            (slice_name::format(&slice), slice_file(table, &slice, shown))
        })
        .collect()
}

/// The kind of each index column, for slice names.
fn column_kinds(array: &ArrayObject) -> Vec<ColumnKind> {
    array
        .schema
        .index_columns()
        .map(|c| match &c.arrow_type {
            t if t.is_signed_integer() => ColumnKind::Int,
            t if t.is_unsigned_integer() => ColumnKind::UInt,
            t if t.is_floating() => ColumnKind::Float,
            arrow_schema::DataType::Timestamp(..) => ColumnKind::Int,
            _ => ColumnKind::Text,
        })
        .collect()
}

/// The file a slice name stands for in `slices/` (any format) or `slices/<format>/` (that
/// format only), if it is one.
pub fn slice_by_name(table: &Table, format: Option<TableFormat>, name: &str) -> Option<NodeKind> {
    let slice = slice_name::parse(name, &column_kinds(table.array()))?;
    if format.is_some_and(|f| f != slice.format) {
        return None;
    }
    Some(slice_file(table, &slice, Shown::ByName))
}

/// A slice of a table as a file: its ranges on top of the table's own selection, clipped.
fn slice_file(table: &Table, slice: &SliceName, shown: Shown) -> NodeKind {
    let array = table.array();
    let mut selection = table.selection.clone();
    selection
        .ranges
        .resize(array.schema.index_columns().count(), Vec::new());
    for (ranges, range) in selection.ranges.iter_mut().zip(&slice.ranges) {
        let bounds = match range {
            SliceRange::All => continue,
            SliceRange::Int(a, b) => (Value::Int(*a), Value::Int(*b)),
            SliceRange::UInt(a, b) => (Value::UInt(*a), Value::UInt(*b)),
            SliceRange::Float(a, b) => (Value::Float(*a), Value::Float(*b)),
            SliceRange::Text(s) => (Value::Text(s.clone()), Value::Text(s.clone())),
        };
        *ranges = vec![bounds];
    }
    let table = Table {
        array: table.array.clone(),
        selection: selection.clipped_to(array),
    };
    file(TableFile::new(table, slice.format, shown))
}

/// `by/`: the enumerated columns of a data frame.
pub fn by_entries(array: &Arc<ArrayObject>) -> Entries {
    enumerated_columns(array)
        .map(|c| {
            (
                file_name(&c.name),
                NodeKind::ByColumn(array.clone(), c.name.clone()),
            )
        })
        .collect()
}

/// `by/<column>/`: every label of the column (and `__null__` when it is nullable).
pub fn by_column_entries(array: &Arc<ArrayObject>, column: &str) -> Entries {
    labels(array, column)
        .into_iter()
        .map(|(name, label)| (name, by_value(array, column, label)))
        .collect()
}

/// `10x/`: every sparse layer of the measurement's `X` (opening obs, var and each layer).
pub fn tenx_entries(store: &dyn Objects, measurement: &SomaObject, obs: &str) -> Entries {
    let SomaObject::Group(group) = measurement else {
        return Vec::new();
    };
    let member = |name: &str| group.members.iter().find(|m| m.name == name);
    let open_array = |uri: &str| match store.open(uri, Some(ObjectType::Array)) {
        Ok(object) => match object.as_ref() {
            SomaObject::Array(array) => Some(array.clone()),
            SomaObject::Group(_) => None,
        },
        Err(e) => {
            warn!("10x: cannot open {uri}: {e}");
            None
        }
    };
    let (Some(var), Some(x)) = (member("var"), member("X")) else {
        return Vec::new();
    };
    let (Some(obs), Some(var)) = (open_array(obs), open_array(&var.uri)) else {
        return Vec::new();
    };
    let layers = match store.open(&x.uri, Some(x.object_type)).as_deref() {
        Ok(SomaObject::Group(x)) => x.members.clone(),
        _ => return Vec::new(),
    };
    layers
        .iter()
        .filter_map(|layer| {
            let x = open_array(&layer.uri)?;
            let two_d = x.schema.index_columns().count() == 2;
            (x.soma_type == SomaType::SparseNDArray && two_d).then(|| {
                let layer_dir = TenxLayer {
                    obs: obs.clone(),
                    var: var.clone(),
                    x,
                    cells: None,
                };
                (
                    file_name(&layer.name),
                    NodeKind::TenxLayer(Arc::new(layer_dir)),
                )
            })
        })
        .collect()
}

/// A matrix directory: the three files (with `genes.tsv` and `features.tsv` both), and `by/`
/// for a whole layer whose obs has enumerated columns.
pub fn tenx_layer_entries(layer: &Arc<TenxLayer>) -> Entries {
    let part = |part| file(TenxFile::new(layer.clone(), part));
    let mut named = vec![
        ("matrix.mtx".into(), part(TenxPart::Matrix)),
        ("genes.tsv".into(), part(TenxPart::Features)),
        ("features.tsv".into(), part(TenxPart::Features)),
        ("barcodes.tsv".into(), part(TenxPart::Barcodes)),
    ];
    if layer.cells.is_none() && enumerated_columns(&layer.obs).next().is_some() {
        named.push(("by".into(), NodeKind::TenxBy(layer.clone())));
    }
    named
}

/// `10x/<layer>/by/`: obs's enumerated columns.
pub fn tenx_by_entries(layer: &Arc<TenxLayer>) -> Entries {
    enumerated_columns(&layer.obs)
        .map(|c| {
            (
                file_name(&c.name),
                NodeKind::TenxByColumn(layer.clone(), c.name.clone()),
            )
        })
        .collect()
}

/// `10x/<layer>/by/<column>/`: a matrix directory per label.
pub fn tenx_by_column_entries(layer: &Arc<TenxLayer>, column: &str) -> Entries {
    labels(&layer.obs, column)
        .into_iter()
        .map(|(name, label)| {
            let mut category = TenxLayer::clone(layer);
            category.cells = Some((column.to_owned(), label));
            (name, NodeKind::TenxLayer(Arc::new(category)))
        })
        .collect()
}

/// The listing of an `anndata/` directory (see [`AnnDataDir`]).
pub fn anndata_entries(
    store: &dyn Objects,
    dir: &AnnDataDir,
    cache: &Arc<super::cache::ContentCache>,
) -> Entries {
    let h5ad_files = |experiment: &Arc<AnnDataExperiment>, category: &Category| -> Entries {
        let h5ad = |m| H5adFile::new(experiment.clone(), Arc::clone(m), category.clone());
        (experiment.measurements.iter())
            .map(|m| (format!("{}.h5ad", file_name(&m.name)), file(h5ad(m))))
            .collect()
    };
    match dir {
        AnnDataDir::Experiment(object) => {
            let SomaObject::Group(group) = object.as_ref() else {
                return Vec::new();
            };
            let Some(experiment) = AnnDataExperiment::open(store, group).map(Arc::new) else {
                return Vec::new();
            };
            let mut named = h5ad_files(&experiment, &None);
            for m in &experiment.measurements {
                let store = ZarrStore::new(experiment.clone(), m.clone(), cache.clone());
                let dir = NodeKind::Zarr(ZarrDir::Store(store));
                named.push((format!("{}.zarr", file_name(&m.name)), dir));
            }
            if enumerated_columns(&experiment.obs).next().is_some() {
                named.push(("by".into(), NodeKind::AnnData(AnnDataDir::By(experiment))));
            }
            named
        }
        AnnDataDir::By(experiment) => enumerated_columns(&experiment.obs)
            .map(|c| {
                let column = AnnDataDir::ByColumn(experiment.clone(), c.name.clone());
                (file_name(&c.name), NodeKind::AnnData(column))
            })
            .collect(),
        AnnDataDir::ByColumn(experiment, column) => labels(&experiment.obs, column)
            .into_iter()
            .map(|(name, label)| {
                let category = Some((column.clone(), label));
                let dir = AnnDataDir::Category(experiment.clone(), category);
                (name, NodeKind::AnnData(dir))
            })
            .collect(),
        AnnDataDir::Category(experiment, category) => h5ad_files(experiment, category),
    }
}

/// The listing of a directory of a Zarr store: a group's `.zgroup`, `.zattrs` and members
/// (and at the root `.zmetadata`), or an array's `.zarray`, `.zattrs` and chunks. A store
/// that cannot be made lists only `error.txt`.
pub fn zarr_entries(dir: &ZarrDir) -> Entries {
    let document = |value: &serde_json::Value| file(ZarrDocument::of(value));
    let group_entries = |group: &ZarrGroup| -> Entries {
        let mut named = vec![
            (".zgroup".into(), document(&crate::format::zarr::zgroup())),
            (".zattrs".into(), document(&group.attrs.clone().into())),
        ];
        if let Some(consolidated) = &group.consolidated {
            let metadata = ZarrDocument(consolidated.clone());
            named.push((".zmetadata".into(), file(metadata)));
        }
        for (name, member) in &group.members {
            let dir = match member {
                ZarrNode::Group(group) => ZarrDir::Group(group.clone()),
                ZarrNode::Array(array) => ZarrDir::Array(array.clone()),
            };
            named.push((name.clone(), NodeKind::Zarr(dir)));
        }
        named
    };
    match dir {
        ZarrDir::Store(store) => match store.root() {
            Ok(root) => group_entries(&root),
            Err(message) => error_entries(&message),
        },
        ZarrDir::Group(group) => group_entries(group),
        ZarrDir::Array(array) => {
            let mut named = vec![
                (".zarray".into(), document(&array.meta.zarray())),
                (".zattrs".into(), document(&array.attrs.clone().into())),
            ];
            for k in 0..array.meta.chunk_count() {
                let chunk = ZarrChunk::new(array.clone(), k);
                named.push((array.meta.chunk_name(k), file(chunk)));
            }
            named
        }
    }
}

/// A column's labels, each with its file name; `__null__` for nulls when it is nullable.
fn labels(array: &ArrayObject, column: &str) -> Vec<(String, Option<Value>)> {
    let Some(col) = array.schema.columns.iter().find(|c| c.name == column) else {
        return Vec::new();
    };
    let Some(enumeration) = &col.enumeration else {
        return Vec::new();
    };
    let mut out: Vec<(String, Option<Value>)> = enumeration
        .values
        .iter()
        .map(|label| {
            let text = label_text(label, enumeration.datatype);
            (file_name(&text), Some(label.clone()))
        })
        .collect();
    if col.nullable {
        out.push((NULL_LABEL.into(), None));
    }
    out
}

/// A label as the text a CSV shows for it.
fn label_text(label: &Value, datatype: Datatype) -> String {
    match label {
        Value::Text(s) => s.clone(),
        Value::Int(i) => i.to_string(),
        Value::UInt(u) => u.to_string(),
        Value::Float(f) if datatype == Datatype::Float32 => float_text(*f as f32),
        Value::Float(f) => float_text(*f),
        Value::Bool(b) => b.to_string(),
        Value::Bytes(b) => b.iter().map(|x| format!("{x:02x}")).collect(),
    }
}

fn by_value(array: &Arc<ArrayObject>, column: &str, label: Option<Value>) -> NodeKind {
    NodeKind::ByValue(Table {
        array: array.clone(),
        selection: Selection {
            equals: Some((column.to_owned(), label)),
            ..Selection::default()
        },
    })
}
