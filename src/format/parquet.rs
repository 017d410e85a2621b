//! Parquet: the Arrow schema of the object kept (enumerations as dictionary columns,
//! nullability), snappy-compressed, through the parquet crate's Arrow writer. Parquet has no
//! timestamp in seconds: such columns are written in milliseconds, as pyarrow writes them.
//!
//! Dictionary encoding is chosen per column from a sample of its first rows. A column whose
//! values repeat (counts, categories, the sorted row index of a matrix) is dictionary
//! encoded; one whose values are nearly all distinct (measurements, identifiers) is written
//! plain. The writer would fall back to plain for such a column anyway once its dictionary
//! filled, but only after hashing every value into it: a third of the time of writing a
//! matrix of measured floats.

use std::collections::HashSet;
use std::io::{self, Write};
use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::{Array, ArrayRef, RecordBatch};
use arrow_schema::{DataType, Field, Schema, SchemaRef, TimeUnit};
use parquet::arrow::ArrowWriter;
use parquet::basic::Compression;
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

/// Whether dictionary encoding pays for column `index`, judged on the first `SAMPLE_ROWS`
/// rows of `sample` (see the module's notes). Columns that are dictionaries already, and
/// types other than numbers and byte strings, keep the writer's default.
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
            if !dictionary_pays(sample, index) {
                props = props
                    .set_column_dictionary_enabled(ColumnPath::from(field.name().as_str()), false);
            }
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
    fn repeated_values_keep_the_dictionary_and_distinct_ones_go_plain() {
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
        ])];
        let pays: Vec<bool> = (0..4).map(|i| dictionary_pays(&sample, i)).collect();
        assert_eq!(pays, [true, false, false, true]);
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
