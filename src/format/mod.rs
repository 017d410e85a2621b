//! Rendering: SOMA objects and Arrow record batches to the bytes of the files soma-mount
//! shows. Each submodule renders one kind of file and knows nothing of FUSE: the JSON
//! documents ([`json`]), CSV, TSV and JSON Lines ([`text`]), Parquet ([`parquet`]) and
//! NumPy `.npy` ([`npy`]).

pub mod json;
pub mod mtx;
pub mod npy;
pub mod parquet;
pub mod png;
pub mod text;

use std::io::{self, Write};

use arrow_array::RecordBatch;
use arrow_schema::SchemaRef;

/// The formats a table (an array's rows) is written in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TableFormat {
    Csv,
    Tsv,
    Jsonl,
    Parquet,
}

impl TableFormat {
    pub const ALL: [TableFormat; 4] = [
        TableFormat::Csv,
        TableFormat::Tsv,
        TableFormat::Parquet,
        TableFormat::Jsonl,
    ];

    pub fn extension(self) -> &'static str {
        match self {
            TableFormat::Csv => "csv",
            TableFormat::Tsv => "tsv",
            TableFormat::Jsonl => "jsonl",
            TableFormat::Parquet => "parquet",
        }
    }

    pub fn from_extension(ext: &str) -> Option<TableFormat> {
        TableFormat::ALL.into_iter().find(|f| f.extension() == ext)
    }

    fn text_kind(self) -> Option<text::TextKind> {
        match self {
            TableFormat::Csv => Some(text::TextKind::Csv),
            TableFormat::Tsv => Some(text::TextKind::Tsv),
            TableFormat::Jsonl => Some(text::TextKind::Jsonl),
            TableFormat::Parquet => None,
        }
    }

    /// A rough size in bytes of one row, to decide whether a file is small.
    pub fn estimated_row_bytes(self, schema: &arrow_schema::Schema) -> u64 {
        let values: u64 = schema
            .fields()
            .iter()
            .map(|f| {
                let width: u64 = if f.data_type().is_primitive() { 8 } else { 16 };
                match self {
                    TableFormat::Jsonl => width + f.name().len() as u64 + 4,
                    TableFormat::Parquet => width / 2,
                    _ => width + 1,
                }
            })
            .sum();
        values.max(1)
    }
}

/// Writes a whole table: `schema`'s rows, batch by batch from `next_batch`, to `out`.
/// The header (CSV, TSV) is written before the first batch is read, so readers see it at once.
pub fn write_table<W: Write + Send>(
    format: TableFormat,
    schema: SchemaRef,
    mut next_batch: impl FnMut() -> io::Result<Option<RecordBatch>>,
    mut out: W,
) -> io::Result<()> {
    let Some(kind) = format.text_kind() else {
        return parquet::write_parquet(schema, next_batch, out);
    };
    let encoder = text::TextEncoder::new(kind, &schema);
    let mut buf = Vec::with_capacity(1 << 20);
    encoder.header(&schema, &mut buf);
    out.write_all(&buf)?;
    while let Some(batch) = next_batch()? {
        buf.clear();
        encoder.encode(&batch, &mut buf)?;
        out.write_all(&buf)?;
    }
    out.flush()
}
