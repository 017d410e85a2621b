//! `anndata/<measurement>.zarr/`: a measurement of an experiment as an AnnData Zarr store
//! (Zarr format 2), equal to what tiledbsoma's `to_anndata` reads, as the h5ad is: obs and
//! var as data frames, X from the first layer and every other layer under `layers`, obsm
//! and varm dense, obsp and varp as CSR matrices, and uns. Its groups and arrays are
//! directories; their `.zgroup`, `.zarray` and `.zattrs`, and the store's consolidated
//! `.zmetadata`, are made when the store is first listed; each chunk is a file read from
//! TileDB only when opened, and only the rows behind it are read.
//!
//! What the store holds is decided where the h5ad's is ([`super::h5ad`], and
//! [`crate::format::anndata`] for encodings); the bytes are [`crate::format::zarr`]'s. A
//! chunk of numbers or booleans has its exact size from the start (chunks are uncompressed
//! and padded); a chunk of text has size 0 until it is generated. Every chunk is generated
//! whole into the cache when opened (a text chunk also by a `stat` with `--exact-sizes`).
//!
//! Making the metadata needs the rows of obs and var (their join ids, and whether the
//! columns encoded by it hold a null: integers, booleans and texts, counted by libtiledb
//! without reading their values where it can; no other column is read), the shape of each
//! uns array (from its schema and cell count: the values of them all are read when a chunk
//! of one is opened; an uns data frame is read whole) and each
//! CSR matrix's number of entries (the length of `data` and `indices`), which the array's
//! fragments tell when no two of them share a row and every cell is on obs and var
//! ([`anndata::row_blocks`]): the usual store is listed without reading a matrix. Its rows
//! then fall in blocks, one per fragment, whose entries are known; a block's entries per
//! row (what `indptr` holds) are counted from the coordinates alone
//! ([`anndata::row_counts`]) when a chunk first needs one of its rows or entries, once per
//! array snapshot, and kept in the cache, so that a daemon started again on the same cache
//! does not count them again. A matrix whose fragments cannot tell is counted whole, as one
//! block, when listed. A chunk of `indptr` (8,192 rows) counts only the blocks its rows
//! fall in, and a chunk of `data` or `indices` reads only the rows that hold its entries.

use std::collections::VecDeque;
use std::io;
use std::ops::Range;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};

use arrow_array::cast::AsArray;
use arrow_array::types::Int64Type;
use arrow_array::{Array as _, ArrayRef, BooleanArray, Int64Array, RecordBatch};
use arrow_schema::DataType;
use log::warn;
use serde_json::{json, Map, Value as Json};

use crate::format::anndata::{is_text, ColumnEncoding, ColumnSpec, Encoding};
use crate::format::h5ad::FrameIndex;
use crate::format::zarr::{self, ArrayMeta, Dtype};
use crate::soma::anndata::csr::{self, EntryBlock, EntryBlocks};
use crate::soma::anndata::{
    self, Along, AnnDataElements, Axis, FrameRows, Layout, MatrixColumns, MatrixElement,
    UnsCollection, UnsMember,
};
use crate::soma::joinids::Positions;
use crate::soma::ArrayObject;
use crate::sync::{at_once, map_at_once, Recover, SingleFlight};

use super::super::cache::{CacheKey, ContentCache};
use super::super::data::{generate_whole, open_generated};
use super::super::error::FsResult;
use super::super::names::file_name;
use super::super::open_file::OpenFile;
use super::anndata::{
    frame_columns, frame_index, matrix_type, measurement_key, scan_frame, uns_array_layout,
    uns_element, uns_value, UnsElement,
};
use super::{FileContext, FileKind};

/// A measurement as an AnnData Zarr store; its tree is made when first asked for.
pub struct ZarrStore {
    origin: Arc<Origin>,
    root: OnceLock<Result<Arc<ZarrGroup>, String>>,
}

/// What a store is made from, which its arrays share (an array that held the store would
/// keep it, and the tree that holds the array, alive for ever).
struct Origin {
    elements: AnnDataElements,
    /// Where the entries per row of its CSR matrices are kept, with the chunks.
    cache: Arc<ContentCache>,
    /// Its uns arrays laid out from their schemas, read together.
    uns: UnsTogether,
}

impl Origin {
    fn what(&self) -> String {
        let (obs, m) = (
            &self.elements.obs.array.uri,
            &self.elements.measurement.name,
        );
        format!("{obs} measurement {m} as zarr")
    }
}

/// A group of the store: its attributes and members (the root also has the consolidated
/// metadata of the whole store).
#[derive(Debug)]
pub struct ZarrGroup {
    pub attrs: Map<String, Json>,
    pub members: Vec<(String, ZarrNode)>,
    pub consolidated: Option<Arc<[u8]>>,
}

#[derive(Debug, Clone)]
pub enum ZarrNode {
    Group(Arc<ZarrGroup>),
    Array(Arc<ZarrArray>),
}

/// An array of the store: its `.zarray`, its attributes, and where its chunks come from.
#[derive(Debug)]
pub struct ZarrArray {
    pub meta: ArrayMeta,
    pub attrs: Map<String, Json>,
    content: Content,
    /// Where it is in the store (for cache keys and messages).
    path: String,
    origin: Arc<Origin>,
}

impl std::fmt::Debug for ZarrStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.origin.fmt(f)
    }
}

impl std::fmt::Debug for Origin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.what())
    }
}

impl ZarrStore {
    /// The store of a measurement's AnnData elements (of all its cells).
    pub fn new(elements: AnnDataElements, cache: Arc<ContentCache>) -> Arc<ZarrStore> {
        Arc::new(ZarrStore {
            origin: Arc::new(Origin {
                elements,
                cache,
                uns: UnsTogether::default(),
            }),
            root: OnceLock::new(),
        })
    }

