//! Queries as paths: `where/` of a data frame or an experiment, a directory per value
//! filter, entered by name (it lists nothing). A filter that cannot be read is a directory
//! holding only `error.txt`, which says what is wrong and where.
//!
//! - `<dataframe>/where/<filter>/`: the rows that satisfy the filter, as `data.<ext>` in
//!   every format, with the frame's `schema.json`.
//! - `<experiment>/where/<obs filter>/`: the experiment restricted to the cells whose obs
//!   row satisfies the filter: `obs/`; for each measurement `ms/<m>/var/`, `X/<layer>/`,
//!   `obsm/<name>/` and `10x/<layer>/`; and `anndata/<m>.h5ad`. Below it,
//!   `ms/<m>/where/<var filter>/` restricts the genes too, with `anndata.h5ad`.
//!
//! Filters run inside libtiledb as rows are read. The matrices are read by the selected
//! cells' (and genes') join ids, in runs of consecutive ids, read from obs (and var) with
//! the filter when a matrix is first listed. A query opens what is looked into: obs and the
//! measurements' groups, a measurement's var and X when it (or `anndata/`) is listed, its
//! obsm when `obsm/` is, and its other parts when its h5ad is generated.

use std::sync::Arc;

use crate::soma::anndata::AT_ONCE;
use crate::sync::map_at_once;

use crate::export::h5ad::H5adContent;
use crate::soma::anndata::{self, AnnDataMeasurement, ExperimentOutline, MeasurementGroup, Named};
use crate::soma::filter::Filter;
use crate::soma::tenx::TenxLayer;
use crate::soma::{ArrayObject, SelectedRows, Selection, SomaObject};
use crate::tiledb::Value;

use super::super::files::{Document, FileContext, H5adFile, Table};
use super::table::data_entries;
use super::tenx::{is_matrix, TenxLayerDir};
use super::{dir, error_entries, file, DirContext, DirKind, Entries, ErrorDir, Listed, NodeKind};
use crate::names::file_name;

/// `<dataframe>/where/`.
#[derive(Debug)]
pub struct WhereDir {
    object: Arc<SomaObject>,
    frame: Arc<ArrayObject>,
}

impl WhereDir {
    pub fn new(object: Arc<SomaObject>, frame: Arc<ArrayObject>) -> WhereDir {
        WhereDir { object, frame }
    }
}

impl DirKind for WhereDir {
    fn list(&self, _: &DirContext) -> Listed {
        Listed::of(Vec::new())
    }

    fn find(&self, name: &str) -> Option<NodeKind> {
        Some(match Filter::parse(name, &self.frame.schema) {
            Ok(filter) => dir(FilteredFrameDir {
                object: self.object.clone(),
                table: Table {
                    array: self.frame.clone(),
                    selection: Selection::filtered(filter),
                },
            }),
            Err(e) => dir(ErrorDir(e.to_string().into())),
        })
    }
}

/// `<dataframe>/where/<filter>/`: the rows that satisfy the filter.
#[derive(Debug)]
struct FilteredFrameDir {
    object: Arc<SomaObject>,
    table: Table,
}

impl DirKind for FilteredFrameDir {
    fn list(&self, _: &DirContext) -> Listed {
        let mut named = data_entries(&self.table);
        let schema = file(Document::schema(self.object.clone()));
        named.push(("schema.json".into(), schema));
        Listed::of(named)
    }
}

/// `<experiment>/where/`: a directory per obs filter, entered by name (it lists nothing).
#[derive(Debug)]
pub struct ExperimentWhereDir(Arc<SomaObject>);

impl ExperimentWhereDir {
    pub fn new(experiment: Arc<SomaObject>) -> ExperimentWhereDir {
        ExperimentWhereDir(experiment)
    }
}

impl DirKind for ExperimentWhereDir {
    fn list(&self, _: &DirContext) -> Listed {
        Listed::of(Vec::new())
    }

    /// Any name: its listing reads the filter (against obs, which a lookup does not open).
    fn find(&self, name: &str) -> Option<NodeKind> {
        let filter = name.to_owned();
        Some(dir(FilteredExperimentDir {
            experiment: self.0.clone(),
            filter,
        }))
    }
}

