//! `anndata/<measurement>.h5ad`, `anndata/by/<column>/<label>/<measurement>.h5ad` and a
//! query's (`where/<filter>/anndata/<measurement>.h5ad`, `…/where/<var filter>/anndata.h5ad`):
//! a measurement of an experiment (all its cells, or some) as anndata's h5ad, equal
//! to what tiledbsoma's `to_anndata` reads: obs and var with their index, X from the first
//! layer (`data` when there is one) and every other layer under `layers`, obsm, varm, obsp,
//! varp and uns.
//!
//! An HDF5 file cannot be streamed (libhdf5 writes its metadata last, wherever it likes), so
//! it is generated whole when opened, and by a `stat` when it is estimated below
//! `--materialize-limit` or with `--exact-sizes`, into the cache; its size is known once it
//! is there. A category's or a query's file is estimated from its own cells (and genes),
//! counted by the `stat`, like every other file of a part. A query's h5ad opens the measurement's parts beyond var and X while its obs
//! and var are written (see [`H5adFile`]); its dense matrices are written beside X. Matrices
//! go from the TileDB read into the HDF5 datasets batch by batch: what a generation holds is
//! a batch, a chunk or block per dataset, and a few numbers per cell and gene (join ids,
//! positions, entries per row).

use std::collections::HashMap;
use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::thread::{Scope, ScopedJoinHandle};

use arrow_array::{Array as _, ArrayRef, RecordBatch};
use arrow_schema::DataType;

use crate::format::h5ad::{
    self, CsrWriter, DenseArray, DenseWriter, FrameIndex, FrameWriter, H5ad,
};
use crate::soma::anndata::AT_ONCE;
use crate::soma::anndata::{
    self, Along, AnnDataElements, AnnDataExperiment, AnnDataMeasurement, Axis, CellPlaces,
    FrameElement, FrameRows, Layout, MatrixColumns, MatrixElement, MeasurementGroup, Placed,
    UnsCollection, UnsElement, UnsMember,
};
use crate::soma::{
    estimated_cells, estimated_cells_along, ArrayObject, Objects, SelectedRows, Selection,
};
use crate::sync::map_at_once;
use crate::tiledb::{MetadataValue, Value};

use super::super::cache::CacheKey;
use super::super::data::{estimated_bytes, generate_whole_at, open_generated, small};
use super::super::error::{FsError, FsResult};
use crate::names::file_name;
use super::super::open_file::OpenFile;
use super::anndata::{
    frame_columns, frame_index, matrix_type, measurement_key, scan_frame, uns_frame_index,
    uns_value,
};
use super::{FileContext, FileKind};

type HdfGroup = hdf5_metno::Group;

/// About how many bytes a value and its index take in an h5ad file, to estimate its size.
const H5AD_VALUE_BYTES: u64 = 8;
/// The bytes of a sparse matrix's column index.
const CSR_INDEX_BYTES: u64 = 4;

/// A measurement (or one category of its cells) as an h5ad file.
///
/// Its first elements (obs, var and X) are read from parts of the measurement that its
/// directory opened; the others (the layers, obsm, varm, obsp, varp and uns) may come from
/// parts that open only when the file is generated, while obs and var are written (a
/// query's h5ad: over object storage they are most of its opens). Its cache key is
/// therefore made in two steps ([`CacheKey::joined`]): from the first parts, then from all.
#[derive(Debug)]
pub struct H5adFile {
    /// obs, var and X.
    first: AnnDataElements,
    /// Every element, once the whole measurement is open.
    whole: OnceLock<Option<AnnDataElements>>,
    /// Where the whole measurement opens from, when it was not opened with the file.
    group: Option<Arc<MeasurementGroup>>,
    /// The key's first part, made from `first`.
    first_key: CacheKey,
    /// The cells of obs and the genes of var it holds, whose join ids its estimate counts.
    cells: Arc<SelectedRows>,
    genes: Arc<SelectedRows>,
}

impl H5adFile {
    /// The h5ad of measurement `m` (every part opened) for the cells `cells` selects of obs
    /// and the genes `genes` selects of var; `None` for a measurement without a layer.
    pub fn new(
        experiment: &AnnDataExperiment,
        m: &Arc<AnnDataMeasurement>,
        cells: &Selection,
        genes: &Selection,
    ) -> Option<H5adFile> {
        let elements = AnnDataElements::of(experiment, m, cells, genes)?;
        let cells = Arc::new(SelectedRows::new(&elements.obs.array, cells.clone()));
        let genes = Arc::new(SelectedRows::new(&elements.var.array, genes.clone()));
        let whole = Some(elements.clone());
        Some(H5adFile::of(elements, whole, None, (cells, genes)))
    }

