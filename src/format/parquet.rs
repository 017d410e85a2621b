//! Parquet: the Arrow schema of the object kept (enumerations as dictionary columns,
//! nullability), snappy-compressed, through the parquet crate's Arrow writer. Parquet has no
//! timestamp in seconds: such columns are written in milliseconds, as pyarrow writes them.
//!
//! Each column's encoding is chosen from a sample of its first rows. Integers that mostly
//! go up (the coordinates of a matrix, row-wise; identifiers) are delta encoded: a few bits
//! a value, and cheap to write. Other columns whose values repeat (counts, categories) are
//! dictionary encoded, and those whose values are nearly all distinct (measurements) are
//! written plain. The writer's default, a dictionary for everything, falls back to plain once
//! a dictionary fills, but only after hashing every value into it: it spent a third of the
//! time of writing a matrix in that hashing.

use std::collections::HashSet;
use std::io::{self, Write};
use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::{Array, ArrayRef, RecordBatch};
use arrow_schema::{DataType, Field, Schema, SchemaRef, TimeUnit};
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, Encoding};
use parquet::file::properties::WriterProperties;
use parquet::schema::types::ColumnPath;

fn parquet_err(e: parquet::errors::ParquetError) -> io::Error {
    io::Error::other(e.to_string())
}

fn arrow_err(e: arrow_schema::ArrowError) -> io::Error {
    io::Error::other(e.to_string())
}

/// The type a column is written as: itself, or milliseconds for seconds.
fn parquet_type(t: &DataType) -> DataType {
    match t {
        DataType::Timestamp(TimeUnit::Second, tz) => {
            DataType::Timestamp(TimeUnit::Millisecond, tz.clone())
        }
        other => other.clone(),
    }
}

/// Rows looked at to choose each column's encoding.
const SAMPLE_ROWS: usize = 32 * 1024;

/// A column is written plain when more than this share of its sampled values are distinct.
const DISTINCT_SHARE_FOR_PLAIN: f64 = 0.9;

/// A column is delta encoded when its values go up (or stay) from one row to the next in at
/// least this share of the sampled rows.
const RISING_SHARE_FOR_DELTA: f64 = 0.9;

/// How a column is encoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ColumnEncoding {
    /// The writer's default: a dictionary, plain once the dictionary fills.
    Dictionary,
    Plain,
    /// DELTA_BINARY_PACKED (integers).
    Delta,
}

/// How to encode column `index`, judged on the first `SAMPLE_ROWS` rows of `sample` (see
/// the module's notes).
fn choose_encoding(sample: &[RecordBatch], index: usize) -> ColumnEncoding {
    if mostly_rising(sample, index) {
        ColumnEncoding::Delta
    } else if dictionary_pays(sample, index) {
        ColumnEncoding::Dictionary
    } else {
        ColumnEncoding::Plain
    }
}

/// Whether column `index` holds integers that mostly rise from row to row in the sample.
fn mostly_rising(sample: &[RecordBatch], index: usize) -> bool {
    let (mut rising, mut pairs) = (0usize, 0usize);
    let mut previous: Option<i64> = None;
    let mut seen = 0usize;
    for batch in sample {
        let array = batch.column(index);
        if !array.data_type().is_integer() {
            return false;
        }
        let rows = array.len().min(SAMPLE_ROWS - seen);
        let Ok(values) = arrow_cast::cast(&array.slice(0, rows), &DataType::Int64) else {
            return false;
        };
        for value in values.as_primitive::<arrow_array::types::Int64Type>() {
            if let (Some(p), Some(v)) = (previous, value) {
                pairs += 1;
                rising += usize::from(v >= p);
            }
            previous = value.or(previous);
        }
        seen += rows;
        if seen >= SAMPLE_ROWS {
            break;
        }
    }
    pairs > 0 && rising as f64 >= RISING_SHARE_FOR_DELTA * pairs as f64
}

/// Whether dictionary encoding pays for column `index` in the sample: whether its values
/// repeat. Columns that are dictionaries already, and types other than numbers and byte
/// strings, keep the writer's default.
fn dictionary_pays(sample: &[RecordBatch], index: usize) -> bool {
    // Byte strings by reference; fixed-width values by their bytes (at most 16).
    let mut distinct: HashSet<&[u8]> = HashSet::new();
    let mut distinct_fixed: HashSet<u128> = HashSet::new();
    let mut values = 0usize;
    for batch in sample {
        let array = batch.column(index);
        let rows = array.len().min(SAMPLE_ROWS - values);
        let valid = |i: &usize| array.is_valid(*i);
        match array.data_type() {
            DataType::LargeUtf8 => {
                let strings = array.as_string::<i64>();
                distinct.extend((0..rows).filter(valid).map(|i| strings.value(i).as_bytes()));
            }
            DataType::LargeBinary => {
                let bytes = array.as_binary::<i64>();
                distinct.extend((0..rows).filter(valid).map(|i| bytes.value(i)));
            }
            t if t.is_primitive() => {
                let width = t.primitive_width().unwrap_or(usize::MAX);
                if width > 16 {
                    return true;
                }
                let data = array.to_data();
                let start = data.offset() * width;
                let raw = &data.buffers()[0].as_slice()[start..start + rows * width];
                distinct_fixed.extend(raw.chunks_exact(width).enumerate().filter_map(|(i, v)| {
                    let mut bytes = [0u8; 16];
                    bytes[..width].copy_from_slice(v);
                    valid(&i).then_some(u128::from_ne_bytes(bytes))
                }));
            }
            _ => return true,
        }
        values += rows;
        if values >= SAMPLE_ROWS {
            break;
        }
    }
    let non_null = values.saturating_sub(
        sample
            .iter()
            .map(|b| b.column(index).null_count())
            .sum::<usize>()
            .min(values),
    );
    ((distinct.len() + distinct_fixed.len()) as f64)
        <= DISTINCT_SHARE_FOR_PLAIN * non_null.max(1) as f64
}

