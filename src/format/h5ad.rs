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
//! and the names it is given must already be valid HDF5 link names.

use std::io;
use std::path::Path;
use std::str::FromStr;
use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::*;
use arrow_array::{
    Array, ArrayRef, ArrowPrimitiveType, BooleanArray, Int32Array, Int64Array, LargeStringArray,
    PrimitiveArray, RecordBatch,
};
use arrow_schema::DataType;
use hdf5::types::VarLenUnicode;
use hdf5::{Dataset, File, Group, H5Type, Location};
use hdf5_metno as hdf5;
use ndarray::ArrayView2;

use super::anndata::{texts, ColumnEncoding, Encoding};
pub use super::anndata::{Categories, ColumnSpec};

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

/// `values` as an array of `A`; an error naming both types when it is of another.
fn primitive<A: ArrowPrimitiveType>(values: &ArrayRef) -> io::Result<&PrimitiveArray<A>> {
    values.as_primitive_opt::<A>().ok_or_else(|| {
        io::Error::other(format!(
            "expected {}, got {}",
            A::DATA_TYPE,
            values.data_type()
        ))
    })
}

/// Where an array's values go, piece by piece, as one element.
trait Sink {
    fn append(&mut self, values: &ArrayRef) -> io::Result<()>;
    fn finish(self: Box<Self>) -> io::Result<()>;
}

/// Numbers of an Arrow type into an array of the same type; nulls become `null`.
struct Numbers<A: ArrowPrimitiveType> {
    values: Appender<A::Native>,
    null: A::Native,
}

impl<A: ArrowPrimitiveType> Sink for Numbers<A>
where
    A::Native: H5Type,
{
    fn append(&mut self, values: &ArrayRef) -> io::Result<()> {
        let array = primitive::<A>(values)?;
        match array.nulls().filter(|n| n.null_count() > 0) {
            None => self.values.push(array.values()),
            Some(nulls) => {
                let filled: Vec<A::Native> = array
                    .values()
                    .iter()
                    .zip(nulls.iter())
                    .map(|(&v, valid)| if valid { v } else { self.null })
                    .collect();
                self.values.push(&filled)
            }
        }
    }

    fn finish(self: Box<Self>) -> io::Result<()> {
        let dataset = self.values.finish()?;
        mark(&dataset, Encoding::Array)
    }
}

fn numbers<A: ArrowPrimitiveType>(
    parent: &Group,
    name: &str,
    extent: Extent,
    null: A::Native,
) -> io::Result<Box<dyn Sink>>
where
    A::Native: H5Type,
{
    Ok(Box::new(Numbers::<A> {
        values: Appender::create(parent, name, extent)?,
        null,
    }))
}

/// Booleans: a plain array, or (with nulls) values and a mask.
struct Booleans {
    values: Appender<bool>,
    mask: Option<Appender<bool>>,
}

impl Sink for Booleans {
    fn append(&mut self, values: &ArrayRef) -> io::Result<()> {
        let array: &BooleanArray = values.as_boolean_opt().ok_or_else(|| {
            io::Error::other(format!("expected bool, got {}", values.data_type()))
        })?;
        let bits: Vec<bool> = (0..array.len())
            .map(|i| array.is_valid(i) && array.value(i))
            .collect();
        self.values.push(&bits)?;
        push_mask(&mut self.mask, array)
    }

    fn finish(self: Box<Self>) -> io::Result<()> {
        finish_masked(self.values, self.mask, Encoding::Array)
    }
}

/// Text: a string array, or (with nulls) values and a mask. Columns that are not text (binary,
/// dates, timestamps, numbers as an index) are written as their CSV text.
struct Texts {
    values: Appender<VarLenUnicode>,
    mask: Option<Appender<bool>>,
}

impl Sink for Texts {
    fn append(&mut self, values: &ArrayRef) -> io::Result<()> {
        let strings = texts(values)?;
        let text = h5_texts(&strings)?;
        self.values.push(&text)?;
        push_mask(&mut self.mask, &strings)
    }

    fn finish(self: Box<Self>) -> io::Result<()> {
        finish_masked(self.values, self.mask, Encoding::StringArray)
    }
}