/// `<experiment>/where/<obs filter>/`: the experiment restricted to the cells whose obs row
/// satisfies the filter.
#[derive(Debug)]
struct FilteredExperimentDir {
    experiment: Arc<SomaObject>,
    /// The path component, as written.
    filter: String,
}

impl DirKind for FilteredExperimentDir {
    fn list(&self, cx: &DirContext) -> Listed {
        let SomaObject::Group(group) = self.experiment.as_ref() else {
            return Listed::of(Vec::new());
        };
        let Some(experiment) = ExperimentOutline::open(cx.store, group) else {
            let message = format!("{}: no obs, or no measurement with var and X", group.uri);
            return Listed::of(error_entries(&message));
        };
        let filter = match Filter::parse(&self.filter, &experiment.obs.schema) {
            Ok(filter) => filter,
            Err(e) => return Listed::of(error_entries(&e.to_string())),
        };
        let query = Arc::new(CellQuery {
            cells: Arc::new(SelectedRows::new(
                &experiment.obs,
                Selection::filtered(filter),
            )),
            experiment,
        });
        let obs = frame_dir(&query.cells);
        let measurements = MeasurementsDir(query.clone());
        let anndata = AnnDataFilesDir(query);
        Listed::of(vec![
            ("obs".into(), obs),
            ("ms".into(), dir(measurements)),
            ("anndata".into(), dir(anndata)),
        ])
    }
}

/// The cells of an experiment that a filter selects.
#[derive(Debug)]
struct CellQuery {
    /// obs and the measurements' groups, each measurement's parts opened when it is
    /// listed (a `cat` of one matrix opens obs and that measurement's var and X), the rest
    /// when its h5ad is generated.
    experiment: ExperimentOutline,
    cells: Arc<SelectedRows>,
}

impl CellQuery {
    /// The h5ad of measurement `m` (its var and X's layers `listed`) for the selected
    /// cells and the genes `genes` selects.
    fn h5ad(
        &self,
        group: &Arc<MeasurementGroup>,
        listed: &Arc<AnnDataMeasurement>,
        genes: &Arc<SelectedRows>,
    ) -> Option<H5adFile> {
        H5adContent::opening(group, listed, &self.cells, genes).map(H5adFile::new)
    }
}

/// Starts opening every part of a measurement whose h5ad is listed, on a thread of its own:
/// a listed h5ad is most often read next, and its generation then finds them open or
/// opening (failures show when it is generated).
fn open_whole_ahead(files: &FileContext, group: &Arc<MeasurementGroup>) {
    let Some(task) = files.background.begin() else {
        return;
    };
    let (group, store, background) = (group.clone(), files.store.clone(), files.background.clone());
    let _ = std::thread::Builder::new()
        .name("soma-open-ahead".into())
        .spawn(move || {
            let _task = task;
            if !background.stopped() {
                group.whole(&*store);
            }
        });
}

/// The selected rows of a frame: `data.<ext>` and the frame's `schema.json`.
fn frame_dir(rows: &SelectedRows) -> NodeKind {
    dir(FilteredFrameDir {
        object: Arc::new(SomaObject::Array(rows.frame.clone())),
        table: Table {
            array: rows.frame.clone(),
            selection: rows.rows.clone(),
        },
    })
}

/// `where/<obs filter>/ms/`: a directory per measurement.
#[derive(Debug)]
struct MeasurementsDir(Arc<CellQuery>);

impl DirKind for MeasurementsDir {
    fn list(&self, _: &DirContext) -> Listed {
        let query = &self.0;
        let measurement = |m: &Arc<MeasurementGroup>| {
            let dir = dir(MeasurementOfQueryDir {
                query: query.clone(),
                group: m.clone(),
            });
            (file_name(&m.name), dir)
        };
        Listed::of(
            query
                .experiment
                .measurements
                .iter()
                .map(measurement)
                .collect(),
        )
    }
}

/// `where/<obs filter>/ms/<m>/`: the measurement's var and X opened when it is listed.
#[derive(Debug)]
struct MeasurementOfQueryDir {
    query: Arc<CellQuery>,
    group: Arc<MeasurementGroup>,
}

