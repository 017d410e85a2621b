//! libtiledb configuration and context: the root every other handle hangs from.

use std::ffi::{CStr, CString};
use std::ptr;
use std::sync::Arc;

use super::error::{Error, Result};
use super::ffi;

/// Turns a C string argument into a `CString`, refusing interior NULs with a clear error.
pub(crate) fn c_string(s: &str) -> Result<CString> {
    CString::new(s).map_err(|_| Error::new(format!("string contains a NUL byte: {s:?}")))
}

/// Reads the message out of a `tiledb_error_t` and frees it.
///
/// # Safety
/// `err` is null or a live error handle that libtiledb just handed over and nothing else
/// frees: this function frees it.
unsafe fn take_error(mut err: *mut ffi::tiledb_error_t) -> Error {
    if err.is_null() {
        return Error::new("libtiledb reported an error without a message");
    }
    let mut msg = ptr::null();
    // SAFETY: `err` is live and ours (the caller's contract); the message it points `msg` at
    // stays valid until the handle is freed, and is copied before the free below.
    let text = unsafe {
        let rc = ffi::tiledb_error_message(err, &mut msg);
        let text = if rc == ffi::TILEDB_OK && !msg.is_null() {
            CStr::from_ptr(msg).to_string_lossy().into_owned()
        } else {
            "libtiledb reported an error without a message".to_owned()
        };
        ffi::tiledb_error_free(&mut err);
        text
    };
    Error::new(text)
}

/// libtiledb configuration parameters (`tiledb_config_t`).
pub struct Config {
    raw: *mut ffi::tiledb_config_t,
}

impl Config {
    pub fn new() -> Result<Self> {
        let mut raw = ptr::null_mut();
        let mut err = ptr::null_mut();
        // SAFETY: both out-pointers are locals; libtiledb stores a new config in `raw`, or on
        // failure a new error handle (which `take_error` frees) in `err`.
        let rc = unsafe { ffi::tiledb_config_alloc(&mut raw, &mut err) };
        if rc != ffi::TILEDB_OK {
            // SAFETY: `err` is null or the error handle the failed call just handed over.
            return Err(unsafe { take_error(err) });
        }
        Ok(Config { raw })
    }

    /// Sets one parameter; unknown keys and bad values are libtiledb's errors.
    pub fn set(&mut self, key: &str, value: &str) -> Result<()> {
        let (k, v) = (c_string(key)?, c_string(value)?);
        let mut err = ptr::null_mut();
        // SAFETY: `self.raw` is live for `self`'s lifetime; the strings outlive the call, which
        // copies them; on failure a new error handle is stored in the local `err`.
        let rc = unsafe { ffi::tiledb_config_set(self.raw, k.as_ptr(), v.as_ptr(), &mut err) };
        if rc != ffi::TILEDB_OK {
            // SAFETY: `err` is null or the error handle the failed call just handed over.
            return Err(unsafe { take_error(err) });
        }
        Ok(())
    }

    pub(crate) fn as_ptr(&self) -> *mut ffi::tiledb_config_t {
        self.raw
    }
}

impl Drop for Config {
    fn drop(&mut self) {
        // SAFETY: `raw` came from `tiledb_config_alloc` and is freed exactly once, here.
        unsafe { ffi::tiledb_config_free(&mut self.raw) }
    }
}

struct RawContext(*mut ffi::tiledb_ctx_t);

// SAFETY: a libtiledb context is documented as thread-safe: all of its state is internally
// synchronised, and soma-mount shares one context across FUSE worker threads.
unsafe impl Send for RawContext {}
// SAFETY: as for `Send`: concurrent calls through `&RawContext` are synchronised by libtiledb.
unsafe impl Sync for RawContext {}

impl Drop for RawContext {
    fn drop(&mut self) {
        // SAFETY: allocated by `tiledb_ctx_alloc`; every handle made from it holds an `Arc` to
        // this context, so it is freed only after all of them.
        unsafe { ffi::tiledb_ctx_free(&mut self.0) }
    }
}

/// A libtiledb context (`tiledb_ctx_t`), cheap to clone and shared by every handle made from it.
#[derive(Clone)]
pub struct Context {
    raw: Arc<RawContext>,
}

impl Context {
    pub fn new(config: &Config) -> Result<Self> {
        let mut raw = ptr::null_mut();
        // SAFETY: `config` is live; libtiledb copies it into the context and stores the new
        // context in the local `raw`.
        let rc = unsafe { ffi::tiledb_ctx_alloc(config.as_ptr(), &mut raw) };
        if rc != ffi::TILEDB_OK || raw.is_null() {
            return Err(Error::new("cannot create a libtiledb context"));
        }
        Ok(Context {
            raw: Arc::new(RawContext(raw)),
        })
    }

    pub(crate) fn as_ptr(&self) -> *mut ffi::tiledb_ctx_t {
        self.raw.0
    }

    /// Turns a C API return code into `Ok` or the context's last error, with libtiledb's message.
    pub(crate) fn check(&self, rc: ffi::capi_return_t) -> Result<()> {
        if rc == ffi::TILEDB_OK {
            return Ok(());
        }
        let mut err = ptr::null_mut();
        // SAFETY: the context is live; libtiledb hands over a new error handle (or null).
        let got = unsafe { ffi::tiledb_ctx_get_last_error(self.as_ptr(), &mut err) };
        if got != ffi::TILEDB_OK || err.is_null() {
            return Err(Error::new(format!("libtiledb call failed with code {rc}")));
        }
        // SAFETY: `err` is the new error handle the call above handed over.
        Err(unsafe { take_error(err) })
    }
}

/// Calls a libtiledb function that takes the context first and checks its return code.
///
/// `tiledb_call!(ctx, tiledb_array_open(array, TILEDB_READ))` expands to
/// `ctx.check(ffi::tiledb_array_open(ctx.as_ptr(), array, TILEDB_READ))`: a `Result<()>` with
/// libtiledb's message. The macro holds no `unsafe` of its own, so it compiles only inside the
/// caller's `unsafe` block, whose `// SAFETY:` comment says why the arguments are valid:
///
/// ```text
/// // SAFETY: `array` is a live array handle owned by the caller.
/// unsafe { tiledb_call!(ctx, tiledb_array_open(array, ffi::TILEDB_READ)) }?;
/// ```
macro_rules! tiledb_call {
    ($ctx:expr, $func:ident($($arg:expr),* $(,)?)) => {{
        let ctx: &$crate::tiledb::Context = $ctx;
        ctx.check($crate::tiledb::ffi::$func(ctx.as_ptr() $(, $arg)*))
    }};
}
pub(crate) use tiledb_call;
