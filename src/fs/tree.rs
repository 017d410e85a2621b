//! The inode table: every directory and file soma-mount has shown, what it stands for, and the
//! decisions of the filesystem (what a directory lists, what a file holds, which errors).
//!
//! Directories are filled on first look: opening the object behind a directory reads its
//! metadata and structure (never array data), and every entry gets an inode then. Inodes live
//! as long as the mount; the tree is as big as the part of the store that was looked at.

use std::collections::HashMap;
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, RwLock};

use log::{error, warn};

use crate::format::{self, json, npy, TableFormat};
use crate::soma::{ArrayObject, BatchReader, Prefetch, Selection, SomaObject, Store, BATCH_BYTES};

use super::cache::{CacheKey, ContentCache};
use super::names::file_name;
use super::open_file::{NpyFile, OpenFile, Stream};

pub type Ino = u64;
pub const ROOT: Ino = 1;

/// Why an operation failed, as the filesystem will report it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FsError {
    /// No such entry (`ENOENT`).
    NotFound,
    /// A directory where a file was needed, or the reverse.
    NotADirectory,
    IsADirectory,
    /// The backend failed (`EIO`); the message has already been logged.
    Io(String),
}

pub type FsResult<T> = Result<T, FsError>;

/// The files soma-mount generates.
#[derive(Debug, Clone)]
pub enum FileKind {
    /// `metadata.json` of an object.
    Metadata(Arc<SomaObject>),
    /// `schema.json` of an array.
    Schema(Arc<SomaObject>),
    /// `error.txt` of a member that cannot be opened.
    ErrorText(Arc<str>),
    /// `data.<ext>`: an array's rows in a table format.
    Table(Arc<SomaObject>, TableFormat),
    /// `data.npy` of a numeric dense array.
    Npy(Arc<SomaObject>),
}

/// How data files are generated and cached (the command line's options).
pub struct DataOptions {
    pub cache: Arc<ContentCache>,
    /// Data files estimated below this size are generated whole when opened.
    pub materialize_limit: u64,
    /// Generate every data file whole when opened, so every size is exact.
    pub exact_sizes: bool,
}

impl FileKind {
    /// The content of a document (not of data files, which are generated when opened).
    fn document(&self) -> FsResult<Vec<u8>> {
        match self {
            FileKind::Metadata(object) => Ok(json::metadata_json(object.metadata())),
            FileKind::Schema(object) => {
                let SomaObject::Array(array) = object.as_ref() else {
                    return Err(FsError::NotFound);
                };
                Ok(json::schema_json(array, array.stored_cells()))
            }
            FileKind::ErrorText(message) => Ok(format!("{message}\n").into_bytes()),
            FileKind::Table(..) | FileKind::Npy(_) => Err(FsError::IsADirectory),
        }
    }
}

/// The array behind a data file.
pub(super) fn array_of(object: &SomaObject) -> &ArrayObject {
    match object {
        SomaObject::Array(array) => array,
        SomaObject::Group(_) => unreachable!("data files are only made for arrays"),
    }
}

/// The cache key of an array's rows in a format: the array as of its fragments.
fn table_key(array: &ArrayObject, format: TableFormat, selection: &Selection) -> CacheKey {
    let timestamp = format!("{:?}", array.read_timestamp_ms);
    let selection = format!("{selection:?}");
    let fragments = array.fragments.iter().map(|f| f.uri.as_str());
    CacheKey::new(
        [
            array.uri.as_str(),
            format.extension(),
            &selection,
            &timestamp,
        ]
        .into_iter()
        .chain(fragments),
    )
}

/// The `.npy` of a dense array with a numeric value column: header, item size and shape.
fn npy_layout(array: &ArrayObject) -> Option<(Vec<u8>, u64, Vec<u64>)> {
    if !array.schema.dense {
        return None;
    }
    let shape = array.schema.shape.clone()?;
    let values = array.schema.columns.iter().rfind(|c| !c.is_index)?;
    let (descr, size) = npy::dtype(&values.arrow_type)?;
    Some((npy::header(descr, &shape), size as u64, shape))
}

fn io_error(what: &str, e: impl std::fmt::Display) -> FsError {
    error!("{what}: {e}");
    FsError::Io(format!("{what}: {e}"))
}

/// What an inode stands for.
enum NodeKind {
    /// The directory of the object at `uri` (a group, an array, or a member that fails to open).
    Object {
        uri: String,
    },
    File(FileKind),
}

/// A directory's entries, made on first look.
struct Listing {
    entries: Vec<(String, Ino)>,
    by_name: HashMap<String, Ino>,
}

struct Node {
    kind: NodeKind,
    listing: OnceLock<Listing>,
    content: OnceLock<FsResult<Arc<[u8]>>>,
}

/// What `stat` shows of an inode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Attr {
    pub ino: Ino,
    pub is_dir: bool,
    pub size: u64,
    /// False for a data file not generated yet: its size is 0 until it is, so it is read
    /// with direct I/O and its attributes must not be cached.
    pub size_known: bool,
}

