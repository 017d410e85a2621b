//! An experiment's measurements as AnnData, as tiledbsoma's `to_anndata` makes them: which
//! arrays each measurement's AnnData is made of (obs, var, the X layers, obsm, varm, obsp,
//! varp and the uns collection), which column indexes a data frame, and the reads an h5ad
//! writer is fed from: a data frame's rows (all, or one category's), and a matrix's cells
//! sorted by row then column (all, or those of some rows). The reads of an element a few
//! rows at a time, that a container serving it in pieces (the Zarr store) is fed from, are
//! in [`reads`] and [`csr`]; what each uns array is, and its values, in [`uns`].
//!
//! Opening reads metadata and structure only; the reads are streams of record batches, so
//! what they hold does not grow with the array.

use std::collections::HashSet;
use std::ops::Range;
use std::sync::{Arc, OnceLock};

use arrow_array::cast::AsArray;
use arrow_array::types::Int64Type;
use arrow_array::{Array as _, ArrayRef, BooleanArray, RecordBatch};
use arrow_buffer::BooleanBuffer;
use arrow_schema::DataType;
use log::{debug, warn};

use crate::sync::{at_once, map_at_once};
use crate::tiledb::{self, Metadata, ObjectType, Value};

pub mod csr;
mod elements;
mod reads;
mod uns;

pub use csr::{CsrPart, CsrSource, RowCountsKept};
pub use elements::{
    Along, AnnDataElements, FrameElement, Layout, MatrixColumns, MatrixElement, MatrixMapping,
};
pub use reads::{
    AxisRows, ColumnPart, Columns, FrameRowsAt, FrameSource, MatrixSource, ObsVarRows,
};
pub use uns::{uns_array_layout, uns_element, UnsElement, UnsTogether, UnsValues};

use super::error::{Error, Result};
use super::joinids::{joinids, Positions};
use super::object::{ArrayObject, GroupObject, Objects, SomaObject};
use super::read::{labels_array, BatchReader, ReadAhead, RowPiece, Selection, BATCH_BYTES};
use super::schema::Column;
use super::soma_type::SomaType;

/// The metadata key where tiledbsoma's `from_anndata` records the name of the column that
/// was the data frame's index (JSON: a string, or null).
const ORIGINAL_INDEX_KEY: &str = "soma_dataframe_original_index_name_json";
/// The metadata key of an uns data frame that holds an array of strings, and its values.
const UNS_HINT_KEY: &str = "soma_uns_outgest_hint";

/// An array of a measurement, under its member name.
#[derive(Debug, Clone)]
pub struct Named {
    pub name: String,
    pub array: Arc<ArrayObject>,
}

/// The `uns` collection of a measurement, or a collection inside it.
#[derive(Debug)]
pub struct UnsCollection {
    /// The group's metadata: its keys not starting with `soma_` are uns values.
    pub metadata: Metadata,
    /// What the group's content depends on (its metadata and members), for cache keys.
    pub fingerprint: String,
    pub members: Vec<(String, UnsMember)>,
}

#[derive(Debug)]
pub enum UnsMember {
    Collection(UnsCollection),
    Array(Arc<ArrayObject>),
}

/// What an uns data frame holds, as its hint says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UnsFrame {
    /// An array of strings: the column `values`.
    Strings1d,
    /// A two-dimensional array of strings: the columns `values_0`, `values_1`, …
    Strings2d,
    /// A data frame.
    Frame,
}

impl UnsFrame {
    pub fn of(frame: &ArrayObject) -> UnsFrame {
        match frame.metadata.get(UNS_HINT_KEY).and_then(|v| v.as_str()) {
            Some("array_1d") => UnsFrame::Strings1d,
            Some("array_2d") => UnsFrame::Strings2d,
            _ => UnsFrame::Frame,
        }
    }
}

/// One measurement as an AnnData's parts.
#[derive(Debug)]
pub struct AnnDataMeasurement {
    pub name: String,
    pub var: Arc<ArrayObject>,
    /// X's layers: the one that becomes X first (`data`, else the first by name), then the
    /// others by name.
    pub layers: Vec<Named>,
    pub obsm: Vec<Named>,
    pub varm: Vec<Named>,
    pub obsp: Vec<Named>,
    pub varp: Vec<Named>,
    pub uns: Option<UnsCollection>,
}

/// An experiment's obs and the measurements that can be AnnData (those with var and an X).
#[derive(Debug)]
pub struct AnnDataExperiment {
    pub obs: Arc<ArrayObject>,
    pub measurements: Vec<Arc<AnnDataMeasurement>>,
}

fn open_logged(store: &dyn Objects, uri: &str, recorded: ObjectType) -> Option<Arc<SomaObject>> {
    store
        .open(uri, Some(recorded))
        .inspect_err(|e| warn!("anndata: cannot open {uri}: {e}"))
        .ok()
}

fn member<'a>(members: &'a [tiledb::Member], name: &str) -> Option<&'a tiledb::Member> {
    members.iter().find(|m| m.name == name)
}

/// Opens the group member `m` and, at the same time, gives its members to `inside` as soon
/// as they are read, before the group's metadata is: what is in a group starts opening a
/// round of requests earlier than after the group's open (as the tree does for a path
/// looked up). Both come from one open of the group ([`Objects::members`]). `None` when `m`
/// cannot be opened as a group.
fn open_group_with<T: Send>(
    store: &dyn Objects,
    m: &tiledb::Member,
    inside: impl FnOnce(&[tiledb::Member]) -> T + Send,
) -> Option<(Arc<SomaObject>, T)> {
    let (object, inner) = at_once(
        || open_logged(store, &m.uri, m.object_type),
        || store.members(&m.uri).ok().map(|members| inside(&members)),
    );
    let object = object?;
    as_group(&object)?;
    Some((object, inner?))
}

/// How many objects of an experiment are opened (or small ones read) at once: each is a
/// few rounds of requests to the store, so one after the other they would take the sum of
/// them all.
pub const AT_ONCE: usize = 8;

