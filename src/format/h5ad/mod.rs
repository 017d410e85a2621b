//! anndata's h5ad: an HDF5 file (written with libhdf5) whose groups and datasets are the
//! elements of anndata's on-disk specification, each marked with the `encoding-type` and
//! `encoding-version` attributes anndata dispatches on: data frames (numeric and string
//! columns, categoricals, nullable booleans and strings), CSR matrices, dense arrays,
//! mappings and scalars.
//!
//! Big elements are written in pieces as their rows come. A data frame's columns and a dense
//! array's rows go into datasets whose shape is known beforehand; a CSR matrix's `data` and
//! `indices`, whose length is not, are appended to resizable chunked datasets a whole chunk
//! at a time. So a writer holds one chunk or block per dataset, plus a CSR matrix's count of
//! entries per row (8 bytes a row), whatever the size of the element.
//!
//! This module knows nothing of SOMA: elements are made of Arrow arrays and plain values,
//! and the names it is given must already be valid HDF5 link names. It holds the file, its
//! groups, attributes and scalars, and the datasets written front to back (`Appender`);
//! the elements are in `columns.rs` (one-dimensional values and whole arrays), `frame.rs`,
//! `csr.rs` and `dense.rs`.

use std::io;
use std::path::Path;
use std::str::FromStr;

use hdf5::types::VarLenUnicode;
use hdf5::{Dataset, File, Group, H5Type, Location};
use hdf5_metno as hdf5;

mod columns;
mod csr;
mod dense;
mod frame;

use super::anndata::Encoding;
pub use super::anndata::{Categories, ColumnSpec};
pub use columns::write_array;
pub(super) use csr::indptr;
pub use csr::CsrWriter;
pub use dense::{DenseArray, DenseWriter};
pub use frame::{FrameIndex, FrameWriter};

pub(super) fn h5_error(e: hdf5::Error) -> io::Error {
    io::Error::other(format!("HDF5: {e}"))
}

/// Text as an HDF5 variable-length UTF-8 string (which cannot hold NUL).
fn h5_text(text: &str) -> io::Result<VarLenUnicode> {
    VarLenUnicode::from_str(text)
        .map_err(|_| io::Error::other(format!("{text:?}: an HDF5 string cannot hold NUL")))
}

fn text_attr(location: &Location, name: &str, value: &str) -> io::Result<()> {
    let value = h5_text(value)?;
    location
        .new_attr::<VarLenUnicode>()
        .create(name)
        .and_then(|attr| attr.write_scalar(&value))
        .map_err(h5_error)
}

fn mark(location: &Location, encoding: Encoding) -> io::Result<()> {
    let (kind, version) = encoding.type_and_version();
    text_attr(location, "encoding-type", kind)?;
    text_attr(location, "encoding-version", version)
}

fn new_group(parent: &Group, name: &str, encoding: Encoding) -> io::Result<Group> {
    let group = parent.create_group(name).map_err(h5_error)?;
    mark(&group, encoding)?;
    Ok(group)
}

/// An h5ad file being written.
pub struct H5ad {
    file: File,
}

impl H5ad {
    /// Creates (truncating) the file at `path`, marked as an AnnData.
    pub fn create(path: &Path) -> io::Result<H5ad> {
        use hdf5::file::FileCloseDegree;
        // Closing the file closes whatever is still open in it: the file is whole on close.
        let file = File::with_options()
            .with_fapl(|fapl| fapl.fclose_degree(FileCloseDegree::Strong))
            .create(path)
            .map_err(h5_error)?;
        mark(&file, Encoding::AnnData)?;
        Ok(H5ad { file })
    }

    /// The root group, where `obs`, `var`, `X` and the mappings go.
    pub fn root(&self) -> &Group {
        &self.file
    }

    /// Writes everything out and closes the file.
    pub fn close(self) -> io::Result<()> {
        self.file.close().map_err(h5_error)
    }
}