    /// The h5ad of the measurement whose group is `group` and whose var and X's layers are
    /// `listed`, for the cells `cells` selects of obs and the genes `genes` selects of its
    /// var (a query's, whose join ids its other files read too); its other parts open when
    /// the file is generated. `None` without a layer.
    pub fn opening(
        group: &Arc<MeasurementGroup>,
        listed: &Arc<AnnDataMeasurement>,
        cells: &Arc<SelectedRows>,
        genes: &Arc<SelectedRows>,
    ) -> Option<H5adFile> {
        let experiment = experiment_of(&cells.frame, listed);
        let first = AnnDataElements::of(&experiment, listed, &cells.rows, &genes.rows)?;
        let selected = (cells.clone(), genes.clone());
        Some(H5adFile::of(first, None, Some(group.clone()), selected))
    }

    fn of(
        first: AnnDataElements,
        whole: Option<AnnDataElements>,
        group: Option<Arc<MeasurementGroup>>,
        (cells, genes): (Arc<SelectedRows>, Arc<SelectedRows>),
    ) -> H5adFile {
        let first_key = measurement_key("h5ad", &first, |_| {});
        let opened = OnceLock::new();
        if let Some(whole) = whole {
            let _ = opened.set(Some(whole));
        }
        H5adFile {
            first,
            whole: opened,
            group,
            first_key,
            cells,
            genes,
        }
    }