/// The arrays among a group's members (in member order), opened at once.
fn member_arrays(store: &dyn Objects, members: &[tiledb::Member]) -> Vec<Named> {
    map_at_once(members, AT_ONCE, |m| {
        match open_logged(store, &m.uri, m.object_type)?.as_ref() {
            SomaObject::Array(array) => Some(Named {
                name: m.name.clone(),
                array: array.clone(),
            }),
            SomaObject::Group(_) => None,
        }
    })
    .into_iter()
    .flatten()
    .collect()
}

fn as_group(object: &SomaObject) -> Option<&GroupObject> {
    match object {
        SomaObject::Group(group) => Some(group),
        SomaObject::Array(_) => None,
    }
}

/// The arrays among the members of a measurement's collection that are two-dimensional ND
/// arrays (sparse only when `sparse_only`).
fn matrices(store: &dyn Objects, members: &[tiledb::Member], sparse_only: bool) -> Vec<Named> {
    member_arrays(store, members)
        .into_iter()
        .filter(|named| {
            let array = &named.array;
            let kind_fits = match array.soma_type {
                SomaType::SparseNDArray => true,
                SomaType::DenseNDArray => !sparse_only,
                _ => false,
            };
            kind_fits && array.schema.index_columns().count() == 2
        })
        .collect()
}

/// Whether an experiment may have measurements that can be AnnData: it has `obs` and `ms`.
/// Decided from its members alone, so that its listing waits for no open; `anndata/`
/// lists the measurements that have a `var` and an `X`.
pub fn has_anndata(experiment: &GroupObject) -> bool {
    member(&experiment.members, "obs").is_some() && member(&experiment.members, "ms").is_some()
}

/// Which parts of a measurement are opened.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Parts {
    /// Everything an AnnData is made of ([`AnnDataExperiment::open`]).
    All,
    /// var and X's layers ([`MeasurementGroup::listed`]): what a query's measurement
    /// directory lists. Its obsm opens when listed, everything else when an h5ad is: over
    /// object storage the other parts are most of an experiment's opens (pbmc: about 230 of
    /// the 300 requests of a query's X when they were opened with it).
    Listed,
}

impl Parts {
    /// Whether a measurement's member named `name` is opened.
    fn opens(self, name: &str) -> bool {
        match self {
            Parts::All => name == "var" || name == "uns" || MATRIX_PARTS.contains(&name),
            Parts::Listed => matches!(name, "var" | "X"),
        }
    }
}

impl AnnDataExperiment {
    /// Opens obs and every part of each measurement that has a var and an X with a layer;
    /// `None` when there is no obs or no such measurement.
    pub fn open(store: &dyn Objects, experiment: &GroupObject) -> Option<AnnDataExperiment> {
        let (obs, measurements) = open_obs_and_measurements(store, experiment, |m, members| {
            AnnDataMeasurement::open(store, m.name.clone(), members, Parts::All).map(Arc::new)
        })?;
        let measurements = measurements.into_iter().map(|(_, m)| m).collect();
        Some(AnnDataExperiment { obs, measurements })
    }
}

/// A measurement's group, and what was made of its members.
type OpenedMeasurement<T> = (Arc<SomaObject>, T);

/// Opens an experiment's obs and, at the same time, its measurements that can be AnnData
/// (groups with a var and an X), each measurement's members given to `each` as soon as they
/// are read: what `each` opens of a measurement starts without waiting for the others, or
/// for the measurement's metadata. A level at a time would wait for the slowest member (an
/// array's open takes twice a group's round trips) before any group in it opened its own.
/// `None` when there is no obs, or `each` keeps no measurement.
fn open_obs_and_measurements<T: Send>(
    store: &dyn Objects,
    experiment: &GroupObject,
    each: impl Fn(&tiledb::Member, &[tiledb::Member]) -> Option<T> + Sync,
) -> Option<(Arc<ArrayObject>, Vec<OpenedMeasurement<T>>)> {
    let members = &experiment.members;
    let (obs, ms) = (member(members, "obs")?, member(members, "ms")?);
    let measurement = |m: &tiledb::Member| {
        let (object, kept) = open_group_with(store, m, |members| {
            let has_parts = member(members, "var").is_some() && member(members, "X").is_some();
            has_parts.then(|| each(m, members)).flatten()
        })?;
        let is_measurement = as_group(&object)?.soma_type == SomaType::Measurement;
        is_measurement.then_some((object, kept?))
    };
    let (obs, measurements) = at_once(
        || open_logged(store, &obs.uri, obs.object_type),
        || {
            let (_, kept) = open_group_with(store, ms, |members| {
                map_at_once(members, AT_ONCE, measurement)
            })?;
            Some(kept.into_iter().flatten().collect::<Vec<_>>())
        },
    );
    let obs = match obs?.as_ref() {
        SomaObject::Array(array) if array.soma_type.is_dataframe() => array.clone(),
        _ => return None,
    };
    let measurements = measurements?;
    (!measurements.is_empty()).then_some((obs, measurements))
}

/// An experiment's obs and the groups of its measurements that can be AnnData, their parts
/// not opened: what a query lists before it is looked into.
#[derive(Debug)]
pub struct ExperimentOutline {
    pub obs: Arc<ArrayObject>,
    pub measurements: Vec<Arc<MeasurementGroup>>,
}

/// The group of a measurement that can be AnnData, its parts opened when first asked for.
#[derive(Debug)]
pub struct MeasurementGroup {
    pub name: String,
    /// A [`SomaObject::Group`].
    group: Arc<SomaObject>,
    listed: OnceLock<Option<Arc<AnnDataMeasurement>>>,
    whole: OnceLock<Option<Arc<AnnDataMeasurement>>>,
}

impl ExperimentOutline {
    /// Opens obs, `ms` and its measurements' groups; `None` when there is no obs or no
    /// measurement with a var and an X.
    pub fn open(store: &dyn Objects, experiment: &GroupObject) -> Option<ExperimentOutline> {
        let (obs, measurements) =
            open_obs_and_measurements(store, experiment, |m, _| Some(m.name.clone()))?;
        let measurements = (measurements.into_iter())
            .map(|(group, name)| {
                Arc::new(MeasurementGroup {
                    name,
                    group,
                    listed: OnceLock::new(),
                    whole: OnceLock::new(),
                })
            })
            .collect();
        Some(ExperimentOutline { obs, measurements })
    }
}

