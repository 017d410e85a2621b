//! `10x/` of a measurement: a Cell Ranger matrix directory per sparse layer of `X`, and
//! under each, `by/` for the cells of each label of obs's enumerated columns.

use std::sync::Arc;

use log::warn;

use crate::soma::tenx::TenxLayer;
use crate::soma::{ArrayObject, Objects, SelectedRows, Selection, SomaObject, SomaType};
use crate::tiledb::{ObjectType, Value};

use super::super::files::{TenxFile, TenxPart};
use super::by::{self, Split};
use super::{dir, file, DirContext, DirKind, Entries, Listed, NodeKind};
use crate::names::file_name;

/// `10x/` of a measurement, whose cells its experiment's obs (at `obs`) describes.
#[derive(Debug)]
pub struct TenxDir {
    measurement: Arc<SomaObject>,
    obs: Arc<str>,
}

impl TenxDir {
    pub fn new(measurement: Arc<SomaObject>, obs: Arc<str>) -> TenxDir {
        TenxDir { measurement, obs }
    }
}

impl DirKind for TenxDir {
    /// Every sparse 2-D layer of the measurement's `X` (opening obs, var and each layer).
    fn list(&self, cx: &DirContext) -> Listed {
        Listed::of(layer_entries(cx.store, &self.measurement, &self.obs))
    }
}

fn layer_entries(store: &dyn Objects, measurement: &SomaObject, obs: &str) -> Entries {
    let SomaObject::Group(group) = measurement else {
        return Vec::new();
    };
    let member = |name: &str| group.members.iter().find(|m| m.name == name);
    let open_array = |uri: &str| open_array(store, uri);
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
            is_matrix(&x).then(|| {
                let layer_dir = TenxLayer::whole(&obs, &var, x);
                (
                    file_name(&layer.name),
                    dir(TenxLayerDir(Arc::new(layer_dir))),
                )
            })
        })
        .collect()
}

/// Whether a layer of X is a 10x matrix: sparse, of two dimensions.
pub fn is_matrix(x: &ArrayObject) -> bool {
    x.soma_type == SomaType::SparseNDArray && x.schema.index_columns().count() == 2
}

/// The array at `uri`, or `None` (logged) when it is no array or cannot be opened.
fn open_array(store: &dyn Objects, uri: &str) -> Option<Arc<ArrayObject>> {
    match store.open(uri, Some(ObjectType::Array)) {
        Ok(object) => match object.as_ref() {
            SomaObject::Array(array) => Some(array.clone()),
            SomaObject::Group(_) => None,
        },
        Err(e) => {
            warn!("10x: cannot open {uri}: {e}");
            None
        }
    }
}

/// `10x/<layer>/`, or a category of it, or a query's: a Cell Ranger matrix directory.
#[derive(Debug, Clone)]
pub struct TenxLayerDir(pub Arc<TenxLayer>);

impl DirKind for TenxLayerDir {
    /// The three files (with `genes.tsv` and `features.tsv` both), Cell Ranger's HDF5
    /// matrix (`matrix.h5`), and `by/` for a whole layer whose obs has enumerated columns.
    fn list(&self, _: &DirContext) -> Listed {
        let layer = &self.0;
        let part = |part| file(TenxFile::new(layer.clone(), part));
        let mut named = vec![
            ("matrix.mtx".into(), part(TenxPart::Matrix)),
            ("matrix.h5".into(), part(TenxPart::MatrixH5)),
            ("genes.tsv".into(), part(TenxPart::Features)),
            ("features.tsv".into(), part(TenxPart::Features)),
            ("barcodes.tsv".into(), part(TenxPart::Barcodes)),
        ];
        if layer.is_whole() {
            named.extend(by::entry(Arc::new(self.clone())));
        }
        Listed::of(named)
    }
}

impl Split for TenxLayerDir {
    fn frame(&self) -> &ArrayObject {
        self.0.obs()
    }

    /// The matrix directory of the label's cells.
    fn part(&self, column: &str, label: Option<Value>) -> NodeKind {
        let mut category = TenxLayer::clone(&self.0);
        let cells = Selection {
            equals: Some((column.to_owned(), label)),
            ..Selection::default()
        };
        category.cells = Arc::new(SelectedRows::new(self.0.obs(), cells));
        dir(TenxLayerDir(Arc::new(category)))
    }
}
