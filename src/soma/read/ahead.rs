//! Reading ahead on threads of their own: the runs after the current one of a band-sorted
//! read ([`NextRun`]), and a whole reader one batch ahead of its consumer ([`ReadAhead`]).
//! Dropping either stops its thread at its next batch and waits for it: no query outlives
//! its reader, and a thread that dies is an error for its consumer, never an early end.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::Arc;

use arrow_array::RecordBatch;
use arrow_schema::SchemaRef;

use crate::tiledb::{self, ReadQuery};

use super::arrow::ArrowBatches;
use super::batches::BatchReader;
use super::spans::KeptRows;
use crate::soma::error::{Error, Result};

/// Runs of a band-sorted read that read ahead while an earlier run is handed out.
pub(super) const RUNS_AHEAD: usize = 2;

/// The batches a run reads ahead before its turn: over a network, each is a round trip its
/// turn does not wait for; each is also read for nothing when the reader stops early (a
/// `head`), so one.
pub(super) const BATCHES_AHEAD: usize = 1;

/// A query of a read, and the rows of its span it keeps when it reads its run's span.
pub(super) struct RunQuery {
    pub(super) query: ReadQuery,
    pub(super) kept: Option<KeptRows>,
}

/// What a run read ahead holds when its turn comes: its first batches, and whether its
/// query returned everything.
pub(super) struct RunAhead {
    pub(super) batches: VecDeque<RecordBatch>,
    pub(super) ended: bool,
}

/// A run's query reading ahead on a thread of its own: its batches, as record batches of
/// the rows it keeps, until they hold a batch's bytes (a run that reads a span keeps a few
/// of its rows, so it reads on for many batches of libtiledb's, and two runs' queries
/// decompress tiles at once; otherwise it stops at its first batch). Dropping it stops the
/// thread at its next batch and waits for it: no query outlives its reader.
pub(super) struct NextRun {
    pub(super) reading: Option<std::thread::JoinHandle<(RunQuery, Result<RunAhead>)>>,
    /// Set when the reader goes away before the run's turn.
    pub(super) stop: Arc<AtomicBool>,
}

impl NextRun {
    pub(super) fn start(
        mut query: RunQuery,
        arrow: Arc<ArrowBatches>,
        batch_bytes: usize,
    ) -> std::io::Result<NextRun> {
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = stop.clone();
        let reading = std::thread::Builder::new()
            .name("soma-read-next".into())
            .spawn(move || {
                let ahead = crate::sync::catch_panic(|| {
                    let mut ahead = RunAhead {
                        batches: VecDeque::new(),
                        ended: false,
                    };
                    let mut held = 0;
                    while held < BATCHES_AHEAD * batch_bytes && !stopped.load(Ordering::Relaxed) {
                        let Some(batch) = query.query.next_batch()? else {
                            ahead.ended = true;
                            break;
                        };
                        let batch = arrow.record_batch(batch, query.kept.as_ref())?;
                        held += batch.get_array_memory_size();
                        ahead.batches.push_back(batch);
                    }
                    Ok(ahead)
                })
                .unwrap_or_else(|panic| Err(Error::from(tiledb::Error::new(panic))));
                (query, ahead)
            })?;
        Ok(NextRun {
            reading: Some(reading),
            stop,
        })
    }

    /// The query and what it read ahead.
    pub(super) fn join(mut self) -> Result<(RunQuery, RunAhead)> {
        let reading = self.reading.take().expect("joined once");
        let (query, ahead) = reading
            .join()
            .map_err(|_| Error::invalid("the thread reading the next run died"))?;
        Ok((query, ahead?))
    }
}

impl Drop for NextRun {
    fn drop(&mut self) {
        if let Some(reading) = self.reading.take() {
            self.stop.store(true, Ordering::Relaxed);
            let _ = reading.join();
        }
    }
}

/// A reader running on its own thread, one batch ahead of its consumer: reading and
/// encoding overlap. Dropping it stops the reader at its next batch and waits for that (a
/// query under way finishes its batch first): whoever drops it knows the read is over.
///
/// The thread says where the read ends: its last message is the end or an error. A thread
/// that panics sends its panic as an error, and a channel that closes without either (a
/// thread that died some other way) is an error for the consumer too, never the end.
pub struct ReadAhead {
    pub(super) batches: mpsc::Receiver<Result<Option<RecordBatch>>>,
    pub(super) schema: SchemaRef,
    pub(super) reader: Option<std::thread::JoinHandle<()>>,
    pub(super) ended: bool,
}

impl ReadAhead {
    pub fn start(mut reader: BatchReader) -> std::io::Result<ReadAhead> {
        let schema = reader.schema();
        let (tx, rx) = mpsc::sync_channel(1);
        let reader = std::thread::Builder::new()
            .name("soma-read".into())
            .spawn(move || loop {
                let next = crate::sync::catch_panic(|| {
                    let next = reader.next_batch();
                    crate::fault::pass(crate::fault::Point::Read);
                    next
                })
                .unwrap_or_else(|panic| Err(Error::invalid(panic)));
                let last = !matches!(next, Ok(Some(_)));
                if tx.send(next).is_err() || last {
                    return;
                }
            })?;
        Ok(ReadAhead {
            batches: rx,
            schema,
            reader: Some(reader),
            ended: false,
        })
    }

    pub fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    /// The next batch, `None` at the end.
    pub fn next_batch(&mut self) -> Result<Option<RecordBatch>> {
        if self.ended {
            return Ok(None);
        }
        let next = self.batches.recv().unwrap_or_else(|_| {
            Err(Error::invalid(
                "the read thread stopped before the end of the data",
            ))
        });
        self.ended = !matches!(next, Ok(Some(_)));
        next
    }
}

impl Drop for ReadAhead {
    fn drop(&mut self) {
        // The receiving end goes first: a reader waiting to hand over a batch, or done with
        // the one it reads, finds no one to take it and returns.
        let (_, nobody) = mpsc::sync_channel(0);
        drop(std::mem::replace(&mut self.batches, nobody));
        if let Some(reader) = self.reader.take() {
            let _ = reader.join();
        }
    }
}