impl MeasurementGroup {
    /// Its members (none when it is no group, which [`open_obs_and_measurements`] keeps
    /// none of).
    fn members(&self) -> &[tiledb::Member] {
        as_group(&self.group).map_or(&[], |group| &group.members)
    }

    /// The measurement's var and X's layers ([`Parts::Listed`]), opened once; `None` when
    /// they cannot be.
    pub fn listed(&self, store: &dyn Objects) -> Option<&Arc<AnnDataMeasurement>> {
        let opened = self.listed.get_or_init(|| {
            AnnDataMeasurement::open(store, self.name.clone(), self.members(), Parts::Listed)
                .map(Arc::new)
        });
        opened.as_ref()
    }

    /// Every part of the measurement ([`Parts::All`], what its AnnData is read from), opened
    /// once; `None` when they cannot be.
    pub fn whole(&self, store: &dyn Objects) -> Option<&Arc<AnnDataMeasurement>> {
        let opened = self.whole.get_or_init(|| {
            AnnDataMeasurement::open(store, self.name.clone(), self.members(), Parts::All)
                .map(Arc::new)
        });
        opened.as_ref()
    }

    /// The two-dimensional ND arrays of the measurement's collection `name` (`obsm`, …),
    /// opened now; none when it has no such collection.
    pub fn matrices(&self, store: &dyn Objects, name: &str) -> Vec<Named> {
        let Some(collection) = member(self.members(), name) else {
            return Vec::new();
        };
        let sparse_only = matches!(name, "obsp" | "varp");
        open_group_with(store, collection, |members| {
            matrices(store, members, sparse_only)
        })
        .map(|(_, matrices)| matrices)
        .unwrap_or_default()
    }
}

/// What one member of a measurement gives its AnnData.
enum Part {
    Var(Arc<ArrayObject>),
    /// The matrices of `X` (its layers), `obsm`, `varm`, `obsp` or `varp`.
    Matrices(&'static str, Vec<Named>),
    Uns(UnsCollection),
}

/// The collections of matrices a measurement's AnnData is read from.
const MATRIX_PARTS: [&str; 5] = ["X", "obsm", "varm", "obsp", "varp"];

impl AnnDataMeasurement {
    /// Opens the `parts` of the measurement whose members are `members`.
    fn open(
        store: &dyn Objects,
        name: String,
        members: &[tiledb::Member],
        parts: Parts,
    ) -> Option<AnnDataMeasurement> {
        // var, X, obsm, …, uns at once, each collection's members as soon as they are read.
        let opened = map_at_once(members, members.len(), |m| {
            if !parts.opens(&m.name) {
                return None;
            }
            let matrix_part = MATRIX_PARTS.iter().find(|&&part| part == m.name);
            Some(match (m.name.as_str(), matrix_part) {
                ("var", _) => match open_logged(store, &m.uri, m.object_type)?.as_ref() {
                    SomaObject::Array(array) if array.soma_type.is_dataframe() => {
                        Part::Var(array.clone())
                    }
                    _ => return None,
                },
                ("uns", _) => Part::Uns(open_uns(store, m)?),
                (_, Some(&part)) => {
                    let sparse_only = matches!(part, "obsp" | "varp");
                    let (_, matrices) =
                        open_group_with(store, m, |members| matrices(store, members, sparse_only))?;
                    Part::Matrices(part, matrices)
                }
                _ => return None,
            })
        });
        let (mut var, mut uns) = (None, None);
        let mut found: [Vec<Named>; 5] = Default::default();
        for part in opened.into_iter().flatten() {
            match part {
                Part::Var(array) => var = Some(array),
                Part::Uns(collection) => uns = Some(collection),
                Part::Matrices(part, named) => {
                    let at = MATRIX_PARTS.iter().position(|&p| p == part);
                    found[at.expect("one of the parts")] = named;
                }
            }
        }
        let [mut layers, obsm, varm, obsp, varp] = found;
        layers.sort_by(|a, b| a.name.cmp(&b.name));
        if let Some(data) = layers.iter().position(|l| l.name == "data") {
            let data = layers.remove(data);
            layers.insert(0, data);
        }
        if layers.is_empty() {
            return None;
        }
        Some(AnnDataMeasurement {
            name,
            var: var?,
            layers,
            obsm,
            varm,
            obsp,
            varp,
            uns,
        })
    }

    /// Every array the AnnData is read from, but obs.
    pub fn arrays(&self) -> impl Iterator<Item = &ArrayObject> {
        let named = [&self.layers, &self.obsm, &self.varm, &self.obsp, &self.varp];
        let mut uns = Vec::new();
        if let Some(collection) = &self.uns {
            collection.arrays(&mut uns);
        }
        std::iter::once(&*self.var)
            .chain(named.into_iter().flatten().map(|n| &*n.array))
            .chain(uns)
    }
}

/// Opens the uns collection `m`, the collections in it and their arrays, each collection's
/// members as soon as they are read; `None` when it cannot be opened as a group. A
/// collection that holds one of the collections it is in is left out (with a warning): it
/// would never end.
fn open_uns(store: &dyn Objects, m: &tiledb::Member) -> Option<UnsCollection> {
    uns_collection(store, m, &[])
}

/// The collection `m` of uns, held by the collections `within` (URIs: one that holds one of
/// them is left out, with a warning).
fn uns_collection(
    store: &dyn Objects,
    m: &tiledb::Member,
    within: &[&str],
) -> Option<UnsCollection> {
    let within: Vec<&str> = within.iter().copied().chain([m.uri.as_str()]).collect();
    let (group, members) = open_group_with(store, m, |members| {
        // Each member at once, and each collection's members as soon as they are read.
        map_at_once(members, AT_ONCE, |inner| {
            let member = match inner.object_type {
                ObjectType::Group if within.contains(&inner.uri.as_str()) => {
                    warn!("anndata: {} holds {}, which holds it", m.uri, inner.uri);
                    return None;
                }
                ObjectType::Group => UnsMember::Collection(uns_collection(store, inner, &within)?),
                _ => match open_logged(store, &inner.uri, inner.object_type)?.as_ref() {
                    SomaObject::Array(array) => UnsMember::Array(array.clone()),
                    SomaObject::Group(_) => return None,
                },
            };
            Some((inner.name.clone(), member))
        })
    })?;
    let group = as_group(&group)?;
    Some(UnsCollection {
        metadata: group.metadata.clone(),
        fingerprint: format!("{:?}{:?}", group.metadata, group.members),
        members: members.into_iter().flatten().collect(),
    })
}

impl UnsCollection {
    /// The uns values of the metadata: every key not starting with `soma_`.
    pub fn values(&self) -> impl Iterator<Item = (&String, &crate::tiledb::MetadataValue)> {
        self.metadata
            .iter()
            .filter(|(key, _)| !key.starts_with("soma_"))
    }

