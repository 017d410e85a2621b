//! libtiledb's virtual filesystem (`tiledb_vfs_t`): the directories of a store, local or on
//! object storage, through the same backends and settings as every other read.

use std::ffi::{c_char, c_void};
use std::ptr;

use super::context::{c_string, tiledb_call, Context};
use super::error::Result;
use super::handle::{copy_c_str, handle};

handle!(
    /// A virtual filesystem over the context's backends and settings (`tiledb_vfs_t`).
    Vfs,
    tiledb_vfs_t,
    tiledb_vfs_free
);

impl Vfs {
    pub fn new(ctx: &Context) -> Result<Vfs> {
        let mut raw = ptr::null_mut();
        // SAFETY: a null config makes the VFS use the context's own (a non-null one would be
        // merged into the context's); the new handle stored in the local `raw` is taken over
        // by the wrapper.
        unsafe {
            tiledb_call!(ctx, tiledb_vfs_alloc(ptr::null_mut(), &mut raw))?;
            Vfs::from_raw(ctx, raw)
        }
    }

    /// The URIs of the entries directly under the directory (or prefix) `uri`. On object
    /// storage one listing request, or one per thousand entries.
    pub fn ls(&self, uri: &str) -> Result<Vec<String>> {
        /// Called by libtiledb once per entry; 1 asks for the next.
        unsafe extern "C" fn collect(entry: *const c_char, data: *mut c_void) -> i32 {
            // SAFETY: `data` is the `Vec<String>` `ls` passed, alive and not otherwise
            // borrowed during the listing; `entry` is a NUL-terminated URI valid for the call.
            unsafe { (*(data as *mut Vec<String>)).push(copy_c_str(entry)) };
            1
        }
        let c_uri = c_string(uri)?;
        let mut entries: Vec<String> = Vec::new();
        // SAFETY: `self.raw` is the live VFS `self` owns; `c_uri` and `entries` outlive the
        // call, which hands `collect` the pointer to `entries` and nothing else.
        unsafe {
            tiledb_call!(
                &self.ctx,
                tiledb_vfs_ls(
                    self.raw,
                    c_uri.as_ptr(),
                    Some(collect),
                    &mut entries as *mut Vec<String> as *mut c_void
                )
            )
        }?;
        Ok(entries)
    }
}
