//! A measurement made up in memory for the export layer's tests ([`crate::soma::fixtures`]'
//! arrays, described only: every read of their data fails): obs and var of 100 rows, X a
//! sparse layer `data`, a dense obsm `X_pca` and a sparse obsp `distances`.

use std::sync::Arc;

use crate::soma::anndata::{AnnDataElements, AnnDataExperiment, AnnDataMeasurement, Named};
use crate::soma::fixtures::{dataframe, dense_array, sparse_array};
use crate::soma::{ArrayObject, Selection, SomaObject};

/// The array a fixture describes.
pub fn array(object: SomaObject) -> Arc<ArrayObject> {
    match object {
        SomaObject::Array(array) => array,
        SomaObject::Group(_) => unreachable!("the fixture is an array"),
    }
}

/// The experiment of obs and the measurement `RNA` (with `layers` as its X's layers).
pub fn experiment(layers: Vec<Named>) -> (AnnDataExperiment, Arc<AnnDataMeasurement>) {
    let named = |name: &str, object| Named {
        name: name.into(),
        array: array(object),
    };
    let m = Arc::new(AnnDataMeasurement {
        name: "RNA".into(),
        var: array(dataframe("var", "var/frag")),
        layers,
        obsm: vec![named("X_pca", dense_array("obsm/X_pca"))],
        varm: Vec::new(),
        obsp: vec![named("distances", sparse_array("obsp/distances"))],
        varp: Vec::new(),
        uns: None,
    });
    let experiment = AnnDataExperiment {
        obs: array(dataframe("obs", "obs/frag")),
        measurements: vec![m.clone()],
    };
    (experiment, m)
}

/// The layer `data`, sparse.
pub fn data_layer() -> Vec<Named> {
    vec![Named {
        name: "data".into(),
        array: array(sparse_array("X/data")),
    }]
}

/// Every element of the measurement, all its cells and genes.
pub fn elements() -> AnnDataElements {
    let (experiment, m) = experiment(data_layer());
    let all = Selection::default();
    AnnDataElements::of(&experiment, &m, &all, &all).expect("the measurement has a layer")
}