    /// The members to_anndata keeps: those without a metadata value of the same name (a
    /// value wins over a member).
    pub fn members_kept(&self) -> impl Iterator<Item = &(String, UnsMember)> {
        let values: HashSet<&str> = self.values().map(|(key, _)| key.as_str()).collect();
        self.members
            .iter()
            .filter(move |(name, _)| !values.contains(name.as_str()))
    }

    fn arrays<'a>(&'a self, out: &mut Vec<&'a ArrayObject>) {
        for (_, member) in &self.members {
            match member {
                UnsMember::Collection(inner) => inner.arrays(out),
                UnsMember::Array(array) => out.push(array),
            }
        }
    }

    /// Feeds what the collections' content depends on (but their arrays') to `feed`.
    pub fn fingerprints(&self, feed: &mut dyn FnMut(&str)) {
        feed(&self.fingerprint);
        for (_, member) in &self.members {
            if let UnsMember::Collection(inner) = member {
                inner.fingerprints(feed);
            }
        }
    }
}

/// Which column of a data frame becomes the AnnData's index, as tiledbsoma's `to_anndata`
/// chooses: the column `from_anndata` recorded as the original index (keeping its name),
/// else `fallback` (unnamed). `None`: neither is there.
pub fn index_column(frame: &ArrayObject, fallback: &str) -> Option<(String, bool)> {
    let has = |name: &str| frame.schema.columns.iter().any(|c| c.name == name);
    let original = frame
        .metadata
        .get(ORIGINAL_INDEX_KEY)
        .and_then(|v| v.as_str())
        .and_then(|json| serde_json::from_str::<Option<String>>(json).ok())
        .flatten();
    match original {
        Some(name) if has(&name) => Some((name, true)),
        _ => has(fallback).then(|| (fallback.to_owned(), false)),
    }
}

/// An enumerated column's labels (the categories of its categorical), and whether their
/// order means something; `None` for a column that is not enumerated.
pub fn categories(column: &Column) -> Result<Option<(ArrayRef, bool)>> {
    column
        .enumeration
        .as_ref()
        .map(|e| Ok((labels_array(e)?, e.ordered)))
        .transpose()
}

/// What a first pass over a data frame's rows (all, or one category's) finds: how many
/// there are, their join ids in order (when the frame has them), and which columns hold a
/// null.
#[derive(Debug, Default)]
pub struct FrameRows {
    pub count: usize,
    pub joinids: Positions,
    pub columns_with_nulls: HashSet<String>,
}

impl FrameRows {
    /// What a pass over rows read whole finds (their join ids are not taken).
    pub fn of(batches: &[RecordBatch]) -> FrameRows {
        let mut rows = FrameRows::default();
        for batch in batches {
            rows.add(batch);
        }
        rows
    }

    /// Counts a batch of rows in: its size and its columns' nulls.
    pub fn add(&mut self, batch: &RecordBatch) {
        self.count += batch.num_rows();
        for (field, column) in batch.schema().fields().iter().zip(batch.columns()) {
            if column.logical_null_count() > 0 {
                self.columns_with_nulls.insert(field.name().clone());
            }
        }
    }
}

/// Reads a data frame's rows (those `rows` selects), in order, a batch at a time.
pub fn read_rows(
    frame: &ArrayObject,
    rows: &Selection,
    visit: impl FnMut(&RecordBatch) -> std::io::Result<()>,
) -> Result<()> {
    read_selected(frame, rows, visit)
}

fn read_selected(
    frame: &ArrayObject,
    selection: &Selection,
    mut visit: impl FnMut(&RecordBatch) -> std::io::Result<()>,
) -> Result<()> {
    let mut reader = ReadAhead::start(BatchReader::open(frame, selection, BATCH_BYTES)?)?;
    while let Some(batch) = reader.next_batch()? {
        visit(&batch)?;
    }
    Ok(())
}

