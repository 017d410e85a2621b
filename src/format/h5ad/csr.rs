//! A CSR matrix of an h5ad ([`CsrWriter`]): its `data` and `indices` appended to growing
//! chunked datasets a chunk at a time, its `indptr` written from the entries per row.

use std::io;
use std::sync::Arc;

use arrow_array::types::*;
use arrow_array::{Array, ArrayRef, Int32Array, Int64Array};
use arrow_schema::DataType;
use hdf5::Group;
use hdf5_metno as hdf5;

use super::super::anndata::Encoding;
use super::columns::{column_sink, numbers, write_array, Sink};
use super::{h5_error, new_group, ColumnSpec, Extent};

/// A CSR matrix being written row by row: entries come sorted by row, then column.
pub struct CsrWriter {
    group: Group,
    shape: [usize; 2],
    data: Box<dyn Sink>,
    indices: Box<dyn Sink>,
    /// Entries per row.
    row_counts: Vec<u64>,
    /// The row of the last entry written.
    last_row: usize,
}

/// Entries a chunk of a CSR matrix's `data` and `indices` holds (at most).
const CSR_CHUNK: usize = 1 << 20;

impl CsrWriter {
    /// A CSR matrix of `shape` at `parent/name` whose values are of `data_type`; about
    /// `expected_entries` of them (this sizes the chunks).
    pub fn create(
        parent: &Group,
        name: &str,
        shape: [usize; 2],
        data_type: &DataType,
        expected_entries: u64,
    ) -> io::Result<CsrWriter> {
        let group = new_group(parent, name, Encoding::CsrMatrix)?;
        let dims = [shape[0] as i64, shape[1] as i64];
        group
            .new_attr::<i64>()
            .shape(2)
            .create("shape")
            .and_then(|attr| attr.write_raw(&dims))
            .map_err(h5_error)?;
        let chunk = usize::try_from(expected_entries)
            .unwrap_or(CSR_CHUNK)
            .clamp(1, CSR_CHUNK);
        let extent = Extent::Growing { chunk };
        let data = column_sink(
            &group,
            &ColumnSpec {
                name: "data".into(),
                data_type: data_type.clone(),
                has_nulls: false,
                categories: None,
            },
            extent,
        )?;
        let indices = if shape[1] <= i32::MAX as usize {
            numbers::<Int32Type>(&group, "indices", extent, 0)?
        } else {
            numbers::<Int64Type>(&group, "indices", extent, 0)?
        };
        Ok(CsrWriter {
            group,
            shape,
            data,
            indices,
            row_counts: vec![0; shape[0]],
            last_row: 0,
        })
    }

    /// Appends entries: each at (`rows[i]`, `cols[i]`) holding `values[i]`. Rows never go
    /// back: an entry in an earlier row than one written before is an error.
    pub fn append(&mut self, rows: &[usize], cols: &[usize], values: &ArrayRef) -> io::Result<()> {
        for &row in rows {
            if row >= self.shape[0] {
                return Err(io::Error::other(format!(
                    "matrix row {row} is outside its {} rows",
                    self.shape[0]
                )));
            }
            if row < self.last_row {
                return Err(io::Error::other(format!(
                    "matrix row {row} comes after row {}",
                    self.last_row
                )));
            }
            self.last_row = row;
            self.row_counts[row] += 1;
        }
        if let Some(&col) = cols.iter().find(|&&c| c >= self.shape[1]) {
            return Err(io::Error::other(format!(
                "matrix column {col} is outside its {} columns",
                self.shape[1]
            )));
        }
        let indices: ArrayRef = if self.shape[1] <= i32::MAX as usize {
            Arc::new(Int32Array::from_iter_values(cols.iter().map(|&c| c as i32)))
        } else {
            Arc::new(Int64Array::from_iter_values(cols.iter().map(|&c| c as i64)))
        };
        self.indices.append(&indices)?;
        self.data.append(values)
    }

    /// Writes `indptr` (int64) and closes the matrix.
    pub fn finish(self) -> io::Result<()> {
        self.data.finish()?;
        self.indices.finish()?;
        let values: ArrayRef = Arc::new(Int64Array::from(indptr(&self.row_counts)));
        write_array(&self.group, "indptr", &[values.len()], &values)
    }
}

/// A compressed matrix's `indptr`: where each row's (or column's) entries start, from how
/// many each has, and then their total.
pub(in crate::format) fn indptr(counts: &[u64]) -> Vec<i64> {
    let mut indptr = Vec::with_capacity(counts.len() + 1);
    let mut total = 0i64;
    indptr.push(total);
    for &count in counts {
        total += count as i64;
        indptr.push(total);
    }
    indptr
}