    /// Every element: the whole measurement, opened now if it is not yet.
    fn whole(&self, store: &dyn Objects) -> io::Result<&AnnDataElements> {
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

    /// The file's cache key, once every part is open.
    fn key_if_open(&self) -> Option<CacheKey> {
        let whole = self.whole.get()?.as_ref()?;
        Some(self.key_of(whole))
    }

    fn key_of(&self, whole: &AnnDataElements) -> CacheKey {
        CacheKey::joined(&self.first_key, &measurement_key("h5ad", whole, |_| {}))
    }

    fn what(&self) -> String {
        let e = &self.first;
        let (obs, m) = (&e.obs.array.uri, &e.measurement.name);
        let (cells, genes) = (&e.obs.rows, &e.var.rows);
        format!("{obs} measurement {m} as h5ad (cells {cells:?}, genes {genes:?})")
    }

    /// About how many bytes the file comes to: every value of every array it is read from
    /// (of obs, var and X alone while the other parts are not open), and an index beside
    /// each. A category's or a query's are counted from its own cells and genes: obs's and
    /// var's rows it holds (their join ids read once), and libtiledb's estimate of each
    /// matrix's cells in them.
    fn estimated_bytes(&self) -> crate::soma::Result<u64> {
        let e = self.whole.get().and_then(Option::as_ref);
        let e = e.unwrap_or(&self.first);
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

    /// Whether it holds every cell and gene of the measurement.
    fn is_whole(&self) -> bool {
        self.cells.is_all() && self.genes.is_all()
    }

    /// Whether the file is generated whole by a `stat` (see the module's notes).
    fn small(&self, cx: &FileContext) -> bool {
        cx.options.exact_sizes || small(&cx.options, self.estimated_bytes())
    }

    /// Generates the file whole into the cache, unless it is there; returns its key. A file
    /// generated before is found by its whole key, so where the cache holds one of the same
    /// first part the other parts open first; otherwise generation starts at once, and they
    /// open while obs, var and X are written.
    fn generate(&self, cx: &FileContext) -> FsResult<CacheKey> {
        let (cache, store, what) = (&cx.options.cache, &*cx.store, self.what());
        if self.whole.get().is_some() || cache.holds_first(&self.first_key) {
            let whole = self.whole(store).map_err(|e| FsError::io(&what, e))?;
            let key = self.key_of(whole);
            if cache.size(&key).is_some() {
                return Ok(key);
            }
        }
        generate_whole_at(cache, &self.first_key, &what, |path| {
            self.write(store, path)?;
            Ok(self.key_of(self.whole(store)?))
        })?;
        let whole = self.whole(store).map_err(|e| FsError::io(&what, e))?;
        Ok(self.key_of(whole))
    }

    /// Writes the AnnData to a new HDF5 file at `path`: obs and var (small ones read at
    /// once, [`FrameRead`]), then X with every dense matrix of the mappings beside it
    /// ([`DenseMatrices`]), then the sparse matrices (the small ones read early,
    /// [`EarlyReads`]) and uns. The parts not open yet open while obs and var are written.
    fn write(&self, store: &dyn Objects, path: &Path) -> io::Result<()> {
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
            let cells = obs.write(root, "obs")?;
            // The selected cells' rows: all that is read of a matrix along obs.
            let only = first.obs.is_restricted().then(|| cells.joinids.runs());
            let only_along =
                |matrix: &MatrixElement| only.as_deref().filter(|_| matrix.rows == Along::Obs);
            let obs_rows = only.clone();
            let matrices_read = scope.spawn(move || match whole() {
                Ok(e) => EarlyReads::choose(e).read_matrices(obs_rows.as_deref()),
                Err(_) => ReadEarly::default(),
            });
            let genes = var.write(root, "var")?;
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

/// The dense matrices of an AnnData's mappings (dense layers, obsm and varm), written beside
/// X, several at once. Their datasets are made before X, each taking its whole space in the
/// file when made ([`DenseArray`]), so the file is the same byte for byte whenever their
/// cells come. On a local disk X and a big obsm both keep both cores busy only part of the
/// time (an obsm of 1,000 columns for a tenth of 100,000 cells: 0.1 s after X's 0.3 s, and
/// beside it 0.05 s more); over object storage their round trips overlap.
struct DenseMatrices<'a> {
    matrices: Vec<DenseMatrix<'a>>,
}

struct DenseMatrix<'a> {
    element: &'a MatrixElement,
    array: DenseArray,
    value_type: DataType,
    axes: (Axis<'a>, Axis<'a>),
}

impl<'a> DenseMatrices<'a> {
    /// Makes the dataset of every dense matrix of `e`'s mappings, in `groups` (one a mapping).
    fn create(
        e: &'a AnnDataElements,
        groups: &[HdfGroup],
        axes: impl Fn(&AnnDataElements, &MatrixElement) -> io::Result<(Axis<'a>, Axis<'a>)>,
    ) -> io::Result<DenseMatrices<'a>> {
        let mut matrices = Vec::new();
        for (mapping, group) in e.mappings.iter().zip(groups) {
            for element in &mapping.members {
                let (value_type, dense) = matrix_type(&element.array, element.layout)?;
                if !dense {
                    continue;
                }
                let axes = axes(e, element)?;
                let shape = [axes.0.len(), axes.1.len()];
                let name = file_name(&element.name);
                let array = DenseArray::create(group, &name, shape, &value_type)?;
                matrices.push(DenseMatrix {
                    element,
                    array,
                    value_type,
                    axes,
                });
            }
        }
        Ok(DenseMatrices { matrices })
    }

    /// Whether `matrix` is one of them.
    fn holds(&self, matrix: &MatrixElement) -> bool {
        (self.matrices.iter()).any(|m| std::ptr::eq(m.element, matrix))
    }

    /// Reads and writes every one, [`AT_ONCE`] at a time, those along obs in the rows
    /// `only_along` gives (all when `None`); once `given_up` is set, none goes on past its
    /// next batch.
    fn write<'r>(
        &self,
        only_along: impl Fn(&MatrixElement) -> Option<&'r [(i64, i64)]> + Sync,
        given_up: &AtomicBool,
    ) -> io::Result<()> {
        let write = |m: &DenseMatrix| {
            let cells = CellsOf::Read(only_along(m.element));
            let matrix = Matrix::Dense(m.array.writer());
            let (value_type, array) = (&m.value_type, &m.element.array);
            fill_matrix(matrix, value_type, array, cells, m.axes, Some(given_up))
        };
        map_at_once(&self.matrices, AT_ONCE, write)
            .into_iter()
            .collect()
    }
}

/// An experiment of obs and the one measurement `m`, as [`AnnDataElements::of`] takes it.
fn experiment_of(obs: &Arc<ArrayObject>, m: &Arc<AnnDataMeasurement>) -> AnnDataExperiment {
    AnnDataExperiment {
        obs: obs.clone(),
        measurements: vec![m.clone()],
    }
}

/// What a thread of early reads read; none when it died (each element is then read in turn).
fn join_reads<T>(reading: ScopedJoinHandle<'_, ReadEarly<T>>) -> ReadEarly<T> {
    reading.join().unwrap_or_default()
}

