//! Sized Parquet: a Parquet file whose exact size follows from its Arrow schema and row count
//! alone, for tables whose columns are all fixed-width and never null (the coordinates and
//! values of SOMA sparse and dense ND arrays). A listing can give such a file's size at its
//! first `stat`, before any data is read; the file is written later, by the small writer here.
//!
//! The file is "PAR1", then row groups of [`GROUP_ROWS`] rows (the last holds the rest), each
//! column chunk a run of DataPage V1 pages of [`PAGE_ROWS`] rows (the last holds the rest):
//! the PLAIN values of a REQUIRED column, snappy-compressed, with no dictionary, statistics,
//! page index, bloom filter or checksum. Each column chunk has a slot at an offset fixed by
//! the layout, as long as its pages could be at worst (each the longest page header and
//! snappy's longest output for its values). The pages are written from the slot's start and
//! the rest of the slot is left a hole, so the file takes about its compressed size on disk.
//! Readers go by each chunk's offset and compressed size, and never read the holes.
//!
//! The footer (FileMetaData in thrift's compact protocol, encoded by [`Compact`]) depends on
//! the values only through each chunk's compressed and uncompressed sizes, whose varints are
//! at most as long as for the largest sizes a slot allows. The size counts them at that
//! longest; the footer written makes up for what they come short by with spaces at the end of
//! `created_by`, whose length stays within one varint width (see [`created_by_base`]). The
//! Arrow types come back through "ARROW:schema", stored as the parquet crate's writer stores it.

use std::io::{self, Seek, SeekFrom, Write};

use arrow_array::cast::AsArray;
use arrow_array::types::{
    Float32Type, Float64Type, Int16Type, Int32Type, Int64Type, Int8Type, UInt16Type, UInt32Type,
    UInt64Type, UInt8Type,
};
use arrow_array::{Array, RecordBatch};
use arrow_schema::{DataType, Schema};

/// Rows in a row group; a file's last row group holds the rest.
const GROUP_ROWS: u64 = 1 << 20;

/// Rows in a page; a column chunk's last page holds the rest.
const PAGE_ROWS: u64 = 1 << 16;

/// The most rows a sized file holds (a trillion: no offset or length comes near overflowing).
const MAX_ROWS: u64 = 1 << 40;

/// The magic bytes at the start and the end of a Parquet file.
const MAGIC: &[u8; 4] = b"PAR1";

/// The shortest `created_by`: its length varint takes two bytes at least (see
/// [`created_by_base`]).
const MIN_CREATED_BY: u64 = 128;

/// Room kept before a compressed page for its header, which takes 29 bytes at most: three
/// i32s of up to five bytes and four of one, eight field headers and two stops.
const HEADER_ROOM: usize = 32;

/// Where row groups and pages end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Layout {
    group_rows: u64,
    page_rows: u64,
}

/// The row groups and pages every sized file is cut into.
const ROW_CUTS: Layout = Layout {
    group_rows: GROUP_ROWS,
    page_rows: PAGE_ROWS,
};

/// The Arrow types a sized file holds, and how each is stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ColumnKind {
    Bool,
    Int8,
    Int16,
    Int32,
    Int64,
    UInt8,
    UInt16,
    UInt32,
    UInt64,
    Float32,
    Float64,
}

/// The Parquet format's thrift enum values the file uses.
mod parquet_enums {
    pub const BOOLEAN: i32 = 0;
    pub const INT32: i32 = 1;
    pub const INT64: i32 = 2;
    pub const FLOAT: i32 = 4;
    pub const DOUBLE: i32 = 5;

    pub const REQUIRED: i32 = 0;

    pub const UINT_8: i32 = 11;
    pub const UINT_16: i32 = 12;
    pub const UINT_32: i32 = 13;
    pub const UINT_64: i32 = 14;
    pub const INT_8: i32 = 15;
    pub const INT_16: i32 = 16;

    pub const PLAIN: i32 = 0;
    pub const RLE: i32 = 3;

    pub const SNAPPY: i32 = 1;

    pub const DATA_PAGE: i32 = 0;

    /// LogicalType's INTEGER member.
    pub const LOGICAL_INTEGER: i16 = 10;
}

impl ColumnKind {
    fn of(data_type: &DataType) -> Option<ColumnKind> {
        Some(match data_type {
            DataType::Boolean => ColumnKind::Bool,
            DataType::Int8 => ColumnKind::Int8,
            DataType::Int16 => ColumnKind::Int16,
            DataType::Int32 => ColumnKind::Int32,
            DataType::Int64 => ColumnKind::Int64,
            DataType::UInt8 => ColumnKind::UInt8,
            DataType::UInt16 => ColumnKind::UInt16,
            DataType::UInt32 => ColumnKind::UInt32,
            DataType::UInt64 => ColumnKind::UInt64,
            DataType::Float32 => ColumnKind::Float32,
            DataType::Float64 => ColumnKind::Float64,
            _ => return None,
        })
    }

    /// The Parquet physical type.
    fn physical_type(self) -> i32 {
        use ColumnKind::*;
        match self {
            Bool => parquet_enums::BOOLEAN,
            Int8 | Int16 | Int32 | UInt8 | UInt16 | UInt32 => parquet_enums::INT32,
            Int64 | UInt64 => parquet_enums::INT64,
            Float32 => parquet_enums::FLOAT,
            Float64 => parquet_enums::DOUBLE,
        }
    }

    /// The IntType logical type (bit width, signed) and the converted type, for the integers
    /// whose physical type is wider or unsigned; the parquet crate's writer annotates the same.
    fn integer_annotation(self) -> Option<(i8, bool, i32)> {
        use ColumnKind::*;
        match self {
            Int8 => Some((8, true, parquet_enums::INT_8)),
            Int16 => Some((16, true, parquet_enums::INT_16)),
            UInt8 => Some((8, false, parquet_enums::UINT_8)),
            UInt16 => Some((16, false, parquet_enums::UINT_16)),
            UInt32 => Some((32, false, parquet_enums::UINT_32)),
            UInt64 => Some((64, false, parquet_enums::UINT_64)),
            Bool | Int32 | Int64 | Float32 | Float64 => None,
        }
    }

