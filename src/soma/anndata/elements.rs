//! The elements of a measurement's AnnData, restricted to a selection of cells, as
//! tiledbsoma's `to_anndata` lays them out, decided here once for every container that holds
//! them (the `.h5ad` writer and the Zarr store walk them):
//!
//! - `obs` and `var`, each indexed by the column `to_anndata` takes ([`index_column`]);
//! - `X` from the first layer (`data` when there is one), the other layers under `layers`,
//!   each as stored (a sparse array CSR, a dense one dense);
//! - `obsm` and `varm` dense, as many columns wide as their widest row ([`matrix_width`]);
//! - `obsp` and `varp` CSR;
//! - `uns`.
//!
//! A matrix is placed along obs or var by join id: its cells off the selected rows or
//! columns are left out, and only the selected cells' rows of a matrix along obs are read.
//! Building the elements reads nothing.

use std::sync::Arc;

use super::super::error::Result;
use super::super::object::ArrayObject;
use super::super::read::Selection;
use super::{index_column, matrix_width, AnnDataExperiment, AnnDataMeasurement};
use super::{Named, UnsCollection};

/// The two axes of an AnnData.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Along {
    Obs,
    Var,
}

/// How a matrix is laid out: as it is stored (a sparse array as CSR, a dense one dense),
/// always dense, or always CSR.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    AsStored,
    Dense,
    Sparse,
}

/// What a matrix's columns are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MatrixColumns {
    /// obs's or var's rows, by join id.
    Along(Along),
    /// Indices from 0, as many as [`matrix_width`] gives for the rows of the whole frame the
    /// matrix is along (obsm, varm).
    Width,
}

/// obs or var: a data frame's rows in the AnnData.
#[derive(Debug, Clone)]
pub struct FrameElement {
    pub array: Arc<ArrayObject>,
    /// Its rows: all, or those selected (a category's, or a filter's).
    pub rows: Selection,
    /// The column that indexes it, and whether the index keeps the column's name; `None`:
    /// the join ids, unnamed.
    pub index: Option<(String, bool)>,
}

impl FrameElement {
    /// A frame's rows, indexed as `to_anndata` indexes them, `fallback` the column taken
    /// when `from_anndata` recorded none.
    fn of(array: &Arc<ArrayObject>, rows: Selection, fallback: &str) -> FrameElement {
        FrameElement {
            array: array.clone(),
            rows,
            index: index_column(array, fallback),
        }
    }

    /// Whether only some of its rows are in the AnnData.
    pub fn is_restricted(&self) -> bool {
        self.rows != Selection::default()
    }
}

/// A matrix of the AnnData.
#[derive(Debug, Clone)]
pub struct MatrixElement {
    /// Its member name in the store (the key it is written under).
    pub name: String,
    pub array: Arc<ArrayObject>,
    /// The axis its rows are placed along.
    pub rows: Along,
    pub columns: MatrixColumns,
    pub layout: Layout,
}

/// A mapping of matrices: `layers`, `obsm`, `varm`, `obsp` or `varp`.
#[derive(Debug, Clone)]
pub struct MatrixMapping {
    pub name: &'static str,
    pub members: Vec<MatrixElement>,
}

/// The elements of a measurement's AnnData.
#[derive(Debug, Clone)]
pub struct AnnDataElements {
    pub measurement: Arc<AnnDataMeasurement>,
    pub obs: FrameElement,
    pub var: FrameElement,
    pub x: MatrixElement,
    /// `layers`, `obsm`, `varm`, `obsp` and `varp`, in that order.
    pub mappings: Vec<MatrixMapping>,
}

