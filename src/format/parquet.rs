//! Parquet: the Arrow schema of the object kept (enumerations as dictionary columns,
//! nullability), snappy-compressed, through the parquet crate's Arrow writer.

use std::io::{self, Write};

use arrow_array::RecordBatch;
use arrow_schema::SchemaRef;
use parquet::arrow::ArrowWriter;
use parquet::basic::Compression;
use parquet::file::properties::WriterProperties;

fn parquet_err(e: parquet::errors::ParquetError) -> io::Error {
    io::Error::other(e.to_string())
}

pub fn write_parquet<W: Write + Send>(
    schema: SchemaRef,
    mut next_batch: impl FnMut() -> io::Result<Option<RecordBatch>>,
    out: W,
) -> io::Result<()> {
    let props = WriterProperties::builder()
        .set_compression(Compression::SNAPPY)
        .build();
    let mut writer = ArrowWriter::try_new(out, schema, Some(props)).map_err(parquet_err)?;
    while let Some(batch) = next_batch()? {
        writer.write(&batch).map_err(parquet_err)?;
    }
    writer.close().map_err(parquet_err)?;
    Ok(())
}