    /// The length of `rows` PLAIN values: a bit each for booleans, else the physical width.
    fn plain_len(self, rows: u64) -> u64 {
        match self.physical_type() {
            parquet_enums::BOOLEAN => rows.div_ceil(8),
            parquet_enums::INT32 | parquet_enums::FLOAT => rows * 4,
            _ => rows * 8,
        }
    }

    /// Appends `len` values of `array` from `start` to `page`, PLAIN encoded. `array` is of
    /// this kind and has no nulls.
    fn append(self, array: &dyn Array, start: usize, len: usize, page: &mut Page) {
        use ColumnKind::*;
        let bytes = &mut page.plain;
        match self {
            Bool => {
                let values = array.as_boolean();
                for i in 0..len {
                    let bit = page.rows as usize + i;
                    if bit.is_multiple_of(8) {
                        bytes.push(0);
                    }
                    if values.value(start + i) {
                        *bytes.last_mut().expect("pushed above") |= 1 << (bit % 8);
                    }
                }
            }
            Int8 => extend_le(bytes, values::<Int8Type>(array, start, len), |v| {
                i32::from(v).to_le_bytes()
            }),
            Int16 => extend_le(bytes, values::<Int16Type>(array, start, len), |v| {
                i32::from(v).to_le_bytes()
            }),
            Int32 => extend_le(bytes, values::<Int32Type>(array, start, len), |v| {
                v.to_le_bytes()
            }),
            Int64 => extend_le(bytes, values::<Int64Type>(array, start, len), |v| {
                v.to_le_bytes()
            }),
            UInt8 => extend_le(bytes, values::<UInt8Type>(array, start, len), |v| {
                u32::from(v).to_le_bytes()
            }),
            UInt16 => extend_le(bytes, values::<UInt16Type>(array, start, len), |v| {
                u32::from(v).to_le_bytes()
            }),
            UInt32 => extend_le(bytes, values::<UInt32Type>(array, start, len), |v| {
                v.to_le_bytes()
            }),
            UInt64 => extend_le(bytes, values::<UInt64Type>(array, start, len), |v| {
                v.to_le_bytes()
            }),
            Float32 => extend_le(bytes, values::<Float32Type>(array, start, len), |v| {
                v.to_le_bytes()
            }),
            Float64 => extend_le(bytes, values::<Float64Type>(array, start, len), |v| {
                v.to_le_bytes()
            }),
        }
        page.rows += len as u64;
    }
}

/// `len` values of a primitive `array` from `start`.
fn values<T: arrow_array::ArrowPrimitiveType>(
    array: &dyn Array,
    start: usize,
    len: usize,
) -> &[T::Native] {
    &array.as_primitive::<T>().values()[start..start + len]
}

/// Appends `values` to `bytes`, each as the `N` bytes `to_le` makes of it.
fn extend_le<T: Copy, const N: usize>(bytes: &mut Vec<u8>, values: &[T], to_le: fn(T) -> [u8; N]) {
    let at = bytes.len();
    bytes.resize(at + values.len() * N, 0);
    for (to, &value) in bytes[at..].chunks_exact_mut(N).zip(values) {
        to.copy_from_slice(&to_le(value));
    }
}

/// A column of a sized file.
#[derive(Debug, Clone)]
struct Column {
    name: String,
    data_type: DataType,
    kind: ColumnKind,
}

/// The most a column chunk of some number of rows can take: its slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct ChunkBound {
    /// The slot's length: every page at its longest header and snappy's longest output.
    slot_len: u64,
    /// The longest total_uncompressed_size (the values and the longest headers).
    uncompressed: u64,
}

/// What a column chunk takes, as the footer records it: its pages, headers included,
/// compressed and not.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct ChunkSize {
    compressed: u64,
    uncompressed: u64,
}

/// A row group of the layout: its rows and where its column chunks' slots start.
#[derive(Debug, Clone)]
struct Group {
    index: usize,
    first_row: u64,
    rows: u64,
    slot_starts: Vec<u64>,
}

/// A page's PLAIN values while its rows come in.
#[derive(Debug)]
struct Page {
    plain: Vec<u8>,
    rows: u64,
}

/// The layout of a sized Parquet file: where every column chunk goes and how long the file
/// is, from the schema and the row count.
#[derive(Debug, Clone)]
pub struct SizedParquet {
    columns: Vec<Column>,
    rows: u64,
    layout: Layout,
    /// "ARROW:schema": the Arrow schema as the parquet crate's writer stores it.
    arrow_schema: String,
    /// The chunk bounds of a full row group and of the last one, by column.
    full_group: Vec<ChunkBound>,
    last_group: Vec<ChunkBound>,
    /// The length of `created_by` before it makes up for shorter sizes.
    created_by_base: u64,
    footer_len: u64,
    size: u64,
}

impl SizedParquet {
    /// The layout of the file of `rows` rows of `schema`: None when some column is nullable,
    /// or not of a fixed-width type the file holds (booleans, integers, floats), or there are
    /// no columns.
    pub fn of(schema: &Schema, rows: u64) -> Option<SizedParquet> {
        SizedParquet::with_layout(schema, rows, ROW_CUTS)
    }