impl AnnDataElements {
    /// The AnnData of measurement `m` of `experiment`, for the cells `cells` selects of obs
    /// and the genes `genes` selects of var. `None` for a measurement without a layer.
    pub fn of(
        experiment: &AnnDataExperiment,
        m: &Arc<AnnDataMeasurement>,
        cells: &Selection,
        genes: &Selection,
    ) -> Option<AnnDataElements> {
        let (x, layers) = m.layers.split_first()?;
        let matrix = |named: &Named, rows, columns, layout| MatrixElement {
            name: named.name.clone(),
            array: named.array.clone(),
            rows,
            columns,
            layout,
        };
        let mapping = |name, members: &[Named], rows, columns, layout| MatrixMapping {
            name,
            members: (members.iter())
                .map(|n| matrix(n, rows, columns, layout))
                .collect(),
        };
        let (obs, var) = (Along::Obs, Along::Var);
        let by_gene = MatrixColumns::Along(var);
        let width = MatrixColumns::Width;
        let (to_obs, to_var) = (MatrixColumns::Along(obs), MatrixColumns::Along(var));
        Some(AnnDataElements {
            measurement: m.clone(),
            obs: FrameElement::of(&experiment.obs, cells.clone(), "obs_id"),
            var: FrameElement::of(&m.var, genes.clone(), "var_id"),
            x: MatrixElement {
                name: "X".into(),
                ..matrix(x, obs, by_gene, Layout::AsStored)
            },
            mappings: vec![
                mapping("layers", layers, obs, by_gene, Layout::AsStored),
                mapping("obsm", &m.obsm, obs, width, Layout::Dense),
                mapping("varm", &m.varm, var, width, Layout::Dense),
                mapping("obsp", &m.obsp, obs, to_obs, Layout::Sparse),
                mapping("varp", &m.varp, var, to_var, Layout::Sparse),
            ],
        })
    }

    /// The frame along an axis.
    pub fn frame(&self, along: Along) -> &FrameElement {
        match along {
            Along::Obs => &self.obs,
            Along::Var => &self.var,
        }
    }

    /// The uns collection, if the measurement has one.
    pub fn uns(&self) -> Option<&UnsCollection> {
        self.measurement.uns.as_ref()
    }

