//! Key-value metadata of groups and arrays, read whole into typed values.

use std::collections::BTreeMap;
use std::ffi::{c_char, c_void};

use super::datatype::{Datatype, Value};
use super::ffi::{capi_return_t, tiledb_ctx_t, tiledb_datatype_t};
use super::{Context, Result};

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

/// `tiledb_{group,array}_get_metadata_num` for a handle of type `T`.
pub(crate) type MetadataNum<T> =
    unsafe extern "C" fn(*mut tiledb_ctx_t, *mut T, *mut u64) -> capi_return_t;

/// `tiledb_{group,array}_get_metadata_from_index` for a handle of type `T`.
pub(crate) type MetadataFromIndex<T> = unsafe extern "C" fn(
    *mut tiledb_ctx_t,
    *mut T,
    u64,
    *mut *const c_char,
    *mut u32,
    *mut tiledb_datatype_t,
    *mut u32,
    *mut *const c_void,
) -> capi_return_t;

/// Reads every metadata entry of an open group or array through its pair of C functions.
///
/// # Safety
/// `handle` is a live group or array, made through `ctx`'s context and open for reading, of
/// the type `num` and `from_index` take (`tiledb_group_*` with a group, `tiledb_array_*` with
/// an array); it stays open for the call.
pub(crate) unsafe fn read_all<T>(
    ctx: &Context,
    handle: *mut T,
    num: MetadataNum<T>,
    from_index: MetadataFromIndex<T>,
) -> Result<Metadata> {
    let mut count = 0u64;
    // SAFETY: `handle` is open and of the kind `num` takes (the caller's contract); `count` is
    // a local.
    ctx.check(unsafe { num(ctx.as_ptr(), handle, &mut count) })?;
    let mut out = Metadata::new();
    for index in 0..count {
        let (mut key, mut key_len, mut datatype, mut value_num, mut value) =
            (std::ptr::null(), 0u32, 0u32, 0u32, std::ptr::null());
        // SAFETY: as above; every out-pointer is a local. The key and value pointers it sets
        // are owned by the open object and valid until it closes.
        ctx.check(unsafe {
            from_index(
                ctx.as_ptr(),
                handle,
                index,
                &mut key,
                &mut key_len,
                &mut datatype,
                &mut value_num,
                &mut value,
            )
        })?;
        let datatype = Datatype::from_raw(datatype)?;
        // SAFETY: libtiledb returned `key_len` bytes at `key` and `value_num` values of
        // `datatype` at `value`, owned by the still-open object; both are copied here.
        let (key, bytes) = unsafe {
            let key = if key.is_null() {
                &[][..]
            } else {
                std::slice::from_raw_parts(key as *const u8, key_len as usize)
            };
            let len = value_num as usize * datatype.size();
            let bytes = if value.is_null() || len == 0 {
                &[][..]
            } else {
                std::slice::from_raw_parts(value as *const u8, len)
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