impl DirKind for MeasurementOfQueryDir {
    fn list(&self, cx: &DirContext) -> Listed {
        let Some(measurement) = self.group.listed(cx.store) else {
            let message = format!(
                "measurement {}: it has no var data frame or no layer in X that opens \
                 (a failed open is in the daemon's log)",
                self.group.name
            );
            return Listed::of(error_entries(&message));
        };
        let all_genes = MeasurementDir {
            query: self.query.clone(),
            group: self.group.clone(),
            measurement: measurement.clone(),
            genes: None,
        };
        all_genes.list(cx)
    }
}

/// `where/<obs filter>/ms/<m>/`, or `…/ms/<m>/where/<var filter>/` (`genes`).
#[derive(Debug)]
struct MeasurementDir {
    query: Arc<CellQuery>,
    group: Arc<MeasurementGroup>,
    /// Its var and X.
    measurement: Arc<AnnDataMeasurement>,
    /// The genes a var filter selects (all when `None`).
    genes: Option<Arc<SelectedRows>>,
}

impl MeasurementDir {
    /// The selected genes: a var filter's, or every gene.
    fn genes(&self) -> Arc<SelectedRows> {
        (self.genes.clone()).unwrap_or_else(|| Arc::new(SelectedRows::all(&self.measurement.var)))
    }

    /// The directory of the matrices `members` (X's layers, or obsm), restricted to the
    /// selected cells, and when `along_genes` to the selected genes.
    fn matrices(&self, members: Matrices, along_genes: bool) -> NodeKind {
        dir(MatricesDir {
            query: self.query.clone(),
            genes: self.genes.clone().filter(|_| along_genes),
            members,
        })
    }

    fn tenx(&self) -> NodeKind {
        let m = &self.measurement;
        let layers = (m.layers.iter())
            .filter(|layer| is_matrix(&layer.array))
            .map(|layer| {
                let tenx = TenxLayer {
                    x: layer.array.clone(),
                    cells: self.query.cells.clone(),
                    genes: self.genes(),
                };
                let layer_dir = dir(TenxLayerDir(Arc::new(tenx)));
                (file_name(&layer.name), layer_dir)
            })
            .collect();
        dir(EntriesDir(layers))
    }
}

impl DirKind for MeasurementDir {
    fn list(&self, cx: &DirContext) -> Listed {
        let m = &self.measurement;
        let var = match &self.genes {
            Some(genes) => frame_dir(genes),
            None => frame_dir(&SelectedRows::new(&m.var, Selection::default())),
        };
        let mut named = vec![
            ("var".into(), var),
            (
                "X".into(),
                self.matrices(Matrices::Opened(m.layers.clone()), true),
            ),
            (
                "obsm".into(),
                self.matrices(Matrices::Of(self.group.clone(), "obsm"), false),
            ),
            ("10x".into(), self.tenx()),
        ];
        match self.genes {
            None => named.push((
                "where".into(),
                dir(MeasurementWhereDir {
                    query: self.query.clone(),
                    group: self.group.clone(),
                    measurement: m.clone(),
                }),
            )),
            Some(_) => {
                open_whole_ahead(cx.files, &self.group);
                let h5ad = self.query.h5ad(&self.group, m, &self.genes());
                named.extend(h5ad.map(|h5ad| ("anndata.h5ad".to_owned(), file(h5ad))));
            }
        }
        Listed::of(named)
    }
}

/// `where/<obs filter>/ms/<m>/where/`: a directory per var filter, entered by name.
#[derive(Debug)]
struct MeasurementWhereDir {
    query: Arc<CellQuery>,
    group: Arc<MeasurementGroup>,
    measurement: Arc<AnnDataMeasurement>,
}

impl DirKind for MeasurementWhereDir {
    fn list(&self, _: &DirContext) -> Listed {
        Listed::of(Vec::new())
    }

    fn find(&self, name: &str) -> Option<NodeKind> {
        let var = &self.measurement.var;
        Some(match Filter::parse(name, &var.schema) {
            Ok(filter) => dir(MeasurementDir {
                query: self.query.clone(),
                group: self.group.clone(),
                measurement: self.measurement.clone(),
                genes: Some(Arc::new(SelectedRows::new(
                    var,
                    Selection::filtered(filter),
                ))),
            }),
            Err(e) => dir(ErrorDir(e.to_string().into())),
        })
    }
}