    fn with_layout(schema: &Schema, rows: u64, layout: Layout) -> Option<SizedParquet> {
        if schema.fields().is_empty() || rows > MAX_ROWS {
            return None;
        }
        let columns = schema
            .fields()
            .iter()
            .map(|f| {
                let kind = ColumnKind::of(f.data_type()).filter(|_| !f.is_nullable())?;
                Some(Column {
                    name: f.name().clone(),
                    data_type: f.data_type().clone(),
                    kind,
                })
            })
            .collect::<Option<Vec<_>>>()?;
        let chunk_bounds = |group_rows: u64| -> Vec<ChunkBound> {
            columns
                .iter()
                .map(|c| chunk_bound(c.kind, group_rows, layout.page_rows))
                .collect()
        };
        let last_rows = match rows % layout.group_rows {
            0 => layout.group_rows,
            rest => rest,
        };
        let mut sized = SizedParquet {
            full_group: chunk_bounds(layout.group_rows),
            last_group: chunk_bounds(last_rows),
            columns,
            rows,
            layout,
            arrow_schema: parquet::arrow::encode_arrow_schema(schema),
            created_by_base: 0,
            footer_len: 0,
            size: 0,
        };
        // What the sizes' varints can come short by, at most: all but one byte of each.
        let shortfall: u64 = sized
            .groups()
            .map(|group| {
                sized
                    .bounds(&group)
                    .iter()
                    .map(|b| zigzag_len(b.slot_len) + zigzag_len(b.uncompressed) - 2)
                    .sum::<u64>()
            })
            .sum();
        sized.created_by_base = created_by_base(shortfall);
        let slots_end = sized.slots_end();
        let footer = sized.footer(
            |group, column| {
                let bound = sized.bounds(group)[column];
                ChunkSize {
                    compressed: bound.slot_len,
                    uncompressed: bound.uncompressed,
                }
            },
            sized.created_by_base,
        );
        sized.footer_len = footer.len() as u64;
        u32::try_from(sized.footer_len).ok()?;
        sized.size = slots_end + sized.footer_len + 4 + MAGIC.len() as u64;
        Some(sized)
    }

    /// The exact size of the file in bytes.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// Writes the file: exactly the announced rows, taken from `next_batch` (an error if the
    /// batches hold more or fewer, or a null, or columns of other types), into `out`, which
    /// starts empty at offset 0. Each page is written where its column chunk's slot has come
    /// to, and the rest of each slot is skipped (seeked past), so a file on disk is sparse: it
    /// takes about its compressed size. At most a page a column and a batch are held. The
    /// file's length is checked to be exactly [`size`](SizedParquet::size) at the end.
    pub fn write<W: Write + Seek>(
        &self,
        mut next_batch: impl FnMut() -> io::Result<Option<RecordBatch>>,
        mut out: W,
    ) -> io::Result<()> {
        out.write_all(MAGIC)?;
        let mut slots = Slots::new(out, self.columns.len());
        let mut groups = self.groups();
        let mut group = groups.next();
        let mut pages = self.first_pages();
        let mut row = 0u64;
        while let Some(batch) = next_batch()? {
            self.check_batch(&batch)?;
            let mut at = 0;
            while at < batch.num_rows() {
                let Some(current) = &group else {
                    return Err(io::Error::other(format!(
                        "the batches hold more than the {} rows of the file",
                        self.rows
                    )));
                };
                let page_end = self.page_end(current, row);
                let take = (page_end - row).min((batch.num_rows() - at) as u64) as usize;
                for ((column, page), array) in
                    self.columns.iter().zip(&mut pages).zip(batch.columns())
                {
                    column.kind.append(array, at, take, page);
                }
                row += take as u64;
                at += take;
                if row < page_end {
                    continue;
                }
                slots.write_pages(current, self.bounds(current), &mut pages)?;
                if row == current.first_row + current.rows {
                    slots.end_group();
                    group = groups.next();
                }
            }
        }
        if row != self.rows {
            return Err(io::Error::other(format!(
                "the batches hold {row} rows, the file {}",
                self.rows
            )));
        }
        self.write_footer(slots)
    }

    /// A page per column for the first rows, with room for the values of a whole page.
    fn first_pages(&self) -> Vec<Page> {
        let first_page_rows = self.rows.min(self.layout.page_rows);
        self.columns
            .iter()
            .map(|c| Page {
                plain: Vec::with_capacity(c.kind.plain_len(first_page_rows) as usize),
                rows: 0,
            })
            .collect()
    }

    /// The row after the page that holds `row` of `group` (pages of a group start at its
    /// first row; its last page holds the rest).
    fn page_end(&self, group: &Group, row: u64) -> u64 {
        let in_group = row - group.first_row;
        let page_rows = self.layout.page_rows;
        group.first_row + group.rows.min((in_group / page_rows + 1) * page_rows)
    }

    /// The footer with the sizes the chunks were written at, padded to the length the size
    /// counts (see [`created_by_base`]); an error when it cannot be.
    fn written_footer(&self, sizes: &[ChunkSize]) -> io::Result<Vec<u8>> {
        let columns = self.columns.len();
        let written_size = |group: &Group, column: usize| sizes[group.index * columns + column];
        let unpadded = self.footer(written_size, self.created_by_base);
        let shortfall = self
            .footer_len
            .checked_sub(unpadded.len() as u64)
            .ok_or_else(|| io::Error::other("the footer outgrew its room"))?;
        let footer = match shortfall {
            0 => unpadded,
            _ => self.footer(written_size, self.created_by_base + shortfall),
        };
        if footer.len() as u64 != self.footer_len {
            return Err(io::Error::other(format!(
                "the footer takes {} bytes, not {}",
                footer.len(),
                self.footer_len
            )));
        }
        Ok(footer)
    }

    /// Ends the file after the last slot: the footer, its length and "PAR1"; then checks the
    /// file is [`size`](SizedParquet::size) bytes long.
    fn write_footer<W: Write + Seek>(&self, slots: Slots<W>) -> io::Result<()> {
        let footer = self.written_footer(&slots.sizes)?;
        let Slots {
            mut out, position, ..
        } = slots;
        let footer_start = self.slots_end();
        if position != footer_start {
            out.seek(SeekFrom::Start(footer_start))?;
        }
        out.write_all(&footer)?;
        out.write_all(&(footer.len() as u32).to_le_bytes())?;
        out.write_all(MAGIC)?;
        out.flush()?;
        let len = out.seek(SeekFrom::End(0))?;
        if len != self.size {
            return Err(io::Error::other(format!(
                "the file is {len} bytes long, not {}",
                self.size
            )));
        }
        Ok(())
    }

