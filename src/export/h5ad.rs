//! A measurement of an experiment (all its cells, or some) as anndata's h5ad, equal to what
//! tiledbsoma's `to_anndata` reads: obs and var with their index, X from the first layer
//! (`data` when there is one) and every other layer under `layers`, obsm, varm, obsp, varp
//! and uns, written with [`crate::format::h5ad`].
//!
//! An HDF5 file cannot be streamed (libhdf5 writes its metadata last, wherever it likes), so
//! it is written whole, to a path. A query's h5ad opens the measurement's parts beyond var
//! and X while its obs and var are written (see [`H5adContent`]); its dense matrices are
//! written beside X. Matrices go from the TileDB read into the HDF5 datasets batch by batch.

use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

use arrow_array::RecordBatch;

use crate::format::h5ad::{self, FrameIndex, FrameWriter, H5ad};
use crate::names::file_name;
use crate::soma::anndata::{
    self, Along, AnnDataElements, AnnDataExperiment, AnnDataMeasurement, Axis, FrameRows,
    MatrixColumns, MatrixElement, MeasurementGroup, UnsCollection, UnsElement, UnsMember,
};
use crate::soma::{estimated_cells_along, ArrayObject, Objects, SelectedRows, Selection};
use crate::tiledb::{MetadataValue, Value};

use super::anndata::early::{join_reads, join_scoped, EarlyReads, FrameRead, ReadEarly};
use super::anndata::matrices::{write_matrix, CellsOf, DenseMatrices, HdfGroup};
use super::anndata::{
    array_bytes, experiment_of, frame_columns, matrix_cell_bytes, uns_arrays, uns_frame_index,
    uns_value, value_bytes,
};

/// What an h5ad of a measurement (or of some of its cells and genes) holds, and how it is
/// written.
///
/// Its first elements (obs, var and X) are read from parts of the measurement that were
/// opened with it; the others (the layers, obsm, varm, obsp, varp and uns) may come from
/// parts that open only when the file is written, while obs and var are written (a query's
/// h5ad: over object storage they are most of its opens).
#[derive(Debug)]
pub struct H5adContent {
    /// obs, var and X.
    first: AnnDataElements,
    /// Every element, once the whole measurement is open.
    whole: OnceLock<Option<AnnDataElements>>,
    /// Where the whole measurement opens from, when it was not opened with the file.
    group: Option<Arc<MeasurementGroup>>,
    /// The cells of obs and the genes of var it holds, whose join ids its estimate counts.
    cells: Arc<SelectedRows>,
    genes: Arc<SelectedRows>,
}

impl H5adContent {
    /// The h5ad of measurement `m` (every part opened) for the cells `cells` selects of obs
    /// and the genes `genes` selects of var; `None` for a measurement without a layer.
    pub fn new(
        experiment: &AnnDataExperiment,
        m: &Arc<AnnDataMeasurement>,
        cells: &Selection,
        genes: &Selection,
    ) -> Option<H5adContent> {
        let elements = AnnDataElements::of(experiment, m, cells, genes)?;
        let cells = Arc::new(SelectedRows::new(&elements.obs.array, cells.clone()));
        let genes = Arc::new(SelectedRows::new(&elements.var.array, genes.clone()));
        let whole = OnceLock::from(Some(elements.clone()));
        Some(H5adContent {
            first: elements,
            whole,
            group: None,
            cells,
            genes,
        })
    }

    /// The h5ad of the measurement whose group is `group` and whose var and X's layers are
    /// `listed`, for the cells `cells` selects of obs and the genes `genes` selects of its
    /// var (a query's, whose join ids its other files read too); its other parts open when
    /// the file is written. `None` without a layer.
    pub fn opening(
        group: &Arc<MeasurementGroup>,
        listed: &Arc<AnnDataMeasurement>,
        cells: &Arc<SelectedRows>,
        genes: &Arc<SelectedRows>,
    ) -> Option<H5adContent> {
        let experiment = experiment_of(&cells.frame, listed);
        let first = AnnDataElements::of(&experiment, listed, &cells.rows, &genes.rows)?;
        Some(H5adContent {
            first,
            whole: OnceLock::new(),
            group: Some(group.clone()),
            cells: cells.clone(),
            genes: genes.clone(),
        })
    }

