//! A dense matrix of an h5ad ([`DenseArray`]): its dataset's file space taken whole when
//! made, its cells written later in blocks of rows ([`DenseWriter`]), from any thread.

use std::io;

use arrow_array::types::*;
use arrow_array::{ArrayRef, ArrowPrimitiveType};
use arrow_schema::DataType;
use hdf5::{Dataset, Group, H5Type};
use hdf5_metno as hdf5;
use ndarray::ArrayView2;

use super::super::anndata::Encoding;
use super::columns::primitive;
use super::{h5_error, mark};

/// A dense two-dimensional array's dataset, its file space taken whole when it is created.
/// Its cells are written later ([`DenseArray::writer`]), from any thread: those writes
/// allocate nothing, so they may go on beside other writes to the file without changing
/// where anything lands in it (the file comes out the same byte for byte).
pub struct DenseArray {
    dataset: Dataset,
    shape: [usize; 2],
    /// Its writer's blocks, of its value type.
    blocks: fn(Dataset, [usize; 2]) -> Box<dyn Cells>,
}

impl DenseArray {
    /// A `shape` array at `parent/name` whose values are of `data_type` (a number type),
    /// marked as an array.
    pub fn create(
        parent: &Group,
        name: &str,
        shape: [usize; 2],
        data_type: &DataType,
    ) -> io::Result<DenseArray> {
        macro_rules! of {
            ($arrow:ty) => {
                (
                    parent.new_dataset::<<$arrow as ArrowPrimitiveType>::Native>(),
                    Blocks::<$arrow>::boxed as fn(Dataset, [usize; 2]) -> Box<dyn Cells>,
                )
            };
        }
        let (builder, blocks) = match data_type {
            DataType::Int8 => of!(Int8Type),
            DataType::Int16 => of!(Int16Type),
            DataType::Int32 => of!(Int32Type),
            DataType::Int64 => of!(Int64Type),
            DataType::UInt8 => of!(UInt8Type),
            DataType::UInt16 => of!(UInt16Type),
            DataType::UInt32 => of!(UInt32Type),
            DataType::UInt64 => of!(UInt64Type),
            DataType::Float32 => of!(Float32Type),
            DataType::Float64 => of!(Float64Type),
            other => {
                return Err(io::Error::other(format!(
                    "{name}: a dense array of {other} cannot be written"
                )))
            }
        };
        // Every cell is written (the writer fills what it is not given with 0), so nothing
        // is filled in when the space is taken.
        let dataset = builder
            .alloc_time(Some(hdf5::dataset::AllocTime::Early))
            .fill_time(hdf5::dataset::FillTime::Never)
            .shape(shape)
            .create(name)
            .map_err(h5_error)?;
        mark(&dataset, Encoding::Array)?;
        Ok(DenseArray {
            dataset,
            shape,
            blocks,
        })
    }

    /// A writer of the array's cells.
    pub fn writer(&self) -> DenseWriter {
        DenseWriter {
            blocks: (self.blocks)(self.dataset.clone(), self.shape),
        }
    }
}

/// The cells of a [`DenseArray`] being written, sorted by row (rows never go back), a block
/// of rows at a time; cells never given are 0.
pub struct DenseWriter {
    blocks: Box<dyn Cells>,
}

/// Bytes a dense writer's block of rows holds (at least one row).
const DENSE_BLOCK_BYTES: usize = 8 << 20;

impl DenseWriter {
    /// Sets the cells (`rows[i]`, `cols[i]`) to `values[i]`.
    pub fn put(&mut self, rows: &[usize], cols: &[usize], values: &ArrayRef) -> io::Result<()> {
        self.blocks.put(rows, cols, values)
    }

    /// Sets the cells (`row`, `col` + i) to `values[i]`.
    pub fn put_row(&mut self, row: usize, col: usize, values: &ArrayRef) -> io::Result<()> {
        self.blocks.put_row(row, col, values)
    }

    /// Writes the rest of the rows.
    pub fn finish(self) -> io::Result<()> {
        self.blocks.finish()
    }
}

trait Cells: Send {
    fn put(&mut self, rows: &[usize], cols: &[usize], values: &ArrayRef) -> io::Result<()>;
    fn put_row(&mut self, row: usize, col: usize, values: &ArrayRef) -> io::Result<()>;
    fn finish(self: Box<Self>) -> io::Result<()>;
}

