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

use crate::budget::{Budgets, Permit};
use crate::soma::Objects;
use crate::sync::Background;

use super::activity::{Activity, Named, Progress};
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
/// streams files while they are read, the store (for a file that opens objects of its own
/// when it is generated), the mount's budgets and the generations running. Work on one file
/// is given a copy that names the file, and work that runs inside a generation one that
/// carries it: a thread the work spawns takes the copy along.
#[derive(Clone)]
pub struct FileContext {
    pub options: DataOptions,
    pub background: Arc<Background>,
    pub store: Arc<dyn Objects>,
    pub budgets: Budgets,
    /// The generations running, which `status` lists.
    pub activity: Arc<Activity>,
    /// The file the work is for.
    pub named: Named,
    /// The generation the work runs inside. It holds a generation slot, which a file the
    /// work generates shares: waiting for a slot of its own could wait for itself.
    pub generation: Option<Arc<Progress>>,
}

impl FileContext {
    /// The context of work on the file at `path`.
    pub fn for_file(&self, path: &str) -> FileContext {
        FileContext {
            named: Named {
                path: path.into(),
                estimated_bytes: None,
            },
            ..self.clone()
        }
    }

    /// The context of work on a file of about `bytes`.
    pub fn expecting(&self, bytes: u64) -> FileContext {
        let mut cx = self.clone();
        cx.named.estimated_bytes = Some(bytes);
        cx
    }

    /// Begins a generation of the named file: the generation slot it holds (none inside
    /// another generation, whose slot it shares), and its progress.
    pub fn begin_generation(&self) -> (Option<Permit>, Arc<Progress>) {
        let slot = match self.generation {
            Some(_) => None,
            None => Some(self.budgets.generations.take(1)),
        };
        (slot, self.activity.begin(&self.named))
    }

    /// The context of work that runs inside `generation`.
    pub fn inside(&self, generation: Arc<Progress>) -> FileContext {
        FileContext {
            generation: Some(generation),
            ..self.clone()
        }
    }
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

#[cfg(test)]
pub mod testing {
    use std::path::Path;

    use super::*;
    use crate::fs::cache::ContentCache;
    use crate::soma::SomaObject;
    use crate::tiledb::{self, ObjectType};

    /// A store that holds no object.
    struct NoObjects;

    impl Objects for NoObjects {
        fn open(&self, uri: &str, _: Option<ObjectType>) -> tiledb::Result<Arc<SomaObject>> {
            Err(tiledb::Error::new(format!("no object at {uri}")))
        }
    }

    /// The file context of a tree over a store that holds no object, generating into a
    /// cache at `cache_dir` and taking from `budgets`.
    pub fn file_context(cache_dir: &Path, budgets: Budgets) -> FileContext {
        let _ = std::fs::remove_dir_all(cache_dir);
        FileContext {
            options: DataOptions {
                cache: Arc::new(ContentCache::open(cache_dir, 1 << 30).unwrap()),
                materialize_limit: 64 << 20,
                exact_sizes: false,
                chunk_cells: 1_000_000,
                metadata_ttl: std::time::Duration::from_secs(60),
            },
            background: Arc::default(),
            store: Arc::new(NoObjects),
            budgets,
            activity: Arc::default(),
            named: Named::default(),
            generation: None,
        }
    }
}