    /// obs, var and X, open from the start.
    pub fn first(&self) -> &AnnDataElements {
        &self.first
    }

    /// Every element: the whole measurement, opened now if it is not yet.
    pub fn whole(&self, store: &dyn Objects) -> io::Result<&AnnDataElements> {
        let whole = self.whole.get_or_init(|| {
            let e = &self.first;
            let m = self.group.as_ref()?.whole(store)?;
            let experiment = experiment_of(&e.obs.array, m);
            AnnDataElements::of(&experiment, m, &e.obs.rows, &e.var.rows)
        });
        whole.as_ref().ok_or_else(|| {
            let m = &self.first.measurement.name;
            io::Error::other(format!(
                "cannot open every part of measurement {m} (a failed open is in the log)"
            ))
        })
    }

    /// Every element, when the whole measurement is open already.
    pub fn whole_if_open(&self) -> Option<&AnnDataElements> {
        self.whole.get()?.as_ref()
    }

    /// Whether opening the whole measurement was tried already.
    pub fn whole_tried(&self) -> bool {
        self.whole.get().is_some()
    }

    /// What it is, for messages.
    pub fn what(&self) -> String {
        let e = &self.first;
        let (obs, m) = (&e.obs.array.uri, &e.measurement.name);
        let (cells, genes) = (&e.obs.rows, &e.var.rows);
        format!("{obs} measurement {m} as h5ad (cells {cells:?}, genes {genes:?})")
    }

    /// Whether it holds every cell and gene of the measurement.
    pub fn is_whole(&self) -> bool {
        self.cells.is_all() && self.genes.is_all()
    }

    /// About how many bytes the file comes to: every value of every array it is read from
    /// (of obs, var and X alone while the other parts are not open), and an index beside
    /// each. A category's or a query's are counted from its own cells and genes: obs's and
    /// var's rows it holds (their join ids read once), and libtiledb's estimate of each
    /// matrix's cells in them.
    pub fn estimated_bytes(&self) -> crate::soma::Result<u64> {
        let e = self.whole_if_open().unwrap_or(&self.first);
        let rows_of = |along| -> &SelectedRows {
            match along {
                Along::Obs => &self.cells,
                Along::Var => &self.genes,
            }
        };
        let mut bytes = 0u64;
        for (frame, rows) in [(&e.obs.array, &self.cells), (&e.var.array, &self.genes)] {
            bytes += match rows.is_all() {
                true => array_bytes(frame)?,
                false => rows.count()? * value_bytes(frame),
            };
        }
        let matrices = std::iter::once(&e.x).chain(e.mappings.iter().flat_map(|m| &m.members));
        for matrix in matrices {
            let columns = match matrix.columns {
                MatrixColumns::Along(along) => Some(rows_of(along)),
                MatrixColumns::Width => None,
            };
            let along = [Some(rows_of(matrix.rows)), columns];
            let cells = estimated_cells_along(&matrix.array, &along)?;
            bytes += cells.saturating_mul(matrix_cell_bytes(matrix));
        }
        let mut uns = Vec::new();
        if let Some(collection) = e.uns() {
            uns_arrays(collection, &mut uns);
        }
        for array in uns {
            bytes += array_bytes(array)?;
        }
        Ok(bytes)
    }