/// The first pass over a data frame's rows (see [`FrameRows`]): it reads their join ids
/// (unless the open tells them: [`ArrayObject::joinids_from_open`]), and looks for nulls in
/// the columns `null_checked` only (no other column is found to hold one): libtiledb counts
/// them without reading the values where it can ([`tiledb::nulls_countable`]), and the
/// other columns are read. The rows must come in join id order (they do when the frame is
/// indexed by `soma_joinid` alone, as tiledbsoma writes obs and var): matrices are laid out
/// by join id.
pub fn scan_rows(
    frame: &ArrayObject,
    rows: &Selection,
    null_checked: &[String],
) -> Result<FrameRows> {
    let selection = rows.clone();
    let every_row = *rows == Selection::default();
    // A column that cannot hold a null has none to look for.
    let (counted, read): (Vec<&Column>, Vec<&Column>) = frame
        .schema
        .columns
        .iter()
        .filter(|c| c.nullable && null_checked.contains(&c.name))
        .partition(|c| tiledb::nulls_countable(c.datatype, c.cell_val_num));
    let counted: Vec<&str> = counted.iter().map(|c| c.name.as_str()).collect();
    let with_nulls = |counts: &[(String, u64)]| -> HashSet<String> {
        (counts.iter())
            .filter(|(_, nulls)| *nulls > 0)
            .map(|(column, _)| column.clone())
            .collect()
    };
    // Every row, with join ids the open tells: only the nulls are counted (libtiledb's
    // reader walks the join-id tiles for that), and a frame with none to count is not read.
    if let (true, true, Some(ids)) = (every_row, read.is_empty(), frame.joinids_from_open()) {
        debug!("{}: join ids {ids:?}, told by the open", frame.uri);
        let joinids = Positions::range(ids);
        let columns_with_nulls = match counted.is_empty() {
            true => HashSet::new(),
            false => with_nulls(&super::read::null_counts(frame, &counted)?),
        };
        return Ok(FrameRows {
            count: joinids.len(),
            joinids,
            columns_with_nulls,
        });
    }
    let only: Vec<&str> = read
        .iter()
        .map(|c| c.name.as_str())
        .chain(["soma_joinid"])
        .collect();
    let mut reader = BatchReader::open_unsorted(frame, &selection, &only, &counted, BATCH_BYTES)?;
    let mut rows = FrameRows::default();
    while let Some(batch) = reader.next_batch()? {
        let ids = joinids(&batch)?;
        let sorted = ids.windows(2).all(|w| w[0] < w[1])
            && rows
                .joinids
                .last()
                .is_none_or(|last| ids.first().is_none_or(|&f| f > last));
        if !sorted {
            return Err(Error::invalid(format!(
                "{}: rows are not in soma_joinid order",
                frame.uri
            )));
        }
        rows.joinids.extend_sorted(ids);
        rows.add(&batch);
    }
    let counts = reader
        .null_counts()
        .ok_or_else(|| Error::invalid("a read of join ids ended early"))?;
    rows.columns_with_nulls.extend(with_nulls(counts));
    Ok(rows)
}

/// Every row of an array (a small one: an uns element).
pub fn read_all(array: &ArrayObject) -> Result<Vec<RecordBatch>> {
    let mut reader = BatchReader::open(array, &Selection::default(), BATCH_BYTES)?;
    let mut batches = Vec::new();
    while let Some(batch) = reader.next_batch()? {
        batches.push(batch);
    }
    Ok(batches)
}

/// The column `name` of rows of `array` read whole ([`read_all`]), in one array; empty, of
/// the schema's type, when no rows were read.
pub fn column_of(
    array: &ArrayObject,
    batches: &[RecordBatch],
    name: &str,
) -> std::io::Result<ArrayRef> {
    let pieces = batches
        .iter()
        .map(|b| {
            b.column_by_name(name)
                .map(|c| c.as_ref())
                .ok_or_else(|| std::io::Error::other(format!("{}: no column {name}", array.uri)))
        })
        .collect::<std::io::Result<Vec<_>>>()?;
    if pieces.is_empty() {
        let field = array.schema.arrow().field_with_name(name).cloned();
        let data_type = field.map_or(arrow_schema::DataType::LargeUtf8, |f| f.data_type().clone());
        return Ok(arrow_array::new_empty_array(&data_type));
    }
    arrow_select::concat::concat(&pieces).map_err(std::io::Error::other)
}

/// Reads a two-dimensional array's cells, sorted by row then column, and hands each batch to
/// `visit` as (row join ids, column join ids, values): every cell, or those in the rows
/// `rows` (runs of join ids, sorted). A dense array's cells are those of its current domain.
pub fn read_cells(
    array: &ArrayObject,
    rows: Option<&[(i64, i64)]>,
    mut visit: impl FnMut(&[i64], &[i64], &ArrayRef) -> std::io::Result<()>,
) -> Result<()> {
    let mut written_out = (Vec::new(), Vec::new());
    read_matrix(array, rows, |batch, cells| {
        let (row_ids, col_ids) = cells.listed(&mut written_out);
        visit(row_ids, col_ids, batch.column(batch.num_columns() - 1))
    })
}

/// The coordinates of a batch of a matrix's cells: listed cell by cell, or as pieces of
/// rows (a dense read's, whose order tells them).
#[derive(Debug, Clone, Copy)]
enum CellCoordinates<'a> {
    Listed(&'a [i64], &'a [i64]),
    RowPieces(&'a [RowPiece]),
}

impl<'a> CellCoordinates<'a> {
    /// The cells' coordinates, listed: pieces of rows are written out into `written_out`.
    fn listed<'s>(self, written_out: &'s mut (Vec<i64>, Vec<i64>)) -> (&'s [i64], &'s [i64])
    where
        'a: 's,
    {
        match self {
            CellCoordinates::Listed(row_ids, col_ids) => (row_ids, col_ids),
            CellCoordinates::RowPieces(pieces) => {
                let (row_ids, col_ids) = written_out;
                row_ids.clear();
                col_ids.clear();
                RowPiece::coordinates(pieces, row_ids, col_ids);
                (row_ids, col_ids)
            }
        }
    }
}

/// Where a batch's cells go in a matrix: cell by cell, or in runs of a row's cells.
#[derive(Clone, Copy)]
pub enum Placed<'a> {
    Cells(&'a CellPlaces),
    Runs(&'a [RowRun]),
}

/// Reads a two-dimensional array's cells as [`read_cells`] does, and hands each batch to
/// `visit` with their places in a matrix whose rows and columns are `axes`: in runs of a
/// row's cells where a dense read's order tells pieces of rows and the columns are plain
/// indices (obsm's), cell by cell otherwise.
pub fn read_placed(
    array: &ArrayObject,
    rows: Option<&[(i64, i64)]>,
    (row_axis, col_axis): (Axis, Axis),
    mut visit: impl FnMut(Placed, &ArrayRef) -> std::io::Result<()>,
) -> Result<()> {
    let (mut written_out, mut runs) = ((Vec::new(), Vec::new()), Vec::new());
    read_matrix(array, rows, |batch, cells| {
        let values = batch.column(batch.num_columns() - 1);
        if let (CellCoordinates::RowPieces(pieces), Axis::Indices(width)) = (cells, col_axis) {
            runs.clear();
            runs.extend(row_runs(pieces, row_axis, width));
            return visit(Placed::Runs(&runs), values);
        }
        let (row_ids, col_ids) = cells.listed(&mut written_out);
        let places = CellPlaces::of((&row_axis, &col_axis), row_ids, col_ids);
        visit(Placed::Cells(&places), values)
    })
}

/// Cells of a row of a matrix that come together in a batch: `cells` values from
/// `values_at` on go to row `row`, from column `col` on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RowRun {
    pub row: usize,
    pub col: usize,
    pub values_at: usize,
    pub cells: usize,
}