/// An open file handle's answer: its number, and whether it must be read with direct I/O
/// (its size is not known yet).
pub struct Opened {
    pub fh: u64,
    pub direct_io: bool,
}

/// The mounted tree.
pub struct Tree {
    store: Store,
    data: DataOptions,
    nodes: RwLock<Vec<Arc<Node>>>,
    open_files: Mutex<HashMap<u64, Arc<OpenFile>>>,
    next_fh: AtomicU64,
}

/// The names soma-mount adds to a directory.
const METADATA_JSON: &str = "metadata.json";
const SCHEMA_JSON: &str = "schema.json";
const ERROR_TXT: &str = "error.txt";

impl Tree {
    /// A tree whose root is the object at `root_uri`.
    pub fn new(store: Store, root_uri: &str, data: DataOptions) -> Tree {
        let root = Node::new(NodeKind::Object {
            uri: root_uri.to_owned(),
        });
        Tree {
            store,
            data,
            // Inode numbers start at 1 (`ROOT`): slot 0 is never handed out.
            nodes: RwLock::new(vec![root.clone(), root]),
            open_files: Mutex::new(HashMap::new()),
            next_fh: AtomicU64::new(1),
        }
    }

    fn node(&self, ino: Ino) -> FsResult<Arc<Node>> {
        let nodes = self.nodes.read().unwrap_or_else(|e| e.into_inner());
        match usize::try_from(ino).ok().filter(|&i| i >= 1) {
            Some(i) => nodes.get(i).cloned().ok_or(FsError::NotFound),
            None => Err(FsError::NotFound),
        }
    }

    fn add_node(&self, kind: NodeKind) -> Ino {
        let mut nodes = self.nodes.write().unwrap_or_else(|e| e.into_inner());
        nodes.push(Node::new(kind));
        (nodes.len() - 1) as Ino
    }

    pub fn getattr(&self, ino: Ino) -> FsResult<Attr> {
        let node = self.node(ino)?;
        let (is_dir, size) = match &node.kind {
            NodeKind::Object { .. } => (true, Some(0)),
            NodeKind::File(FileKind::Table(object, format)) => {
                let key = table_key(array_of(object), *format, &Selection::default());
                (false, self.data.cache.size(&key))
            }
            NodeKind::File(FileKind::Npy(object)) => {
                let size = npy_layout(array_of(object)).map(|(header, item, shape)| {
                    header.len() as u64 + shape.iter().product::<u64>() * item
                });
                (false, size)
            }
            NodeKind::File(_) => (false, Some(self.content_of(&node)?.len() as u64)),
        };
        Ok(Attr {
            ino,
            is_dir,
            size: size.unwrap_or(0),
            size_known: size.is_some(),
        })
    }

    pub fn lookup(&self, parent: Ino, name: &str) -> FsResult<Attr> {
        let node = self.node(parent)?;
        let ino = *self
            .listing(&node)?
            .by_name
            .get(name)
            .ok_or(FsError::NotFound)?;
        self.getattr(ino)
    }

    /// The entries of a directory, in listing order, with whether each is a directory.
    pub fn readdir(&self, ino: Ino) -> FsResult<Vec<(Ino, bool, String)>> {
        let node = self.node(ino)?;
        let listing = self.listing(&node)?;
        let nodes = self.nodes.read().unwrap_or_else(|e| e.into_inner());
        Ok(listing
            .entries
            .iter()
            .map(|(name, child)| {
                let is_dir = matches!(nodes[*child as usize].kind, NodeKind::Object { .. });
                (*child, is_dir, name.clone())
            })
            .collect())
    }

    fn content_of(&self, node: &Node) -> FsResult<Arc<[u8]>> {
        let NodeKind::File(file) = &node.kind else {
            return Err(FsError::IsADirectory);
        };
        node.content
            .get_or_init(|| file.document().map(Arc::from))
            .clone()
    }

    /// Opens a file for reading. Data files come from the cache when generated before;
    /// otherwise small ones and Parquet are generated whole now, and the rest are streamed
    /// while they are generated.
    pub fn open(&self, ino: Ino) -> FsResult<Opened> {
        let node = self.node(ino)?;
        let NodeKind::File(file) = &node.kind else {
            return Err(FsError::IsADirectory);
        };
        let (open_file, direct_io) = match file {
            FileKind::Table(object, format) => {
                self.open_table(array_of(object), *format, &Selection::default())?
            }
            FileKind::Npy(object) => {
                let (header, item, shape) =
                    npy_layout(array_of(object)).ok_or(FsError::NotFound)?;
                let npy = NpyFile::new(object.clone(), header, item, shape);
                (OpenFile::Npy(npy), false)
            }
            _ => (OpenFile::Bytes(self.content_of(&node)?), false),
        };
        let fh = self.next_fh.fetch_add(1, Ordering::Relaxed);
        self.open_files
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(fh, Arc::new(open_file));
        Ok(Opened { fh, direct_io })
    }