    /// The number of columns of a matrix whose columns are [`MatrixColumns::Width`]: reckoned
    /// from the rows of the whole frame it is along, `rows_read` when all of them are read,
    /// else as many as the frame stores.
    pub fn width(&self, matrix: &MatrixElement, rows_read: usize) -> Result<u64> {
        let frame = self.frame(matrix.rows);
        let rows = match frame.is_restricted() {
            false => rows_read as u64,
            true => frame.array.stored_cells()?,
        };
        matrix_width(&matrix.array, rows)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::soma::fixtures::{dataframe, dense_array, group, sparse_array, MemoryStore};
    use crate::soma::SomaObject;
    use crate::tiledb::{ObjectType, Value};

    /// An experiment whose measurement RNA has var, X with the layers `counts` and `data`,
    /// obsm with a dense `pca` and a sparse `umap` without a shape (100 x 10, 300 cells),
    /// and varp.
    fn experiment() -> AnnDataExperiment {
        let (array, collection) = (ObjectType::Array, ObjectType::Group);
        let store = MemoryStore::of(vec![
            group(
                "exp",
                "SOMAExperiment",
                &[("obs", "obs", array), ("ms", "ms", collection)],
            ),
            dataframe("obs", "obs-frag"),
            group("ms", "SOMACollection", &[("RNA", "rna", collection)]),
            group(
                "rna",
                "SOMAMeasurement",
                &[
                    ("var", "var", array),
                    ("X", "x", collection),
                    ("obsm", "obsm", collection),
                    ("varp", "varp", collection),
                ],
            ),
            dataframe("var", "var-frag"),
            group(
                "x",
                "SOMACollection",
                &[("counts", "x/counts", array), ("data", "x/data", array)],
            ),
            sparse_array("x/counts"),
            sparse_array("x/data"),
            group(
                "obsm",
                "SOMACollection",
                &[("pca", "obsm/pca", array), ("umap", "obsm/umap", array)],
            ),
            dense_array("obsm/pca"),
            without_shape(sparse_array("obsm/umap")),
            group("varp", "SOMACollection", &[("conn", "varp/conn", array)]),
            sparse_array("varp/conn"),
        ]);
        let SomaObject::Group(exp) = store.0[0].as_ref() else {
            unreachable!("the first object is the experiment")
        };
        AnnDataExperiment::open(&store, exp).expect("an experiment with a measurement")
    }

    /// A sparse array as tiledbsoma before 1.15 writes it: its domain is its shape's only
    /// bound.
    fn without_shape(array: SomaObject) -> SomaObject {
        let SomaObject::Array(array) = array else {
            unreachable!("an array")
        };
        let mut schema = array.schema.clone();
        schema.shape = None;
        for column in schema.columns.iter_mut().filter(|c| c.is_index) {
            column.domain = column.schema_domain.clone();
        }
        let fragments = array.fragments().unwrap().to_vec();
        SomaObject::Array(Arc::new(ArrayObject::described(
            &array.uri,
            array.soma_type,
            array.metadata.clone(),
            schema,
            array.non_empty_domain.clone(),
            fragments,
        )))
    }

    fn summary(matrix: &MatrixElement) -> (&str, &str, Along, MatrixColumns, Layout) {
        let uri = matrix.array.uri.as_str();
        (
            &matrix.name,
            uri,
            matrix.rows,
            matrix.columns,
            matrix.layout,
        )
    }

    #[test]
    fn x_is_the_data_layer_and_every_matrix_is_laid_out_as_to_anndata_reads_it() {
        let experiment = experiment();
        let m = &experiment.measurements[0];
        let all = Selection::default();
        let e = AnnDataElements::of(&experiment, m, &all, &all).unwrap();
        let (obs, var) = (Along::Obs, Along::Var);
        let genes = MatrixColumns::Along(var);
        assert_eq!(summary(&e.x), ("X", "x/data", obs, genes, Layout::AsStored));
        let mappings: Vec<(&str, Vec<_>)> = (e.mappings.iter())
            .map(|m| (m.name, m.members.iter().map(summary).collect()))
            .collect();
        let width = MatrixColumns::Width;
        assert_eq!(
            mappings,
            [
                (
                    "layers",
                    vec![("counts", "x/counts", obs, genes, Layout::AsStored)]
                ),
                (
                    "obsm",
                    vec![
                        ("pca", "obsm/pca", obs, width, Layout::Dense),
                        ("umap", "obsm/umap", obs, width, Layout::Dense),
                    ]
                ),
                ("varm", vec![]),
                ("obsp", vec![]),
                (
                    "varp",
                    vec![("conn", "varp/conn", var, genes, Layout::Sparse)]
                ),
            ]
        );
        assert_eq!(
            (e.obs.array.uri.as_str(), e.var.array.uri.as_str()),
            ("obs", "var")
        );
        assert!(!e.obs.is_restricted() && !e.var.is_restricted());
        // Neither frame has the column to_anndata indexes by: the join ids index them.
        assert_eq!((&e.obs.index, &e.var.index), (&None, &None));
        assert_eq!((&e.obs.rows, &e.var.rows), (&all, &all));
    }

    #[test]
    fn a_dense_matrix_is_as_wide_as_its_shape_and_a_sparse_one_as_its_rows_of_the_whole_frame() {
        let experiment = experiment();
        let m = &experiment.measurements[0];
        let all = Selection::default();
        let whole = AnnDataElements::of(&experiment, m, &all, &all).unwrap();
        let label = Selection {
            equals: Some(("cell_type".to_owned(), Some(Value::Text("a".into())))),
            ..Selection::default()
        };
        let category = AnnDataElements::of(&experiment, m, &label, &all).unwrap();
        assert!(category.obs.is_restricted() && !category.var.is_restricted());
        let obsm = |e: &AnnDataElements, name: &str| {
            let members = &e.mappings[1].members;
            members.iter().find(|m| m.name == name).unwrap().clone()
        };
        // pca: dense, 10 columns whatever the rows.
        assert_eq!(whole.width(&obsm(&whole, "pca"), 100).unwrap(), 10);
        assert_eq!(category.width(&obsm(&category, "pca"), 7).unwrap(), 10);
        // umap: 300 cells over obs's 100 rows are 3 a row, for a category too (7 rows read
        // would not divide them: the width would be past the last stored column, 10).
        assert_eq!(whole.width(&obsm(&whole, "umap"), 100).unwrap(), 3);
        assert_eq!(category.width(&obsm(&category, "umap"), 7).unwrap(), 3);
        assert_eq!(whole.width(&obsm(&whole, "umap"), 7).unwrap(), 10);
    }
}
