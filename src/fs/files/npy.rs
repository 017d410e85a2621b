//! `data.npy` of a dense array with a numeric value column: NumPy's format in C order. Its
//! size follows from the schema, and a read of any byte range reads only the rows behind it
//! (whole tiles of the first dimension), so `numpy.load(..., mmap_mode="r")` reads only
//! what is sliced.

use std::io;
use std::sync::{Arc, Mutex};

use crate::format::npy;
use crate::soma::{dense_values, ArrayObject};
use crate::sync::Recover;

use super::super::error::{FsError, FsResult};
use super::super::open_file::{OpenFile, ReadAt};
use super::{FileContext, FileKind};

/// The `.npy` of a dense array with a numeric value column: header, item size and shape.
fn npy_layout(array: &ArrayObject) -> Option<(Vec<u8>, u64, Vec<u64>)> {
    if !array.schema.dense {
        return None;
    }
    let shape = array.schema.shape.clone()?;
    let values = array.schema.columns.iter().rfind(|c| !c.is_index)?;
    let (descr, size) = npy::dtype(&values.arrow_type)?;
    Some((npy::header(descr, &shape), size as u64, shape))
}

/// `data.npy` of a dense array.
#[derive(Debug)]
pub struct NpyFile {
    array: Arc<ArrayObject>,
}

impl NpyFile {
    /// The file of `array`, if it has one (dense, with a numeric value column).
    pub fn of(array: &Arc<ArrayObject>) -> Option<NpyFile> {
        npy_layout(array).map(|_| NpyFile {
            array: array.clone(),
        })
    }
}

impl FileKind for NpyFile {
    fn size(&self, _cx: &FileContext) -> FsResult<Option<u64>> {
        let (header, item, shape) = npy_layout(&self.array).ok_or(FsError::NotFound)?;
        Ok(Some(
            header.len() as u64 + shape.iter().product::<u64>() * item,
        ))
    }

    fn open(&self, _cx: &FileContext) -> FsResult<OpenFile> {
        let (header, item, shape) = npy_layout(&self.array).ok_or(FsError::NotFound)?;
        let reader = NpyReader::new(self.array.clone(), header, item, shape);
        Ok(OpenFile::Ranges(Box::new(reader)))
    }
}

/// An open `.npy`: the header, then values in C order read on demand.
struct NpyReader {
    array: Arc<ArrayObject>,
    header: Vec<u8>,
    item_size: u64,
    shape: Vec<u64>,
    /// The tile extent of the first dimension, in rows.
    tile_rows: u64,
    /// The rows of the first dimension read last: (first row, their bytes).
    last_rows: Mutex<Option<(u64, Arc<Vec<u8>>)>>,
    /// Held while reading: one read at a time, so that a reader that waited may find its
    /// rows read by the one before it.
    reading: Mutex<()>,
}

/// At least this many bytes of rows are read per query, for sequential readers.
const NPY_MIN_READ_BYTES: u64 = 1 << 20;

impl NpyReader {
    fn new(array: Arc<ArrayObject>, header: Vec<u8>, item_size: u64, shape: Vec<u64>) -> Self {
        let tile_rows = array
            .schema
            .first_tile_extent()
            .map_or(1, |extent| extent as u64);
        NpyReader {
            array,
            header,
            item_size,
            shape,
            tile_rows,
            last_rows: Mutex::new(None),
            reading: Mutex::new(()),
        }
    }

    /// The whole file's size: header and every cell.
    fn size(&self) -> u64 {
        self.header.len() as u64 + self.shape.iter().product::<u64>() * self.item_size
    }

    /// Rows starting at or before `row` covering data bytes up to `data_end`, from the last
    /// read when it has them, else from a new dense read.
    fn rows_from(&self, row: u64, data_end: u64) -> io::Result<(u64, Arc<Vec<u8>>)> {
        let row_bytes = self.shape.iter().skip(1).product::<u64>() * self.item_size;
        let held = || {
            let last = self.last_rows.lock().recover();
            last.as_ref()
                .filter(|(first, bytes)| {
                    row >= *first && row < first + bytes.len() as u64 / row_bytes
                })
                .cloned()
        };
        if let Some(rows) = held() {
            return Ok(rows);
        }
        let _reading = self.reading.lock().recover();
        if let Some(rows) = held() {
            return Ok(rows);
        }
        // Whole tiles of the first dimension: libtiledb decompresses whole tiles anyway, so
        // a read that stops inside one would pay for it again on the next read.
        let extent = self.tile_rows.max(1);
        let first = row - row % extent;
        let wanted_rows = data_end.div_ceil(row_bytes).saturating_sub(first);
        let min_rows = NPY_MIN_READ_BYTES.div_ceil(row_bytes);
        let rows = wanted_rows.max(min_rows).div_ceil(extent) * extent;
        let last_row = (first + rows).min(self.shape[0]) - 1;
        let bytes = dense_values(&self.array, Some((first, last_row)))?;
        let bytes = Arc::new(bytes);
        *self.last_rows.lock().recover() = Some((first, bytes.clone()));
        Ok((first, bytes))
    }
}

impl ReadAt for NpyReader {
    fn read_at(&self, offset: u64, size: u32) -> io::Result<Vec<u8>> {
        let end = offset.saturating_add(u64::from(size)).min(self.size());
        let header_len = self.header.len() as u64;
        let mut out = Vec::with_capacity(end.saturating_sub(offset) as usize);
        let mut pos = offset;
        if pos < header_len.min(end) {
            out.extend_from_slice(&self.header[pos as usize..header_len.min(end) as usize]);
            pos = header_len.min(end);
        }
        let row_bytes = self.shape.iter().skip(1).product::<u64>() * self.item_size;
        while pos < end && row_bytes > 0 {
            let data_pos = pos - header_len;
            let row = data_pos / row_bytes;
            let (first, rows) = self.rows_from(row, end - header_len)?;
            let skip = (data_pos - first * row_bytes) as usize;
            let take = ((end - pos) as usize).min(rows.len().saturating_sub(skip));
            if take == 0 {
                return Err(io::Error::other(
                    "dense read returned fewer cells than the shape",
                ));
            }
            out.extend_from_slice(&rows[skip..skip + take]);
            pos += take as u64;
        }
        Ok(out)
    }
}
