//! Key-value metadata of groups and arrays, read whole into typed values.

use std::collections::BTreeMap;
use std::ffi::{c_char, c_void};

use super::datatype::{Datatype, Value};
use super::Result;

/// One metadata entry: its TileDB datatype and its values.
#[derive(Debug, Clone, PartialEq)]
pub struct MetadataValue {
    pub datatype: Datatype,
    pub values: Vec<Value>,
}

impl MetadataValue {
    /// The value as text, when it is one string.
    pub fn as_str(&self) -> Option<&str> {
        match self.values.as_slice() {
            [Value::Text(s)] => Some(s),
            _ => None,
        }
    }
}

/// All metadata of an object, sorted by key.
pub type Metadata = BTreeMap<String, MetadataValue>;

/// The raw out-parameters of `tiledb_{group,array}_get_metadata_from_index`.
pub(crate) struct RawEntry {
    pub key: *const c_char,
    pub key_len: u32,
    pub datatype: u32,
    pub value_num: u32,
    pub value: *const c_void,
}

impl RawEntry {
    pub fn new() -> Self {
        RawEntry {
            key: std::ptr::null(),
            key_len: 0,
            datatype: 0,
            value_num: 0,
            value: std::ptr::null(),
        }
    }
}

/// Reads `count` entries through `get_entry`, which fills a `RawEntry` for an index; the
/// pointers it leaves are owned by the open object and valid until it closes.
pub(crate) fn read_all(
    count: u64,
    mut get_entry: impl FnMut(u64, &mut RawEntry) -> Result<()>,
) -> Result<Metadata> {
    let mut out = Metadata::new();
    for index in 0..count {
        let mut e = RawEntry::new();
        get_entry(index, &mut e)?;
        let datatype = Datatype::from_raw(e.datatype)?;
        // SAFETY: libtiledb returned `key_len` bytes at `key` and `value_num` values of
        // `datatype` at `value`, owned by the still-open object; both are copied here.
        let (key, bytes) = unsafe {
            let key = if e.key.is_null() {
                &[][..]
            } else {
                std::slice::from_raw_parts(e.key as *const u8, e.key_len as usize)
            };
            let len = e.value_num as usize * datatype.size();
            let bytes = if e.value.is_null() || len == 0 {
                &[][..]
            } else {
                std::slice::from_raw_parts(e.value as *const u8, len)
            };
            (key, bytes)
        };
        let values = datatype.decode(bytes);
        out.insert(
            String::from_utf8_lossy(key).into_owned(),
            MetadataValue { datatype, values },
        );
    }
    Ok(out)
}