    /// Whether `batch` holds columns of the file's types, with no nulls.
    fn check_batch(&self, batch: &RecordBatch) -> io::Result<()> {
        if batch.num_columns() != self.columns.len() {
            return Err(io::Error::other(format!(
                "a batch has {} columns, the file {}",
                batch.num_columns(),
                self.columns.len()
            )));
        }
        for (column, array) in self.columns.iter().zip(batch.columns()) {
            if array.data_type() != &column.data_type {
                return Err(io::Error::other(format!(
                    "column {} is {}, not {}",
                    column.name,
                    array.data_type(),
                    column.data_type
                )));
            }
            if array.null_count() > 0 {
                return Err(io::Error::other(format!(
                    "column {} holds a null",
                    column.name
                )));
            }
        }
        Ok(())
    }

    /// The row groups, in order, each with its column chunks' slots.
    fn groups(&self) -> impl Iterator<Item = Group> + '_ {
        let count = self.rows.div_ceil(self.layout.group_rows) as usize;
        let mut offset = MAGIC.len() as u64;
        (0..count).map(move |index| {
            let first_row = index as u64 * self.layout.group_rows;
            let rows = self.layout.group_rows.min(self.rows - first_row);
            let bounds = if index + 1 == count {
                &self.last_group
            } else {
                &self.full_group
            };
            let slot_starts = bounds
                .iter()
                .map(|b| {
                    let start = offset;
                    offset += b.slot_len;
                    start
                })
                .collect();
            Group {
                index,
                first_row,
                rows,
                slot_starts,
            }
        })
    }

    /// The bounds of `group`'s column chunks.
    fn bounds(&self, group: &Group) -> &[ChunkBound] {
        if group.rows == self.layout.group_rows {
            &self.full_group
        } else {
            &self.last_group
        }
    }

    /// Where the last slot ends and the footer starts.
    fn slots_end(&self) -> u64 {
        let groups = self.rows.div_ceil(self.layout.group_rows);
        let total = |bounds: &[ChunkBound]| bounds.iter().map(|b| b.slot_len).sum::<u64>();
        match groups {
            0 => MAGIC.len() as u64,
            _ => {
                MAGIC.len() as u64
                    + (groups - 1) * total(&self.full_group)
                    + total(&self.last_group)
            }
        }
    }

    /// The footer, FileMetaData, with the chunk sizes `size` gives, and `created_by` padded
    /// with spaces to `created_by_len` bytes.
    fn footer(&self, size: impl Fn(&Group, usize) -> ChunkSize, created_by_len: u64) -> Vec<u8> {
        let mut t = Compact::default();
        t.begin_struct();
        t.i32(1, 1); // version
        t.list(2, kind::STRUCT, self.columns.len() + 1);
        t.begin_struct();
        t.binary(4, b"arrow_schema");
        t.i32(5, self.columns.len() as i32);
        t.end_struct();
        for column in &self.columns {
            t.begin_struct();
            t.i32(1, column.kind.physical_type());
            t.i32(3, parquet_enums::REQUIRED);
            t.binary(4, column.name.as_bytes());
            if let Some((bit_width, signed, converted)) = column.kind.integer_annotation() {
                t.i32(6, converted);
                t.struct_field(10);
                t.struct_field(parquet_enums::LOGICAL_INTEGER);
                t.i8(1, bit_width);
                t.bool(2, signed);
                t.end_struct();
                t.end_struct();
            }
            t.end_struct();
        }
        t.i64(3, self.rows as i64);
        let groups = self.rows.div_ceil(self.layout.group_rows) as usize;
        t.list(4, kind::STRUCT, groups);
        for group in self.groups() {
            t.begin_struct();
            t.list(1, kind::STRUCT, self.columns.len());
            let mut values_len = 0;
            for (c, column) in self.columns.iter().enumerate() {
                let slot_start = group.slot_starts[c] as i64;
                let chunk = size(&group, c);
                values_len += column.kind.plain_len(group.rows);
                t.begin_struct();
                t.i64(2, slot_start); // file_offset
                t.struct_field(3); // meta_data
                t.i32(1, column.kind.physical_type());
                t.list(2, kind::I32, 2);
                t.i32_element(parquet_enums::PLAIN);
                t.i32_element(parquet_enums::RLE);
                t.list(3, kind::BINARY, 1);
                t.binary_element(column.name.as_bytes());
                t.i32(4, parquet_enums::SNAPPY);
                t.i64(5, group.rows as i64);
                t.i64(6, chunk.uncompressed as i64);
                t.i64(7, chunk.compressed as i64);
                t.i64(9, slot_start); // data_page_offset
                t.end_struct();
                t.end_struct();
            }
            t.i64(2, values_len as i64); // total_byte_size
            t.i64(3, group.rows as i64);
            t.i64(5, group.slot_starts[0] as i64); // file_offset
            t.end_struct();
        }
        t.list(5, kind::STRUCT, 1);
        t.begin_struct();
        t.binary(1, parquet::arrow::ARROW_SCHEMA_META_KEY.as_bytes());
        t.binary(2, self.arrow_schema.as_bytes());
        t.end_struct();
        let mut created_by = format!("soma-mount {}", env!("CARGO_PKG_VERSION")).into_bytes();
        created_by.resize((created_by_len as usize).max(created_by.len()), b' ');
        t.binary(6, &created_by);
        t.list(7, kind::STRUCT, self.columns.len());
        for _ in &self.columns {
            t.begin_struct();
            t.struct_field(1); // TYPE_ORDER
            t.end_struct();
            t.end_struct();
        }
        t.end_struct();
        t.bytes
    }
}