    /// Writes the AnnData to a new HDF5 file at `path`: obs and var (small ones read at
    /// once, [`FrameRead`]), then X with every dense matrix of the mappings beside it
    /// ([`DenseMatrices`]), then the sparse matrices (the small ones read early,
    /// [`EarlyReads`]) and uns. The parts not open yet open while obs and var are written.
    pub fn write(&self, store: &dyn Objects, path: &Path) -> io::Result<()> {
        let first = &self.first;
        std::thread::scope(|scope| {
            let whole = || self.whole(store);
            let uns_read = scope.spawn(move || match whole() {
                Ok(e) => EarlyReads::choose(e).read_uns(),
                Err(_) => ReadEarly::default(),
            });
            let obs = FrameRead::start(scope, &first.obs);
            let var = FrameRead::start(scope, &first.var);
            let file = H5ad::create(path)?;
            let root = file.root();
            let cells = write_frame(root, "obs", obs)?;
            // The selected cells' rows: all that is read of a matrix along obs.
            let only = first.obs.is_restricted().then(|| cells.joinids.runs());
            let only_along =
                |matrix: &MatrixElement| only.as_deref().filter(|_| matrix.rows == Along::Obs);
            let obs_rows = only.clone();
            let matrices_read = scope.spawn(move || match whole() {
                Ok(e) => EarlyReads::choose(e).read_matrices(obs_rows.as_deref()),
                Err(_) => ReadEarly::default(),
            });
            let genes = write_frame(root, "var", var)?;
            let axis = |along| match along {
                Along::Obs => Axis::Joinids(&cells.joinids),
                Along::Var => Axis::Joinids(&genes.joinids),
            };
            let axes = |e: &AnnDataElements, matrix: &MatrixElement| -> io::Result<_> {
                let rows = axis(matrix.rows);
                let cols = match matrix.columns {
                    MatrixColumns::Along(along) => axis(along),
                    MatrixColumns::Width => Axis::Indices(e.width(matrix, rows.len())? as usize),
                };
                Ok((rows, cols))
            };
            let e = whole()?;
            let groups = (e.mappings.iter())
                .map(|mapping| h5ad::mapping(root, mapping.name))
                .collect::<io::Result<Vec<_>>>()?;
            let dense = DenseMatrices::create(e, &groups, axes)?;
            let x_axes = axes(first, &first.x)?;
            let x_failed = AtomicBool::new(false);
            std::thread::scope(|beside| {
                let dense_written = beside.spawn(|| dense.write(only_along, &x_failed));
                let x_written = write_matrix(
                    root,
                    "X",
                    &first.x.array,
                    CellsOf::Read(only_along(&first.x)),
                    x_axes,
                    first.x.layout,
                );
                // The file is lost: the dense matrices stop at their next batch.
                x_failed.store(x_written.is_err(), Ordering::Relaxed);
                x_written.and(join_scoped(dense_written))
            })?;
            let mut matrices_read = join_reads(matrices_read);
            for (mapping, group) in e.mappings.iter().zip(&groups) {
                for matrix in mapping.members.iter().filter(|m| !dense.holds(m)) {
                    let cells = match matrices_read.remove(&matrix.array.uri) {
                        Some(held) => CellsOf::Held(held?),
                        None => CellsOf::Read(only_along(matrix)),
                    };
                    let name = file_name(&matrix.name);
                    let axes = axes(e, matrix)?;
                    write_matrix(group, &name, &matrix.array, cells, axes, matrix.layout)?;
                }
            }
            drop(groups);
            let uns = h5ad::mapping(root, "uns")?;
            if let Some(collection) = e.uns() {
                write_uns(&uns, collection, &mut join_reads(uns_read))?;
            }
            drop(uns);
            file.close()
        })
    }
}

/// Writes obs or var as `name`, its rows held or read now, and returns what its first pass
/// found.
fn write_frame(root: &HdfGroup, name: &str, read: FrameRead) -> io::Result<FrameRows> {
    let frame = read.frame;
    let index = super::anndata::frame_index(frame);
    let (scanned, held) = read.scanned()?;
    let mut writer = frame_writer(root, name, &frame.array, &scanned, index)?;
    match held {
        Some(batches) => batches.iter().try_for_each(|batch| writer.append(batch))?,
        None => anndata::read_rows(&frame.array, &frame.rows, |batch| writer.append(batch))?,
    }
    writer.finish()?;
    Ok(scanned)
}

/// A writer of a data frame's rows (see [`frame_columns`]).
fn frame_writer(
    parent: &HdfGroup,
    name: &str,
    frame: &ArrayObject,
    rows: &FrameRows,
    index: FrameIndex,
) -> io::Result<FrameWriter> {
    let columns = frame_columns(frame, rows, &index)?;
    FrameWriter::create(parent, name, rows.count, index, &columns)
}