/// A mapping (`layers`, `obsm`, `uns`, a dictionary inside `uns`).
pub fn mapping(parent: &Group, name: &str) -> io::Result<Group> {
    new_group(parent, name, Encoding::Dict)
}

/// A string scalar (in `uns`).
pub fn write_text_scalar(parent: &Group, name: &str, value: &str) -> io::Result<()> {
    let value = h5_text(value)?;
    let dataset = parent
        .new_dataset::<VarLenUnicode>()
        .create(name)
        .map_err(h5_error)?;
    dataset.write_scalar(&value).map_err(h5_error)?;
    mark(&dataset, Encoding::String)
}

/// A numeric (or boolean) scalar (in `uns`).
pub fn write_numeric_scalar<T: H5Type>(parent: &Group, name: &str, value: T) -> io::Result<()> {
    let dataset = parent.new_dataset::<T>().create(name).map_err(h5_error)?;
    dataset.write_scalar(&value).map_err(h5_error)?;
    mark(&dataset, Encoding::NumericScalar)
}

/// How long a one-dimensional dataset is: known beforehand (a data frame's column), or
/// growing as values come (a CSR matrix's `data`), stored in chunks of this many values.
#[derive(Debug, Clone, Copy)]
pub enum Extent {
    Fixed(usize),
    Growing { chunk: usize },
}

/// Values written front to back into a one-dimensional dataset.
pub(super) struct Appender<T> {
    dataset: Dataset,
    extent: Extent,
    written: usize,
    /// Growing datasets: values not yet making a whole chunk.
    pending: Vec<T>,
}

impl<T: H5Type + Clone> Appender<T> {
    pub(super) fn create(parent: &Group, name: &str, extent: Extent) -> io::Result<Appender<T>> {
        let builder = parent.new_dataset::<T>();
        let dataset = match extent {
            Extent::Fixed(len) => builder.shape(len).create(name),
            Extent::Growing { chunk } => builder.chunk(chunk.max(1)).shape(0..).create(name),
        }
        .map_err(h5_error)?;
        Ok(Appender {
            dataset,
            extent,
            written: 0,
            pending: Vec::new(),
        })
    }

    fn write_at_end(&mut self, values: &[T]) -> io::Result<()> {
        if values.is_empty() {
            return Ok(());
        }
        let end = self.written + values.len();
        match self.extent {
            Extent::Fixed(len) if end > len => {
                return Err(io::Error::other(format!(
                    "more than the {len} values expected in {}",
                    self.dataset.name()
                )))
            }
            Extent::Fixed(_) => {}
            Extent::Growing { .. } => self.dataset.resize(end).map_err(h5_error)?,
        }
        self.dataset
            .write_slice(values, self.written..end)
            .map_err(h5_error)?;
        self.written = end;
        Ok(())
    }

    pub(super) fn push(&mut self, values: &[T]) -> io::Result<()> {
        let Extent::Growing { chunk } = self.extent else {
            return self.write_at_end(values);
        };
        self.pending.extend_from_slice(values);
        let whole = self.pending.len() / chunk * chunk;
        if whole > 0 {
            let rest = self.pending.split_off(whole);
            let chunks = std::mem::replace(&mut self.pending, rest);
            self.write_at_end(&chunks)?;
        }
        Ok(())
    }