/// The length of `created_by` in the footer the size counts: at least [`MIN_CREATED_BY`], and
/// such that it and every length up to `shortfall` more take varints of the same width. So a
/// footer whose sizes come short by up to `shortfall` bytes is padded back to the counted
/// length by lengthening `created_by` by as many bytes.
fn created_by_base(shortfall: u64) -> u64 {
    let mut base = MIN_CREATED_BY;
    while varint_len(base + shortfall) != varint_len(base) {
        base *= 128; // the shortest length of the next width
    }
    base
}

/// The bound of a column chunk of `rows` rows of `kind`, in pages of `page_rows`.
fn chunk_bound(kind: ColumnKind, rows: u64, page_rows: u64) -> ChunkBound {
    let page = |rows: u64| {
        let plain = kind.plain_len(rows);
        let compressed = snap::raw::max_compress_len(plain as usize) as u64;
        let header = page_header(rows, plain, compressed).len() as u64;
        ChunkBound {
            slot_len: header + compressed,
            uncompressed: header + plain,
        }
    };
    let (full, rest) = (rows / page_rows, rows % page_rows);
    let mut bound = page(page_rows);
    bound.slot_len *= full;
    bound.uncompressed *= full;
    if rest > 0 {
        let last = page(rest);
        bound.slot_len += last.slot_len;
        bound.uncompressed += last.uncompressed;
    }
    bound
}

/// A DataPage V1 header: `rows` PLAIN values of `plain` bytes, `compressed` bytes compressed.
fn page_header(rows: u64, plain: u64, compressed: u64) -> Vec<u8> {
    let mut t = Compact::default();
    t.begin_struct();
    t.i32(1, parquet_enums::DATA_PAGE);
    t.i32(2, plain as i32);
    t.i32(3, compressed as i32);
    t.struct_field(5);
    t.i32(1, rows as i32);
    t.i32(2, parquet_enums::PLAIN);
    t.i32(3, parquet_enums::RLE); // definition levels (none: the column is required)
    t.i32(4, parquet_enums::RLE); // repetition levels (none)
    t.end_struct();
    t.end_struct();
    t.bytes
}

/// The column chunks of a sized file as they are written: each page goes where its chunk has
/// come to in its slot.
struct Slots<W> {
    out: W,
    /// The offset `out` is at.
    position: u64,
    /// What the current row group's chunks hold so far, by column.
    written: Vec<ChunkSize>,
    /// What every finished chunk holds, group by group.
    sizes: Vec<ChunkSize>,
    page_writer: PageWriter,
}

impl<W: Write + Seek> Slots<W> {
    /// The slots of a file of `columns` columns, written to `out`, which is past "PAR1".
    fn new(out: W, columns: usize) -> Slots<W> {
        Slots {
            out,
            position: MAGIC.len() as u64,
            written: vec![ChunkSize::default(); columns],
            sizes: Vec::new(),
            page_writer: PageWriter::new(),
        }
    }

    /// Writes each column's page of `group` compressed, where its chunk has come to in its
    /// slot (seeking past what is left of the slot before), and empties it. An error when a
    /// chunk would outgrow its slot, which `bounds` gives.
    fn write_pages(
        &mut self,
        group: &Group,
        bounds: &[ChunkBound],
        pages: &mut [Page],
    ) -> io::Result<()> {
        for (c, page) in pages.iter_mut().enumerate() {
            let slot_start = group.slot_starts[c];
            let chunk = &mut self.written[c];
            let bytes = self.page_writer.compress(page)?;
            let at_chunk = chunk.compressed;
            if at_chunk + bytes.len() as u64 > bounds[c].slot_len {
                return Err(io::Error::other("a column chunk outgrew its slot"));
            }
            if self.position != slot_start + at_chunk {
                self.position = self.out.seek(SeekFrom::Start(slot_start + at_chunk))?;
            }
            self.out.write_all(bytes)?;
            self.position += bytes.len() as u64;
            chunk.compressed += bytes.len() as u64;
            chunk.uncompressed += self.page_writer.uncompressed;
            page.plain.clear();
            page.rows = 0;
        }
        Ok(())
    }

    /// Ends the current row group: what its chunks hold is final.
    fn end_group(&mut self) {
        self.sizes.extend_from_slice(&self.written);
        self.written.fill(ChunkSize::default());
    }
}

/// Compresses pages and puts their headers before them, in a buffer kept from page to page.
struct PageWriter {
    encoder: snap::raw::Encoder,
    buffer: Vec<u8>,
    /// The last page's uncompressed length, header included.
    uncompressed: u64,
}

impl PageWriter {
    fn new() -> PageWriter {
        PageWriter {
            encoder: snap::raw::Encoder::new(),
            buffer: Vec::new(),
            uncompressed: 0,
        }
    }

    /// `page` as it is written: its header, then its values compressed.
    fn compress(&mut self, page: &Page) -> io::Result<&[u8]> {
        let needed = HEADER_ROOM + snap::raw::max_compress_len(page.plain.len());
        if self.buffer.len() < needed {
            self.buffer.resize(needed, 0);
        }
        let compressed = self
            .encoder
            .compress(&page.plain, &mut self.buffer[HEADER_ROOM..])
            .map_err(io::Error::other)?;
        let header = page_header(page.rows, page.plain.len() as u64, compressed as u64);
        let start = HEADER_ROOM - header.len();
        self.buffer[start..HEADER_ROOM].copy_from_slice(&header);
        self.uncompressed = (header.len() + page.plain.len()) as u64;
        Ok(&self.buffer[start..HEADER_ROOM + compressed])
    }
}

/// The length of `value`'s varint (as thrift's compact protocol writes lengths).
fn varint_len(value: u64) -> u64 {
    (64 - (value | 1).leading_zeros() as u64).div_ceil(7)
}

