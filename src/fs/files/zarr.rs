//! `anndata/<measurement>.zarr/`: a measurement as an AnnData Zarr store, made by
//! [`crate::export::zarr`]. Its groups and arrays are directories ([`super::super::dirs`]);
//! their `.zgroup`, `.zarray` and `.zattrs`, and the store's consolidated `.zmetadata`, are
//! [`ZarrDocument`]s made when the store is first listed; each chunk is a [`ZarrChunk`],
//! generated whole into the cache when opened (a chunk of text also by a `stat` with
//! `--exact-sizes`, its size being unknown until then).

use std::sync::Arc;

use serde_json::Value as Json;

use crate::export::zarr::ZarrArray;
use crate::format::zarr;

use super::super::cache::CacheKey;
use super::super::data::{generate, open_generated};
use super::super::error::FsResult;
use super::super::open_file::OpenFile;
use super::anndata::measurement_key;
use super::{FileContext, FileKind};

/// The document files of a store: `.zgroup`, `.zattrs`, `.zarray`, `.zmetadata`.
#[derive(Debug)]
pub struct ZarrDocument(pub Arc<[u8]>);

impl ZarrDocument {
    /// The document of a JSON value.
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
    /// Chunk `k` of `array`.
    pub fn new(array: Arc<ZarrArray>, k: u64) -> ZarrChunk {
        let key = measurement_key("zarr", array.elements(), |d| {
            d.text(array.path()).number(k);
        });
        ZarrChunk { array, k, key }
    }

    fn what(&self) -> String {
        let name = self.array.meta.chunk_name(self.k);
        format!("{}/{name}", self.array.what())
    }

    /// Generates the chunk whole into the cache.
    fn generate(&self, cx: &FileContext) -> FsResult<()> {
        generate(cx, &self.key, &self.what(), |out, _| {
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