    /// The root group, made (once) with everything under it.
    pub fn root(self: &Arc<Self>) -> Result<Arc<ZarrGroup>, String> {
        self.root
            .get_or_init(|| {
                let started = std::time::Instant::now();
                let what = self.origin.what();
                let built = build(&self.origin).map(Arc::new).map_err(|e| {
                    warn!("{what}: cannot be made: {e}");
                    format!("{what}: {e}")
                });
                log::debug!("made {what} in {:?}", started.elapsed());
                built
            })
            .clone()
    }
}

/// The document files of a store: `.zgroup`, `.zattrs`, `.zarray`, `.zmetadata`.
#[derive(Debug)]
pub struct ZarrDocument(pub Arc<[u8]>);

impl ZarrDocument {
    pub fn of(value: &Json) -> ZarrDocument {
        ZarrDocument(zarr::document(value).into())
    }
}

impl FileKind for ZarrDocument {
    fn size(&self, _cx: &FileContext) -> FsResult<Option<u64>> {
        Ok(Some(self.0.len() as u64))
    }

    fn open(&self, _cx: &FileContext) -> FsResult<OpenFile> {
        Ok(OpenFile::Bytes(self.0.clone()))
    }
}

/// One chunk file of an array: chunk `k` along its first dimension.
#[derive(Debug)]
pub struct ZarrChunk {
    array: Arc<ZarrArray>,
    k: u64,
    key: CacheKey,
}

impl ZarrChunk {
    pub fn new(array: Arc<ZarrArray>, k: u64) -> ZarrChunk {
        let origin = &array.origin;
        let key = measurement_key("zarr", &origin.elements, |d| {
            d.text(&array.path).number(k);
        });
        ZarrChunk { array, k, key }
    }

    fn what(&self) -> String {
        let name = self.array.meta.chunk_name(self.k);
        format!("{} {}/{name}", self.array.origin.what(), self.array.path)
    }

    /// Generates the chunk whole into the cache.
    fn generate(&self, cx: &FileContext) -> FsResult<()> {
        generate_whole(&cx.options.cache, &self.key, &self.what(), |out| {
            out.write_all(&self.array.chunk(self.k)?)
        })
    }
}

impl FileKind for ZarrChunk {
    fn size(&self, cx: &FileContext) -> FsResult<Option<u64>> {
        match self.array.meta.chunk_size() {
            Some(size) => Ok(Some(size)),
            None => Ok(cx.options.cache.size(&self.key)),
        }
    }

    /// Every chunk is generated whole into the cache when opened (a chunk is small), so that
    /// a reader that opens it again (read_lazy reads obs whole each time) reads no TileDB.
    fn open(&self, cx: &FileContext) -> FsResult<OpenFile> {
        self.generate(cx)?;
        open_generated(&cx.options.cache, &self.key, &self.what())
    }

    /// A chunk of text (the others' sizes follow from their `.zarray`): it is small.
    fn sized_on_stat(&self, _cx: &FileContext) -> bool {
        self.array.meta.chunk_size().is_none()
    }

    fn settle_size(&self, cx: &FileContext) -> FsResult<()> {
        self.generate(cx)
    }
}

// ---------------------------------------------------------------------------------------
// where chunks come from

/// The rows of obs or var: their join ids in order, each at its place.
#[derive(Debug)]
struct AxisRows {
    positions: Positions,
    /// What identifies them: the data frame's snapshot.
    id: String,
}

impl AxisRows {
    /// The rows a first pass over a data frame found (their join ids are taken).
    fn new(frame: &ArrayObject, rows: &mut FrameRows) -> Arc<AxisRows> {
        Arc::new(AxisRows {
            positions: std::mem::take(&mut rows.joinids),
            id: frame.content_id.clone(),
        })
    }
}

/// The columns of a matrix: obs's or var's rows, or plain indices (obsm and varm).
#[derive(Debug, Clone)]
enum Columns {
    Rows(Arc<AxisRows>),
    Indices(usize),
}

/// A matrix read from a two-dimensional array: its rows are obs's or var's.
#[derive(Debug)]
struct MatrixSource {
    array: Arc<ArrayObject>,
    rows: Arc<AxisRows>,
    cols: Columns,
    value_type: DataType,
}

impl MatrixSource {
    fn axes(&self) -> (Axis<'_>, Axis<'_>) {
        let cols = match &self.cols {
            Columns::Rows(rows) => Axis::Joinids(&rows.positions),
            Columns::Indices(n) => Axis::Indices(*n),
        };
        (Axis::Joinids(&self.rows.positions), cols)
    }

    fn axes_id(&self) -> String {
        match &self.cols {
            Columns::Rows(cols) => format!("{}\n{}", self.rows.id, cols.id),
            Columns::Indices(n) => format!("{}\n{n}", self.rows.id),
        }
    }

    /// Visits the cells of the rows `rows` (positions), in order, a batch at a time: the
    /// places (row, column) of the cells on the axes, which of the batch's cells are (the
    /// others are left out), and the batch's values.
    fn cells(
        &self,
        rows: Range<usize>,
        mut visit: impl FnMut(&[(usize, usize)], &[bool], &ArrayRef) -> io::Result<()>,
    ) -> io::Result<()> {
        if rows.is_empty() {
            return Ok(());
        }
        let (row_axis, col_axis) = self.axes();
        let runs = self.rows.positions.runs_at(rows);
        anndata::read_cells(&self.array, Some(&runs), |row_ids, col_ids, values| {
            let mut places = Vec::with_capacity(row_ids.len());
            let mut keep = Vec::with_capacity(row_ids.len());
            for (&r, &c) in row_ids.iter().zip(col_ids) {
                let place = row_axis.at(r).zip(col_axis.at(c));
                keep.push(place.is_some());
                places.extend(place);
            }
            visit(&places, &keep, values)
        })?;
        Ok(())
    }