/// The length of a non-negative `value`'s zigzag varint (as thrift's compact protocol writes
/// integers wider than a byte).
fn zigzag_len(value: u64) -> u64 {
    varint_len(Compact::zigzag(value as i64))
}

/// Thrift compact protocol type codes.
mod kind {
    pub const BOOLEAN_TRUE: u8 = 1;
    pub const BOOLEAN_FALSE: u8 = 2;
    pub const BYTE: u8 = 3;
    pub const I32: u8 = 5;
    pub const I64: u8 = 6;
    pub const BINARY: u8 = 8;
    pub const LIST: u8 = 9;
    pub const STRUCT: u8 = 12;
}

/// An encoder of thrift's compact protocol, for the fields the footer and page headers hold:
/// each field a header with its id as a delta from the last one's, integers as zigzag
/// varints, binaries with their length first, lists with their length and element type, and
/// structs that end with a stop byte.
#[derive(Default)]
struct Compact {
    bytes: Vec<u8>,
    /// The id of the last field written in the struct being written.
    last_id: i16,
    /// The last ids of the structs the one being written is in.
    outer_ids: Vec<i16>,
}

impl Compact {
    fn varint(&mut self, mut value: u64) {
        while value >= 0x80 {
            self.bytes.push(value as u8 | 0x80);
            value >>= 7;
        }
        self.bytes.push(value as u8);
    }

    fn zigzag(value: i64) -> u64 {
        ((value << 1) ^ (value >> 63)) as u64
    }

    fn field(&mut self, id: i16, kind: u8) {
        let delta = id - self.last_id;
        if (1..=15).contains(&delta) {
            self.bytes.push((delta as u8) << 4 | kind);
        } else {
            self.bytes.push(kind);
            self.varint(Compact::zigzag(id.into()));
        }
        self.last_id = id;
    }

    /// Starts a struct that is a list element, or the outermost one.
    fn begin_struct(&mut self) {
        self.outer_ids.push(self.last_id);
        self.last_id = 0;
    }

    /// Starts a struct (or union) that is field `id`.
    fn struct_field(&mut self, id: i16) {
        self.field(id, kind::STRUCT);
        self.begin_struct();
    }

    fn end_struct(&mut self) {
        self.bytes.push(0);
        self.last_id = self.outer_ids.pop().unwrap_or(0);
    }

    fn bool(&mut self, id: i16, value: bool) {
        let kind = if value {
            kind::BOOLEAN_TRUE
        } else {
            kind::BOOLEAN_FALSE
        };
        self.field(id, kind);
    }

    fn i8(&mut self, id: i16, value: i8) {
        self.field(id, kind::BYTE);
        self.bytes.push(value as u8);
    }

    fn i32(&mut self, id: i16, value: i32) {
        self.field(id, kind::I32);
        self.i32_element(value);
    }

    fn i64(&mut self, id: i16, value: i64) {
        self.field(id, kind::I64);
        self.varint(Compact::zigzag(value));
    }

    fn binary(&mut self, id: i16, value: &[u8]) {
        self.field(id, kind::BINARY);
        self.binary_element(value);
    }

    /// Starts a list of `len` elements of `element_kind`, field `id`; the elements follow.
    fn list(&mut self, id: i16, element_kind: u8, len: usize) {
        self.field(id, kind::LIST);
        if len < 15 {
            self.bytes.push((len as u8) << 4 | element_kind);
        } else {
            self.bytes.push(0xf0 | element_kind);
            self.varint(len as u64);
        }
    }

    fn i32_element(&mut self, value: i32) {
        self.varint(Compact::zigzag(value.into()));
    }