/// Where pieces of rows go in a matrix whose rows are `rows` and whose columns are the
/// indices below `width`: the cells the matrix holds (as [`CellPlaces`] keeps them), a run
/// of each piece, at its values' place in the batch.
fn row_runs<'a>(
    pieces: &'a [RowPiece],
    rows: Axis<'a>,
    width: usize,
) -> impl Iterator<Item = RowRun> + 'a {
    let mut values_at = 0;
    pieces.iter().filter_map(move |piece| {
        let at = values_at;
        values_at += piece.cells;
        // Columns below 0 and from `width` on are not the matrix's.
        let skipped = usize::try_from(piece.first_col.min(0).unsigned_abs()).ok()?;
        let col = usize::try_from(piece.first_col.max(0)).ok()?;
        let cells = (piece.cells.saturating_sub(skipped)).min(width.saturating_sub(col));
        let row = rows.at(piece.row)?;
        (cells > 0).then_some(RowRun {
            row,
            col,
            values_at: at + skipped,
            cells,
        })
    })
}

/// Runs of join ids as ranges of dimension `dim` of `array`: the parts of them inside its
/// domain (the current domain, its shape, where it has one), none when no part is. libtiledb
/// refuses a range outside it, and a matrix may be shorter than the frame its join ids
/// come from (an obsm of the first cells): the cells of the others are simply not there.
pub fn runs_in_domain(array: &ArrayObject, dim: usize, runs: &[(i64, i64)]) -> Vec<(Value, Value)> {
    let domain = (array.schema.index_columns().nth(dim))
        .and_then(|c| c.domain.clone())
        .and_then(|(lo, hi)| Some((lo.as_i128()?, hi.as_i128()?)));
    let (lo, hi) = domain.unwrap_or((i128::MIN, i128::MAX));
    (runs.iter())
        .filter_map(|&(a, b)| {
            let (a, b) = (i128::from(a).max(lo), i128::from(b).min(hi));
            (a <= b).then_some((Value::Int(a as i64), Value::Int(b as i64)))
        })
        .collect()
}

/// Reads a two-dimensional array's cells in the rows `rows` (all when `None`), a batch at
/// a time with its coordinates: a dense array's values alone where their order tells their
/// coordinates ([`DenseCellOrder`](super::read::DenseCellOrder)), libtiledb filling them
/// in cell by cell otherwise.
fn read_matrix(
    array: &ArrayObject,
    rows: Option<&[(i64, i64)]>,
    mut visit: impl FnMut(&RecordBatch, CellCoordinates) -> std::io::Result<()>,
) -> Result<()> {
    let mut selection = Selection::default();
    if let Some(rows) = rows {
        let runs = runs_in_domain(array, 0, rows);
        if runs.is_empty() {
            return Ok(());
        }
        selection.ranges = vec![runs];
    }
    // Read on a thread of its own, a batch ahead: TileDB reads while the writer writes.
    if let Some((reader, mut order)) =
        BatchReader::open_dense_values(array, &selection, BATCH_BYTES)?
    {
        let mut reader = ReadAhead::start(reader)?;
        let mut pieces = Vec::new();
        while let Some(batch) = reader.next_batch()? {
            pieces.clear();
            order.next_pieces(batch.num_rows(), &mut pieces)?;
            visit(&batch, CellCoordinates::RowPieces(&pieces))?;
        }
        return Ok(());
    }
    let mut reader = ReadAhead::start(BatchReader::open(array, &selection, BATCH_BYTES)?)?;
    while let Some(batch) = reader.next_batch()? {
        let cells =
            CellCoordinates::Listed(dimension(array, &batch, 0)?, dimension(array, &batch, 1)?);
        visit(&batch, cells)?;
    }
    Ok(())
}

/// The coordinates of column `i` of a batch of a matrix's cells (int64).
fn dimension<'a>(array: &ArrayObject, batch: &'a RecordBatch, i: usize) -> Result<&'a [i64]> {
    batch
        .column(i)
        .as_primitive_opt::<Int64Type>()
        .map(|a| a.values().as_ref())
        .ok_or_else(|| Error::invalid(format!("{}: dimensions are not int64", array.uri)))
}

/// How a matrix's coordinates along one dimension map to the rows or columns of the
/// AnnData's matrix.
#[derive(Clone, Copy)]
pub enum Axis<'a> {
    /// Join ids, each at its place among obs's or var's.
    Joinids(&'a Positions),
    /// Indices below this count, as they are (the columns of obsm and varm).
    Indices(usize),
}