    /// Values kept (`keep`) and cast to the matrix's value type.
    fn values(&self, values: &ArrayRef, keep: &[bool]) -> io::Result<ArrayRef> {
        let mut values = if keep.iter().all(|&k| k) {
            values.clone()
        } else {
            arrow_select::filter::filter(values, &BooleanArray::from(keep.to_vec()))
                .map_err(io::Error::other)?
        };
        if values.data_type() != &self.value_type {
            values = arrow_cast::cast(&values, &self.value_type).map_err(io::Error::other)?;
        }
        Ok(values)
    }
}

/// A CSR matrix: its source, its rows in blocks of known entries, and its entries read last.
#[derive(Debug)]
struct CsrSource {
    matrix: MatrixSource,
    /// Its rows in blocks, in order.
    blocks: EntryBlocks,
    /// Where the entries per row are kept.
    origin: Arc<Origin>,
    /// The entries read last, the latest first ([`HELD_READS`] at most).
    last: Mutex<VecDeque<Arc<HeldEntries>>>,
    /// Reads under way, by range: a reader of the same entries (`indices` after `data`)
    /// waits for the one reading them and takes its read.
    reading: SingleFlight<Range<u64>, Result<Arc<HeldEntries>, String>>,
}

/// Rows of a CSR matrix's `indptr` in a chunk (64 KiB): a chunk needs the entries per row
/// of the blocks its rows fall in counted, so that a slice of a few rows counts those of a
/// fragment or two rather than of the whole matrix, as chunks of [`zarr::CHUNK_BYTES`]
/// (131,072 rows) would.
const INDPTR_CHUNK_ROWS: u64 = 1 << 13;

/// How many reads of entries a CSR matrix keeps: a reader that reads chunks of `data` and
/// `indices` on several threads asks for a few ranges in turn, each twice.
const HELD_READS: usize = 4;

#[derive(Debug, Clone, Copy)]
enum CsrPart {
    Data,
    Indices,
    Indptr,
}

impl CsrSource {
    /// A CSR matrix of `matrix`: in the blocks of rows its fragments tell the entries of,
    /// else in one block of every row, counted now.
    fn new(matrix: MatrixSource, origin: Arc<Origin>) -> io::Result<CsrSource> {
        let (rows, _) = matrix.axes();
        let place = |joinid: i64| rows.at(joinid);
        let told = anndata::row_blocks(&matrix.array, matrix.axes())?.and_then(|blocks| {
            let mut before = 0;
            blocks
                .into_iter()
                .map(|block| {
                    let (lo, hi) = block.joinids;
                    let places = place(lo)?..place(hi)? + 1;
                    let told = EntryBlock {
                        joinids: Some(block.joinids),
                        places,
                        before,
                        entries: block.entries,
                        offsets: Mutex::new(None),
                    };
                    before += block.entries;
                    Some(told)
                })
                .collect::<Option<Vec<EntryBlock>>>()
        });
        let blocks = match told {
            Some(blocks) => blocks,
            None => {
                let mut every_row = EntryBlock {
                    joinids: None,
                    places: 0..rows.len(),
                    before: 0,
                    entries: 0,
                    offsets: Mutex::new(None),
                };
                let offsets = csr::offsets(0, block_counts(&origin.cache, &matrix, &every_row)?);
                every_row.entries = offsets.last().copied().unwrap_or(0);
                every_row.offsets = Mutex::new(Some(offsets.into()));
                vec![every_row]
            }
        };
        Ok(CsrSource {
            matrix,
            blocks: EntryBlocks(blocks),
            origin,
            last: Mutex::new(VecDeque::new()),
            reading: SingleFlight::default(),
        })
    }

    /// The length of `data` and `indices`.
    fn entries(&self) -> u64 {
        self.blocks.entries()
    }

    /// Where each row of block `b` starts, then where its last ends: counted once, and the
    /// count kept in the cache ([`block_counts`]).
    fn offsets(&self, b: usize) -> io::Result<Arc<[u64]>> {
        let block = &self.blocks.0[b];
        let mut offsets = block.offsets.lock().recover();
        if let Some(known) = &*offsets {
            return Ok(known.clone());
        }
        let counts = block_counts(&self.origin.cache, &self.matrix, block)?;
        let counted = csr::offsets(block.before, counts);
        let end = block.before + block.entries;
        if counted.last() != Some(&end) {
            return Err(io::Error::other(format!(
                "{}: {} entries counted in {:?}, {} in its fragments",
                self.matrix.array.uri,
                counted.last().unwrap_or(&0) - block.before,
                block.joinids,
                block.entries
            )));
        }
        Ok(offsets.insert(counted.into()).clone())
    }

    /// `indptr` at the places `places`: counts only the blocks they fall in.
    fn indptr(&self, places: Range<usize>) -> io::Result<Vec<u64>> {
        // Blocks are counted on this thread, one after the other: a count is kept in the
        // cache as a generation nested in this chunk's, which holds its generation slot;
        // on other threads each would wait for a slot of its own, which the chunks
        // waiting for them may all hold.
        self.blocks.indptr(places, |b| self.offsets(b))
    }

    /// The place of the row that holds entry `entry` (below [`Self::entries`]).
    fn place_of(&self, entry: u64) -> io::Result<usize> {
        self.blocks
            .place_of(entry, |b| self.offsets(b))?
            .ok_or_else(|| io::Error::other(format!("{}: no entry {entry}", self.matrix.array.uri)))
    }

    /// The values or column positions of the entries `entries`. Both are read at once and
    /// kept: a reader that wants one wants the other next.
    fn entries_of(&self, entries: Range<u64>, part: CsrPart) -> io::Result<ArrayRef> {
        let held = || -> Option<Arc<HeldEntries>> {
            let last = self.last.lock().recover();
            last.iter().find(|held| held.entries == entries).cloned()
        };
        let read = match held() {
            Some(read) => read,
            None => self
                .reading
                .run(entries.clone(), || {
                    // A read that ended just before this one's flight began is as good.
                    if let Some(read) = held() {
                        return Ok(read);
                    }
                    let read = Arc::new(
                        self.read_entries(entries.clone())
                            .map_err(|e| e.to_string())?,
                    );
                    let mut last = self.last.lock().recover();
                    last.truncate(HELD_READS - 1);
                    last.push_front(read.clone());
                    Ok(read)
                })
                .map_err(io::Error::other)?,
        };
        Ok(match part {
            CsrPart::Data => read.values.clone(),
            _ => read.columns.clone(),
        })
    }

