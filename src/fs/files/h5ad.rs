//! `anndata/<measurement>.h5ad`, `anndata/by/<column>/<label>/<measurement>.h5ad` and a
//! query's (`where/<filter>/anndata/<measurement>.h5ad`, `…/where/<var filter>/anndata.h5ad`):
//! a measurement's h5ad, written by [`crate::export::h5ad`], as a file.
//!
//! The file is generated whole when opened, and by a `stat` when it is estimated below
//! `--materialize-limit` or with `--exact-sizes`, into the cache; its size is known once it
//! is there. A category's or a query's file is estimated from its own cells (and genes),
//! counted by the `stat`, like every other file of a part.

use crate::export::h5ad::H5adContent;
use crate::soma::anndata::AnnDataElements;

use super::super::cache::CacheKey;
use super::super::data::{generate_at, open_generated, small};
use super::super::error::{FsError, FsResult};
use super::super::open_file::OpenFile;
use super::anndata::measurement_key;
use super::{FileContext, FileKind};

/// A measurement (or one category of its cells) as an h5ad file. Its parts beyond obs, var
/// and X may open only when it is generated, so its cache key is made in two steps
/// ([`CacheKey::joined`]): from the first parts, then from all.
#[derive(Debug)]
pub struct H5adFile {
    content: H5adContent,
    /// The key's first part, made from obs, var and X.
    first_key: CacheKey,
}

impl H5adFile {
    /// The file of `content`.
    pub fn new(content: H5adContent) -> H5adFile {
        let first_key = measurement_key("h5ad", content.first(), |_| {});
        H5adFile { content, first_key }
    }

    /// The file's whole key, from the one of every element.
    fn key_of(&self, whole: &AnnDataElements) -> CacheKey {
        CacheKey::joined(&self.first_key, &measurement_key("h5ad", whole, |_| {}))
    }

    /// Whether the file is generated whole by a `stat` (see the module's notes).
    fn small(&self, cx: &FileContext) -> bool {
        cx.options.exact_sizes || small(&cx.options, self.content.estimated_bytes())
    }

    /// Generates the file whole into the cache, unless it is there; returns its key. A file
    /// generated before is found by its whole key, so where the cache holds one of the same
    /// first part the other parts open first; otherwise generation starts at once, and they
    /// open while obs, var and X are written.
    fn generate(&self, cx: &FileContext) -> FsResult<CacheKey> {
        let (cache, store, what) = (&cx.options.cache, &*cx.store, self.content.what());
        let whole = || self.content.whole(store);
        if self.content.whole_tried() || cache.holds_first(&self.first_key) {
            let key = self.key_of(whole().map_err(|e| FsError::io(&what, e))?);
            if cache.size(&key).is_some() {
                return Ok(key);
            }
        }
        generate_at(cx, &self.first_key, &what, |path, _| {
            self.content.write(store, path)?;
            Ok(self.key_of(whole()?))
        })?;
        Ok(self.key_of(whole().map_err(|e| FsError::io(&what, e))?))
    }
}

impl FileKind for H5adFile {
    /// Known once every part is open and the file generated.
    fn size(&self, cx: &FileContext) -> FsResult<Option<u64>> {
        let whole = self.content.whole_if_open();
        Ok(whole.and_then(|whole| cx.options.cache.size(&self.key_of(whole))))
    }

    fn open(&self, cx: &FileContext) -> FsResult<OpenFile> {
        let key = self.generate(cx)?;
        open_generated(&cx.options.cache, &key, &self.content.what())
    }

    /// A small file, or any with `--exact-sizes`: `ls -l anndata/` generates the small
    /// measurements and leaves the large ones for their first open. A category's or a
    /// query's always: its cells are counted on the request pool
    /// ([`FileKind::settle_size`]), not here.
    fn sized_on_stat(&self, cx: &FileContext) -> bool {
        !self.content.is_whole() || self.small(cx)
    }

    fn settle_size(&self, cx: &FileContext) -> FsResult<()> {
        match self.small(cx) {
            true => self.generate(cx).map(|_| ()),
            false => Ok(()),
        }
    }
}
