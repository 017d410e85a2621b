//! The kinds of file soma-mount shows, each in a module of its own that answers everything
//! about it: its size, how it opens, whether a `stat` generates it, and (for generated
//! files) its cache key. The tree asks these questions through [`FileKind`] and decides
//! nothing about any kind; a new kind of file is a new module here and a line in the
//! listing that shows it ([`super::dirs`]).

mod anndata;
mod document;
mod h5ad;
mod npy;
mod png;
mod status;
mod table;
mod tenx;
mod zarr;

use std::fmt;
use std::sync::Arc;

use crate::soma::Objects;
use crate::sync::Background;

use super::data::DataOptions;
use super::error::FsResult;
use super::open_file::OpenFile;

pub use anndata::CountsInCache;
pub use document::{Document, SpatialDoc};
pub use h5ad::H5adFile;
pub use npy::NpyFile;
pub use png::PngFile;
pub use status::{describe_status, StatusFile, TreeCounts, STATUS_NAME};
pub use table::{Shown, Table, TableFile};
pub use tenx::{TenxFile, TenxPart};
pub use zarr::{ZarrChunk, ZarrDocument};

/// What files are generated with: the options and the cache, the background work that
/// streams files while they are read, and the store, for a file that opens objects of its
/// own when it is generated.
pub struct FileContext {
    pub options: DataOptions,
    pub background: Arc<Background>,
    pub store: Arc<dyn Objects>,
}

/// One kind of file.
pub trait FileKind: fmt::Debug + Send + Sync {
    /// Its exact size, when known without generating anything; `None` for a file not
    /// generated yet (shown with size 0, read with direct I/O).
    fn size(&self, cx: &FileContext) -> FsResult<Option<u64>>;

    /// Opens it for reading.
    fn open(&self, cx: &FileContext) -> FsResult<OpenFile>;

    /// Whether a `stat` that finds its size not known yet waits for
    /// [`FileKind::settle_size`] before answering, rather than answering size 0 at once. It
    /// is answered in the thread that took the request: what needs a read of the store (a
    /// category's cells counted) is left to `settle_size`.
    fn sized_on_stat(&self, _cx: &FileContext) -> bool {
        false
    }

    /// Makes its exact size known, for a `stat` that waits for it: generates it whole into
    /// the cache, or counts what its size follows from. A file whose estimate needs a count
    /// of its own cells (a category's or a query's) counts them first, and leaves its size
    /// unknown when they put it above `--materialize-limit`.
    fn settle_size(&self, _cx: &FileContext) -> FsResult<()> {
        Ok(())
    }

    /// Whether [`FileKind::settle_size`] only counts, reading no value and generating
    /// nothing, so that listing its directory settles it ahead of the `stat` that `ls -l`,
    /// or a dataset reader, sends next.
    fn settled_by_counting(&self) -> bool {
        false
    }
}