    fn read_entries(&self, entries: Range<u64>) -> io::Result<HeldEntries> {
        let rows = if entries.is_empty() {
            0..0
        } else {
            self.place_of(entries.start)?..self.place_of(entries.end - 1)? + 1
        };
        let mut at = match rows.is_empty() {
            true => entries.start,
            false => self.indptr(rows.start..rows.start + 1)?[0],
        };
        let mut pieces: Vec<ArrayRef> = Vec::new();
        let mut columns: Vec<i64> = Vec::new();
        self.matrix.cells(rows, |places, keep, values| {
            // The kept entries of this batch that fall in `entries`.
            let first = entries.start.saturating_sub(at).min(places.len() as u64) as usize;
            let last = entries.end.saturating_sub(at).min(places.len() as u64) as usize;
            at += places.len() as u64;
            if first >= last {
                return Ok(());
            }
            let values = self.matrix.values(values, keep)?;
            pieces.push(values.slice(first, last - first));
            columns.extend(places[first..last].iter().map(|&(_, c)| c as i64));
            Ok(())
        })?;
        let pieces: Vec<&dyn arrow_array::Array> = pieces.iter().map(|p| p.as_ref()).collect();
        let values = if pieces.is_empty() {
            arrow_array::new_empty_array(&self.matrix.value_type)
        } else {
            arrow_select::concat::concat(&pieces).map_err(io::Error::other)?
        };
        if values.len() as u64 != entries.end - entries.start {
            return Err(io::Error::other(format!(
                "{}: {} entries read of the {} counted",
                self.matrix.array.uri,
                values.len(),
                entries.end - entries.start
            )));
        }
        Ok(HeldEntries {
            entries,
            values,
            columns: Arc::new(Int64Array::from(columns)),
        })
    }
}

/// The entries per row of `block` of a matrix: from the cache, where they are kept per
/// array snapshot (and obs's and var's) across daemons that share it; else counted, and
/// kept there.
fn block_counts(
    cache: &ContentCache,
    source: &MatrixSource,
    block: &EntryBlock,
) -> io::Result<Vec<u64>> {
    let axes_id = source.axes_id();
    let which = match block.joinids {
        Some((lo, hi)) => format!("rows {lo}-{hi}"),
        None => "every row".to_owned(),
    };
    let key = CacheKey::of(|digest| {
        digest
            .text("entries per row")
            .text(&source.array.content_id)
            .text(&axes_id)
            .text(&which);
    });
    if let Some((file, size)) = cache.open_entry(&key) {
        let mut bytes = Vec::with_capacity(size as usize);
        io::Read::read_to_end(&mut &file, &mut bytes)?;
        let counts: Vec<u64> = bytes
            .chunks_exact(8)
            .map(|b| u64::from_le_bytes(b.try_into().expect("8 bytes")))
            .collect();
        if counts.len() == block.places.len() {
            return Ok(counts);
        }
    }
    let counts = anndata::row_counts(
        &source.array,
        source.axes(),
        block.joinids,
        block.places.clone(),
    )?;
    let what = format!("{}: entries per row of {which}", source.array.uri);
    let kept = generate_whole(cache, &key, &what, |out| {
        counts
            .iter()
            .try_for_each(|count| out.write_all(&count.to_le_bytes()))
    });
    if let Err(e) = kept {
        warn!("{what} cannot be kept in the cache: {e:?}");
    }
    Ok(counts)
}

/// The entries of a CSR matrix read once: their range, values and column positions.
#[derive(Debug)]
struct HeldEntries {
    entries: Range<u64>,
    values: ArrayRef,
    columns: ArrayRef,
}

/// A data frame's rows.
#[derive(Debug)]
struct FrameSource {
    frame: Arc<ArrayObject>,
    rows: FrameRowsAt,
}

/// Where a data frame's rows are.
#[derive(Debug)]
enum FrameRowsAt {
    /// In the array, read a column at a time when asked: obs's or var's rows.
    Array(Arc<AxisRows>),
    /// Read whole already (uns): the batches, and how many rows they hold.
    Read(Vec<RecordBatch>, usize),
}

impl FrameSource {
    fn len(&self) -> usize {
        match &self.rows {
            FrameRowsAt::Array(rows) => rows.positions.len(),
            FrameRowsAt::Read(_, count) => *count,
        }
    }

    fn column(&self, name: &str, rows: Range<usize>) -> io::Result<ArrayRef> {
        let batches = match &self.rows {
            FrameRowsAt::Array(axis) => {
                let column = anndata::read_frame_column(&self.frame, name, &axis.positions, rows);
                return Ok(column?);
            }
            FrameRowsAt::Read(batches, _) => batches,
        };
        let pieces = batches
            .iter()
            .map(|b| {
                b.column_by_name(name)
                    .map(|c| c.as_ref())
                    .ok_or_else(|| io::Error::other(format!("no column {name} in the rows read")))
            })
            .collect::<io::Result<Vec<_>>>()?;
        let all = match pieces.as_slice() {
            [] => return Ok(arrow_array::new_empty_array(&DataType::LargeUtf8)),
            _ => arrow_select::concat::concat(&pieces).map_err(io::Error::other)?,
        };
        Ok(all.slice(rows.start, rows.len()))
    }
}

/// What of a data frame column an array holds.
#[derive(Debug, Clone)]
enum ColumnPart {
    /// The values, as numbers of this type, booleans or text.
    Values(DataType),
    /// Whether each is null.
    Mask,
    /// The dictionary keys as codes of this type, -1 for null.
    Codes(DataType),
    /// Row numbers from 0 (the index of a data frame without one).
    RowNumbers,
}

