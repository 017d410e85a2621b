//! What anndata's on-disk specification makes of values, whatever the container (h5ad or
//! Zarr): the `encoding-type` and `encoding-version` of each kind of element, how a data
//! frame column is encoded (numbers, booleans, categoricals, text, and which of them become
//! nullable elements with a mask), the type of a categorical's codes, and the text of
//! columns that anndata can only hold as text. The writers in [`super::h5ad`] and
//! [`super::zarr`] only encode what is decided here.

use std::io;
use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::{ArrayRef, LargeStringArray, RecordBatch};
use arrow_schema::{DataType, Field, Schema};

use super::text::{Scratch, TextBuf, TextEncoder, TextKind};

/// An element's `encoding-type` and `encoding-version`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Encoding {
    AnnData,
    Dict,
    DataFrame,
    Array,
    StringArray,
    Categorical,
    NullableBoolean,
    NullableString,
    CsrMatrix,
    NumericScalar,
    String,
}

impl Encoding {
    pub fn type_and_version(self) -> (&'static str, &'static str) {
        match self {
            Encoding::AnnData => ("anndata", "0.1.0"),
            Encoding::Dict => ("dict", "0.1.0"),
            Encoding::DataFrame => ("dataframe", "0.2.0"),
            Encoding::Array => ("array", "0.2.0"),
            Encoding::StringArray => ("string-array", "0.2.0"),
            Encoding::Categorical => ("categorical", "0.2.0"),
            Encoding::NullableBoolean => ("nullable-boolean", "0.1.0"),
            Encoding::NullableString => ("nullable-string-array", "0.1.0"),
            Encoding::CsrMatrix => ("csr_matrix", "0.1.0"),
            Encoding::NumericScalar => ("numeric-scalar", "0.2.0"),
            Encoding::String => ("string", "0.2.0"),
        }
    }
}

/// The categories of a categorical column, and whether their order means something.
#[derive(Debug, Clone)]
pub struct Categories {
    pub labels: ArrayRef,
    pub ordered: bool,
}

/// One column of an element: its name, the Arrow type its values come in, whether any of
/// them is null, and for a dictionary its categories.
#[derive(Debug, Clone)]
pub struct ColumnSpec {
    pub name: String,
    pub data_type: DataType,
    pub has_nulls: bool,
    pub categories: Option<Categories>,
}

/// How a column is encoded, as anndata (and pandas, reading Arrow) would hold it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ColumnEncoding {
    /// An array of numbers of this type: integers with nulls as float64 with NaN, as pandas
    /// reads them; floats' nulls as NaN.
    Numbers(DataType),
    /// An array of booleans, or (`nullable`: some are null) values and a mask.
    Booleans { nullable: bool },
    /// A categorical: the dictionary keys as codes of this type (-1 for null), and the
    /// categories.
    Categorical { code_type: DataType },
    /// A string array, or (`nullable`) values and a mask: strings as they are, other types
    /// as their CSV text (see [`texts`]).
    Texts { nullable: bool },
}

impl ColumnSpec {
    pub fn encoding(&self) -> ColumnEncoding {
        match &self.data_type {
            t if t.is_integer() && self.has_nulls => ColumnEncoding::Numbers(DataType::Float64),
            t if is_number(t) => ColumnEncoding::Numbers(t.clone()),
            DataType::Boolean => ColumnEncoding::Booleans {
                nullable: self.has_nulls,
            },
            DataType::Dictionary(..) => ColumnEncoding::Categorical {
                code_type: code_type(self.categories.as_ref().map_or(0, |c| c.labels.len())),
            },
            _ => ColumnEncoding::Texts {
                nullable: self.has_nulls,
            },
        }
    }
}

impl ColumnSpec {
    /// Whether the encoding of this column depends on whether it holds a null (integers,
    /// booleans and texts; not floats or categoricals): only such a column must be read
    /// before its element can be laid out.
    pub fn encoding_depends_on_nulls(&self) -> bool {
        let with = |has_nulls| {
            ColumnSpec {
                has_nulls,
                ..self.clone()
            }
            .encoding()
        };
        with(true) != with(false)
    }
}

