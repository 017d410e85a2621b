//! Rendering: SOMA objects and Arrow record batches to the bytes of the files soma-mount
//! shows. Each submodule renders one kind of file and knows nothing of FUSE: the JSON
//! documents ([`json`]), CSV, TSV and JSON Lines ([`text`]), Parquet ([`parquet`]),
//! NumPy `.npy` ([`npy`]) and anndata's h5ad ([`h5ad`]).

pub mod anndata;
pub mod h5ad;
pub mod json;
pub mod mtx;
pub mod npy;
pub mod parquet;
pub mod parquet_sized;
pub mod png;
pub mod tenx_h5;
pub mod text;
pub mod zarr;

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

    /// A rough size in bytes of one row, to decide whether a file is small. A column's text
    /// counts `text_widths[i]` bytes where that is known (an integer index column's widest
    /// number, from the bounds of the stored cells), else 8 for a number and 16 for anything
    /// else; Parquet counts half the default, whatever the text.
    pub fn estimated_row_bytes(
        self,
        schema: &arrow_schema::Schema,
        text_widths: &[Option<u64>],
    ) -> u64 {
        let values: u64 = schema
            .fields()
            .iter()
            .enumerate()
            .map(|(i, f)| {
                let width: u64 = if f.data_type().is_primitive() { 8 } else { 16 };
                let text = text_widths.get(i).copied().flatten().unwrap_or(width);
                match self {
                    TableFormat::Jsonl => text + f.name().len() as u64 + 4,
                    TableFormat::Parquet => width / 2,
                    _ => text + 1,
                }
            })
            .sum();
        values.max(1)
    }
}

/// Writes a whole table: `schema`'s rows, batch by batch from `next_batch`, to `out`.
/// The header (CSV, TSV) is written before the first batch is read, so readers see it at once.
///
/// Text is encoded on every core. Batches are cut into pieces of about [`PIECE_BYTES`] of
/// text, dealt in turn to one encoder per core; a writer thread takes the encoded pieces
/// back in the same turn, writes them, and hands each buffer back to its encoder. So the
/// text in flight is a few pieces per core: it stays in the caches, its memory is reused
/// rather than faulted in afresh, and the last piece of a batch is written while the others
/// are still encoded. A failed write (a reader that went away) stops the encoders, and with
/// them the reading.
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
    let piece_rows = (PIECE_BYTES / format.estimated_row_bytes(&schema, &[])).max(1) as usize;
    let encoders = std::thread::available_parallelism().map_or(1, |n| n.get().min(MAX_ENCODERS));
    std::thread::scope(|scope| {
        let mut lanes = Vec::with_capacity(encoders);
        let mut encoded = Vec::with_capacity(encoders);
        for _ in 0..encoders {
            let (lane, to_writer, writer_end) = new_lane();
            let (to_encoder, pieces) = mpsc::sync_channel::<RecordBatch>(1);
            let encoder = &encoder;
            let thread = std::thread::Builder::new()
                .name("soma-encode".into())
                .spawn_scoped(scope, move || lane.run(encoder, pieces, to_writer));
            match thread {
                Ok(thread) => {
                    lanes.push(LaneEnd::Thread(to_encoder, thread));
                    encoded.push(writer_end);
                }
                Err(_) => {
                    // Its thread could not start: its pieces are encoded here.
                    let (lane, to_writer, writer_end) = new_lane();
                    lanes.push(LaneEnd::Here(lane, to_writer));
                    encoded.push(writer_end);
                }
            }
        }
        let writer = std::thread::Builder::new()
            .name("soma-write".into())
            .spawn_scoped(scope, move || write_in_turn(encoded, out))?;
        let reading = (|| -> io::Result<()> {
            let mut turn = (0..lanes.len()).cycle();
            while let Some(batch) = next_batch()? {
                for start in (0..batch.num_rows()).step_by(piece_rows) {
                    let piece = batch.slice(start, piece_rows.min(batch.num_rows() - start));
                    let lane = &mut lanes[turn.next().expect("a cycle never ends")];
                    let sent = match lane {
                        LaneEnd::Thread(to_encoder, _) => to_encoder.send(piece).is_ok(),
                        LaneEnd::Here(lane, to_writer) => {
                            to_writer.send(lane.encode(&encoder, &piece)).is_ok()
                        }
                    };
                    if !sent {
                        return Ok(()); // the writer failed: its error is the result
                    }
                }
            }
            Ok(())
        })();
        // Every sender goes first (encoders and the writer see the end), then the joins.
        let threads: Vec<_> = lanes
            .into_iter()
            .filter_map(|lane| match lane {
                LaneEnd::Thread(_, thread) => Some(thread),
                LaneEnd::Here(..) => None,
            })
            .collect();
        let panicked = threads.into_iter().any(|thread| thread.join().is_err());
        let written = writer
            .join()
            .unwrap_or_else(|_| Err(io::Error::other("the writer thread panicked")));
        if panicked {
            return Err(io::Error::other("a text encoder thread panicked"));
        }
        written.and(reading)
    })
}

/// About this many bytes of text are encoded as one piece (see [`write_table`]).
const PIECE_BYTES: u64 = 256 << 10;

/// At most this many threads encode text.
const MAX_ENCODERS: usize = 8;

/// The text of a piece, as an encoder hands it to the writer.
type Encoded = io::Result<text::TextBuf>;

/// The writer's end of a lane: encoded pieces come in, their buffers go back.
type WriterEnd = (mpsc::Receiver<Encoded>, mpsc::Sender<text::TextBuf>);

/// A new lane: its encoder's state, where the encoder sends text, and the writer's end.
fn new_lane() -> (Lane, mpsc::SyncSender<Encoded>, WriterEnd) {
    let (to_writer, texts) = mpsc::sync_channel(1);
    let (recycle, spare) = mpsc::channel();
    (Lane::new(spare), to_writer, (texts, recycle))
}