/// Where an array's chunks come from.
#[derive(Debug)]
enum Content {
    /// Values held whole (categories, uns metadata), in C order.
    Values(ArrayRef),
    /// An uns array's values, read whole when first needed.
    Uns(Arc<UnsValues>),
    Column {
        frame: Arc<FrameSource>,
        column: String,
        part: ColumnPart,
    },
    Csr(Arc<CsrSource>, CsrPart),
    /// A dense matrix, cells not stored being 0.
    Dense(Arc<MatrixSource>),
}

/// An uns array laid out from its schema and cell count ([`uns_array_layout`]), its values
/// read whole when a chunk first needs them and then held.
#[derive(Debug)]
struct UnsValues {
    array: Arc<ArrayObject>,
    /// The shape it was laid out with: the values read must fill it.
    shape: Vec<usize>,
    /// Held while they are read: a second reader waits for them.
    read: Mutex<Option<ArrayRef>>,
}

impl UnsValues {
    fn values(&self) -> io::Result<ArrayRef> {
        let mut read = self.read.lock().recover();
        if let Some(values) = &*read {
            return Ok(values.clone());
        }
        let values = match uns_element(&self.array)? {
            UnsElement::Array { shape, values } if shape == self.shape => values,
            _ => {
                return Err(io::Error::other(format!(
                    "{}: read, it is not the array of shape {:?} its schema and cell count \
                     told",
                    self.array.uri, self.shape
                )))
            }
        };
        *read = Some(values.clone());
        Ok(values)
    }
}

/// A store's uns arrays that are read when a chunk needs them ([`UnsValues`]), all read at
/// once, [`anndata::AT_ONCE`] at a time, when a chunk first needs one: anndata reads uns
/// whole when it opens a store, a chunk after another, and one read after another would
/// cost a round trip or two each over a network.
#[derive(Debug, Default)]
struct UnsTogether {
    arrays: Mutex<Vec<Weak<UnsValues>>>,
    started: AtomicBool,
}

impl UnsTogether {
    /// Reads every array once, the first time it is called (a failed read is read again,
    /// and reported, by the chunk that needs it).
    fn read_all(&self) {
        if self.started.swap(true, Ordering::AcqRel) {
            return;
        }
        let arrays: Vec<Arc<UnsValues>> = (self.arrays.lock().recover().iter())
            .filter_map(Weak::upgrade)
            .collect();
        map_at_once(&arrays, anndata::AT_ONCE, |uns| {
            let _ = uns.values();
        });
    }
}

impl ZarrArray {
    /// The bytes of chunk `k`.
    fn chunk(&self, k: u64) -> io::Result<Vec<u8>> {
        if k >= self.meta.chunk_count() {
            return Err(io::Error::other(format!("no chunk {k}")));
        }
        let rows = self.meta.chunk_rows(k);
        let (start, end) = (rows.start as usize, rows.end as usize);
        // Values held whole, in C order: the chunk's rows of them.
        let rows_of = |values: &ArrayRef| {
            let row_items = self.meta.shape.iter().skip(1).product::<u64>() as usize;
            values.slice(start * row_items, (end - start) * row_items)
        };
        let values = match &self.content {
            Content::Values(values) => rows_of(values),
            Content::Uns(uns) => {
                self.origin.uns.read_all();
                rows_of(&uns.values()?)
            }
            Content::Column {
                frame,
                column,
                part,
            } => column_part(frame, column, part, start..end)?,
            Content::Csr(csr, CsrPart::Indptr) => {
                let pointers = csr.indptr(start..end)?.into_iter().map(|p| p as i64);
                Arc::new(Int64Array::from_iter_values(pointers))
            }
            Content::Csr(csr, part) => {
                let entries = csr.entries_of(rows, *part)?;
                match &self.meta.dtype {
                    Dtype::Number(t) if t != entries.data_type() => {
                        arrow_cast::cast(&entries, t).map_err(io::Error::other)?
                    }
                    _ => entries,
                }
            }
            Content::Dense(matrix) => return self.dense_chunk(matrix, start..end),
        };
        zarr::chunk(&self.meta, &values)
    }

    /// A chunk of a dense matrix: its rows' cells placed in a chunk of zeros.
    fn dense_chunk(&self, matrix: &MatrixSource, rows: Range<usize>) -> io::Result<Vec<u8>> {
        let size = self.meta.chunk_size().unwrap_or(0) as usize;
        let item = self.meta.dtype.item_size().unwrap_or(1) as usize;
        let width = self.meta.shape.get(1).copied().unwrap_or(1) as usize;
        let mut chunk = vec![0u8; size];
        let first = rows.start;
        let mut bytes = Vec::new();
        matrix.cells(rows, |places, keep, values| {
            let values = matrix.values(values, keep)?;
            bytes.clear();
            zarr::put_fixed(values.as_ref(), &mut bytes)?;
            for (i, &(r, c)) in places.iter().enumerate() {
                let at = ((r - first) * width + c) * item;
                chunk[at..at + item].copy_from_slice(&bytes[i * item..(i + 1) * item]);
            }
            Ok(())
        })?;
        Ok(chunk)
    }
}