/// The smallest signed type that holds every code of `categories` categories, as pandas
/// picks it.
pub fn code_type(categories: usize) -> DataType {
    match categories {
        n if n < 1 << 7 => DataType::Int8,
        n if n < 1 << 15 => DataType::Int16,
        n if n < 1 << 31 => DataType::Int32,
        _ => DataType::Int64,
    }
}

/// A column's values as text (see [`ColumnEncoding::Texts`]): strings and dictionaries of
/// strings as they are, other types as their CSV text.
pub fn texts(values: &ArrayRef) -> io::Result<LargeStringArray> {
    let as_text = |array: &ArrayRef| -> io::Result<LargeStringArray> {
        Ok(arrow_cast::cast(array, &DataType::LargeUtf8)
            .map_err(io::Error::other)?
            .as_string::<i64>()
            .clone())
    };
    match values.data_type() {
        DataType::LargeUtf8 | DataType::Utf8 => as_text(values),
        DataType::Dictionary(_, labels)
            if matches!(**labels, DataType::LargeUtf8 | DataType::Utf8) =>
        {
            as_text(values)
        }
        _ => csv_texts(values),
    }
}

/// Values as the CSV files spell them, one per row (nulls stay null). Only for types whose
/// CSV text is never quoted: numbers, booleans, binary (hex), dates and timestamps.
fn csv_texts(values: &ArrayRef) -> io::Result<LargeStringArray> {
    let schema = Arc::new(Schema::new(vec![Field::new(
        "value",
        values.data_type().clone(),
        true,
    )]));
    let batch =
        RecordBatch::try_new(schema.clone(), vec![values.clone()]).map_err(io::Error::other)?;
    let mut text = TextBuf::default();
    TextEncoder::new(TextKind::Csv, &schema).encode(&batch, &mut text, &mut Scratch::default())?;
    let text = std::str::from_utf8(text.as_bytes()).map_err(io::Error::other)?;
    let nulls = values.logical_nulls();
    Ok(text
        .lines()
        .enumerate()
        .map(|(i, line)| nulls.as_ref().is_none_or(|n| n.is_valid(i)).then_some(line))
        .collect())
}

/// Whether a whole array (of any shape) is held as text: a string array, as [`texts`]
/// makes it; else it is an array of numbers or booleans.
pub fn is_text(data_type: &DataType) -> bool {
    !(is_number(data_type) || data_type == &DataType::Boolean)
}

/// Whether values of this type are stored as numbers of the same type.
fn is_number(data_type: &DataType) -> bool {
    data_type.is_integer() || matches!(data_type, DataType::Float32 | DataType::Float64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(data_type: DataType) -> ColumnSpec {
        ColumnSpec {
            name: "c".into(),
            data_type,
            has_nulls: false,
            categories: None,
        }
    }

    #[test]
    fn only_integers_booleans_and_texts_are_laid_out_by_their_nulls() {
        // pandas reads integers with nulls as float64, booleans and strings with nulls as
        // objects; floats' nulls are NaN and categoricals' are code -1 either way.
        let dictionary =
            DataType::Dictionary(Box::new(DataType::Int32), Box::new(DataType::LargeUtf8));
        for (data_type, depends) in [
            (DataType::Int64, true),
            (DataType::UInt8, true),
            (DataType::Boolean, true),
            (DataType::LargeUtf8, true),
            (
                DataType::Timestamp(arrow_schema::TimeUnit::Second, None),
                true,
            ),
            (DataType::Float32, false),
            (DataType::Float64, false),
            (dictionary, false),
        ] {
            assert_eq!(
                spec(data_type.clone()).encoding_depends_on_nulls(),
                depends,
                "{data_type}"
            );
        }
    }
}
