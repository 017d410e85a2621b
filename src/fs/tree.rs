//! The inode table: every directory and file soma-mount has shown, and the operations on
//! them. What a directory lists and what a file holds is decided in [`super::node`]; data
//! files are opened by [`super::data`].
//!
//! Directories are filled on first look: opening the object behind a directory reads its
//! metadata and structure (never array data), and every entry gets an inode then. A slice
//! opened by a name that is not listed gets an inode on that lookup. Inodes live as long as
//! the mount; the tree is as big as the part of the store that was looked at.
//!
//! A look into a group is usually followed by looks into its members, so a group's listing
//! starts opening its member objects, several at a time, on threads of their own: the look
//! itself answers at once, and `ls -R` of a remote store pays its round trips in parallel
//! rather than one after another. Those threads, and those generating files while they are
//! read, are background work ([`Background`]) that the daemon stops and waits for before it
//! exits ([`Tree::stop_background_work`]).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock, Weak};
use std::time::{Duration, Instant};

use log::warn;

use crate::soma::Objects;
use crate::sync::{Background, Recover};

use super::data::DataOptions;
use super::error::{FsError, FsResult};
use super::files::{FileContext, FileKind};
use super::node::{self, NodeKind};
use super::open_file::{OpenFile, Outcome, Stream};

pub type Ino = u64;
pub const ROOT: Ino = 1;

/// A directory's entries, made on first look.
struct Listing {
    entries: Vec<(String, Ino)>,
    by_name: HashMap<String, Ino>,
    /// What the listing was made from (an object directory's object); equal fingerprints
    /// mean equal listings. `None` for an object that could not be opened.
    fingerprint: Option<String>,
    made: Instant,
}

impl Listing {
    /// The same entries and inodes, counted as made now: kept for another metadata TTL.
    fn renewed(&self) -> Arc<Listing> {
        Arc::new(Listing {
            entries: self.entries.clone(),
            by_name: self.by_name.clone(),
            fingerprint: self.fingerprint.clone(),
            made: Instant::now(),
        })
    }
}

struct Node {
    kind: NodeKind,
    listing: RwLock<Option<Arc<Listing>>>,
    /// Held while the listing is made: looks that need it meanwhile wait for it rather than
    /// make another one (with other inodes, and on S3 the same requests again).
    making: Mutex<()>,
    /// Entries found by lookup that the listing does not show (slices opened by name).
    found: Mutex<HashMap<String, Ino>>,
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

/// Where a `stat` gets its answer: called once, at once or when a file under way has been
/// generated (see [`Tree::stat`]).
pub type AttrAnswer = Box<dyn FnOnce(FsResult<Attr>) + Send>;

/// An open file handle's answer: its number, and whether it must be read with direct I/O
/// (its size is not known yet).
pub struct Opened {
    pub fh: u64,
    pub direct_io: bool,
    /// For content generated whole into the cache: the cache file, which the kernel may read
    /// itself (FUSE passthrough) instead of asking for every block.
    pub cache_file: Option<std::fs::File>,
}

/// The mounted tree.
pub struct Tree {
    /// The tree itself, for the threads that open members ahead.
    me: Weak<Tree>,
    background: Arc<Background>,
    store: Box<dyn Objects>,
    /// What files are generated with.
    files: FileContext,
    nodes: RwLock<Vec<Arc<Node>>>,
    open_files: Mutex<HashMap<u64, Arc<OpenFile>>>,
    /// Open handles of files generated while they are read, by inode: a `stat` waits for
    /// the generation such a handle reads while the handle is open (the last one opened).
    streams: Mutex<HashMap<Ino, Weak<OpenFile>>>,
    next_fh: AtomicU64,
}

impl Tree {
    /// A tree whose root is the object at `root_uri`.
    pub fn new(store: impl Objects + 'static, root_uri: &str, data: DataOptions) -> Arc<Tree> {
        let root = Node::new(NodeKind::Object {
            uri: root_uri.to_owned(),
            recorded: None,
            obs: None,
            ancestors: Arc::new([]),
        });
        let background = Arc::new(Background::default());
        Arc::new_cyclic(|me| Tree {
            me: me.clone(),
            background: background.clone(),
            store: Box::new(store),
            files: FileContext {
                options: data,
                background: background.clone(),
            },
            // Inode numbers start at 1 (`ROOT`): slot 0 is never handed out.
            nodes: RwLock::new(vec![root.clone(), root]),
            open_files: Mutex::new(HashMap::new()),
            streams: Mutex::new(HashMap::new()),
            next_fh: AtomicU64::new(1),
        })
    }