/// The values of a part of a data frame column for some rows.
fn column_part(
    frame: &FrameSource,
    column: &str,
    part: &ColumnPart,
    rows: Range<usize>,
) -> io::Result<ArrayRef> {
    if let ColumnPart::RowNumbers = part {
        return Ok(Arc::new(Int64Array::from_iter_values(
            rows.start as i64..rows.end as i64,
        )));
    }
    let values = frame.column(column, rows)?;
    Ok(match part {
        ColumnPart::Values(t) if values.data_type() != t && !is_text(t) => {
            arrow_cast::cast(&values, t).map_err(io::Error::other)?
        }
        ColumnPart::Values(_) | ColumnPart::RowNumbers => values,
        ColumnPart::Mask => {
            let nulls = values.logical_nulls();
            let mask =
                (0..values.len()).map(|i| Some(nulls.as_ref().is_some_and(|n| n.is_null(i))));
            Arc::new(mask.collect::<BooleanArray>())
        }
        ColumnPart::Codes(t) => {
            let keys = values
                .as_any_dictionary_opt()
                .ok_or_else(|| io::Error::other(format!("{column}: not a dictionary")))?
                .keys();
            let keys = arrow_cast::cast(keys, &DataType::Int64).map_err(io::Error::other)?;
            let keys = keys.as_primitive::<Int64Type>();
            let codes: Int64Array = keys.iter().map(|k| Some(k.unwrap_or(-1))).collect();
            arrow_cast::cast(&codes, t).map_err(io::Error::other)?
        }
    })
}

// ---------------------------------------------------------------------------------------
// the tree

fn encoding_attrs(encoding: Encoding) -> Map<String, Json> {
    let (kind, version) = encoding.type_and_version();
    let mut attrs = Map::new();
    attrs.insert("encoding-type".into(), json!(kind));
    attrs.insert("encoding-version".into(), json!(version));
    attrs
}

/// Makes the members of groups, each at its path.
struct Builder<'a> {
    origin: &'a Arc<Origin>,
}