    /// Writes what is pending; a dataset of known length must have got all of it.
    pub(super) fn finish(mut self) -> io::Result<Dataset> {
        let pending = std::mem::take(&mut self.pending);
        self.write_at_end(&pending)?;
        if let Extent::Fixed(len) = self.extent {
            if self.written != len {
                return Err(io::Error::other(format!(
                    "{} values of the {len} expected in {}",
                    self.written,
                    self.dataset.name()
                )));
            }
        }
        Ok(self.dataset)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow_array::{ArrayRef, RecordBatch};
    use arrow_schema::DataType;

    use super::*;
    use arrow_array::{Float32Array, StringArray};

    fn temp_file(name: &str) -> std::path::PathBuf {
        std::env::temp_dir().join(format!("soma-mount-h5ad-{name}-{}.h5", std::process::id()))
    }

    fn text_attr_of(location: &Location, name: &str) -> String {
        let value: VarLenUnicode = location.attr(name).unwrap().read_scalar().unwrap();
        value.as_str().to_owned()
    }

    #[test]
    fn a_dense_array_takes_a_row_s_cells_at_once() {
        let path = temp_file("dense-rows");
        let file = H5ad::create(&path).unwrap();
        let array = DenseArray::create(file.root(), "m", [3, 4], &DataType::Float32).unwrap();
        let mut dense = array.writer();
        let values = |v: &[f32]| Arc::new(Float32Array::from(v.to_vec())) as ArrayRef;
        // Row 0 from column 1, then row 2 whole.
        dense.put_row(0, 1, &values(&[1.0, 2.0, 3.0])).unwrap();
        dense.put_row(2, 0, &values(&[5.0, 6.0, 7.0, 8.0])).unwrap();
        assert!(
            dense.put_row(2, 2, &values(&[1.0; 3])).is_err(),
            "past its columns"
        );
        assert!(
            dense.put_row(3, 0, &values(&[1.0])).is_err(),
            "past its rows"
        );
        dense.finish().unwrap();
        file.close().unwrap();
        let file = File::open(&path).unwrap();
        let cells: Vec<f32> = file.dataset("m").unwrap().read_raw().unwrap();
        assert_eq!(
            cells,
            [0.0, 1.0, 2.0, 3.0, 0.0, 0.0, 0.0, 0.0, 5.0, 6.0, 7.0, 8.0]
        );
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn a_csr_matrix_is_written_in_pieces_with_its_row_pointers() {
        let path = temp_file("csr");
        let file = H5ad::create(&path).unwrap();
        // Chunks of 2 entries: the 5 entries go as two whole chunks, then the rest.
        let mut csr = CsrWriter::create(file.root(), "X", [4, 3], &DataType::Float32, 2).unwrap();
        let values = |v: &[f32]| Arc::new(Float32Array::from(v.to_vec())) as ArrayRef;
        csr.append(&[0, 0, 2], &[0, 2, 1], &values(&[1.0, 2.0, 3.0]))
            .unwrap();
        csr.append(&[3, 3], &[0, 1], &values(&[4.0, 5.0])).unwrap();
        assert!(
            csr.append(&[1], &[0], &values(&[6.0])).is_err(),
            "rows go back"
        );
        csr.finish().unwrap();
        file.close().unwrap();

        let file = File::open(&path).unwrap();
        assert_eq!(text_attr_of(&file, "encoding-type"), "anndata");
        let x = file.group("X").unwrap();
        assert_eq!(text_attr_of(&x, "encoding-type"), "csr_matrix");
        let shape: Vec<i64> = x.attr("shape").unwrap().read_raw().unwrap();
        assert_eq!(shape, [4, 3]);
        let indptr: Vec<i64> = x.dataset("indptr").unwrap().read_raw().unwrap();
        assert_eq!(indptr, [0, 2, 2, 3, 5]);
        let indices: Vec<i32> = x.dataset("indices").unwrap().read_raw().unwrap();
        assert_eq!(indices, [0, 2, 1, 0, 1]);
        let data: Vec<f32> = x.dataset("data").unwrap().read_raw().unwrap();
        assert_eq!(data, [1.0, 2.0, 3.0, 4.0, 5.0]);
        std::fs::remove_file(&path).unwrap();
    }

    /// A file of a growing CSR matrix and a dense array made before it, the dense array's
    /// rows written on another thread while the matrix grows (`beside`), or after it.
    fn csr_and_dense(name: &str, beside: bool) -> Vec<u8> {
        let path = temp_file(name);
        let file = H5ad::create(&path).unwrap();
        let (rows, width) = (3000, 100);
        let dense =
            DenseArray::create(file.root(), "obsm", [rows, width], &DataType::Float32).unwrap();
        let fill_dense = || {
            let mut writer = dense.writer();
            for row in (0..rows).step_by(2) {
                let values: Vec<f32> = (0..width).map(|c| (row * width + c) as f32).collect();
                let values = Arc::new(Float32Array::from(values)) as ArrayRef;
                writer.put_row(row, 0, &values).unwrap();
            }
            writer.finish().unwrap();
        };
        let fill_csr = || {
            let mut csr =
                CsrWriter::create(file.root(), "X", [rows, 50], &DataType::Float32, 64).unwrap();
            for row in 0..rows {
                let values = Arc::new(Float32Array::from(vec![row as f32; 10])) as ArrayRef;
                let cols: Vec<usize> = (0..10).map(|c| c * 5).collect();
                csr.append(&[row; 10], &cols, &values).unwrap();
            }
            csr.finish().unwrap();
        };
        if beside {
            std::thread::scope(|scope| {
                let dense_written = scope.spawn(fill_dense);
                fill_csr();
                dense_written.join().unwrap();
            });
        } else {
            fill_csr();
            fill_dense();
        }
        drop(dense);
        file.close().unwrap();
        let bytes = std::fs::read(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        bytes
    }

    #[test]
    fn a_dense_array_written_beside_a_growing_matrix_leaves_the_file_as_written_after_it() {
        let after = csr_and_dense("after", false);
        for i in 0..3 {
            assert!(
                csr_and_dense(&format!("beside-{i}"), true) == after,
                "the file differs when the dense array is written beside the CSR matrix"
            );
        }
        let file_path = temp_file("check");
        std::fs::write(&file_path, &after).unwrap();
        let file = File::open(&file_path).unwrap();
        let obsm = file.dataset("obsm").unwrap();
        assert_eq!(text_attr_of(&obsm, "encoding-type"), "array");
        let cells: Vec<f32> = obsm.read_raw().unwrap();
        assert_eq!(cells[2 * 100 + 7], (2 * 100 + 7) as f32);
        assert_eq!(cells[100 + 7], 0.0, "odd rows were not given");
        std::fs::remove_file(&file_path).unwrap();
    }

    #[test]
    fn a_text_column_with_nulls_is_a_nullable_string_array() {
        let path = temp_file("frame");
        let file = H5ad::create(&path).unwrap();
        let spec = ColumnSpec {
            name: "note".into(),
            data_type: DataType::Utf8,
            has_nulls: true,
            categories: None,
        };
        let index = FrameIndex::Column {
            name: "id".into(),
            named: false,
        };
        let mut frame =
            FrameWriter::create(file.root(), "obs", 3, index, &[(spec, "note".into())]).unwrap();
        let column = |v: Vec<Option<&str>>| Arc::new(StringArray::from(v)) as ArrayRef;
        let batch = RecordBatch::try_from_iter([
            ("id", column(vec![Some("a"), Some("b"), Some("c")])),
            ("note", column(vec![Some("x"), None, Some("z")])),
        ])
        .unwrap();
        frame.append(&batch).unwrap();
        frame.finish().unwrap();
        file.close().unwrap();

        let file = File::open(&path).unwrap();
        let obs = file.group("obs").unwrap();
        assert_eq!(text_attr_of(&obs, "_index"), "_index");
        let note = obs.group("note").unwrap();
        assert_eq!(
            text_attr_of(&note, "encoding-type"),
            "nullable-string-array"
        );
        let mask: Vec<bool> = note.dataset("mask").unwrap().read_raw().unwrap();
        assert_eq!(mask, [false, true, false]);
        let values: Vec<VarLenUnicode> = note.dataset("values").unwrap().read_raw().unwrap();
        let values: Vec<&str> = values.iter().map(|v| v.as_str()).collect();
        assert_eq!(values, ["x", "", "z"]);
        std::fs::remove_file(&path).unwrap();
    }
}