    /// Ends the background work: refuses new work, lets member opens under way skip the
    /// members they have not started, stops every file still being generated (its readers
    /// are gone with the mount), and waits up to `limit` for all of it to end: false if some
    /// still runs. The daemon calls it before it exits.
    pub fn stop_background_work(&self, limit: Duration) -> bool {
        self.background.stop();
        for open_file in self.open_files.lock().recover().values() {
            open_file.close();
        }
        self.background.wait(limit)
    }

    fn node(&self, ino: Ino) -> FsResult<Arc<Node>> {
        let nodes = self.nodes.read().recover();
        match usize::try_from(ino).ok().filter(|&i| i >= 1) {
            Some(i) => nodes.get(i).cloned().ok_or(FsError::NotFound),
            None => Err(FsError::NotFound),
        }
    }

    fn add_node(&self, kind: NodeKind) -> Ino {
        let mut nodes = self.nodes.write().recover();
        nodes.push(Node::new(kind));
        (nodes.len() - 1) as Ino
    }

    /// What `stat` shows of an inode as things are: a data file not generated yet shows
    /// size 0, its size not known.
    pub fn attr(&self, ino: Ino) -> FsResult<Attr> {
        let node = self.node(ino)?;
        let size = match &node.kind {
            NodeKind::File(file) => file.size(&self.files)?,
            _ => Some(0),
        };
        Ok(Attr {
            ino,
            is_dir: node.kind.is_dir(),
            size: size.unwrap_or(0),
            size_known: size.is_some(),
        })
    }

    /// Answers a `stat` of an inode. A data file whose size is not known yet is answered
    /// once it is, when it is being generated for a reader (the size-trusting readers,
    /// DuckDB and polars, open a file and then `fstat` it), or when a `stat` generates it
    /// ([`FileKind::generated_on_stat`]: `fread`, `tar` and `rsync` take sizes from `stat`
    /// before they open); otherwise at once, with size 0. Nothing waits in the FUSE
    /// request's thread.
    pub fn stat(&self, ino: Ino, answer: AttrAnswer) {
        let attr = match self.attr(ino) {
            Ok(attr) if !attr.size_known => attr,
            known_or_failed => return answer(known_or_failed),
        };
        let Some(tree) = self.me.upgrade() else {
            return answer(Ok(attr));
        };
        if let Some(stream) = self.stream_of(ino) {
            return stream.when_finished(move |outcome| match outcome {
                Outcome::Failed(e) => answer(Err(FsError::Io(e.clone()))),
                Outcome::Done(_) | Outcome::Stopped => answer(tree.attr(ino)),
            });
        }
        let Some(file) = self.generation_on_stat(ino) else {
            return answer(Ok(attr));
        };
        let Some(task) = self.background.begin() else {
            return answer(Ok(attr));
        };
        let answer = Arc::new(Mutex::new(Some(answer)));
        let answer_here = answer.clone();
        let spawned = std::thread::Builder::new()
            .name("soma-generate".into())
            .spawn(move || {
                let generated = crate::sync::catch_panic(|| file.generate(&tree.files))
                    .unwrap_or_else(|panic| Err(FsError::io("generating on stat", panic)));
                if let Some(answer) = answer.lock().recover().take() {
                    answer(generated.and_then(|()| tree.attr(ino)));
                }
                drop(task);
            });
        if spawned.is_err() {
            if let Some(answer) = answer_here.lock().recover().take() {
                answer(Ok(attr));
            }
        }
    }

    /// The stream generating an inode's content for a handle that is open.
    fn stream_of(&self, ino: Ino) -> Option<Arc<Stream>> {
        let mut streams = self.streams.lock().recover();
        let open_file = streams.get(&ino).and_then(Weak::upgrade);
        match open_file.as_deref() {
            Some(OpenFile::Streaming(stream)) => Some(stream.clone()),
            _ => {
                streams.remove(&ino);
                None
            }
        }
    }

    /// The file an inode stands for when a `stat` of it generates it.
    fn generation_on_stat(&self, ino: Ino) -> Option<Arc<dyn FileKind>> {
        match &self.node(ino).ok()?.kind {
            NodeKind::File(file) if file.generated_on_stat(&self.files) => Some(file.clone()),
            _ => None,
        }
    }

    /// Looks up a name in a directory and answers as [`Self::stat`] does.
    pub fn lookup(&self, parent: Ino, name: &str, answer: AttrAnswer) {
        match self.find(parent, name) {
            Ok(ino) => self.stat(ino, answer),
            Err(e) => answer(Err(e)),
        }
    }