/// Elements read early, by array URI.
type ReadEarly<T> = HashMap<String, io::Result<T>>;

/// A matrix's cells as read: (row ids, column ids, values) a batch at a time.
type HeldCells = Vec<(Vec<i64>, Vec<i64>, ArrayRef)>;

/// The small elements after X (the sparse matrices of `layers`, `obsp` and `varp`, and
/// uns's arrays), read all at once on threads of their own while obs, var and X are
/// written (the dense matrices are written beside X, [`DenseMatrices`]). Each read costs a
/// few round trips to object storage, so read in turn they were most of a query's h5ad
/// over S3. An element is read early when it is estimated at [`EARLY_READ_BYTES`] or
/// less, as long as those chosen come to [`EARLY_READS_BYTES`] at most; the others are
/// read when their turn comes, streamed as X is.
///
/// What they hold is bounded by that, like the writer's own blocks, and not taken from the
/// memory budget: their readers take their shares from it, and holding a share while the
/// file waits for them could leave a reader of X waiting for memory that never comes.
struct EarlyReads<'a> {
    matrices: Vec<&'a MatrixElement>,
    uns: Vec<&'a ArrayObject>,
}

/// The most an element read early is estimated at.
const EARLY_READ_BYTES: u64 = 4 << 20;

/// The most the elements read early are estimated at, together.
const EARLY_READS_BYTES: u64 = 32 << 20;

impl<'a> EarlyReads<'a> {
    fn choose(e: &'a AnnDataElements) -> EarlyReads<'a> {
        let mut left = EARLY_READS_BYTES;
        let mut fits = |array: &ArrayObject| match array_bytes(array) {
            Ok(bytes) if bytes <= EARLY_READ_BYTES && bytes <= left => {
                left -= bytes;
                true
            }
            _ => false,
        };
        let mut uns = Vec::new();
        if let Some(collection) = e.uns() {
            uns_arrays(collection, &mut uns);
        }
        uns.retain(|array| fits(array));
        // Dense matrices are written beside X as they are read ([`DenseMatrices`]).
        let sparse = |m: &&MatrixElement| matches!(matrix_type(&m.array, m.layout), Ok((_, false)));
        let matrices = (e.mappings.iter())
            .flat_map(|mapping| &mapping.members)
            .filter(sparse)
            .filter(|matrix| fits(&matrix.array))
            .collect();
        EarlyReads { matrices, uns }
    }

    /// Reads the matrices, those along obs in the rows `obs_rows` only (all when `None`).
    fn read_matrices(&self, obs_rows: Option<&[(i64, i64)]>) -> ReadEarly<HeldCells> {
        let read = |matrix: &&MatrixElement| {
            let mut held = HeldCells::new();
            let only = obs_rows.filter(|_| matrix.rows == Along::Obs);
            let cells = anndata::read_cells(&matrix.array, only, |rows, cols, values| {
                held.push((rows.to_vec(), cols.to_vec(), values.clone()));
                Ok(())
            });
            (
                matrix.array.uri.clone(),
                cells.map(|_| held).map_err(io::Error::other),
            )
        };
        map_at_once(&self.matrices, AT_ONCE, read)
            .into_iter()
            .collect()
    }

    fn read_uns(&self) -> ReadEarly<UnsElement> {
        let read = |array: &&ArrayObject| (array.uri.clone(), anndata::uns_element(array));
        map_at_once(&self.uns, AT_ONCE, read).into_iter().collect()
    }
}

/// The arrays of an uns collection and of the collections in it.
fn uns_arrays<'a>(collection: &'a UnsCollection, into: &mut Vec<&'a ArrayObject>) {
    for (_, member) in collection.members_kept() {
        match member {
            UnsMember::Collection(inner) => uns_arrays(inner, into),
            UnsMember::Array(array) => into.push(array),
        }
    }
}

/// Where a matrix's cells come from: read now, in the rows given (all when `None`), or
/// read early.
enum CellsOf<'a> {
    Read(Option<&'a [(i64, i64)]>),
    Held(HeldCells),
}

/// About how many bytes an array comes to in an h5ad file.
fn array_bytes(array: &ArrayObject) -> crate::soma::Result<u64> {
    estimated_bytes(array, value_bytes(array))
}

