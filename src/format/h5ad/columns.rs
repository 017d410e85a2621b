//! The one-dimensional elements of an h5ad: where a column's (or a CSR matrix part's) values
//! go, piece by piece ([`Sink`]: numbers, booleans, texts, nullable ones with their mask,
//! categoricals' codes), and a whole array written at once ([`write_array`]).

use std::io;

use arrow_array::cast::AsArray;
use arrow_array::types::*;
use arrow_array::{
    Array, ArrayRef, ArrowPrimitiveType, BooleanArray, LargeStringArray, PrimitiveArray,
};
use arrow_schema::DataType;
use hdf5::types::VarLenUnicode;
use hdf5::{Dataset, Group, H5Type};
use hdf5_metno as hdf5;

use super::super::anndata::{texts, ColumnEncoding, Encoding};
use super::{h5_error, h5_text, mark, new_group, Appender, Categories, ColumnSpec, Extent};

/// `values` as an array of `A`; an error naming both types when it is of another.
pub(super) fn primitive<A: ArrowPrimitiveType>(
    values: &ArrayRef,
) -> io::Result<&PrimitiveArray<A>> {
    values.as_primitive_opt::<A>().ok_or_else(|| {
        io::Error::other(format!(
            "expected {}, got {}",
            A::DATA_TYPE,
            values.data_type()
        ))
    })
}

/// Where an array's values go, piece by piece, as one element.
pub(super) trait Sink {
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

pub(super) fn numbers<A: ArrowPrimitiveType>(
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
pub(super) struct Texts {
    pub(super) values: Appender<VarLenUnicode>,
    pub(super) mask: Option<Appender<bool>>,
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
pub(super) fn column_sink(
    parent: &Group,
    column: &ColumnSpec,
    extent: Extent,
) -> io::Result<Box<dyn Sink>> {
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