    /// The inode of a name in a directory.
    fn find(&self, parent: Ino, name: &str) -> FsResult<Ino> {
        let node = self.node(parent)?;
        if let Some(&ino) = self.listing(&node)?.by_name.get(name) {
            return Ok(ino);
        }
        // A slice can be opened by name without being listed.
        let NodeKind::Slices(table) = &node.kind else {
            return Err(FsError::NotFound);
        };
        let mut found = node.found.lock().recover();
        let ino = match found.get(name) {
            Some(&ino) => ino,
            None => {
                let kind = node::slice_by_name(table, name).ok_or(FsError::NotFound)?;
                let ino = self.add_node(kind);
                found.insert(name.to_owned(), ino);
                ino
            }
        };
        drop(found);
        Ok(ino)
    }

    /// The entries of a directory, in listing order, with whether each is a directory.
    pub fn readdir(&self, ino: Ino) -> FsResult<Vec<(Ino, bool, String)>> {
        let node = self.node(ino)?;
        let listing = self.listing(&node)?;
        let nodes = self.nodes.read().recover();
        Ok(listing
            .entries
            .iter()
            .map(|(name, child)| (*child, nodes[*child as usize].kind.is_dir(), name.clone()))
            .collect())
    }

    /// Opens a file for reading.
    pub fn open(&self, ino: Ino) -> FsResult<Opened> {
        let node = self.node(ino)?;
        let NodeKind::File(file) = &node.kind else {
            return Err(FsError::IsADirectory);
        };
        let open_file = file.open(&self.files)?;
        // A file whose size is not known yet is read with direct I/O.
        let direct_io = matches!(open_file, OpenFile::Streaming(_));
        let cache_file = match &open_file {
            OpenFile::Cached(file) => file.try_clone().ok(),
            _ => None,
        };
        let open_file = Arc::new(open_file);
        if let OpenFile::Streaming(_) = *open_file {
            let mut streams = self.streams.lock().recover();
            streams.retain(|_, handle| handle.strong_count() > 0);
            streams.insert(ino, Arc::downgrade(&open_file));
        }
        let fh = self.next_fh.fetch_add(1, Ordering::Relaxed);
        self.open_files.lock().recover().insert(fh, open_file);
        Ok(Opened {
            fh,
            direct_io,
            cache_file,
        })
    }

    /// Reads from an open file.
    pub fn read(&self, fh: u64, offset: u64, size: u32) -> FsResult<Vec<u8>> {
        let open_file = self
            .open_files
            .lock()
            .recover()
            .get(&fh)
            .cloned()
            .ok_or(FsError::NotFound)?;
        open_file
            .read(offset, size)
            .map_err(|e| FsError::io("read failed", e))
    }

    /// Closes a file handle.
    pub fn release(&self, fh: u64) {
        let removed = self.open_files.lock().recover().remove(&fh);
        if let Some(open_file) = removed {
            open_file.close();
        }
    }

    /// A directory's listing: made on first look, and for object directories made again
    /// once older than the metadata TTL (kept, with its inodes, when the object is unchanged).
    fn listing(&self, node: &Node) -> FsResult<Arc<Listing>> {
        self.listing_of(node, true)
    }