/// Each string as HDF5 text (a null as the empty string).
fn h5_texts(strings: &LargeStringArray) -> io::Result<Vec<VarLenUnicode>> {
    (0..strings.len())
        .map(|i| {
            h5_text(if strings.is_valid(i) {
                strings.value(i)
            } else {
                ""
            })
        })
        .collect()
}

/// A nullable element: its group, holding `values` and `mask`.
fn masked<T: H5Type + Clone>(
    parent: &Group,
    name: &str,
    nullable: bool,
    encoding: Encoding,
    extent: Extent,
) -> io::Result<(Appender<T>, Option<Appender<bool>>)> {
    if !nullable {
        return Ok((Appender::create(parent, name, extent)?, None));
    }
    let element = new_group(parent, name, encoding)?;
    Ok((
        Appender::create(&element, "values", extent)?,
        Some(Appender::create(&element, "mask", extent)?),
    ))
}

fn push_mask(mask: &mut Option<Appender<bool>>, values: &dyn Array) -> io::Result<()> {
    match mask {
        Some(mask) => {
            let nulls: Vec<bool> = (0..values.len()).map(|i| values.is_null(i)).collect();
            mask.push(&nulls)
        }
        None => Ok(()),
    }
}

fn finish_masked<T: H5Type + Clone>(
    values: Appender<T>,
    mask: Option<Appender<bool>>,
    values_encoding: Encoding,
) -> io::Result<()> {
    let values = values.finish()?;
    mark(&values, values_encoding)?;
    match mask {
        Some(mask) => {
            let mask = mask.finish()?;
            mark(&mask, Encoding::Array)
        }
        None => Ok(()),
    }
}

/// A categorical's codes: the dictionary keys, -1 for null.
struct Codes {
    codes: Box<dyn Sink>,
    code_type: DataType,
}

impl Sink for Codes {
    fn append(&mut self, values: &ArrayRef) -> io::Result<()> {
        let keys = values
            .as_any_dictionary_opt()
            .ok_or_else(|| {
                io::Error::other(format!("expected labels, got {}", values.data_type()))
            })?
            .keys();
        let codes = arrow_cast::cast(keys, &self.code_type).map_err(io::Error::other)?;
        self.codes.append(&codes)
    }

    fn finish(self: Box<Self>) -> io::Result<()> {
        self.codes.finish()
    }
}

/// The sink that writes a column as anndata (and pandas, reading Arrow) would hold it:
///
/// - numbers as an array of their own type; integers with nulls as float64 with NaN, as
///   pandas reads them; floats' nulls as NaN;
/// - booleans as an array, or a nullable boolean when some are null;
/// - dictionaries as a categorical (codes -1 for null);
/// - everything else as a string array, or a nullable string array when some are null:
///   strings as they are, other types as the CSV text.
fn column_sink(parent: &Group, column: &ColumnSpec, extent: Extent) -> io::Result<Box<dyn Sink>> {
    let name = column.name.as_str();
    macro_rules! exact {
        ($arrow:ty, $null:expr) => {
            numbers::<$arrow>(parent, name, extent, $null)
        };
    }
    let numbers = match column.encoding() {
        ColumnEncoding::Numbers(stored) => stored,
        ColumnEncoding::Booleans { nullable } => {
            let (values, mask) = masked(parent, name, nullable, Encoding::NullableBoolean, extent)?;
            return Ok(Box::new(Booleans { values, mask }));
        }
        ColumnEncoding::Categorical { code_type } => {
            let categories = column
                .categories
                .as_ref()
                .ok_or_else(|| io::Error::other(format!("column {name} has no categories")))?;
            return categorical(parent, name, categories, code_type, extent);
        }
        ColumnEncoding::Texts { nullable } => {
            let (values, mask) = masked(parent, name, nullable, Encoding::NullableString, extent)?;
            return Ok(Box::new(Texts { values, mask }));
        }
    };
    let sink = match &numbers {
        DataType::Int8 => exact!(Int8Type, 0),
        DataType::Int16 => exact!(Int16Type, 0),
        DataType::Int32 => exact!(Int32Type, 0),
        DataType::Int64 => exact!(Int64Type, 0),
        DataType::UInt8 => exact!(UInt8Type, 0),
        DataType::UInt16 => exact!(UInt16Type, 0),
        DataType::UInt32 => exact!(UInt32Type, 0),
        DataType::UInt64 => exact!(UInt64Type, 0),
        DataType::Float32 => exact!(Float32Type, f32::NAN),
        DataType::Float64 => exact!(Float64Type, f64::NAN),
        other => Err(io::Error::other(format!("{name}: numbers of {other}"))),
    }?;
    if numbers == column.data_type {
        return Ok(sink);
    }
    Ok(Box::new(Cast {
        to: numbers,
        inner: sink,
    }))
}

