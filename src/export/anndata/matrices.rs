//! The matrices of an h5ad: each read from TileDB into [`crate::format::h5ad`]'s CSR or
//! dense writer batch by batch (what a matrix holds while written is a batch, a chunk or
//! block, and a few numbers per cell and gene), and the dense matrices of the mappings,
//! written beside X ([`DenseMatrices`]).

use std::io;
use std::sync::atomic::{AtomicBool, Ordering};

use arrow_array::ArrayRef;
use arrow_schema::DataType;

use crate::format::h5ad::{CsrWriter, DenseArray, DenseWriter};
use crate::names::file_name;
use crate::soma::anndata::{
    self, AnnDataElements, Axis, CellPlaces, Layout, MatrixElement, Placed, AT_ONCE,
};
use crate::soma::{estimated_cells, ArrayObject, Selection};
use crate::sync::map_at_once;

use super::early::HeldCells;
use super::matrix_type;

/// A group of an HDF5 file.
pub type HdfGroup = hdf5_metno::Group;

/// Where a matrix's cells come from: read now, in the rows given (all when `None`), or
/// read early.
pub enum CellsOf<'a> {
    Read(Option<&'a [(i64, i64)]>),
    Held(HeldCells),
}

/// The writer of one matrix.
enum Matrix {
    Csr(CsrWriter),
    Dense(DenseWriter),
}

/// Writes a two-dimensional array as a matrix: its cells in the rows `only` (runs of join
/// ids; all when `None`), placed along `axes`. Cells outside the axes are left out. Booleans
/// of a dense array are written as uint8, as tiledbsoma reads them.
pub fn write_matrix(
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

/// The dense matrices of an AnnData's mappings (dense layers, obsm and varm), written beside
/// X, several at once. Their datasets are made before X, each taking its whole space in the
/// file when made ([`DenseArray`]), so the file is the same byte for byte whenever their
/// cells come. X and a big obsm each keep the cores busy only part of the time; over object
/// storage their round trips overlap.
pub struct DenseMatrices<'a> {
    matrices: Vec<DenseMatrix<'a>>,
}

/// One dense matrix: its element, its dataset, and where its cells go.
struct DenseMatrix<'a> {
    element: &'a MatrixElement,
    array: DenseArray,
    value_type: DataType,
    axes: (Axis<'a>, Axis<'a>),
}

impl<'a> DenseMatrices<'a> {
    /// Makes the dataset of every dense matrix of `e`'s mappings, in `groups` (one a mapping).
    pub fn create(
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
    pub fn holds(&self, matrix: &MatrixElement) -> bool {
        (self.matrices.iter()).any(|m| std::ptr::eq(m.element, matrix))
    }

    /// Reads and writes every one, [`AT_ONCE`] at a time, those along obs in the rows
    /// `only_along` gives (all when `None`); once `given_up` is set, none goes on past its
    /// next batch.
    pub fn write<'r>(
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