impl Axis<'_> {
    pub fn len(&self) -> usize {
        match self {
            Axis::Joinids(positions) => positions.len(),
            Axis::Indices(count) => *count,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The place of coordinate `id` along the axis; `None`: the cell is left out.
    pub fn at(&self, id: i64) -> Option<usize> {
        match self {
            Axis::Joinids(positions) => positions.get(id).map(|p| p as usize - 1),
            Axis::Indices(count) => usize::try_from(id).ok().filter(|i| i < count),
        }
    }
}

/// The places of a batch's cells in a matrix whose rows and columns are `axes`: where
/// each cell both axes hold goes (row, column), in the batch's order, and which cells those
/// are (the others are left out). Cells come row by row, so a row's place is looked up once
/// for all its cells.
pub struct CellPlaces {
    pub rows: Vec<usize>,
    pub cols: Vec<usize>,
    pub keep: Vec<bool>,
}

impl CellPlaces {
    pub fn of((rows, cols): (&Axis, &Axis), row_ids: &[i64], col_ids: &[i64]) -> CellPlaces {
        let cells = row_ids.len();
        let mut places = CellPlaces {
            rows: Vec::with_capacity(cells),
            cols: Vec::with_capacity(cells),
            keep: Vec::with_capacity(cells),
        };
        let mut row: Option<(i64, Option<usize>)> = None;
        for (&r, &c) in row_ids.iter().zip(col_ids) {
            let row_place = match row {
                Some((id, place)) if id == r => place,
                _ => {
                    let place = rows.at(r);
                    row = Some((r, place));
                    place
                }
            };
            let place = row_place.zip(cols.at(c));
            places.keep.push(place.is_some());
            if let Some((r, c)) = place {
                places.rows.push(r);
                places.cols.push(c);
            }
        }
        places
    }

    /// Whether every cell of the batch is kept.
    pub fn keeps_all(&self) -> bool {
        self.rows.len() == self.keep.len()
    }

    /// The batch's `values` of the cells kept, as `value_type`.
    pub fn values(&self, values: &ArrayRef, value_type: &DataType) -> std::io::Result<ArrayRef> {
        if self.keeps_all() {
            return values_as(values, value_type);
        }
        let keep = BooleanBuffer::collect_bool(self.keep.len(), |i| self.keep[i]);
        let kept = arrow_select::filter::filter(values, &BooleanArray::new(keep, None))
            .map_err(std::io::Error::other)?;
        values_as(&kept, value_type)
    }
}

/// A matrix's `values` as `value_type`.
pub fn values_as(values: &ArrayRef, value_type: &DataType) -> std::io::Result<ArrayRef> {
    match values.data_type() == value_type {
        true => Ok(values.clone()),
        false => arrow_cast::cast(values, value_type).map_err(std::io::Error::other),
    }
}

/// Whether every coordinate of dimension `dim` that `array` stores is on `axis`: those of its
/// non-empty domain from lo to hi are when both ends are, as many places apart.
fn holds_stored(axis: Axis, array: &ArrayObject, dim: usize) -> bool {
    let Some((lo, hi)) = array.non_empty_domain.get(dim).cloned().flatten() else {
        return true;
    };
    match (lo.as_i128(), hi.as_i128()) {
        (Some(lo), Some(hi)) => match (axis.at(lo as i64), axis.at(hi as i64)) {
            (Some(first), Some(last)) => (last - first) as i128 == hi - lo,
            _ => false,
        },
        _ => false,
    }
}

/// The rows of a sparse matrix on `rows` and `cols` in blocks whose entries its fragments
/// tell without a read: each fragment's range of join ids on the first dimension (inclusive)
/// and its cells, in row order. They tell when every stored cell is on both axes and no two
/// fragments hold cells of a row in common, so that none can hold a cell another holds too
/// (which a read would show once). `None`: count the entries ([`row_counts`]).
pub fn row_blocks(
    array: &ArrayObject,
    (rows, cols): (Axis, Axis),
) -> Result<Option<Vec<RowBlock>>> {
    if array.schema.dense || !holds_stored(rows, array, 0) || !holds_stored(cols, array, 1) {
        return Ok(None);
    }
    let joinid = |value: &Value| i64::try_from(value.as_i128()?).ok();
    let Some(mut blocks) = array
        .fragments()?
        .iter()
        .map(|f| {
            let (lo, hi) = f.first_dimension.as_ref()?;
            Some(RowBlock {
                joinids: (joinid(lo)?, joinid(hi)?),
                entries: f.cell_num,
            })
        })
        .collect::<Option<Vec<RowBlock>>>()
    else {
        return Ok(None);
    };
    blocks.sort_unstable_by_key(|block| block.joinids);
    let apart = blocks
        .windows(2)
        .all(|pair| pair[0].joinids.1 < pair[1].joinids.0);
    Ok(apart.then_some(blocks))
}

/// Rows of a matrix whose entries are known: their join ids (inclusive) and their entries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RowBlock {
    pub joinids: (i64, i64),
    pub entries: u64,
}

/// Entries per row of a matrix (those whose row and column are on `rows` and `cols`) in the
/// rows whose join ids are in `joinids` (inclusive; every row when `None`), counted from the
/// coordinates alone: the first dimension's, and the second's only when some columns may be
/// off the axis; read in no particular order. One count per place of `places`, the places
/// on `rows` of the rows counted.
pub fn row_counts(
    array: &ArrayObject,
    (rows, cols): (Axis, Axis),
    joinids: Option<(i64, i64)>,
    places: Range<usize>,
) -> Result<Vec<u64>> {
    let started = std::time::Instant::now();
    let mut counts = vec![0u64; places.len()];
    let index: Vec<&str> = array
        .schema
        .index_columns()
        .map(|c| c.name.as_str())
        .collect();
    let [row_dim, col_dim] = index.as_slice() else {
        return Err(Error::invalid(format!(
            "{}: not two-dimensional",
            array.uri
        )));
    };
    // The column of a cell is only looked at when some could be off the axis.
    let all_columns = holds_stored(cols, array, 1);
    let only: Vec<&str> = if all_columns {
        vec![row_dim]
    } else {
        vec![row_dim, col_dim]
    };
    let selection = Selection {
        ranges: joinids
            .map(|(lo, hi)| vec![vec![(Value::Int(lo), Value::Int(hi))]])
            .unwrap_or_default(),
        ..Selection::default()
    };
    let mut count = |row: i64| -> Result<()> {
        if let Some(place) = rows.at(row) {
            let counted = place
                .checked_sub(places.start)
                .and_then(|i| counts.get_mut(i))
                .ok_or_else(|| {
                    Error::invalid(format!(
                        "{}: row {row} is at place {place}, outside {places:?}",
                        array.uri
                    ))
                })?;
            *counted += 1;
        }
        Ok(())
    };
    let reader = BatchReader::open_unsorted(array, &selection, &only, &[], BATCH_BYTES)?;
    let mut reader = ReadAhead::start(reader)?;
    while let Some(batch) = reader.next_batch()? {
        let row_ids = dimension(array, &batch, 0)?;
        if all_columns {
            row_ids.iter().try_for_each(|&r| count(r))?;
        } else {
            for (&r, &c) in row_ids.iter().zip(dimension(array, &batch, 1)?) {
                if cols.at(c).is_some() {
                    count(r)?;
                }
            }
        }
    }
    let which = match joinids {
        Some((lo, hi)) => format!("rows {lo}-{hi}"),
        None => "every row".to_owned(),
    };
    debug!(
        "{}: entries per row counted in {:?} ({which})",
        array.uri,
        started.elapsed()
    );
    Ok(counts)
}

