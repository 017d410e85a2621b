//! Zarr format 2, as anndata reads it: the JSON of a group (`.zgroup`), an array
//! (`.zarray`), their attributes (`.zattrs`) and the consolidated metadata of a whole store
//! (`.zmetadata`); how an array is cut into chunks and what each chunk file is called; and
//! the bytes of a chunk.
//!
//! Chunks are stored uncompressed (`"compressor": null`) and whole: a chunk at the edge of
//! an array is padded with the fill value to the full chunk shape, as Zarr writes it. So a
//! chunk of numbers or booleans has a size that follows from its `.zarray` alone
//! ([`ArrayMeta::chunk_size`]). Text is `vlen-utf8` (a count, then each string's length and
//! bytes), whose size is only known once made.
//!
//! Chunk shapes are chosen for readers that fetch a chunk at a time: about
//! [`CHUNK_BYTES`] each. A one-dimensional array of numbers holds `CHUNK_BYTES / itemsize`
//! values a chunk; a two-dimensional one whole rows, as many as make `CHUNK_BYTES` (at least
//! one); text [`TEXT_CHUNK_ITEMS`] strings a chunk.
//!
//! This module knows nothing of SOMA or anndata: arrays are shapes, types and Arrow values.

use std::io;

use arrow_array::cast::AsArray;
use arrow_array::{Array, ArrayRef, LargeStringArray};
use arrow_schema::DataType;
use serde_json::{json, Map, Value as Json};

/// About the size of a chunk of numbers (1 MiB): a slice of a few rows of X reads one chunk
/// of `data` and `indices` (262,144 float32 entries) from TileDB, not many times the rows it
/// wants; a whole read takes 4 chunks per million entries.
pub const CHUNK_BYTES: u64 = 1 << 20;
/// Strings in a chunk of text.
pub const TEXT_CHUNK_ITEMS: u64 = 1 << 16;

/// What an array holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Dtype {
    /// Numbers of an Arrow primitive type (integers, float32, float64).
    Number(DataType),
    /// Booleans, a byte each.
    Bool,
    /// UTF-8 strings (`vlen-utf8`).
    Text,
}

impl Dtype {
    /// The type of `values` as stored: a number type as it is, booleans, else text.
    pub fn of(data_type: &DataType) -> Dtype {
        match data_type {
            DataType::Boolean => Dtype::Bool,
            t if item_size(t).is_some() => Dtype::Number(t.clone()),
            _ => Dtype::Text,
        }
    }

    /// Bytes per item; `None` for text.
    pub fn item_size(&self) -> Option<u64> {
        match self {
            Dtype::Number(t) => item_size(t),
            Dtype::Bool => Some(1),
            Dtype::Text => None,
        }
    }

    /// NumPy's type string (`<f4`, `|b1`, `|O`).
    fn descr(&self) -> String {
        match self {
            Dtype::Bool => "|b1".into(),
            Dtype::Text => "|O".into(),
            Dtype::Number(t) => {
                let kind = match t {
                    t if t.is_floating() => 'f',
                    t if t.is_signed_integer() => 'i',
                    _ => 'u',
                };
                let size = item_size(t).unwrap_or(0);
                let order = if size == 1 { '|' } else { '<' };
                format!("{order}{kind}{size}")
            }
        }
    }

    fn fill_value(&self) -> Json {
        match self {
            Dtype::Bool => json!(false),
            Dtype::Text => json!(""),
            Dtype::Number(t) if t.is_floating() => json!(0.0),
            Dtype::Number(_) => json!(0),
        }
    }
}

/// Bytes per number of a type stored as numbers.
fn item_size(data_type: &DataType) -> Option<u64> {
    Some(match data_type {
        DataType::Int8 | DataType::UInt8 => 1,
        DataType::Int16 | DataType::UInt16 => 2,
        DataType::Int32 | DataType::UInt32 | DataType::Float32 => 4,
        DataType::Int64 | DataType::UInt64 | DataType::Float64 => 8,
        _ => return None,
    })
}

/// An array's shape, chunk shape and type: what its `.zarray` says.
#[derive(Debug, Clone)]
pub struct ArrayMeta {
    pub shape: Vec<u64>,
    pub chunks: Vec<u64>,
    pub dtype: Dtype,
}

impl ArrayMeta {
    /// An array of `shape`, cut into chunks by the rule of this module: along the first
    /// dimension only, about [`CHUNK_BYTES`] (or [`TEXT_CHUNK_ITEMS`] strings) each.
    pub fn new(shape: Vec<u64>, dtype: Dtype) -> ArrayMeta {
        let row_items: u64 = shape.iter().skip(1).product::<u64>().max(1);
        let rows = match dtype.item_size() {
            Some(size) => CHUNK_BYTES / (row_items * size),
            None => TEXT_CHUNK_ITEMS / row_items,
        };
        ArrayMeta::with_chunk_rows(shape, dtype, rows)
    }

