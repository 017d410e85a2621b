//! Parquet: the Arrow schema of the object kept (enumerations as dictionary columns,
//! nullability), snappy-compressed, through the parquet crate's Arrow writer. Parquet has no
//! timestamp in seconds: such columns are written in milliseconds, as pyarrow writes them.

use std::io::{self, Write};

use std::sync::Arc;

use arrow_array::RecordBatch;
use arrow_schema::{DataType, Field, Schema, SchemaRef, TimeUnit};
use parquet::arrow::ArrowWriter;
use parquet::basic::Compression;
use parquet::file::properties::WriterProperties;

fn parquet_err(e: parquet::errors::ParquetError) -> io::Error {
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
    let props = WriterProperties::builder()
        .set_compression(Compression::SNAPPY)
        .build();
    let mut writer =
        ArrowWriter::try_new(out, written.clone(), Some(props)).map_err(parquet_err)?;
    while let Some(batch) = next_batch()? {
        let batch = if recast {
            let columns = batch
                .columns()
                .iter()
                .zip(written.fields())
                .map(|(c, f)| arrow_cast::cast(c, f.data_type()))
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| io::Error::other(e.to_string()))?;
            RecordBatch::try_new(written.clone(), columns)
                .map_err(|e| io::Error::other(e.to_string()))?
        } else {
            batch
        };
        writer.write(&batch).map_err(parquet_err)?;
    }
    writer.close().map_err(parquet_err)?;
    Ok(())
}
