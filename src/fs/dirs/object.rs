//! The directory of a SOMA object: a group lists its members, an array its files, and each
//! their metadata, spatial documents and views (`10x/`, `anndata/`, `by/`). A member that
//! cannot be shown as itself is a directory holding only `error.txt`.

use std::sync::Arc;

use log::warn;

use crate::format::png::ImageAxis;
use crate::soma::{spatial, Objects, Selection, SomaObject, SomaType};
use crate::tiledb::{Member, ObjectType};

use super::super::files::{Document, NpyFile, PngFile, SpatialDoc, Table};
use super::anndata::AnnDataDir;
use super::by;
use super::query::{ExperimentWhereDir, WhereDir};
use super::table::table_entries;
use super::table::FrameSplit;
use super::tenx::TenxDir;
use super::{dir, error_entries, file, DirContext, DirKind, Entries, ErrorDir, Listed};
use crate::names::file_name;

/// The directory of the object at `uri` (a group, an array, or a member that fails to open).
#[derive(Debug, Clone)]
pub struct ObjectDir {
    pub uri: String,
    /// What the group that lists it records it as (`None`: the root, which is probed).
    pub recorded: Option<ObjectType>,
    /// The enclosing experiment's obs, for the measurements under its `ms`.
    obs: Option<Arc<str>>,
    /// The URIs of the enclosing object directories, to stop at cycles.
    ancestors: Arc<[String]>,
}

impl ObjectDir {
    /// The mount's root: the object at `uri`, whatever it is.
    pub fn root(uri: &str) -> ObjectDir {
        ObjectDir {
            uri: uri.to_owned(),
            recorded: None,
            obs: None,
            ancestors: Arc::new([]),
        }
    }
}

impl DirKind for ObjectDir {
    /// The listing of the object opened, with the fingerprint of what it was made from; or,
    /// when the object cannot be opened, the error's listing.
    fn list(&self, cx: &DirContext) -> Listed {
        match cx.store.open(&self.uri, self.recorded) {
            Ok(object) => {
                let mut ancestors = self.ancestors.to_vec();
                ancestors.push(same_object(&self.uri));
                Listed {
                    fingerprint: Some(object.fingerprint()),
                    entries: object_files(cx.store, object, self.obs.as_ref(), ancestors.into()),
                    failed: false,
                }
            }
            Err(e) => {
                warn!("cannot open {}: {e}", self.uri);
                Listed {
                    entries: error_entries(&format!("cannot open {}: {e}", self.uri)),
                    fingerprint: None,
                    failed: true,
                }
            }
        }
    }

    fn object(&self) -> Option<&ObjectDir> {
        Some(self)
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
        named.extend(member_entries(group, obs, &ancestors));
        if let (SomaType::Measurement, Some(obs)) = (group.soma_type, obs) {
            let tenx = TenxDir::new(object.clone(), obs.clone());
            named.push(("10x".into(), dir(tenx)));
        }
        if group.soma_type == SomaType::Experiment && crate::soma::anndata::has_anndata(group) {
            named.push(("anndata".into(), dir(AnnDataDir::new(object.clone()))));
            let queries = ExperimentWhereDir::new(object.clone());
            named.push(("where".into(), dir(queries)));
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
        if array.soma_type.is_dataframe() {
            named.extend(by::entry(Arc::new(FrameSplit(array.clone()))));
            let queries = WhereDir::new(object.clone(), array.clone());
            named.push(("where".into(), dir(queries)));
        }
    }
    named
}

/// A group's members, each the directory of its object; a member that encloses the group
/// is an error's directory, since it would make an endless tree.
fn member_entries(
    group: &crate::soma::GroupObject,
    obs: Option<&Arc<str>>,
    ancestors: &Arc<[String]>,
) -> Entries {
    // An experiment's obs is what the measurements under its `ms` describe cells with.
    let experiment_obs = (group.soma_type == SomaType::Experiment)
        .then(|| group.members.iter().find(|m| m.name == "obs"))
        .flatten()
        .map(|m| Arc::<str>::from(m.uri.as_str()));
    let entry = |member: &Member| {
        let obs = match (&experiment_obs, group.soma_type) {
            (Some(obs), _) if member.name == "ms" => Some(obs.clone()),
            (None, SomaType::Collection) => obs.cloned(),
            _ => None,
        };
        let uri = member.uri.clone();
        if ancestors.contains(&same_object(&uri)) {
            warn!(
                "{}: member {:?} is an enclosing group",
                group.uri, member.name
            );
            let message = format!("{uri} is a group that encloses this directory (a cycle)");
            return dir(ErrorDir(message.into()));
        }
        dir(ObjectDir {
            uri,
            recorded: Some(member.object_type),
            obs,
            ancestors: ancestors.clone(),
        })
    };
    (group.members.iter())
        .map(|member| (member_entry(member), entry(member)))
        .collect()
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