/// The writer's properties: snappy, and per column the encoding `sample` suggests.
fn properties(schema: &Schema, sample: &[RecordBatch]) -> WriterProperties {
    let mut props = WriterProperties::builder().set_compression(Compression::SNAPPY);
    if !sample.is_empty() {
        for (index, field) in schema.fields().iter().enumerate() {
            let path = || ColumnPath::from(field.name().as_str());
            props = match choose_encoding(sample, index) {
                ColumnEncoding::Dictionary => props,
                ColumnEncoding::Plain => props.set_column_dictionary_enabled(path(), false),
                ColumnEncoding::Delta => props
                    .set_column_dictionary_enabled(path(), false)
                    .set_column_encoding(path(), Encoding::DELTA_BINARY_PACKED),
            };
        }
    }
    props.build()
}

pub fn write_parquet<W: Write + Send>(
    schema: SchemaRef,
    mut next_batch: impl FnMut() -> io::Result<Option<RecordBatch>>,
    out: W,
) -> io::Result<()> {
    let written: SchemaRef = Arc::new(Schema::new_with_metadata(
        schema
            .fields()
            .iter()
            .map(|f| Field::new(f.name(), parquet_type(f.data_type()), f.is_nullable()))
            .map(|f| match schema.field_with_name(f.name()) {
                Ok(orig) if orig.dict_is_ordered() == Some(true) => f.with_dict_is_ordered(true),
                _ => f,
            })
            .collect::<Vec<_>>(),
        schema.metadata().clone(),
    ));
    let recast = written != schema;
    let to_written = |batch: RecordBatch| -> io::Result<RecordBatch> {
        if !recast {
            return Ok(batch);
        }
        let columns = batch
            .columns()
            .iter()
            .zip(written.fields())
            .map(|(c, f)| arrow_cast::cast(c, f.data_type()))
            .collect::<Result<Vec<ArrayRef>, _>>()
            .map_err(arrow_err)?;
        RecordBatch::try_new(written.clone(), columns).map_err(arrow_err)
    };
    // The first rows, held until there are enough to choose each column's encoding.
    let mut sample = Vec::new();
    let mut sampled = 0;
    let mut ended = false;
    while sampled < SAMPLE_ROWS {
        let Some(batch) = next_batch()? else {
            ended = true;
            break;
        };
        sampled += batch.num_rows();
        sample.push(to_written(batch)?);
    }
    let props = properties(&written, &sample);
    let mut writer =
        ArrowWriter::try_new(out, written.clone(), Some(props)).map_err(parquet_err)?;
    for batch in &sample {
        writer.write(batch).map_err(parquet_err)?;
    }
    drop(sample);
    while !ended {
        match next_batch()? {
            Some(batch) => writer.write(&to_written(batch)?).map_err(parquet_err)?,
            None => ended = true,
        }
    }
    writer.close().map_err(parquet_err)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::{Float32Array, Int64Array, LargeStringArray};

    fn batch(columns: Vec<(&str, ArrayRef)>) -> RecordBatch {
        RecordBatch::try_from_iter(columns).unwrap()
    }

    #[test]
    fn rising_integers_go_delta_repeated_values_keep_the_dictionary_and_distinct_ones_go_plain() {
        let n = 10_000;
        let sample = [batch(vec![
            (
                "row",
                Arc::new(Int64Array::from_iter_values((0..n).map(|i| i / 100))) as ArrayRef,
            ),
            ("id", Arc::new(Int64Array::from_iter_values(0..n))),
            (
                "value",
                Arc::new(Float32Array::from_iter_values(
                    (0..n).map(|i| i as f32 * 0.37),
                )),
            ),
            (
                "label",
                Arc::new(LargeStringArray::from_iter_values(
                    (0..n).map(|i| format!("{}", i % 7)),
                )),
            ),
            (
                "count",
                Arc::new(Int64Array::from_iter_values(
                    (0..n).map(|i| (i * 7919) % 13),
                )),
            ),
        ])];
        let chosen: Vec<ColumnEncoding> = (0..5).map(|i| choose_encoding(&sample, i)).collect();
        use ColumnEncoding::*;
        assert_eq!(chosen, [Delta, Delta, Plain, Dictionary, Dictionary]);
    }

    #[test]
    fn the_encoding_choice_keeps_every_value() {
        let n = 100_000i64;
        let ids = Arc::new(Int64Array::from_iter_values(0..n)) as ArrayRef;
        let values = Arc::new(Float32Array::from_iter_values(
            (0..n).map(|i| (i % 13) as f32),
        ));
        let table = batch(vec![("id", ids), ("value", values as ArrayRef)]);
        let mut batches =
            vec![table.slice(0, 1000), table.slice(1000, (n - 1000) as usize)].into_iter();
        let path =
            std::env::temp_dir().join(format!("soma-mount-test-{}.parquet", std::process::id()));
        let file = std::fs::File::create(&path).unwrap();
        write_parquet(table.schema(), || Ok(batches.next()), &file).unwrap();
        let file = std::fs::File::open(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        let reader = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(file)
            .unwrap()
            .build()
            .unwrap();
        let read: Vec<RecordBatch> = reader.collect::<Result<_, _>>().unwrap();
        let read = arrow_select::concat::concat_batches(&table.schema(), &read).unwrap();
        assert_eq!(read, table);
    }
}