/// About how many bytes a cell of an array comes to in an h5ad file: a value and an index
/// per column.
fn value_bytes(array: &ArrayObject) -> u64 {
    H5AD_VALUE_BYTES * array.schema.columns.len() as u64
}

/// How many bytes a cell of a matrix takes in an h5ad file: its value, and a sparse one's
/// column index (int32, [`CsrWriter`]).
fn matrix_cell_bytes(matrix: &MatrixElement) -> u64 {
    match matrix_type(&matrix.array, matrix.layout) {
        Ok((value_type, dense)) => {
            let value = value_type
                .primitive_width()
                .map_or(H5AD_VALUE_BYTES, |w| w as u64);
            value + if dense { 0 } else { CSR_INDEX_BYTES }
        }
        Err(_) => value_bytes(&matrix.array),
    }
}

/// obs or var, as the file reads it: its first pass ([`scan_frame`]) and then its rows.
///
/// A small frame (estimated at [`EARLY_FRAME_BYTES`] or less) has both read at once, on
/// threads of their own from the start of the file's generation, its rows held until they
/// are written: obs's first pass, obs's rows and var's two reads then overlap, where they
/// came one after another (over object storage each is two or three round trips). A larger
/// frame is read in its turn, its rows streamed into the file. What the threads hold is
/// bounded by that estimate and not taken from the memory budget: their readers take their
/// shares from it, and none waits for the file's thread.
struct FrameRead<'s, 'a> {
    frame: &'a FrameElement,
    /// Its first pass and its rows, being read; `None`: read in turn.
    early: Option<(Reading<'s, FrameRows>, Reading<'s, Vec<RecordBatch>>)>,
}

/// A read on a thread of the file's generation.
type Reading<'s, T> = ScopedJoinHandle<'s, io::Result<T>>;

/// The most a frame read at once is estimated at.
const EARLY_FRAME_BYTES: u64 = 16 << 20;

impl<'s, 'a: 's> FrameRead<'s, 'a> {
    fn start<'e>(scope: &'s Scope<'s, 'e>, frame: &'a FrameElement) -> FrameRead<'s, 'a> {
        let small = matches!(array_bytes(&frame.array), Ok(bytes) if bytes <= EARLY_FRAME_BYTES);
        let early = small.then(|| {
            let scan = scope.spawn(|| scan_frame(&frame.array, &frame.rows, &frame_index(frame)));
            let rows = scope.spawn(|| {
                let mut held = Vec::new();
                anndata::read_rows(&frame.array, &frame.rows, |batch| {
                    held.push(batch.clone());
                    Ok(())
                })?;
                Ok(held)
            });
            (scan, rows)
        });
        FrameRead { frame, early }
    }

    /// Writes the frame's rows as `name`, and returns what its first pass found.
    fn write(self, root: &HdfGroup, name: &str) -> io::Result<FrameRows> {
        let (frame, index) = (self.frame, frame_index(self.frame));
        let (scanned, held) = match self.early {
            Some((scan, rows)) => (join_scoped(scan)?, Some(join_scoped(rows)?)),
            None => (scan_frame(&frame.array, &frame.rows, &index)?, None),
        };
        let mut writer = frame_writer(root, name, &frame.array, &scanned, index)?;
        match held {
            Some(batches) => batches.iter().try_for_each(|batch| writer.append(batch))?,
            None => anndata::read_rows(&frame.array, &frame.rows, |batch| writer.append(batch))?,
        }
        writer.finish()?;
        Ok(scanned)
    }
}

/// What a thread of the generation returned (its panic goes on in the joining thread).
fn join_scoped<T>(thread: ScopedJoinHandle<'_, T>) -> T {
    thread
        .join()
        .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
}

impl FileKind for H5adFile {
    /// Known once every part is open and the file generated.
    fn size(&self, cx: &FileContext) -> FsResult<Option<u64>> {
        Ok(self
            .key_if_open()
            .and_then(|key| cx.options.cache.size(&key)))
    }

    fn open(&self, cx: &FileContext) -> FsResult<OpenFile> {
        let key = self.generate(cx)?;
        open_generated(&cx.options.cache, &key, &self.what())
    }

    /// A small file, or any with `--exact-sizes`: `ls -l anndata/` generates the small
    /// measurements and leaves the large ones for their first open. A category's or a
    /// query's always: its cells are counted on the request pool
    /// ([`FileKind::settle_size`]), not here.
    fn sized_on_stat(&self, cx: &FileContext) -> bool {
        !self.is_whole() || self.small(cx)
    }