impl Builder<'_> {
    fn array(
        &self,
        path: &str,
        meta: ArrayMeta,
        attrs: Map<String, Json>,
        content: Content,
    ) -> ZarrNode {
        ZarrNode::Array(Arc::new(ZarrArray {
            meta,
            attrs,
            content,
            path: path.to_owned(),
            origin: self.origin.clone(),
        }))
    }

    /// An array of values of `data_type` read whole (held, or an uns array's), of
    /// `shape`: numbers and booleans as an `array`, anything else as a `string-array` (or,
    /// for a scalar, a `numeric-scalar` or `string`).
    fn values_of(
        &self,
        path: &str,
        shape: Vec<u64>,
        data_type: &DataType,
        content: Content,
    ) -> ZarrNode {
        let dtype = if is_text(data_type) {
            Dtype::Text
        } else {
            Dtype::of(data_type)
        };
        let encoding = match (shape.is_empty(), &dtype) {
            (true, Dtype::Text) => Encoding::String,
            (true, _) => Encoding::NumericScalar,
            (false, Dtype::Text) => Encoding::StringArray,
            (false, _) => Encoding::Array,
        };
        let meta = ArrayMeta::new(shape, dtype);
        self.array(path, meta, encoding_attrs(encoding), content)
    }

    /// An array of values held whole (see [`Builder::values_of`]).
    fn values(&self, path: &str, shape: Vec<u64>, values: ArrayRef) -> ZarrNode {
        let data_type = values.data_type().clone();
        self.values_of(path, shape, &data_type, Content::Values(values))
    }

    fn column(
        &self,
        path: &str,
        frame: &Arc<FrameSource>,
        (column, part): (&str, ColumnPart),
        dtype: Dtype,
        encoding: Option<Encoding>,
    ) -> ZarrNode {
        let meta = ArrayMeta::new(vec![frame.len() as u64], dtype);
        let content = Content::Column {
            frame: frame.clone(),
            column: column.to_owned(),
            part,
        };
        let attrs = encoding.map(encoding_attrs).unwrap_or_default();
        self.array(path, meta, attrs, content)
    }

    /// A data frame: its index, then its columns, each as anndata encodes it.
    fn frame(
        &self,
        path: &str,
        frame: Arc<FrameSource>,
        rows: &FrameRows,
        index: FrameIndex,
    ) -> io::Result<ZarrNode> {
        let columns = frame_columns(&frame.frame, rows, &index)?;
        let mut attrs = encoding_attrs(Encoding::DataFrame);
        let index_name = match &index {
            FrameIndex::Column { name, named: true } => name.clone(),
            _ => "_index".to_owned(),
        };
        attrs.insert("_index".into(), json!(index_name));
        let order: Vec<&str> = columns.iter().map(|(_, name)| name.as_str()).collect();
        attrs.insert("column-order".into(), json!(order));
        let mut members = Vec::new();
        let index_path = format!("{path}/{index_name}");
        let index_array = match &index {
            FrameIndex::Column { name, .. } => self.column(
                &index_path,
                &frame,
                (name, ColumnPart::Values(DataType::LargeUtf8)),
                Dtype::Text,
                Some(Encoding::StringArray),
            ),
            FrameIndex::RowNumbers => self.column(
                &index_path,
                &frame,
                ("", ColumnPart::RowNumbers),
                Dtype::Number(DataType::Int64),
                Some(Encoding::Array),
            ),
        };
        members.push((index_name, index_array));
        for (spec, name) in &columns {
            let at = format!("{path}/{name}");
            members.push((name.clone(), self.frame_column(&at, &frame, spec)?));
        }
        Ok(group(attrs, members))
    }

    fn frame_column(
        &self,
        path: &str,
        frame: &Arc<FrameSource>,
        spec: &ColumnSpec,
    ) -> io::Result<ZarrNode> {
        let name = spec.name.as_str();
        let masked = |values: Dtype, values_encoding: Encoding, encoding: Encoding| {
            let values_part = (name, ColumnPart::Values(spec.data_type.clone()));
            let values = self.column(
                &format!("{path}/values"),
                frame,
                values_part,
                values,
                Some(values_encoding),
            );
            let mask = self.column(
                &format!("{path}/mask"),
                frame,
                (name, ColumnPart::Mask),
                Dtype::Bool,
                Some(Encoding::Array),
            );
            group(
                encoding_attrs(encoding),
                vec![("values".into(), values), ("mask".into(), mask)],
            )
        };
        Ok(match spec.encoding() {
            ColumnEncoding::Numbers(t) => self.column(
                path,
                frame,
                (name, ColumnPart::Values(t.clone())),
                Dtype::Number(t),
                Some(Encoding::Array),
            ),
            ColumnEncoding::Booleans { nullable: false } => self.column(
                path,
                frame,
                (name, ColumnPart::Values(DataType::Boolean)),
                Dtype::Bool,
                Some(Encoding::Array),
            ),
            ColumnEncoding::Booleans { nullable: true } => {
                masked(Dtype::Bool, Encoding::Array, Encoding::NullableBoolean)
            }
            ColumnEncoding::Texts { nullable: false } => self.column(
                path,
                frame,
                (name, ColumnPart::Values(DataType::LargeUtf8)),
                Dtype::Text,
                Some(Encoding::StringArray),
            ),
            ColumnEncoding::Texts { nullable: true } => {
                masked(Dtype::Text, Encoding::StringArray, Encoding::NullableString)
            }
            ColumnEncoding::Categorical { code_type } => {
                let categories = spec
                    .categories
                    .as_ref()
                    .ok_or_else(|| io::Error::other(format!("column {name} has no categories")))?;
                let mut attrs = encoding_attrs(Encoding::Categorical);
                attrs.insert("ordered".into(), json!(categories.ordered));
                let labels = categories.labels.clone();
                let shape = vec![labels.len() as u64];
                let categories = self.values(&format!("{path}/categories"), shape, labels);
                let codes = self.column(
                    &format!("{path}/codes"),
                    frame,
                    (name, ColumnPart::Codes(code_type.clone())),
                    Dtype::Number(code_type),
                    Some(Encoding::Array),
                );
                group(
                    attrs,
                    vec![("categories".into(), categories), ("codes".into(), codes)],
                )
            }
        })
    }

    /// A matrix: CSR or dense, as `layout` and the array say.
    fn matrix(&self, path: &str, source: MatrixSource, layout: Layout) -> io::Result<ZarrNode> {
        let (value_type, dense) = matrix_type(&source.array, layout)?;
        let source = MatrixSource {
            value_type,
            ..source
        };
        let (rows, cols) = source.axes();
        let shape = vec![rows.len() as u64, cols.len() as u64];
        if dense {
            let meta = ArrayMeta::new(shape, Dtype::of(&source.value_type));
            let attrs = encoding_attrs(Encoding::Array);
            return Ok(self.array(path, meta, attrs, Content::Dense(Arc::new(source))));
        }
        let csr = Arc::new(CsrSource::new(source, self.origin.clone())?);
        let total = csr.entries();
        let index_type = if shape[1] <= i32::MAX as u64 {
            DataType::Int32
        } else {
            DataType::Int64
        };
        let value_dtype = Dtype::of(&csr.matrix.value_type);
        let mut attrs = encoding_attrs(Encoding::CsrMatrix);
        attrs.insert("shape".into(), json!(shape));
        let parts = [
            ("data", value_dtype, total, CsrPart::Data),
            (
                "indices",
                Dtype::Number(index_type),
                total,
                CsrPart::Indices,
            ),
            (
                "indptr",
                Dtype::Number(DataType::Int64),
                shape[0] + 1,
                CsrPart::Indptr,
            ),
        ];
        let members = parts
            .into_iter()
            .map(|(name, dtype, len, part)| {
                let meta = match part {
                    CsrPart::Indptr => {
                        ArrayMeta::with_chunk_rows(vec![len], dtype, INDPTR_CHUNK_ROWS)
                    }
                    _ => ArrayMeta::new(vec![len], dtype),
                };
                let content = Content::Csr(csr.clone(), part);
                let array = self.array(&format!("{path}/{name}"), meta, Map::new(), content);
                (name.to_owned(), array)
            })
            .collect();
        Ok(group(attrs, members))
    }

    /// A mapping of matrices (`layers`, `obsm`, …).
    fn matrices(
        &self,
        path: &str,
        members: &[MatrixElement],
        source: &(dyn Fn(&MatrixElement) -> io::Result<MatrixSource> + Sync),
    ) -> io::Result<ZarrNode> {
        // At once: a sparse matrix's entries may be counted from its fragment list, a few
        // round trips of its own.
        let members = map_at_once(members, anndata::AT_ONCE, |member| {
            let name = file_name(&member.name);
            let at = format!("{path}/{name}");
            let matrix = self.matrix(&at, source(member)?, member.layout)?;
            Ok((name, matrix))
        })
        .into_iter()
        .collect::<io::Result<Vec<_>>>()?;
        Ok(group(encoding_attrs(Encoding::Dict), members))
    }

    /// An uns collection: each member kept, then each metadata value.
    fn uns(&self, path: &str, collection: &UnsCollection) -> io::Result<ZarrNode> {
        // Each member's arrays are read whole: all at once.
        let kept: Vec<_> = collection.members_kept().collect();
        let members = map_at_once(&kept, anndata::AT_ONCE, |(name, member)| {
            let key = file_name(name);
            let at = format!("{path}/{key}");
            let node = match member {
                UnsMember::Collection(inner) => self.uns(&at, inner)?,
                UnsMember::Array(array) => match uns_array_layout(array)? {
                    // Laid out from its schema, read when a chunk is opened.
                    Some((shape, data_type)) => {
                        let values = Arc::new(UnsValues {
                            array: array.clone(),
                            shape: shape.clone(),
                            read: Mutex::new(None),
                        });
                        let arrays = &self.origin.uns.arrays;
                        arrays.lock().recover().push(Arc::downgrade(&values));
                        let shape = shape.iter().map(|&n| n as u64).collect();
                        self.values_of(&at, shape, &data_type, Content::Uns(values))
                    }
                    None => self.uns_frame(&at, array)?,
                },
            };
            Ok((key, node))
        });
        let mut members = members.into_iter().collect::<io::Result<Vec<_>>>()?;
        for (name, value) in collection.values() {
            let key = file_name(name);
            let (values, scalar) = uns_value(value);
            let shape = if scalar {
                Vec::new()
            } else {
                vec![values.len() as u64]
            };
            let at = format!("{path}/{key}");
            members.push((key, self.values(&at, shape, values)));
        }
        Ok(group(encoding_attrs(Encoding::Dict), members))
    }

    /// An uns array that is a data frame, read whole.
    fn uns_frame(&self, path: &str, array: &Arc<ArrayObject>) -> io::Result<ZarrNode> {
        Ok(match uns_element(array)? {
            UnsElement::Array { shape, values } => {
                let shape = shape.into_iter().map(|n| n as u64).collect();
                self.values(path, shape, values)
            }
            UnsElement::Frame { batches, index } => {
                let mut rows = FrameRows::default();
                for batch in &batches {
                    rows.add(batch);
                }
                let frame = Arc::new(FrameSource {
                    frame: array.clone(),
                    rows: FrameRowsAt::Read(batches, rows.count),
                });
                self.frame(path, frame, &rows, index)?
            }
        })
    }
}

