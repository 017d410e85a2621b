//! The pattern every C handle follows: a non-null pointer, the context that made it, and a
//! `Drop` that frees it with its own `tiledb_*_free`. Whether a handle may move to another
//! thread (`Send`) or be shared between threads (`Sync`) is the handle type's own: each is
//! declared beside its type, with the reason libtiledb allows it.

/// Declares a wrapper owning one C handle type, freed on drop (and first closed with
/// `close = tiledb_*_close` for handles that are opened). `free_args = context` marks a
/// `tiledb_*_free` that takes the context before the handle.
macro_rules! handle {
    (@free $free:ident, $ctx:expr, $raw:expr) => {
        $crate::tiledb::ffi::$free($raw)
    };
    (@free $free:ident, $ctx:expr, $raw:expr, context) => {
        $crate::tiledb::ffi::$free($ctx, $raw)
    };
    ($(#[$doc:meta])* $name:ident, $raw:ident, $free:ident $(, close = $close:ident)?
        $(, free_args = $free_args:ident)?) => {
        $(#[$doc])*
        pub struct $name {
            raw: *mut $crate::tiledb::ffi::$raw,
            ctx: $crate::tiledb::Context,
        }

        impl $name {
            /// Takes ownership of a handle libtiledb just returned.
            ///
            /// # Safety
            /// `raw` is null (an error) or a live handle of this type, made through `ctx`'s
            /// context, that nothing else frees: the wrapper frees it on drop.
            #[allow(dead_code)]
            pub(crate) unsafe fn from_raw(
                ctx: &$crate::tiledb::Context,
                raw: *mut $crate::tiledb::ffi::$raw,
            ) -> $crate::tiledb::Result<Self> {
                if raw.is_null() {
                    return Err($crate::tiledb::Error::new(concat!(
                        "libtiledb returned a null ",
                        stringify!($raw)
                    )));
                }
                Ok($name { raw, ctx: ctx.clone() })
            }

            #[allow(dead_code)]
            pub(crate) fn as_ptr(&self) -> *mut $crate::tiledb::ffi::$raw {
                self.raw
            }

            #[allow(dead_code)]
            pub(crate) fn context(&self) -> &$crate::tiledb::Context {
                &self.ctx
            }
        }

        impl std::fmt::Debug for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.debug_struct(stringify!($name)).finish_non_exhaustive()
            }
        }

        impl Drop for $name {
            fn drop(&mut self) {
                $(
                    // SAFETY: `raw` is live and was opened by this wrapper; closing an object
                    // that failed to open is a harmless error, ignored like any close error.
                    let _ = unsafe { $crate::tiledb::ffi::$close(self.ctx.as_ptr(), self.raw) };
                )?
                // SAFETY: `raw` is a live handle owned by `self` alone and is freed once; the
                // context it needs lives on through `self.ctx` until after this call.
                let _ = unsafe {
                    $crate::tiledb::handle::handle!(
                        @free $free, self.ctx.as_ptr(), &mut self.raw $(, $free_args)?
                    )
                };
            }
        }

    };
}
pub(crate) use handle;

/// Copies a `tiledb_string_t` into a Rust `String` and frees it.
///
/// # Safety
/// `s` is null or a live string handle that libtiledb just handed over and nothing else
/// frees: this function frees it.
pub(crate) unsafe fn take_string(mut s: *mut super::ffi::tiledb_string_t) -> super::Result<String> {
    if s.is_null() {
        return Err(super::Error::new("libtiledb returned a null string"));
    }
    let mut data = std::ptr::null();
    let mut len = 0usize;
    // SAFETY: `s` is live and ours (the caller's contract); the `len` bytes at `data` stay
    // valid until it is freed, and they are copied before the free.
    let text = unsafe {
        let rc = super::ffi::tiledb_string_view(s, &mut data, &mut len);
        let text = if rc == super::ffi::TILEDB_OK && !data.is_null() {
            let bytes = std::slice::from_raw_parts(data as *const u8, len);
            Ok(String::from_utf8_lossy(bytes).into_owned())
        } else {
            Err(super::Error::new("cannot read a libtiledb string"))
        };
        super::ffi::tiledb_string_free(&mut s);
        text
    };
    text
}

/// Copies a NUL-terminated C string owned by libtiledb into a `String`.
///
/// # Safety
/// `p` is null or points to a NUL-terminated string that stays valid during the call.
pub(crate) unsafe fn copy_c_str(p: *const std::ffi::c_char) -> String {
    if p.is_null() {
        return String::new();
    }
    // SAFETY: `p` is non-null here, so a valid NUL-terminated string (the caller's contract).
    unsafe { std::ffi::CStr::from_ptr(p) }
        .to_string_lossy()
        .into_owned()
}