fn categorical(
    parent: &Group,
    name: &str,
    categories: &Categories,
    code_type: DataType,
    extent: Extent,
) -> io::Result<Box<dyn Sink>> {
    let element = new_group(parent, name, Encoding::Categorical)?;
    element
        .new_attr::<bool>()
        .create("ordered")
        .and_then(|attr| attr.write_scalar(&categories.ordered))
        .map_err(h5_error)?;
    write_array(
        &element,
        "categories",
        &[categories.labels.len()],
        &categories.labels,
    )?;
    let codes = match code_type {
        DataType::Int8 => numbers::<Int8Type>(&element, "codes", extent, -1)?,
        DataType::Int16 => numbers::<Int16Type>(&element, "codes", extent, -1)?,
        DataType::Int32 => numbers::<Int32Type>(&element, "codes", extent, -1)?,
        _ => numbers::<Int64Type>(&element, "codes", extent, -1)?,
    };
    Ok(Box::new(Codes { codes, code_type }))
}

/// A sink for values cast to another type first.
struct Cast {
    to: DataType,
    inner: Box<dyn Sink>,
}

impl Sink for Cast {
    fn append(&mut self, values: &ArrayRef) -> io::Result<()> {
        let cast = arrow_cast::cast(values, &self.to).map_err(io::Error::other)?;
        self.inner.append(&cast)
    }

    fn finish(self: Box<Self>) -> io::Result<()> {
        self.inner.finish()
    }
}

/// Writes a whole array of any shape (C order) at once, as [`column_sink`] writes a column
/// without nulls: numbers and booleans as an array, text (and what is written as text) as a
/// string array, a dictionary as its labels' text.
pub fn write_array(
    parent: &Group,
    name: &str,
    shape: &[usize],
    values: &ArrayRef,
) -> io::Result<()> {
    let count: usize = shape.iter().product();
    if count != values.len() {
        return Err(io::Error::other(format!(
            "{name}: {} values for a shape of {count}",
            values.len()
        )));
    }
    fn whole<T: H5Type>(
        parent: &Group,
        name: &str,
        shape: &[usize],
        values: &[T],
    ) -> io::Result<Dataset> {
        let dataset = parent
            .new_dataset::<T>()
            .shape(shape.to_vec())
            .create(name)
            .map_err(h5_error)?;
        if !values.is_empty() {
            dataset.write_raw(values).map_err(h5_error)?;
        }
        Ok(dataset)
    }
    macro_rules! numbers_of {
        ($arrow:ty) => {
            whole(
                parent,
                name,
                shape,
                values.as_primitive::<$arrow>().values(),
            )
        };
    }
    let (dataset, encoding) = match values.data_type() {
        DataType::Int8 => (numbers_of!(Int8Type)?, Encoding::Array),
        DataType::Int16 => (numbers_of!(Int16Type)?, Encoding::Array),
        DataType::Int32 => (numbers_of!(Int32Type)?, Encoding::Array),
        DataType::Int64 => (numbers_of!(Int64Type)?, Encoding::Array),
        DataType::UInt8 => (numbers_of!(UInt8Type)?, Encoding::Array),
        DataType::UInt16 => (numbers_of!(UInt16Type)?, Encoding::Array),
        DataType::UInt32 => (numbers_of!(UInt32Type)?, Encoding::Array),
        DataType::UInt64 => (numbers_of!(UInt64Type)?, Encoding::Array),
        DataType::Float32 => (numbers_of!(Float32Type)?, Encoding::Array),
        DataType::Float64 => (numbers_of!(Float64Type)?, Encoding::Array),
        DataType::Boolean => {
            let bools: Vec<bool> = values
                .as_boolean()
                .iter()
                .map(|b| b == Some(true))
                .collect();
            (whole(parent, name, shape, &bools)?, Encoding::Array)
        }
        _ => {
            let text = h5_texts(&texts(values)?)?;
            (whole(parent, name, shape, &text)?, Encoding::StringArray)
        }
    };
    mark(&dataset, encoding)
}