/// One encoder's state: the buffers the writer handed back, and what it keeps between pieces.
struct Lane {
    spare: mpsc::Receiver<text::TextBuf>,
    scratch: text::Scratch,
}

impl Lane {
    fn new(spare: mpsc::Receiver<text::TextBuf>) -> Lane {
        Lane {
            spare,
            scratch: text::Scratch::default(),
        }
    }

    /// An encoder thread: encodes pieces until there are no more, or the writer is gone.
    fn run(
        mut self,
        encoder: &text::TextEncoder,
        pieces: mpsc::Receiver<RecordBatch>,
        to_writer: mpsc::SyncSender<Encoded>,
    ) {
        for piece in pieces {
            let text = crate::sync::catch_panic(|| {
                crate::fault::pass(crate::fault::Point::Encode);
                self.encode(encoder, &piece)
            })
            .unwrap_or_else(|panic| Err(io::Error::other(panic)));
            let failed = text.is_err();
            if to_writer.send(text).is_err() || failed {
                return;
            }
        }
    }

    /// `piece` as text, in a buffer handed back when there is one.
    fn encode(&mut self, encoder: &text::TextEncoder, piece: &RecordBatch) -> Encoded {
        let mut text = self.spare.try_recv().unwrap_or_default();
        text.clear();
        encoder.encode(piece, &mut text, &mut self.scratch)?;
        Ok(text)
    }
}

/// Where the reading loop sends a lane's pieces.
enum LaneEnd<'scope> {
    /// To its encoder thread.
    Thread(
        mpsc::SyncSender<RecordBatch>,
        std::thread::ScopedJoinHandle<'scope, ()>,
    ),
    /// Nowhere: the loop encodes them itself and sends the text to the writer.
    Here(Lane, mpsc::SyncSender<Encoded>),
}

/// The writer thread: takes pieces from the lanes in turn (the order they were dealt in),
/// writes them and hands their buffers back, until a lane has no more; fails at the first
/// error, its own or an encoder's.
fn write_in_turn<W: Write>(lanes: Vec<WriterEnd>, mut out: W) -> io::Result<()> {
    for (texts, recycle) in lanes.iter().cycle() {
        let Ok(text) = texts.recv() else {
            break; // no more pieces
        };
        let text = text?;
        out.write_all(text.as_bytes())?;
        let _ = recycle.send(text);
    }
    out.flush()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    use arrow_array::{Float32Array, Int64Array, LargeStringArray};
    use arrow_schema::{DataType, Field, Schema};

    /// Batches of `rows` rows each: an id, a float and a string, all different per row.
    fn batches(rows: usize) -> (SchemaRef, impl FnMut(usize) -> RecordBatch) {
        let schema = Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, false),
            Field::new("x", DataType::Float32, false),
            Field::new("s", DataType::LargeUtf8, false),
        ]));
        let batch_schema = schema.clone();
        let make = move |n: usize| {
            let ids: Vec<i64> = (0..rows as i64).map(|i| (n * rows) as i64 + i).collect();
            RecordBatch::try_new(
                batch_schema.clone(),
                vec![
                    Arc::new(Int64Array::from(ids.clone())),
                    Arc::new(Float32Array::from_iter_values(
                        ids.iter().map(|&i| i as f32 / 7.0),
                    )),
                    Arc::new(LargeStringArray::from_iter_values(
                        ids.iter().map(|i| format!("r{i}")),
                    )),
                ],
            )
            .unwrap()
        };
        (schema, make)
    }

    #[test]
    fn pieces_are_written_in_table_order() {
        // Several batches, each of many pieces, spread over every encoder.
        let (schema, mut make) = batches(50_000);
        let mut n = 0;
        let mut out = Vec::new();
        let next = || {
            n += 1;
            Ok((n <= 5).then(|| make(n - 1)))
        };
        write_table(TableFormat::Csv, schema, next, &mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        let mut lines = text.lines();
        assert_eq!(lines.next(), Some("id,x,s"));
        let mut count = 0;
        for (i, line) in lines.enumerate() {
            let want = format!("{i},{},r{i}", text::float_text(i as f32 / 7.0));
            assert_eq!(line, want);
            count += 1;
        }
        assert_eq!(count, 250_000);
    }

    /// A destination that refuses every write after `limit` bytes, as a reader that went away.
    struct Closing {
        written: usize,
        limit: usize,
    }

    impl Write for Closing {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            if self.written + buf.len() > self.limit {
                return Err(io::Error::from(io::ErrorKind::BrokenPipe));
            }
            self.written += buf.len();
            Ok(buf.len())
        }

        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_failed_write_stops_the_reading() {
        let (schema, mut make) = batches(10_000);
        let mut read = 0;
        let next = || {
            read += 1;
            Ok(Some(make(read))) // endless
        };
        let out = Closing {
            written: 0,
            limit: 1 << 20,
        };
        let err = write_table(TableFormat::Csv, schema, next, out).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::BrokenPipe);
        assert!(read < 100, "read {read} batches after the write failed");
    }

    #[test]
    fn a_failed_read_is_the_result() {
        let (schema, mut make) = batches(1_000);
        let mut read = 0;
        let next = || {
            read += 1;
            match read {
                1..=3 => Ok(Some(make(read))),
                _ => Err(io::Error::other("the store went away")),
            }
        };
        let mut out = Vec::new();
        let err = write_table(TableFormat::Jsonl, schema, next, &mut out).unwrap_err();
        assert_eq!(err.to_string(), "the store went away");
        assert_eq!(String::from_utf8(out).unwrap().lines().count(), 3_000);
    }
}