/// The matrices of a query's `X/` or `obsm/`.
#[derive(Debug)]
enum Matrices {
    Opened(Vec<Named>),
    /// Those of a measurement's collection, opened when listed.
    Of(Arc<MeasurementGroup>, &'static str),
}

/// `X/` or `obsm/` of a query: a directory per matrix.
#[derive(Debug)]
struct MatricesDir {
    query: Arc<CellQuery>,
    /// The selected genes, for matrices along var.
    genes: Option<Arc<SelectedRows>>,
    members: Matrices,
}

impl DirKind for MatricesDir {
    fn list(&self, cx: &DirContext) -> Listed {
        let opened;
        let members = match &self.members {
            Matrices::Opened(members) => members,
            Matrices::Of(group, collection) => {
                opened = group.matrices(cx.store, collection);
                &opened
            }
        };
        let matrix = |member: &Named| {
            let dir = dir(MatrixDir {
                query: self.query.clone(),
                genes: self.genes.clone(),
                array: member.array.clone(),
            });
            (file_name(&member.name), dir)
        };
        Listed::of(members.iter().map(matrix).collect())
    }
}

/// A matrix of a query: its cells in the selected cells' rows (and genes' columns), with
/// the store's join ids as coordinates, as `data.<ext>`, and its `schema.json`.
#[derive(Debug)]
struct MatrixDir {
    query: Arc<CellQuery>,
    genes: Option<Arc<SelectedRows>>,
    array: Arc<ArrayObject>,
}

impl DirKind for MatrixDir {
    /// Reads the selected cells' join ids (and genes') when first listed.
    fn list(&self, _: &DirContext) -> Listed {
        let gene_runs = self.genes.as_ref().map(|genes| genes.runs()).transpose();
        let runs = (self.query.cells.runs()).and_then(|cells| Ok((cells, gene_runs?)));
        let (cells, genes) = match runs {
            Ok(runs) => runs,
            Err(message) => return Listed::of(error_entries(&message)),
        };
        let ranges_of = |dim, runs| joinid_ranges(anndata::runs_in_domain(&self.array, dim, runs));
        let mut ranges = vec![ranges_of(0, cells)];
        ranges.extend(genes.map(|genes| ranges_of(1, genes)));
        let table = Table {
            array: self.array.clone(),
            selection: Selection {
                ranges,
                ..Selection::default()
            },
        };
        let mut named = data_entries(&table);
        let object = Arc::new(SomaObject::Array(self.array.clone()));
        named.push(("schema.json".into(), file(Document::schema(object))));
        Listed::of(named)
    }
}

/// A dimension's ranges of join ids; none selects nothing (an empty range), where no
/// range would select every row.
fn joinid_ranges(ranges: Vec<(Value, Value)>) -> Vec<(Value, Value)> {
    match ranges.is_empty() {
        true => vec![(Value::Int(1), Value::Int(0))],
        false => ranges,
    }
}

/// `where/<obs filter>/anndata/`: `<measurement>.h5ad` of the selected cells.
#[derive(Debug)]
struct AnnDataFilesDir(Arc<CellQuery>);

impl DirKind for AnnDataFilesDir {
    /// Opens each measurement's var and X (at once), having started opening their other
    /// parts ([`open_whole_ahead`]).
    fn list(&self, cx: &DirContext) -> Listed {
        let query = &self.0;
        let h5ad = |group: &Arc<MeasurementGroup>| {
            open_whole_ahead(cx.files, group);
            let listed = group.listed(cx.store)?;
            let every_gene = Arc::new(SelectedRows::all(&listed.var));
            let h5ad = query.h5ad(group, listed, &every_gene)?;
            Some((format!("{}.h5ad", file_name(&group.name)), file(h5ad)))
        };
        let measurements = &query.experiment.measurements;
        Listed::of(
            map_at_once(measurements, AT_ONCE, h5ad)
                .into_iter()
                .flatten()
                .collect(),
        )
    }
}

/// A directory of entries made with it.
#[derive(Debug)]
struct EntriesDir(Entries);

impl DirKind for EntriesDir {
    fn list(&self, _: &DirContext) -> Listed {
        Listed::of(self.0.clone())
    }
}
