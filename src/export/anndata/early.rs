//! The reads an h5ad's generation starts ahead of their turn, each on a thread of the
//! generation's scope: a small obs or var read whole from the start ([`FrameRead`]), and
//! the small elements after X (sparse matrices and uns arrays, [`EarlyReads`]) read while
//! obs, var and X are written. Over object storage each read costs a few round trips, so
//! they overlap rather than wait for their turn. What they hold is bounded by their
//! estimates, not taken from the memory budget: their readers take their shares from it,
//! and holding a share while the file waits for them could leave a reader of X waiting for
//! memory that never comes.

use std::collections::HashMap;
use std::io;
use std::thread::{Scope, ScopedJoinHandle};

use arrow_array::{ArrayRef, RecordBatch};

use crate::soma::anndata::{
    self, Along, AnnDataElements, FrameElement, FrameRows, MatrixElement, UnsElement, AT_ONCE,
};
use crate::soma::ArrayObject;
use crate::sync::map_at_once;

use super::{array_bytes, frame_index, matrix_type, scan_frame, uns_arrays};

/// Elements read early, by array URI.
pub type ReadEarly<T> = HashMap<String, io::Result<T>>;

/// A matrix's cells as read: (row ids, column ids, values) a batch at a time.
pub type HeldCells = Vec<(Vec<i64>, Vec<i64>, ArrayRef)>;

/// The small elements after X (the sparse matrices of `layers`, `obsp` and `varp`, and
/// uns's arrays), read all at once on threads of their own while obs, var and X are
/// written (the dense matrices are written beside X,
/// [`super::matrices::DenseMatrices`]). An element is read early when it is estimated at
/// [`EARLY_READ_BYTES`] or less, as long as those chosen come to [`EARLY_READS_BYTES`] at
/// most; the others are read when their turn comes, streamed as X is.
pub struct EarlyReads<'a> {
    matrices: Vec<&'a MatrixElement>,
    uns: Vec<&'a ArrayObject>,
}

/// The most an element read early is estimated at.
pub const EARLY_READ_BYTES: u64 = 4 << 20;

/// The most the elements read early are estimated at, together.
pub const EARLY_READS_BYTES: u64 = 32 << 20;

impl<'a> EarlyReads<'a> {
    /// The elements of `e` read early.
    pub fn choose(e: &'a AnnDataElements) -> EarlyReads<'a> {
        let mut left = EARLY_READS_BYTES;
        let mut fits = |array: &ArrayObject| match array_bytes(array) {
            Ok(bytes) if bytes <= EARLY_READ_BYTES && bytes <= left => {
                left -= bytes;
                true
            }
            _ => false,
        };
        let mut uns = Vec::new();
        if let Some(collection) = e.uns() {
            uns_arrays(collection, &mut uns);
        }
        uns.retain(|array| fits(array));
        // Dense matrices are written beside X as they are read.
        let sparse = |m: &&MatrixElement| matches!(matrix_type(&m.array, m.layout), Ok((_, false)));
        let matrices = (e.mappings.iter())
            .flat_map(|mapping| &mapping.members)
            .filter(sparse)
            .filter(|matrix| fits(&matrix.array))
            .collect();
        EarlyReads { matrices, uns }
    }

    /// Reads the matrices, those along obs in the rows `obs_rows` only (all when `None`).
    pub fn read_matrices(&self, obs_rows: Option<&[(i64, i64)]>) -> ReadEarly<HeldCells> {
        let read = |matrix: &&MatrixElement| {
            let mut held = HeldCells::new();
            let only = obs_rows.filter(|_| matrix.rows == Along::Obs);
            let cells = anndata::read_cells(&matrix.array, only, |rows, cols, values| {
                held.push((rows.to_vec(), cols.to_vec(), values.clone()));
                Ok(())
            });
            (
                matrix.array.uri.clone(),
                cells.map(|_| held).map_err(io::Error::other),
            )
        };
        map_at_once(&self.matrices, AT_ONCE, read)
            .into_iter()
            .collect()
    }

    /// Reads the uns arrays.
    pub fn read_uns(&self) -> ReadEarly<UnsElement> {
        let read = |array: &&ArrayObject| (array.uri.clone(), anndata::uns_element(array));
        map_at_once(&self.uns, AT_ONCE, read).into_iter().collect()
    }
}

/// obs or var, as the file reads it: its first pass ([`scan_frame`]) and then its rows.
///
/// A small frame (estimated at [`EARLY_FRAME_BYTES`] or less) has both read at once, on
/// threads of their own from the start of the file's generation, its rows held until they
/// are written: obs's first pass, obs's rows and var's two reads then overlap. A larger
/// frame is read in its turn, its rows streamed into the file.
pub struct FrameRead<'s, 'a> {
    pub frame: &'a FrameElement,
    /// Its first pass and its rows, being read; `None`: read in turn.
    early: Option<(Reading<'s, FrameRows>, Reading<'s, Vec<RecordBatch>>)>,
}

/// A read on a thread of the file's generation.
type Reading<'s, T> = ScopedJoinHandle<'s, io::Result<T>>;

/// The most a frame read at once is estimated at.
pub const EARLY_FRAME_BYTES: u64 = 16 << 20;

impl<'s, 'a: 's> FrameRead<'s, 'a> {
    /// Starts reading `frame` in `scope` when it is small.
    pub fn start<'e>(scope: &'s Scope<'s, 'e>, frame: &'a FrameElement) -> FrameRead<'s, 'a> {
        let small = matches!(array_bytes(&frame.array), Ok(bytes) if bytes <= EARLY_FRAME_BYTES);
        let early = small.then(|| {
            let scan = scope.spawn(|| scan_frame(&frame.array, &frame.rows, &frame_index(frame)));
            let rows = scope.spawn(|| {
                let mut held = Vec::new();
                anndata::read_rows(&frame.array, &frame.rows, |batch| {
                    held.push(batch.clone());
                    Ok(())
                })?;
                Ok(held)
            });
            (scan, rows)
        });
        FrameRead { frame, early }
    }

    /// What its first pass found (made now when the frame is read in turn), and its rows
    /// when they were read early (`None`: they are read as they are written).
    pub fn scanned(self) -> io::Result<(FrameRows, Option<Vec<RecordBatch>>)> {
        match self.early {
            Some((scan, rows)) => Ok((join_scoped(scan)?, Some(join_scoped(rows)?))),
            None => {
                let frame = self.frame;
                let scanned = scan_frame(&frame.array, &frame.rows, &frame_index(frame))?;
                Ok((scanned, None))
            }
        }
    }
}

/// What a thread of the generation returned (its panic goes on in the joining thread).
pub fn join_scoped<T>(thread: ScopedJoinHandle<'_, T>) -> T {
    thread
        .join()
        .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
}

/// What a thread of early reads read; none when it died (each element is then read in turn).
pub fn join_reads<T>(reading: ScopedJoinHandle<'_, ReadEarly<T>>) -> ReadEarly<T> {
    reading.join().unwrap_or_default()
}