    /// [`Self::listing`]; with `open_members`, a new listing of a group also starts opening
    /// its member objects (one level down) in the background.
    fn listing_of(&self, node: &Node, open_members: bool) -> FsResult<Arc<Listing>> {
        if !node.kind.is_dir() {
            return Err(FsError::NotADirectory);
        }
        let expires = matches!(node.kind, NodeKind::Object { .. });
        let fresh = |current: &Option<Arc<Listing>>| {
            current
                .as_ref()
                .filter(|l| !expires || l.made.elapsed() < self.files.options.metadata_ttl)
                .cloned()
        };
        if let Some(listing) = fresh(&node.listing.read().recover()) {
            return Ok(listing);
        }
        let _making = node.making.lock().recover();
        // Another look may have made it while this one waited.
        let current = node.listing.read().recover().clone();
        if let Some(listing) = fresh(&current) {
            return Ok(listing);
        }
        let (fingerprint, named) = match &node.kind {
            NodeKind::Object {
                uri,
                recorded,
                obs,
                ancestors,
            } => {
                match node::object_entries(&*self.store, uri, *recorded, obs.as_ref(), ancestors) {
                    Ok((fingerprint, named)) => (Some(fingerprint), named),
                    // A refresh that fails keeps the last good listing (a store that is briefly
                    // unreachable must not look emptied); the next look tries again.
                    Err(_) if current.as_ref().is_some_and(|l| l.fingerprint.is_some()) => {
                        warn!("{uri}: keeping the last listing until the store answers again");
                        let kept = current.expect("checked just above").renewed();
                        *node.listing.write().recover() = Some(kept.clone());
                        return Ok(kept);
                    }
                    Err(named) => (None, named),
                }
            }
            NodeKind::Broken(message) => (None, node::error_entries(message)),
            NodeKind::Slices(table) => (
                None,
                node::slices_entries(table, self.files.options.chunk_cells),
            ),
            NodeKind::By(object) => (None, node::by_entries(object)),
            NodeKind::ByColumn(object, column) => (None, node::by_column_entries(object, column)),
            NodeKind::ByValue(table) => (None, node::table_entries(table)),
            NodeKind::Tenx { measurement, obs } => {
                (None, node::tenx_entries(&*self.store, measurement, obs))
            }
            NodeKind::TenxLayer(layer) => (None, node::tenx_layer_entries(layer)),
            NodeKind::TenxBy(layer) => (None, node::tenx_by_entries(layer)),
            NodeKind::TenxByColumn(layer, column) => {
                (None, node::tenx_by_column_entries(layer, column))
            }
            NodeKind::AnnData(dir) => {
                let cache = &self.files.options.cache;
                (None, node::anndata_entries(&*self.store, dir, cache))
            }
            NodeKind::Zarr(dir) => (None, node::zarr_entries(dir)),
            NodeKind::File(_) => (None, Vec::new()),
        };
        let listing = match current {
            Some(old) if old.fingerprint == fingerprint => old.renewed(),
            _ => Arc::new(self.add_entries(named, fingerprint)),
        };
        *node.listing.write().recover() = Some(listing.clone());
        if open_members && matches!(node.kind, NodeKind::Object { .. }) {
            self.open_members_ahead(&listing);
        }
        Ok(listing)
    }

    /// Starts listing the not-yet-listed object directories among a listing's entries, on
    /// a thread of its own. A look into one of them meanwhile waits for its listing (see
    /// `Node::making`) or makes it first.
    fn open_members_ahead(&self, listing: &Listing) {
        let members: Vec<Arc<Node>> = listing
            .entries
            .iter()
            .filter_map(|(_, ino)| self.node(*ino).ok())
            .filter(|n| matches!(n.kind, NodeKind::Object { .. }))
            .filter(|n| n.listing.read().recover().is_none())
            .collect();
        // A lone member gains nothing: the look into it opens it as soon.
        if members.len() < 2 {
            return;
        }
        let Some(tree) = self.me.upgrade() else {
            return;
        };
        let Some(task) = self.background.begin() else {
            return;
        };
        // No thread: the members are opened when they are looked at.
        let _ = std::thread::Builder::new()
            .name("soma-open-ahead".into())
            .spawn(move || {
                tree.open_members(&members);
                drop(task);
            });
    }

    /// Lists `members`, several at a time, until they are done or background work stops.
    fn open_members(&self, members: &[Arc<Node>]) {
        const AT_ONCE: usize = 8;
        let next = AtomicU64::new(0);
        let open_next = || loop {
            let i = next.fetch_add(1, Ordering::Relaxed) as usize;
            let Some(member) = members.get(i) else { break };
            if self.background.stopped() {
                break;
            }
            // Errors show in the member's own listing (error.txt) when it is looked at.
            let _ = self.listing_of(member, false);
        };
        std::thread::scope(|scope| {
            for _ in 1..AT_ONCE.min(members.len()) {
                // Fewer threads (none may start) only means fewer at once.
                let _ = std::thread::Builder::new().spawn_scoped(scope, open_next);
            }
            open_next();
        });
    }

    /// Gives every entry an inode.
    fn add_entries(&self, named: Vec<(String, NodeKind)>, fingerprint: Option<String>) -> Listing {
        let mut listing = Listing {
            entries: Vec::with_capacity(named.len()),
            by_name: HashMap::with_capacity(named.len()),
            fingerprint,
            made: Instant::now(),
        };
        for (name, kind) in named {
            if listing.by_name.contains_key(&name) {
                // Members come first, so a member keeps its name over a generated file.
                warn!("two entries are named {name:?}; showing only the first");
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
            listing: RwLock::new(None),
            making: Mutex::new(()),
            found: Mutex::new(HashMap::new()),
        })
    }
}
