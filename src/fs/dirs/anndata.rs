//! `anndata/` of an experiment: `<measurement>.h5ad` and `<measurement>.zarr/` for each
//! measurement, and `by/` for the `.h5ad` of the cells of each label of obs's enumerated
//! columns.

use std::sync::Arc;

use crate::soma::anndata::{AnnDataElements, AnnDataExperiment};
use crate::soma::{ArrayObject, Selection, SomaObject};
use crate::tiledb::Value;

use crate::export::h5ad::H5adContent;
use crate::export::zarr::ZarrStore;
use crate::names::file_name;

use super::super::files::{CountsInCache, H5adFile};
use super::by::{self, Split};
use super::zarr::ZarrStoreDir;
use super::{dir, file, DirContext, DirKind, Entries, Listed, NodeKind};

/// `anndata/` of the experiment (which its listing opens: obs and every part of each
/// measurement).
#[derive(Debug)]
pub struct AnnDataDir(Arc<SomaObject>);

impl AnnDataDir {
    pub fn new(experiment: Arc<SomaObject>) -> AnnDataDir {
        AnnDataDir(experiment)
    }
}

impl DirKind for AnnDataDir {
    fn list(&self, cx: &DirContext) -> Listed {
        let SomaObject::Group(group) = self.0.as_ref() else {
            return Listed::of(Vec::new());
        };
        let Some(experiment) = AnnDataExperiment::open(cx.store, group).map(Arc::new) else {
            return Listed::of(Vec::new());
        };
        let all = Selection::default();
        let mut named = h5ad_files(&experiment, &all, &all);
        for m in &experiment.measurements {
            let Some(elements) = AnnDataElements::of(&experiment, m, &all, &all) else {
                continue;
            };
            let counts = Arc::new(CountsInCache(cx.files.options.cache.clone()));
            let store = ZarrStore::new(elements, counts);
            let name = format!("{}.zarr", file_name(&m.name));
            named.push((name, dir(ZarrStoreDir(store))));
        }
        named.extend(by::entry(Arc::new(AnnDataSplit(experiment))));
        Listed::of(named)
    }
}

/// `<measurement>.h5ad` of each measurement, for the cells `cells` selects and the genes
/// `genes` selects.
pub fn h5ad_files(experiment: &AnnDataExperiment, cells: &Selection, genes: &Selection) -> Entries {
    (experiment.measurements.iter())
        .filter_map(|m| {
            let h5ad = H5adFile::new(H5adContent::new(experiment, m, cells, genes)?);
            Some((format!("{}.h5ad", file_name(&m.name)), file(h5ad)))
        })
        .collect()
}

/// The experiment's cells, split by obs's enumerated columns.
#[derive(Debug)]
struct AnnDataSplit(Arc<AnnDataExperiment>);

impl Split for AnnDataSplit {
    fn frame(&self) -> &ArrayObject {
        &self.0.obs
    }

    fn part(&self, column: &str, label: Option<Value>) -> NodeKind {
        let cells = Selection {
            equals: Some((column.to_owned(), label)),
            ..Selection::default()
        };
        dir(AnnDataCategoryDir(self.0.clone(), cells))
    }
}

/// `anndata/by/<column>/<label>/`: `<measurement>.h5ad` of the label's cells.
#[derive(Debug)]
struct AnnDataCategoryDir(Arc<AnnDataExperiment>, Selection);

impl DirKind for AnnDataCategoryDir {
    fn list(&self, _: &DirContext) -> Listed {
        Listed::of(h5ad_files(&self.0, &self.1, &Selection::default()))
    }
}