    fn open_table(
        &self,
        array: &ArrayObject,
        format: TableFormat,
        selection: &Selection,
    ) -> FsResult<(OpenFile, bool)> {
        let cache = &self.data.cache;
        let key = table_key(array, format, selection);
        if let Some((file, _)) = cache.open_entry(&key) {
            return Ok((OpenFile::Cached(file), false));
        }
        let estimate = array
            .stored_cells()
            .saturating_mul(format.estimated_row_bytes(&array.schema.arrow()));
        let whole = format == TableFormat::Parquet
            || self.data.exact_sizes
            || estimate < self.data.materialize_limit;
        let what = format!("{}/data.{}", array.uri, format.extension());
        let reader = BatchReader::open(&self.store, array, selection, BATCH_BYTES)
            .map_err(|e| io_error(&what, e))?;
        let mut reader = Prefetch::start(reader).map_err(|e| io_error(&what, e))?;
        let schema = reader.schema();
        let mut next_batch = move || reader.next_batch().map_err(io::Error::other);
        if !whole {
            let stream = Stream::start(cache.clone(), key, move |out| {
                format::write_table(format, schema, &mut next_batch, out)
            })
            .map_err(|e| io_error(&what, e))?;
            return Ok((OpenFile::Streaming(stream), true));
        }
        // Generate whole, once even when several open it at the same time.
        let lock = cache.generation_lock(&key);
        let _generating = lock.lock().unwrap_or_else(|e| e.into_inner());
        if cache.size(&key).is_none() {
            let (pending, file) = cache.begin(&key).map_err(|e| io_error(&what, e))?;
            let mut out = io::BufWriter::with_capacity(1 << 20, &file);
            format::write_table(format, schema, &mut next_batch, &mut out)
                .map_err(|e| io_error(&what, e))?;
            drop(out);
            let size = file.metadata().map_err(|e| io_error(&what, e))?.len();
            cache
                .commit(pending, size)
                .map_err(|e| io_error(&what, e))?;
        }
        let (file, _) = cache
            .open_entry(&key)
            .ok_or_else(|| io_error(&what, "the generated file left the cache at once"))?;
        Ok((OpenFile::Cached(file), false))
    }

    /// Reads from an open file.
    pub fn read(&self, fh: u64, offset: u64, size: u32) -> FsResult<Vec<u8>> {
        let open_file = self
            .open_files
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&fh)
            .cloned()
            .ok_or(FsError::NotFound)?;
        open_file
            .read(&self.store, offset, size)
            .map_err(|e| io_error("read failed", e))
    }

    /// Closes a file handle.
    pub fn release(&self, fh: u64) {
        let removed = self
            .open_files
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&fh);
        if let Some(open_file) = removed {
            open_file.close();
        }
    }

    fn listing<'a>(&self, node: &'a Node) -> FsResult<&'a Listing> {
        let NodeKind::Object { uri } = &node.kind else {
            return Err(FsError::NotADirectory);
        };
        Ok(node.listing.get_or_init(|| self.make_listing(uri)))
    }

    /// Opens the object at `uri` and gives every entry of its directory an inode.
    fn make_listing(&self, uri: &str) -> Listing {
        let mut named: Vec<(String, NodeKind)> = Vec::new();
        match self.store.open(uri) {
            Ok(object) => {
                let object = Arc::new(object);
                if let SomaObject::Group(group) = object.as_ref() {
                    for member in &group.members {
                        named.push((
                            file_name(&member.name),
                            NodeKind::Object {
                                uri: member.uri.clone(),
                            },
                        ));
                    }
                }
                named.push((
                    METADATA_JSON.into(),
                    NodeKind::File(FileKind::Metadata(object.clone())),
                ));
                if let SomaObject::Array(array) = object.as_ref() {
                    named.push((
                        SCHEMA_JSON.into(),
                        NodeKind::File(FileKind::Schema(object.clone())),
                    ));
                    for format in TableFormat::ALL {
                        named.push((
                            format!("data.{}", format.extension()),
                            NodeKind::File(FileKind::Table(object.clone(), format)),
                        ));
                    }
                    if npy_layout(array).is_some() {
                        named.push((
                            "data.npy".into(),
                            NodeKind::File(FileKind::Npy(object.clone())),
                        ));
                    }
                }
            }
            Err(e) => {
                warn!("cannot open {uri}: {e}");
                let message = format!("cannot open {uri}: {e}");
                named.push((
                    ERROR_TXT.into(),
                    NodeKind::File(FileKind::ErrorText(message.into())),
                ));
            }
        }
        let mut listing = Listing {
            entries: Vec::with_capacity(named.len()),
            by_name: HashMap::with_capacity(named.len()),
        };
        for (name, kind) in named {
            if listing.by_name.contains_key(&name) {
                // Members come first, so a member keeps its name over a generated file.
                warn!("{uri}: two entries are named {name:?}; showing only the first");
                continue;
            }
            let ino = self.add_node(kind);
            listing.by_name.insert(name.clone(), ino);
            listing.entries.push((name, ino));
        }
        listing
    }
}

impl Node {
    fn new(kind: NodeKind) -> Arc<Node> {
        Arc::new(Node {
            kind,
            listing: OnceLock::new(),
            content: OnceLock::new(),
        })
    }
}
