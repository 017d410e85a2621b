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
use std::sync::mpsc;

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
///
/// Text is encoded on every core: a large batch is cut into one run of rows per core, the
/// runs are encoded side by side, and a writer thread writes them in order while the next
/// batch is read and encoded. A failed write (a reader that went away) stops the encoding.
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
    let mut header = text::TextBuf::default();
    encoder.header(&schema, &mut header);
    out.write_all(header.as_bytes())?;
    let encoders = std::thread::available_parallelism().map_or(1, |n| n.get().min(MAX_ENCODERS));
    std::thread::scope(|scope| {
        let (to_writer, encoded) = mpsc::sync_channel::<text::TextBuf>(2 * encoders);
        let (recycle, spare) = mpsc::channel::<text::TextBuf>();
        let writer = std::thread::Builder::new()
            .name("soma-write".into())
            .spawn_scoped(scope, move || -> io::Result<()> {
                for text in encoded {
                    out.write_all(text.as_bytes())?;
                    let _ = recycle.send(text);
                }
                out.flush()
            })?;
        let encoding = (|| -> io::Result<()> {
            while let Some(batch) = next_batch()? {
                for text in encode_text(&encoder, &batch, encoders, &spare)? {
                    if to_writer.send(text).is_err() {
                        return Ok(()); // the writer failed: its error is the result
                    }
                }
            }
            Ok(())
        })();
        drop(to_writer);
        let written = writer
            .join()
            .unwrap_or_else(|_| Err(io::Error::other("the writer thread panicked")));
        written.and(encoding)
    })
}

/// At most this many threads encode one batch.
const MAX_ENCODERS: usize = 8;

/// Batches with fewer rows are encoded on one thread.
const ROWS_PER_ENCODER: usize = 16 * 1024;

/// `batch` as text, in runs of rows encoded side by side (see [`write_table`]); buffers come
/// from `spare` when the writer has handed some back.
fn encode_text(
    encoder: &text::TextEncoder,
    batch: &RecordBatch,
    encoders: usize,
    spare: &mpsc::Receiver<text::TextBuf>,
) -> io::Result<Vec<text::TextBuf>> {
    let rows = batch.num_rows();
    let runs = (rows / ROWS_PER_ENCODER).clamp(1, encoders);
    let per_run = rows.div_ceil(runs);
    let spare_text = || {
        let mut text = spare.try_recv().unwrap_or_default();
        text.clear();
        text
    };
    let encode = |run: usize, mut text: text::TextBuf| -> io::Result<text::TextBuf> {
        let start = (run * per_run).min(rows);
        let len = per_run.min(rows - start);
        encoder.encode(&batch.slice(start, len), &mut text)?;
        Ok(text)
    };
    let mut texts = Vec::with_capacity(runs);
    std::thread::scope(|scope| -> io::Result<()> {
        let others: Vec<_> = (1..runs)
            .map(|run| {
                let text = spare_text();
                let thread = std::thread::Builder::new().name("soma-encode".into());
                thread.spawn_scoped(scope, move || encode(run, text)).ok()
            })
            .collect();
        texts.push(encode(0, spare_text())?);
        for (i, other) in others.into_iter().enumerate() {
            texts.push(match other {
                Some(thread) => thread
                    .join()
                    .unwrap_or_else(|_| Err(io::Error::other("an encoder thread panicked")))?,
                // Its thread could not start: encoded here.
                None => encode(i + 1, text::TextBuf::default())?,
            });
        }
        Ok(())
    })?;
    Ok(texts)
}