    /// An array of `shape` cut along its first dimension only, `rows` a chunk (at least 1,
    /// at most the array's).
    pub fn with_chunk_rows(shape: Vec<u64>, dtype: Dtype, rows: u64) -> ArrayMeta {
        let mut chunks = shape.clone();
        if let Some(first) = chunks.first_mut() {
            *first = rows.clamp(1, (*first).max(1));
        }
        // A dimension of length 0 still has chunks of at least 1.
        for chunk in chunks.iter_mut() {
            *chunk = (*chunk).max(1);
        }
        ArrayMeta {
            shape,
            chunks,
            dtype,
        }
    }

    /// Items in one chunk (padded to the full chunk shape).
    pub fn chunk_items(&self) -> u64 {
        self.chunks.iter().product()
    }

    /// The exact size of every chunk file; `None` for text.
    pub fn chunk_size(&self) -> Option<u64> {
        Some(self.chunk_items() * self.dtype.item_size()?)
    }

    /// Chunks along the first dimension (only that one is cut).
    pub fn chunk_count(&self) -> u64 {
        match (self.shape.first(), self.chunks.first()) {
            (Some(&len), Some(&chunk)) => len.div_ceil(chunk),
            _ => 1,
        }
    }

    /// The name of chunk `k` (along the first dimension): `k`, `k.0`, or `0` for a scalar.
    pub fn chunk_name(&self, k: u64) -> String {
        let mut name = k.to_string();
        for _ in 1..self.shape.len() {
            name.push_str(".0");
        }
        name
    }

    /// The range of first-dimension indices chunk `k` holds (without the padding).
    pub fn chunk_rows(&self, k: u64) -> std::ops::Range<u64> {
        let (len, chunk) = match (self.shape.first(), self.chunks.first()) {
            (Some(&len), Some(&chunk)) => (len, chunk),
            _ => return 0..1,
        };
        (k * chunk).min(len)..((k + 1) * chunk).min(len)
    }

    /// The `.zarray` document.
    pub fn zarray(&self) -> Json {
        let filters = match self.dtype {
            Dtype::Text => json!([{"id": "vlen-utf8"}]),
            _ => Json::Null,
        };
        json!({
            "shape": self.shape,
            "chunks": self.chunks,
            "dtype": self.dtype.descr(),
            "fill_value": self.dtype.fill_value(),
            "order": "C",
            "filters": filters,
            "dimension_separator": ".",
            "compressor": null,
            "zarr_format": 2,
        })
    }
}

/// The `.zgroup` document.
pub fn zgroup() -> Json {
    json!({"zarr_format": 2})
}

/// The `.zmetadata` document: every `.zgroup`, `.zarray` and `.zattrs` of a store, by path.
pub fn consolidated(metadata: Map<String, Json>) -> Json {
    json!({"metadata": metadata, "zarr_consolidated_format": 1})
}

/// A JSON document's bytes, as Zarr writes them (indented).
pub fn document(value: &Json) -> Vec<u8> {
    let mut bytes = serde_json::to_vec_pretty(value).unwrap_or_default();
    bytes.push(b'\n');
    bytes
}

/// Appends the bytes of `values` (numbers or booleans, as [`Dtype::of`] their type says)
/// to a chunk: little-endian, a byte per boolean; a null as NaN for floats, else 0.
pub fn put_fixed(values: &dyn Array, out: &mut Vec<u8>) -> io::Result<()> {
    if let Some(bools) = values.as_boolean_opt() {
        out.extend((0..bools.len()).map(|i| u8::from(bools.is_valid(i) && bools.value(i))));
        return Ok(());
    }
    let size = item_size(values.data_type()).ok_or_else(|| {
        io::Error::other(format!("{} is not stored as numbers", values.data_type()))
    })? as usize;
    let data = values.to_data();
    let buffer = data
        .buffers()
        .first()
        .ok_or_else(|| io::Error::other("numbers without a buffer"))?;
    let start = out.len();
    let bytes = &buffer.as_slice()[data.offset() * size..(data.offset() + data.len()) * size];
    out.extend_from_slice(bytes);
    if let Some(nulls) = data.nulls().filter(|n| n.null_count() > 0) {
        let fill: Vec<u8> = match values.data_type() {
            DataType::Float32 => f32::NAN.to_le_bytes().to_vec(),
            DataType::Float64 => f64::NAN.to_le_bytes().to_vec(),
            _ => vec![0; size],
        };
        for i in (0..data.len()).filter(|&i| nulls.is_null(i)) {
            out[start + i * size..start + (i + 1) * size].copy_from_slice(&fill);
        }
    }
    Ok(())
}