/// Reads the column `column` of a data frame's rows at the places `places` of `rows` (its
/// rows' join ids), in that order: only those rows when the frame is indexed by
/// `soma_joinid` first.
pub fn read_frame_column(
    frame: &ArrayObject,
    column: &str,
    rows: &Positions,
    places: Range<usize>,
) -> Result<ArrayRef> {
    let places = places.start..places.end.min(rows.len());
    let runs = rows.runs_at(places.clone());
    let by_joinid = frame
        .schema
        .index_columns()
        .next()
        .is_some_and(|c| c.name == "soma_joinid");
    let mut selection = Selection {
        columns: Some(vec![column.to_owned()]),
        ..Selection::default()
    };
    if by_joinid {
        if runs.is_empty() {
            let field = frame.schema.arrow().field_with_name(column).cloned();
            let data_type = field.map_err(|e| Error::invalid(e.to_string()))?;
            return Ok(arrow_array::new_empty_array(data_type.data_type()));
        }
        selection.ranges = vec![runs
            .iter()
            .map(|&(a, b)| (Value::Int(a), Value::Int(b)))
            .collect()];
    }
    let mut pieces = Vec::new();
    let mut reader = BatchReader::open(frame, &selection, BATCH_BYTES)?;
    let wanted = |id: i64| {
        rows.get(id)
            .is_some_and(|place| places.contains(&(place as usize - 1)))
    };
    while let Some(batch) = reader.next_batch()? {
        let ids = joinids(&batch)?;
        let keep: arrow_array::BooleanArray = ids.iter().map(|&id| Some(wanted(id))).collect();
        let values = batch
            .column_by_name(column)
            .ok_or_else(|| Error::invalid(format!("{}: no column {column}", frame.uri)))?;
        pieces.push(
            arrow_select::filter::filter(values, &keep)
                .map_err(|e| Error::invalid(e.to_string()))?,
        );
    }
    let pieces: Vec<&dyn arrow_array::Array> = pieces.iter().map(|p| p.as_ref()).collect();
    let values = match pieces.as_slice() {
        [] => {
            let field = frame.schema.arrow().field_with_name(column).cloned();
            let field = field.map_err(|e| Error::invalid(e.to_string()))?;
            arrow_array::new_empty_array(field.data_type())
        }
        _ => arrow_select::concat::concat(&pieces).map_err(|e| Error::invalid(e.to_string()))?,
    };
    if values.len() != places.len() {
        return Err(Error::invalid(format!(
            "{}: {} of the {} rows asked for",
            frame.uri,
            values.len(),
            places.len()
        )));
    }
    Ok(values)
}

/// The number of columns tiledbsoma's `to_anndata` gives an obsm or varm array read as
/// dense, for `rows` rows in all: its current domain's (dense arrays and arrays with a
/// shape); else, for a sparse array stored whole, its cells over the rows; else past the
/// last stored column.
pub fn matrix_width(array: &ArrayObject, rows: u64) -> Result<u64> {
    let second = array.schema.index_columns().nth(1);
    let has_shape = second.is_some_and(|c| c.domain != c.schema_domain);
    let shape = array.schema.shape.as_ref().and_then(|s| s.get(1).copied());
    if array.schema.dense || has_shape {
        return Ok(shape.unwrap_or(0));
    }
    let cells = array.stored_cells()?;
    if rows > 0 && cells.is_multiple_of(rows) {
        return Ok(cells / rows);
    }
    Ok(match array.non_empty_domain.get(1).cloned().flatten() {
        Some((_, hi)) => hi.as_i128().map_or(0, |hi| (hi + 1).max(0) as u64),
        None => 0,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::soma::fixtures::{group, MemoryStore};

    #[test]
    fn pieces_of_rows_go_where_the_matrix_holds_their_cells() {
        // The matrix's rows are join ids 10, 11 and 20; its columns the indices below 3.
        let positions = Positions::new(vec![10, 11, 20]);
        let rows = Axis::Joinids(&positions);
        let piece = |row, first_col, cells| RowPiece {
            row,
            first_col,
            cells,
        };
        let run = |row, col, values_at, cells| RowRun {
            row,
            col,
            values_at,
            cells,
        };
        let pieces = [
            piece(10, 1, 4),  // columns 1-4: 3 and 4 are not the matrix's
            piece(12, 0, 5),  // a row the matrix does not hold
            piece(20, -2, 4), // columns -2-1: -2 and -1 are not the matrix's
            piece(11, 5, 2),  // beyond its columns
        ];
        let runs: Vec<RowRun> = row_runs(&pieces, rows, 3).collect();
        assert_eq!(runs, [run(0, 1, 0, 2), run(2, 0, 11, 2)]);
    }

    #[test]
    fn an_uns_collection_that_holds_its_own_holder_ends() {
        let collection = |uri, members: &[(&str, &str)]| {
            let members: Vec<_> = (members.iter())
                .map(|&(name, uri)| (name, uri, ObjectType::Group))
                .collect();
            group(uri, "SOMACollection", &members)
        };
        let store = MemoryStore::of(vec![
            collection("uns", &[("inner", "inner")]),
            collection("inner", &[("back", "uns"), ("leaf", "leaf")]),
            collection("leaf", &[]),
        ]);
        let uns = tiledb::Member {
            name: "uns".into(),
            uri: "uns".into(),
            object_type: ObjectType::Group,
        };
        let collection = open_uns(&store, &uns).expect("uns opens");
        let [(name, UnsMember::Collection(inner))] = collection.members.as_slice() else {
            panic!("uns holds inner: {collection:?}")
        };
        assert_eq!(name, "inner");
        let names: Vec<&str> = inner.members.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["leaf"], "the way back to uns is left out");
    }
}
