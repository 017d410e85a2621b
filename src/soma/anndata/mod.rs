//! An experiment's measurements as AnnData, as tiledbsoma's `to_anndata` makes them: which
//! arrays each measurement's AnnData is made of (obs, var, the X layers, obsm, varm, obsp,
//! varp and the uns collection), opened here. The reads an h5ad writer is fed from are in
//! `frames.rs` (a data frame's rows: all, or one category's) and `cells.rs` (a matrix's cells
//! sorted by row then column: all, or those of some rows). The reads of an element a few
//! rows at a time, that a container serving it in pieces (the Zarr store) is fed from, are
//! in [`reads`] and [`csr`]; what each uns array is, and its values, in [`uns`].
//!
//! Opening reads metadata and structure only; the reads are streams of record batches, so
//! what they hold does not grow with the array.

use std::collections::HashSet;
use std::sync::{Arc, OnceLock};

use log::warn;

use crate::sync::{at_once, map_at_once};
use crate::tiledb::{self, Metadata, ObjectType};

mod cells;
pub mod csr;
mod elements;
mod frames;
mod reads;
mod uns;

pub use cells::{
    matrix_width, read_cells, read_placed, row_blocks, row_counts, runs_in_domain, values_as, Axis,
    CellPlaces, Placed, RowBlock, RowRun,
};
pub use csr::{CsrPart, CsrSource, RowCountsKept};
pub use elements::{
    Along, AnnDataElements, FrameElement, Layout, MatrixColumns, MatrixElement, MatrixMapping,
};
pub use frames::{
    categories, column_of, index_column, read_all, read_frame_column, read_rows, scan_rows,
    FrameRows,
};
pub use reads::{
    AxisRows, ColumnPart, Columns, FrameRowsAt, FrameSource, MatrixSource, ObsVarRows,
};
pub use uns::{uns_array_layout, uns_element, UnsElement, UnsTogether, UnsValues};

use super::object::{ArrayObject, GroupObject, Objects, SomaObject};
use super::soma_type::SomaType;

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::soma::fixtures::{group, MemoryStore};

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