fn group(attrs: Map<String, Json>, members: Vec<(String, ZarrNode)>) -> ZarrNode {
    ZarrNode::Group(Arc::new(ZarrGroup {
        attrs,
        members,
        consolidated: None,
    }))
}

/// Makes the whole tree of a store, and its consolidated metadata.
fn build(origin: &Arc<Origin>) -> io::Result<ZarrGroup> {
    let b = Builder { origin };
    // uns is read while obs's and var's rows are, and the matrices made from them.
    let (members, uns) = at_once(
        || frames_and_matrices(&b),
        || match origin.elements.uns() {
            Some(collection) => b.uns("uns", collection),
            None => Ok(group(encoding_attrs(Encoding::Dict), Vec::new())),
        },
    );
    let mut members = members?;
    members.push(("uns".into(), uns?));

    let attrs = encoding_attrs(Encoding::AnnData);
    let mut metadata = Map::new();
    metadata.insert(".zgroup".into(), zarr::zgroup());
    metadata.insert(".zattrs".into(), Json::Object(attrs.clone()));
    for (name, member) in &members {
        add_metadata(&mut metadata, name, member);
    }
    let consolidated = zarr::document(&zarr::consolidated(metadata)).into();
    Ok(ZarrGroup {
        attrs,
        members,
        consolidated: Some(consolidated),
    })
}

/// obs, var, X, layers, obsm, varm, obsp and varp: the rows of obs and var first, then every
/// matrix at once.
fn frames_and_matrices(b: &Builder) -> io::Result<Vec<(String, ZarrNode)>> {
    let e = &b.origin.elements;
    let (obs_index, var_index) = (frame_index(&e.obs), frame_index(&e.var));
    let (obs_rows, var_rows) = at_once(
        || scan_frame(&e.obs.array, &e.obs.rows, &obs_index),
        || scan_frame(&e.var.array, &e.var.rows, &var_index),
    );
    let (mut obs_rows, mut var_rows) = (obs_rows?, var_rows?);
    let obs = AxisRows::new(&e.obs.array, &mut obs_rows);
    let var = AxisRows::new(&e.var.array, &mut var_rows);
    let lazy_frame = |frame: &Arc<ArrayObject>, rows: &Arc<AxisRows>| {
        Arc::new(FrameSource {
            frame: frame.clone(),
            rows: FrameRowsAt::Array(rows.clone()),
        })
    };
    let obs_frame = b.frame("obs", lazy_frame(&e.obs.array, &obs), &obs_rows, obs_index)?;
    let var_frame = b.frame("var", lazy_frame(&e.var.array, &var), &var_rows, var_index)?;

    let rows_along = |along| match along {
        Along::Obs => obs.clone(),
        Along::Var => var.clone(),
    };
    let source = |matrix: &MatrixElement| -> io::Result<MatrixSource> {
        let rows = rows_along(matrix.rows);
        let cols = match matrix.columns {
            MatrixColumns::Along(along) => Columns::Rows(rows_along(along)),
            MatrixColumns::Width => {
                Columns::Indices(e.width(matrix, rows.positions.len())? as usize)
            }
        };
        Ok(MatrixSource {
            array: matrix.array.clone(),
            rows,
            cols,
            value_type: DataType::Null,
        })
    };
    type Make<'a> = Box<dyn Fn() -> io::Result<ZarrNode> + Sync + 'a>;
    let x: Make = Box::new(|| b.matrix("X", source(&e.x)?, e.x.layout));
    let mappings = e.mappings.iter().map(|mapping| -> (&str, Make) {
        let make = || b.matrices(mapping.name, &mapping.members, &source);
        (mapping.name, Box::new(make))
    });
    let parts: Vec<(&str, Make)> = std::iter::once(("X", x)).chain(mappings).collect();
    let matrices = map_at_once(&parts, parts.len(), |(_, make)| make());
    let mut members = vec![("obs".to_owned(), obs_frame), ("var".to_owned(), var_frame)];
    for ((part, _), matrix) in parts.into_iter().zip(matrices) {
        members.push((part.to_owned(), matrix?));
    }
    Ok(members)
}

/// Adds the metadata of `node` at `path`, and of everything under it.
fn add_metadata(metadata: &mut Map<String, Json>, path: &str, node: &ZarrNode) {
    match node {
        ZarrNode::Group(group) => {
            metadata.insert(format!("{path}/.zgroup"), zarr::zgroup());
            metadata.insert(format!("{path}/.zattrs"), Json::Object(group.attrs.clone()));
            for (name, member) in &group.members {
                add_metadata(metadata, &format!("{path}/{name}"), member);
            }
        }
        ZarrNode::Array(array) => {
            metadata.insert(format!("{path}/.zarray"), array.meta.zarray());
            metadata.insert(format!("{path}/.zattrs"), Json::Object(array.attrs.clone()));
        }
    }
}