struct Blocks<A: ArrowPrimitiveType> {
    dataset: Dataset,
    shape: [usize; 2],
    block_rows: usize,
    /// The first row of the block held.
    start: usize,
    /// The block's cells, made at the first put.
    block: Vec<A::Native>,
}

impl<A: ArrowPrimitiveType> Blocks<A>
where
    A::Native: H5Type,
{
    fn boxed(dataset: Dataset, shape: [usize; 2]) -> Box<dyn Cells>
    where
        A: 'static,
    {
        let row_bytes = (shape[1] * std::mem::size_of::<A::Native>()).max(1);
        let block_rows = (DENSE_BLOCK_BYTES / row_bytes).clamp(1, shape[0].max(1));
        Box::new(Blocks::<A> {
            dataset,
            shape,
            block_rows,
            start: 0,
            block: Vec::new(),
        })
    }

    /// The block's offset of `row`, writing the blocks before it first; an error for a row
    /// outside the array or before the block held.
    fn row_at(&mut self, row: usize) -> io::Result<usize> {
        if row >= self.shape[0] {
            return Err(io::Error::other(format!(
                "row {row} is outside a {} x {} array",
                self.shape[0], self.shape[1]
            )));
        }
        while row >= self.start + self.block_rows {
            self.write_block()?;
        }
        if row < self.start {
            return Err(io::Error::other(format!(
                "array row {row} comes after row {}",
                self.start
            )));
        }
        if self.block.is_empty() {
            self.block = vec![A::Native::default(); self.block_rows * self.shape[1]];
        }
        Ok((row - self.start) * self.shape[1])
    }

    /// `values` as this array's values.
    fn values_of(values: &ArrayRef) -> io::Result<&[A::Native]> {
        Ok(primitive::<A>(values)?.values().as_ref())
    }

    /// Writes the block held (zeros when no cell was put in it) and starts the next.
    fn write_block(&mut self) -> io::Result<()> {
        let rows = self.block_rows.min(self.shape[0] - self.start);
        if self.block.is_empty() {
            self.block = vec![A::Native::default(); self.block_rows * self.shape[1]];
        }
        let cells = &self.block[..rows * self.shape[1]];
        let view =
            ArrayView2::from_shape((rows, self.shape[1]), cells).map_err(io::Error::other)?;
        let selection = hdf5::Hyperslab::from(vec![
            hdf5::SliceOrIndex::from(self.start..self.start + rows),
            hdf5::SliceOrIndex::from(..),
        ]);
        if rows > 0 && self.shape[1] > 0 {
            self.dataset
                .write_slice(view, selection)
                .map_err(h5_error)?;
        }
        self.start += rows;
        self.block.fill(A::Native::default());
        Ok(())
    }
}

impl<A: ArrowPrimitiveType> Cells for Blocks<A>
where
    A::Native: H5Type,
{
    fn put(&mut self, rows: &[usize], cols: &[usize], values: &ArrayRef) -> io::Result<()> {
        let values = Self::values_of(values)?;
        for (i, (&row, &col)) in rows.iter().zip(cols).enumerate() {
            if col >= self.shape[1] {
                return Err(io::Error::other(format!(
                    "cell ({row}, {col}) is outside a {} x {} array",
                    self.shape[0], self.shape[1]
                )));
            }
            let at = self.row_at(row)?;
            self.block[at + col] = values[i];
        }
        Ok(())
    }

    fn put_row(&mut self, row: usize, col: usize, values: &ArrayRef) -> io::Result<()> {
        let values = Self::values_of(values)?;
        let cols = col..col + values.len();
        if cols.end > self.shape[1] {
            return Err(io::Error::other(format!(
                "cells ({row}, {cols:?}) are outside a {} x {} array",
                self.shape[0], self.shape[1]
            )));
        }
        let at = self.row_at(row)?;
        self.block[at + cols.start..at + cols.end].copy_from_slice(values);
        Ok(())
    }

    fn finish(mut self: Box<Self>) -> io::Result<()> {
        while self.start < self.shape[0] {
            self.write_block()?;
        }
        Ok(())
    }
}