/// Writes an uns collection as to_anndata reads it: each member (a collection as a mapping,
/// an array as below), then each metadata value not starting with `soma_` (a value wins over
/// a member of the same name).
fn write_uns(
    group: &HdfGroup,
    collection: &UnsCollection,
    read_early: &mut ReadEarly<UnsElement>,
) -> io::Result<()> {
    for (name, member) in collection.members_kept() {
        let key = file_name(name);
        match member {
            UnsMember::Collection(inner) => {
                write_uns(&h5ad::mapping(group, &key)?, inner, read_early)?
            }
            UnsMember::Array(array) => {
                let element = match read_early.remove(&array.uri) {
                    Some(element) => element?,
                    None => anndata::uns_element(array)?,
                };
                write_uns_array(group, &key, array, element)?
            }
        }
    }
    for (name, value) in collection.values() {
        write_uns_value(group, &file_name(name), value)?;
    }
    Ok(())
}

/// Writes an uns array: an array as it is, a data frame as one.
fn write_uns_array(
    group: &HdfGroup,
    key: &str,
    array: &ArrayObject,
    element: UnsElement,
) -> io::Result<()> {
    match element {
        UnsElement::Array { shape, values } => h5ad::write_array(group, key, &shape, &values),
        UnsElement::Frame { batches, index } => {
            write_frame_rows(group, key, array, &batches, uns_frame_index(index))
        }
    }
}

/// Writes rows read whole as a data frame.
fn write_frame_rows(
    group: &HdfGroup,
    key: &str,
    frame: &ArrayObject,
    batches: &[RecordBatch],
    index: FrameIndex,
) -> io::Result<()> {
    let rows = FrameRows::of(batches);
    let mut writer = frame_writer(group, key, frame, &rows, index)?;
    for batch in batches {
        writer.append(batch)?;
    }
    writer.finish()
}

/// A metadata value of uns: one string or number as a scalar, several as an array (a blob
/// as an array of bytes).
fn write_uns_value(group: &HdfGroup, key: &str, value: &MetadataValue) -> io::Result<()> {
    match value.values.as_slice() {
        [Value::Text(text)] => return h5ad::write_text_scalar(group, key, text),
        [Value::Int(n)] => return h5ad::write_numeric_scalar(group, key, *n),
        [Value::UInt(n)] => return h5ad::write_numeric_scalar(group, key, *n),
        [Value::Float(x)] => return h5ad::write_numeric_scalar(group, key, *x),
        [Value::Bool(b)] => return h5ad::write_numeric_scalar(group, key, *b),
        _ => {}
    }
    let (array, _) = uns_value(value);
    h5ad::write_array(group, key, &[array.len()], &array)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::export::fixtures::{data_layer, experiment};
    use crate::soma::fixtures::MemoryStore;

    #[test]
    fn a_measurement_without_a_layer_has_no_h5ad() {
        let (experiment, m) = experiment(Vec::new());
        let all = Selection::default();
        assert!(H5adContent::new(&experiment, &m, &all, &all).is_none());
    }

    #[test]
    fn a_measurement_opened_whole_has_every_element_from_the_start() {
        let (experiment, m) = experiment(data_layer());
        let all = Selection::default();
        let content = H5adContent::new(&experiment, &m, &all, &all).expect("it has a layer");
        assert!(content.is_whole() && content.whole_tried());
        let whole = content.whole_if_open().expect("every part is open");
        let mappings: Vec<&str> = whole.mappings.iter().map(|m| m.name).collect();
        assert!(mappings.contains(&"obsm") && mappings.contains(&"obsp"));
        let store = MemoryStore::of(Vec::new());
        assert!(content.whole(&store).is_ok(), "nothing more to open");
        assert!(content.what().contains("measurement RNA as h5ad"));
    }

    #[test]
    fn a_file_whose_reads_fail_is_an_error_not_a_panic() {
        let (experiment, m) = experiment(data_layer());
        let all = Selection::default();
        let content = H5adContent::new(&experiment, &m, &all, &all).expect("it has a layer");
        let path = std::env::temp_dir().join(format!(
            "soma-mount-export-h5ad-{}.h5ad",
            std::process::id()
        ));
        let store = MemoryStore::of(Vec::new());
        assert!(
            content.write(&store, &path).is_err(),
            "a fixture's data cannot be read"
        );
        let _ = std::fs::remove_file(&path);
    }
}