/// What a data frame's index is.
#[derive(Debug, Clone)]
pub enum FrameIndex {
    /// A column's values as text; the index keeps the column's name when `named`.
    Column { name: String, named: bool },
    /// Row numbers from 0, as integers (a pandas RangeIndex).
    RowNumbers,
}

/// A data frame being written, batch by batch: its index and its columns, in order.
pub struct FrameWriter {
    index: FrameIndex,
    index_sink: Box<dyn Sink>,
    /// The name of each column in the batches, and its sink.
    columns: Vec<(String, Box<dyn Sink>)>,
    rows_written: usize,
}

impl FrameWriter {
    /// A data frame of `rows` rows at `parent/name`. `columns` pairs each column, named as
    /// in the batches, with its name in the file.
    pub fn create(
        parent: &Group,
        name: &str,
        rows: usize,
        index: FrameIndex,
        columns: &[(ColumnSpec, String)],
    ) -> io::Result<FrameWriter> {
        let group = new_group(parent, name, Encoding::DataFrame)?;
        let extent = Extent::Fixed(rows);
        let index_name = match &index {
            FrameIndex::Column { name, named: true } => name.clone(),
            _ => "_index".to_owned(),
        };
        text_attr(&group, "_index", &index_name)?;
        let order = columns
            .iter()
            .map(|(_, file_name)| h5_text(file_name))
            .collect::<io::Result<Vec<_>>>()?;
        group
            .new_attr::<VarLenUnicode>()
            .shape(order.len())
            .create("column-order")
            .and_then(|attr| attr.write_raw(&order))
            .map_err(h5_error)?;
        let index_sink: Box<dyn Sink> = match &index {
            FrameIndex::Column { .. } => Box::new(Texts {
                values: Appender::create(&group, &index_name, extent)?,
                mask: None,
            }),
            FrameIndex::RowNumbers => numbers::<Int64Type>(&group, &index_name, extent, 0)?,
        };
        let columns = columns
            .iter()
            .map(|(spec, file_name)| {
                let mut in_file = spec.clone();
                in_file.name = file_name.clone();
                Ok((spec.name.clone(), column_sink(&group, &in_file, extent)?))
            })
            .collect::<io::Result<Vec<_>>>()?;
        Ok(FrameWriter {
            index,
            index_sink,
            columns,
            rows_written: 0,
        })
    }

    /// Writes the rows of a batch holding (at least) the index column and every column.
    pub fn append(&mut self, batch: &RecordBatch) -> io::Result<()> {
        let column = |name: &str| {
            batch
                .column_by_name(name)
                .cloned()
                .ok_or_else(|| io::Error::other(format!("no column {name} in the rows read")))
        };
        let index = match &self.index {
            FrameIndex::Column { name, .. } => column(name)?,
            FrameIndex::RowNumbers => {
                let start = self.rows_written as i64;
                Arc::new(Int64Array::from_iter_values(
                    start..start + batch.num_rows() as i64,
                )) as ArrayRef
            }
        };
        self.index_sink.append(&index)?;
        for (name, sink) in &mut self.columns {
            sink.append(&column(name)?)?;
        }
        self.rows_written += batch.num_rows();
        Ok(())
    }

    pub fn finish(self) -> io::Result<()> {
        self.index_sink.finish()?;
        for (_, sink) in self.columns {
            sink.finish()?;
        }
        Ok(())
    }
}

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
pub(super) fn indptr(counts: &[u64]) -> Vec<i64> {
    let mut indptr = Vec::with_capacity(counts.len() + 1);
    let mut total = 0i64;
    indptr.push(total);
    for &count in counts {
        total += count as i64;
        indptr.push(total);
    }
    indptr
}

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

#[cfg(test)]
mod tests {
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