    fn binary_element(&mut self, value: &[u8]) {
        self.varint(value.len() as u64);
        self.bytes.extend_from_slice(value);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs::File;
    use std::os::unix::fs::MetadataExt;
    use std::path::PathBuf;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    use arrow_array::{
        ArrayRef, BooleanArray, Float32Array, Float64Array, Int16Array, Int32Array, Int64Array,
        Int8Array, UInt16Array, UInt32Array, UInt64Array, UInt8Array,
    };
    use arrow_schema::{Field, SchemaRef};
    use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

    const TYPES: [DataType; 11] = [
        DataType::Boolean,
        DataType::Int8,
        DataType::Int16,
        DataType::Int32,
        DataType::Int64,
        DataType::UInt8,
        DataType::UInt16,
        DataType::UInt32,
        DataType::UInt64,
        DataType::Float32,
        DataType::Float64,
    ];

    /// How a test column's values go.
    #[derive(Debug, Clone, Copy)]
    enum Values {
        /// Random bits: nothing for snappy to find.
        Random,
        /// One value throughout.
        Constant,
        /// Rising slowly, as a matrix's coordinates row by row.
        Sorted,
    }

    /// A path in the temporary directory, different for every call.
    fn temp_path() -> PathBuf {
        static COUNT: AtomicUsize = AtomicUsize::new(0);
        let n = COUNT.fetch_add(1, Ordering::Relaxed);
        std::env::temp_dir().join(format!(
            "soma-mount-parquet-sized-{}-{n}.parquet",
            std::process::id()
        ))
    }

    /// A column of `rows` values of `data_type`, going as `values` says, drawn from `seed`.
    fn column(data_type: &DataType, rows: usize, values: Values, seed: u64) -> ArrayRef {
        let mut state = seed | 1;
        let raw: Vec<u64> = (0..rows as u64)
            .map(|i| match values {
                Values::Random => {
                    // xorshift64*
                    state ^= state >> 12;
                    state ^= state << 25;
                    state ^= state >> 27;
                    state.wrapping_mul(0x2545_f491_4f6c_dd1d)
                }
                Values::Constant => seed,
                Values::Sorted => i / 3,
            })
            .collect();
        let float32 = |r: u64| match values {
            Values::Sorted => r as f32,
            _ => Some(f32::from_bits(r as u32))
                .filter(|f| !f.is_nan())
                .unwrap_or(1.5),
        };
        let float64 = |r: u64| match values {
            Values::Sorted => r as f64,
            _ => Some(f64::from_bits(r))
                .filter(|f| !f.is_nan())
                .unwrap_or(1.5),
        };
        let r = raw.iter().copied();
        match data_type {
            DataType::Boolean => Arc::new(BooleanArray::from_iter(r.map(|r| Some(r & 1 == 1)))),
            DataType::Int8 => Arc::new(Int8Array::from_iter_values(r.map(|r| r as i8))),
            DataType::Int16 => Arc::new(Int16Array::from_iter_values(r.map(|r| r as i16))),
            DataType::Int32 => Arc::new(Int32Array::from_iter_values(r.map(|r| r as i32))),
            DataType::Int64 => Arc::new(Int64Array::from_iter_values(r.map(|r| r as i64))),
            DataType::UInt8 => Arc::new(UInt8Array::from_iter_values(r.map(|r| r as u8))),
            DataType::UInt16 => Arc::new(UInt16Array::from_iter_values(r.map(|r| r as u16))),
            DataType::UInt32 => Arc::new(UInt32Array::from_iter_values(r.map(|r| r as u32))),
            DataType::UInt64 => Arc::new(UInt64Array::from_iter_values(r)),
            DataType::Float32 => Arc::new(Float32Array::from_iter_values(r.map(float32))),
            DataType::Float64 => Arc::new(Float64Array::from_iter_values(r.map(float64))),
            other => unreachable!("no test column of {other}"),
        }
    }

    /// A table of `rows` rows with a column of each of `types`.
    fn table(types: &[DataType], rows: usize, values: Values, seed: u64) -> RecordBatch {
        let fields: Vec<Field> = types
            .iter()
            .enumerate()
            .map(|(i, t)| Field::new(format!("c{i}_{t}"), t.clone(), false))
            .collect();
        let columns = types
            .iter()
            .enumerate()
            .map(|(i, t)| column(t, rows, values, seed.wrapping_add(i as u64)))
            .collect();
        RecordBatch::try_new(Arc::new(Schema::new(fields)), columns).unwrap()
    }

    /// Writes `batches` as `sized` to a new file; its path.
    fn write_file(sized: &SizedParquet, batches: Vec<RecordBatch>) -> io::Result<PathBuf> {
        let path = temp_path();
        let file = File::create(&path)?;
        let mut batches = batches.into_iter();
        let written = sized.write(|| Ok(batches.next()), &file);
        if written.is_err() {
            std::fs::remove_file(&path)?;
        }
        written.map(|()| path)
    }

    /// The file at `path` read by the parquet crate, in one batch, and removed.
    fn read_file(path: &PathBuf) -> (SchemaRef, RecordBatch) {
        let file = File::open(path).unwrap();
        std::fs::remove_file(path).unwrap();
        let builder = ParquetRecordBatchReaderBuilder::try_new(file).unwrap();
        let schema = builder.schema().clone();
        let batches: Vec<RecordBatch> = builder.build().unwrap().collect::<Result<_, _>>().unwrap();
        let read = arrow_select::concat::concat_batches(&schema, &batches).unwrap();
        (schema, read)
    }

    /// `table` cut at `cuts` (row numbers, in any order; repeats make empty batches).
    fn split(table: &RecordBatch, mut cuts: Vec<usize>) -> Vec<RecordBatch> {
        cuts.sort_unstable();
        let mut start = 0;
        let mut batches = Vec::new();
        for cut in cuts.into_iter().chain([table.num_rows()]) {
            batches.push(table.slice(start, cut - start));
            start = cut;
        }
        batches
    }

    /// Writes `table` in a sized file of `layout`, cut at `cuts`, checks the file's length is
    /// the size, and reads it back.
    fn round_trip(
        table: &RecordBatch,
        layout: Layout,
        cuts: Vec<usize>,
    ) -> (SchemaRef, RecordBatch) {
        let rows = table.num_rows() as u64;
        let sized = SizedParquet::with_layout(&table.schema(), rows, layout).unwrap();
        let path = write_file(&sized, split(table, cuts)).unwrap();
        let len = std::fs::metadata(&path).unwrap().len();
        assert_eq!(len, sized.size(), "{layout:?}, {rows} rows");
        read_file(&path)
    }

    fn values_strategy() -> impl proptest::strategy::Strategy<Value = Values> {
        use proptest::prelude::*;
        prop_oneof![
            Just(Values::Random),
            Just(Values::Constant),
            Just(Values::Sorted)
        ]
    }

    proptest::proptest! {
        #[test]
        fn the_size_is_the_length_written_and_the_file_reads_back(
            types in proptest::collection::vec(proptest::sample::select(TYPES.to_vec()), 1..=4),
            rows in proptest::prop_oneof![proptest::strategy::Just(0usize), proptest::strategy::Just(1), 0..600usize],
            page_rows in 1..70u64,
            group_rows in 1..300u64,
            values in values_strategy(),
            seed in proptest::prelude::any::<u64>(),
            cuts in proptest::collection::vec(proptest::prelude::any::<proptest::sample::Index>(), 0..5),
        ) {
            let table = table(&types, rows, values, seed);
            let cuts = cuts.iter().map(|i| i.index(rows + 1)).collect();
            let (schema, read) = round_trip(&table, Layout { group_rows, page_rows }, cuts);
            proptest::prop_assert_eq!(&schema, &table.schema());
            proptest::prop_assert_eq!(read, table);
        }
    }

    #[test]
    fn no_rows_make_an_empty_table_of_the_schema() {
        let table = table(
            &[DataType::Int64, DataType::UInt32, DataType::Float64],
            0,
            Values::Random,
            1,
        );
        let sized = SizedParquet::of(&table.schema(), 0).unwrap();
        let path = write_file(&sized, vec![]).unwrap();
        assert_eq!(std::fs::metadata(&path).unwrap().len(), sized.size());
        let (schema, read) = read_file(&path);
        assert_eq!(schema, table.schema());
        assert_eq!(read.num_rows(), 0);
    }

    #[test]
    fn the_parquet_schema_and_chunks_are_as_the_parquet_crate_writes_them() {
        let table = table(&TYPES, 10, Values::Random, 3);
        let sized = SizedParquet::of(&table.schema(), 10).unwrap();
        let path = write_file(&sized, vec![table.clone()]).unwrap();
        let file = File::open(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        let metadata = ParquetRecordBatchReaderBuilder::try_new(file)
            .unwrap()
            .metadata()
            .clone();
        let expected = parquet::arrow::ArrowSchemaConverter::new()
            .convert(&table.schema())
            .unwrap();
        let written = metadata.file_metadata().schema_descr();
        assert_eq!(written.root_schema(), expected.root_schema());
        let group = sized.groups().next().unwrap();
        let chunks = metadata.row_group(0).columns();
        for (chunk, slot_start) in chunks.iter().zip(group.slot_starts) {
            assert_eq!(chunk.compression(), parquet::basic::Compression::SNAPPY);
            assert_eq!(chunk.data_page_offset(), slot_start as i64);
            assert_eq!(chunk.file_offset(), slot_start as i64);
            assert_eq!(chunk.num_values(), 10);
        }
    }

    #[test]
    fn nullable_and_variable_width_columns_have_no_sized_file() {
        let schema =
            |field: Field| Schema::new(vec![Field::new("x", DataType::Int64, false), field]);
        assert!(SizedParquet::of(&schema(Field::new("y", DataType::Int64, true)), 5).is_none());
        assert!(SizedParquet::of(&schema(Field::new("y", DataType::Utf8, false)), 5).is_none());
        assert!(SizedParquet::of(&Schema::empty(), 5).is_none());
        assert!(SizedParquet::of(&schema(Field::new("y", DataType::UInt8, false)), 5).is_some());
    }

    #[test]
    fn more_or_fewer_rows_than_announced_fail() {
        let table = table(&[DataType::Int64], 100, Values::Sorted, 1);
        for announced in [99, 101] {
            let sized = SizedParquet::of(&table.schema(), announced).unwrap();
            assert!(
                write_file(&sized, vec![table.clone()]).is_err(),
                "{announced}"
            );
        }
    }

    #[test]
    fn compressible_values_leave_holes() {
        // Two and a half row groups of a matrix's coordinates and a constant value.
        let rows = (GROUP_ROWS * 5 / 2) as usize;
        let coordinates =
            |f: fn(i64) -> i64| Arc::new(Int64Array::from_iter_values((0..rows as i64).map(f)));
        let table = RecordBatch::try_from_iter_with_nullable([
            ("soma_dim_0", coordinates(|i| i / 1000) as ArrayRef, false),
            ("soma_dim_1", coordinates(|i| i % 1000), false),
            (
                "soma_data",
                Arc::new(Float32Array::from_iter_values((0..rows).map(|_| 1.0))),
                false,
            ),
        ])
        .unwrap();
        let sized = SizedParquet::of(&table.schema(), rows as u64).unwrap();
        let cuts = (1..10).map(|i| i * rows / 10 + 7).collect();
        let path = write_file(&sized, split(&table, cuts)).unwrap();
        let meta = std::fs::metadata(&path).unwrap();
        let (_, read) = read_file(&path);
        assert_eq!(read, table);
        assert_eq!(meta.len(), sized.size());
        let on_disk = meta.blocks() * 512;
        assert!(
            on_disk < meta.len() / 4,
            "{on_disk} bytes on disk of {}",
            meta.len()
        );
    }

    #[test]
    fn created_by_stays_within_one_varint_width() {
        assert_eq!(created_by_base(0), 128);
        assert_eq!(created_by_base(16383 - 128), 128);
        assert_eq!(created_by_base(16384 - 128), 16384);
        assert_eq!(created_by_base(2_097_151 - 16384), 16384);
        assert_eq!(created_by_base(2_097_152 - 16384), 2_097_152);
        for shortfall in [0, 1, 100, 16255, 16256, 20_000, 3_000_000] {
            let base = created_by_base(shortfall);
            assert_eq!(
                varint_len(base),
                varint_len(base + shortfall),
                "{shortfall}"
            );
        }
    }

    #[test]
    fn many_column_chunks_pad_created_by_past_two_byte_lengths() {
        // 8,400 chunks, each able to come short by two bytes: more than a two-byte length
        // of created_by has room for, so its length takes three bytes.
        let types = [const { DataType::Int64 }; 4];
        let layout = Layout {
            group_rows: 16,
            page_rows: 16,
        };
        for values in [Values::Constant, Values::Random] {
            let table = table(&types, 16 * 2100, values, 7);
            let sized = SizedParquet::with_layout(&table.schema(), 16 * 2100, layout).unwrap();
            assert_eq!(sized.created_by_base, 16384);
            let (_, read) = round_trip(&table, layout, vec![1000, 20_000]);
            assert_eq!(read, table);
        }
    }

    #[test]
    fn the_longest_page_header_fits_its_room() {
        let max = i32::MAX as u64;
        let header = page_header(max, max, max);
        assert_eq!(header.len(), 29);
        assert!(header.len() <= HEADER_ROOM);
    }

    #[test]
    fn varint_lengths_are_those_encoded() {
        let values = [0u64, 1, 63, 64, 127, 128, 8191, 8192, 16383, 16384, 1 << 40];
        for value in values.into_iter().chain([(1 << 62) - 1]) {
            let mut t = Compact::default();
            t.varint(value);
            assert_eq!(varint_len(value), t.bytes.len() as u64, "{value}");
            let mut t = Compact::default();
            t.i64(1, value as i64);
            assert_eq!(1 + zigzag_len(value), t.bytes.len() as u64, "{value}");
        }
    }
}
