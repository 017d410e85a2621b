//! Directory listings through libtiledb's virtual filesystem (`tiledb_vfs_t`): on local
//! disk and object storage alike, with the context's settings (on S3, through the same
//! endpoint as every other request).

use std::ffi::{c_char, c_void, CStr};
use std::ptr;

use super::context::{c_string, tiledb_call, Context};
use super::handle::handle;
use super::Result;

handle!(
    /// A virtual filesystem (`tiledb_vfs_t`).
    Vfs,
    tiledb_vfs_t,
    tiledb_vfs_free
);

impl Vfs {
    /// A virtual filesystem with `ctx`'s settings.
    pub fn new(ctx: &Context) -> Result<Vfs> {
        let mut raw = ptr::null_mut();
        // SAFETY: a null config takes the context's; the new handle stored in `raw` is taken
        // over by the wrapper.
        unsafe {
            tiledb_call!(ctx, tiledb_vfs_alloc(ptr::null_mut(), &mut raw))?;
            Vfs::from_raw(ctx, raw)
        }
    }

    /// The URIs of what the directory at `uri` holds.
    pub fn ls(&self, uri: &str) -> Result<Vec<String>> {
        let c_uri = c_string(uri)?;
        let mut found: Vec<String> = Vec::new();
        // SAFETY: the handle is live and `c_uri` outlives the call; libtiledb calls `collect`
        // with `data`, which points at `found`, only during this call.
        unsafe {
            tiledb_call!(
                self.context(),
                tiledb_vfs_ls(
                    self.as_ptr(),
                    c_uri.as_ptr(),
                    Some(collect),
                    &mut found as *mut Vec<String> as *mut c_void
                )
            )
        }?;
        Ok(found)
    }
}

/// `tiledb_vfs_ls`'s callback: adds `path` to the `Vec<String>` at `data`, and goes on (1).
///
/// # Safety
/// `path` is a NUL-terminated string and `data` the `Vec<String>` [`Vfs::ls`] passes.
unsafe extern "C" fn collect(path: *const c_char, data: *mut c_void) -> i32 {
    // SAFETY: see above; libtiledb owns `path` for the call, `data` is exclusively ours.
    let (path, found) = unsafe { (CStr::from_ptr(path), &mut *(data as *mut Vec<String>)) };
    found.push(path.to_string_lossy().into_owned());
    1
}