    fn settle_size(&self, cx: &FileContext) -> FsResult<()> {
        match self.small(cx) {
            true => self.generate(cx).map(|_| ()),
            false => Ok(()),
        }
    }
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

/// The writer of one matrix.
enum Matrix {
    Csr(CsrWriter),
    Dense(DenseWriter),
}

/// Writes a two-dimensional array as a matrix: its cells in the rows `only` (runs of join
/// ids; all when `None`), placed along `axes`. Cells outside the axes are left out. Booleans
/// of a dense array are written as uint8, as tiledbsoma reads them.
fn write_matrix(
    parent: &HdfGroup,
    name: &str,
    array: &ArrayObject,
    cells: CellsOf,
    axes: (Axis, Axis),
    layout: Layout,
) -> io::Result<()> {
    let (value_type, dense) = matrix_type(array, layout)?;
    let shape = [axes.0.len(), axes.1.len()];
    let matrix = if dense {
        Matrix::Dense(DenseArray::create(parent, name, shape, &value_type)?.writer())
    } else {
        let expected = expected_cells(array, &cells).map_err(io::Error::other)?;
        Matrix::Csr(CsrWriter::create(
            parent,
            name,
            shape,
            &value_type,
            expected,
        )?)
    };
    fill_matrix(matrix, &value_type, array, cells, axes, None)
}

/// About how many cells of `array` are written (this sizes a sparse matrix's chunks, which
/// take their whole space in the file): those held, or libtiledb's estimate of those in
/// the rows read.
fn expected_cells(array: &ArrayObject, cells: &CellsOf) -> crate::soma::Result<u64> {
    match cells {
        CellsOf::Held(held) => Ok(held.iter().map(|(rows, _, _)| rows.len() as u64).sum()),
        CellsOf::Read(None) => array.stored_cells().map_err(Into::into),
        CellsOf::Read(Some(runs)) => {
            let ranges = vec![anndata::runs_in_domain(array, 0, runs)];
            if ranges[0].is_empty() {
                return Ok(0);
            }
            let selection = Selection {
                ranges,
                ..Selection::default()
            };
            estimated_cells(array, &selection)
        }
    }
}

/// Writes the cells of `array` into `matrix` (made for them by [`write_matrix`] or
/// [`DenseMatrices::create`]) as values of `value_type`, placed along `axes`; an error at
/// the first batch after `given_up` is set.
fn fill_matrix(
    mut matrix: Matrix,
    value_type: &DataType,
    array: &ArrayObject,
    cells: CellsOf,
    (rows, cols): (Axis, Axis),
    given_up: Option<&AtomicBool>,
) -> io::Result<()> {
    let mut put = |placed: Placed, values: &ArrayRef| match (placed, &mut matrix) {
        _ if given_up.is_some_and(|g| g.load(Ordering::Relaxed)) => {
            Err(io::Error::other("the file's generation gave up"))
        }
        (Placed::Runs(runs), Matrix::Dense(dense)) => {
            let values = anndata::values_as(values, value_type)?;
            for run in runs {
                dense.put_row(run.row, run.col, &values.slice(run.values_at, run.cells))?;
            }
            Ok(())
        }
        (Placed::Runs(runs), Matrix::Csr(csr)) => {
            let values = anndata::values_as(values, value_type)?;
            for run in runs {
                let cols: Vec<usize> = (run.col..run.col + run.cells).collect();
                let rows = vec![run.row; run.cells];
                csr.append(&rows, &cols, &values.slice(run.values_at, run.cells))?;
            }
            Ok(())
        }
        (Placed::Cells(places), matrix) => {
            let values = places.values(values, value_type)?;
            match matrix {
                Matrix::Csr(csr) => csr.append(&places.rows, &places.cols, &values),
                Matrix::Dense(block) => block.put(&places.rows, &places.cols, &values),
            }
        }
    };
    match cells {
        CellsOf::Read(only) => anndata::read_placed(array, only, (rows, cols), put)?,
        CellsOf::Held(held) => {
            for (row_ids, col_ids, values) in &held {
                let places = CellPlaces::of((&rows, &cols), row_ids, col_ids);
                put(Placed::Cells(&places), values)?;
            }
        }
    }
    match matrix {
        Matrix::Csr(csr) => csr.finish(),
        Matrix::Dense(dense) => dense.finish(),
    }
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