/// A chunk of fixed-size items: `bytes` of the values, padded with zeros (the fill value)
/// to `size`.
pub fn padded(mut bytes: Vec<u8>, size: u64) -> io::Result<Vec<u8>> {
    let size = size as usize;
    if bytes.len() > size {
        return Err(io::Error::other(format!(
            "{} bytes of values for a chunk of {size}",
            bytes.len()
        )));
    }
    bytes.resize(size, 0);
    Ok(bytes)
}

/// A chunk of text (`vlen-utf8`): the number of items, then each string's length and bytes
/// (a null as the empty string), padded with empty strings to `items`.
pub fn text_chunk(values: &LargeStringArray, items: u64) -> io::Result<Vec<u8>> {
    if values.len() as u64 > items {
        return Err(io::Error::other(format!(
            "{} strings for a chunk of {items}",
            values.len()
        )));
    }
    let length =
        |n: usize| u32::try_from(n).map_err(|_| io::Error::other("a string of 4 GiB or more"));
    let text_bytes = values.values().len();
    let mut out = Vec::with_capacity(4 + 4 * items as usize + text_bytes);
    out.extend_from_slice(&length(items as usize)?.to_le_bytes());
    for i in 0..values.len() {
        let text = if values.is_valid(i) {
            values.value(i)
        } else {
            ""
        };
        out.extend_from_slice(&length(text.len())?.to_le_bytes());
        out.extend_from_slice(text.as_bytes());
    }
    for _ in values.len() as u64..items {
        out.extend_from_slice(&0u32.to_le_bytes());
    }
    Ok(out)
}

/// A chunk of `values` (all of the chunk's items, not padded yet) of an array of `meta`.
pub fn chunk(meta: &ArrayMeta, values: &ArrayRef) -> io::Result<Vec<u8>> {
    match meta.chunk_size() {
        Some(size) => {
            let mut bytes = Vec::with_capacity(size as usize);
            put_fixed(values.as_ref(), &mut bytes)?;
            padded(bytes, size)
        }
        None => text_chunk(&super::anndata::texts(values)?, meta.chunk_items()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::{Float32Array, Int64Array};
    use std::sync::Arc;

    #[test]
    fn chunks_hold_about_one_mib_along_the_first_dimension() {
        let x = ArrayMeta::new(vec![20_000_000], Dtype::Number(DataType::Float32));
        assert_eq!(x.chunks, [1 << 18]);
        assert_eq!(x.chunk_count(), 20_000_000u64.div_ceil(1 << 18));
        assert_eq!(x.chunk_size(), Some(1 << 20));
        let small = ArrayMeta::new(vec![700], Dtype::Number(DataType::Int64));
        assert_eq!(
            (small.chunks.as_slice(), small.chunk_count()),
            (&[700][..], 1)
        );
        let wide = ArrayMeta::new(vec![50_000, 1_000], Dtype::Number(DataType::Float32));
        assert_eq!(wide.chunks, [262, 1000]);
        assert_eq!(wide.chunk_name(3), "3.0");
        assert_eq!(wide.chunk_rows(190), 49_780..50_000);
        let scalar = ArrayMeta::new(vec![], Dtype::Text);
        assert_eq!(
            (scalar.chunk_name(0), scalar.chunk_items()),
            ("0".into(), 1)
        );
    }

    #[test]
    fn an_edge_chunk_is_padded_and_nulls_are_filled() {
        let meta = ArrayMeta::new(vec![3], Dtype::Number(DataType::Float32));
        let values: ArrayRef = Arc::new(Float32Array::from(vec![Some(1.5), None]));
        let mut bytes = chunk(&meta, &values).unwrap();
        assert_eq!(bytes.len(), 12);
        assert_eq!(bytes[..4], 1.5f32.to_le_bytes());
        assert!(f32::from_le_bytes(bytes[4..8].try_into().unwrap()).is_nan());
        bytes.truncate(0);
        let ints: ArrayRef = Arc::new(Int64Array::from(vec![7]).slice(0, 1));
        put_fixed(ints.as_ref(), &mut bytes).unwrap();
        assert_eq!(bytes, 7i64.to_le_bytes());
    }

    #[test]
    fn text_is_counted_then_each_string_with_its_length() {
        let values = LargeStringArray::from(vec![Some("ab"), None]);
        let bytes = text_chunk(&values, 3).unwrap();
        let mut want = Vec::new();
        for word in [3u32, 2] {
            want.extend_from_slice(&word.to_le_bytes());
        }
        want.extend_from_slice(b"ab");
        want.extend_from_slice(&[0; 8]);
        assert_eq!(bytes, want);
    }
}
