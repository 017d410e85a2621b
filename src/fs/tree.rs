//! The inode table: the directories and files the kernel holds, and the operations on them.
//! What a directory lists is decided by its kind ([`super::dirs`]), what a file holds by its
//! kind ([`super::files`]); data files are opened by [`super::data`].
//!
//! Directories are filled on first look: opening the object behind a directory reads its
//! metadata and structure (array data only for the kinds that say so: a Zarr store's
//! metadata, a query's selected join ids), and every entry gets a node, with its inode
//! number, then. The kernel counts the inodes it was given by lookups and tells when it
//! forgets them (`forget`): a forgotten inode leaves the table, and a forgotten directory
//! lets go of its listing, so what the daemon holds follows what the kernel holds, not
//! everything ever looked at. An entry keeps its inode number as long as its directory's
//! listing lives.
//!
//! No request waits in the thread that took it from the kernel. A look that needs a listing
//! not made yet, an open (which may generate a file whole), a `stat` that waits for a size,
//! and a read from the store run on the request pool; a read of a file being generated is
//! answered by its generator. Listing a directory (`ls`) also starts opening its member
//! objects, and theirs, ahead, on a pool of their own, so `ls -R` of a remote store pays its
//! round trips several at a time; a look by name (`cat a/b/c`) opens only what it names. All of this is
//! background work ([`Background`]) that the daemon stops and waits for before it exits
//! ([`Tree::stop_background_work`]).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock, Weak};
use std::time::{Duration, Instant};

use log::warn;

use crate::budget::Budgets;
use crate::soma::Objects;
use crate::sync::{Background, Pool, Recover};
use crate::tiledb::ObjectType;

use super::activity::Activity;
use super::data::DataOptions;
use super::dirs::{self, DirContext, NodeKind, ObjectDir};
use super::error::{FsError, FsResult};
use super::files::{FileContext, FileKind, StatusFile, TreeCounts, STATUS_NAME};
use super::open_file::{OpenFile, Outcome, ReadAnswer, Stream};

pub type Ino = u64;
pub const ROOT: Ino = 1;

/// Requests that may wait on the store or a generation, at most this many at once (more
/// wait their turn; the FUSE threads never do).
const REQUEST_THREADS: usize = 64;
/// Member objects opened ahead of looks into them, at most this many at once.
const AHEAD_THREADS: usize = 8;
/// How many levels below a listed directory its members are opened ahead: `ls -R` lists
/// every directory, and finds the next two levels opened or being opened.
const AHEAD_LEVELS: u32 = 2;

/// A directory's entries, made on first look.
struct Listing {
    entries: Vec<(String, Arc<Node>)>,
    by_name: HashMap<String, usize>,
    /// What the listing was made from (an object directory's object); equal fingerprints
    /// mean equal listings. `None` for an object that could not be opened.
    fingerprint: Option<String>,
    made: Instant,
    /// Whether its member objects have been opened ahead (see [`Tree::open_members_ahead`]).
    members_ahead: AtomicBool,
    /// Whether a `readdir` has shown it, and whether its files' sizes have been settled
    /// ahead since (see [`Tree::settle_sizes_ahead`]).
    shown: AtomicBool,
    sizes_ahead: AtomicBool,
}

impl Listing {
    /// The same entries and nodes, counted as made now: kept for another metadata TTL.
    fn renewed(&self) -> Arc<Listing> {
        Arc::new(Listing {
            entries: self.entries.clone(),
            by_name: self.by_name.clone(),
            fingerprint: self.fingerprint.clone(),
            made: Instant::now(),
            members_ahead: AtomicBool::new(self.members_ahead.load(Ordering::Relaxed)),
            shown: AtomicBool::new(self.shown.load(Ordering::Relaxed)),
            sizes_ahead: AtomicBool::new(self.sizes_ahead.load(Ordering::Relaxed)),
        })
    }

    fn get(&self, name: &str) -> Option<&Arc<Node>> {
        self.by_name.get(name).map(|&i| &self.entries[i].1)
    }
}

struct Node {
    ino: Ino,
    /// Where it is, from the mount's root (for `soma-mount status` and log lines).
    path: String,
    kind: NodeKind,
    listing: RwLock<Option<Arc<Listing>>>,
    /// Held while the listing is made: looks that need it meanwhile wait for it rather than
    /// make another one (with other inodes, and on S3 the same requests again).
    making: Mutex<()>,
    /// Entries found by lookup that the listing does not show (slices opened by name):
    /// held by the inode table while the kernel holds them.
    found: Mutex<HashMap<String, Weak<Node>>>,
    counts: Arc<TreeCounts>,
}

/// An inode the kernel holds, and how many lookups gave it to the kernel.
struct Known {
    node: Arc<Node>,
    lookups: u64,
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

/// Where a directory's entries go: inode, whether a directory, name.
pub type EntriesAnswer = Box<dyn FnOnce(FsResult<Vec<(Ino, bool, String)>>) + Send>;

/// Where an open's answer goes.
pub type OpenAnswer = Box<dyn FnOnce(FsResult<Opened>) + Send>;

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
    /// The tree itself, for work that runs on other threads.
    me: Weak<Tree>,
    background: Arc<Background>,
    /// What files are generated with, and the store objects are opened from.
    files: FileContext,
    /// The inodes the kernel holds, and the root.
    inodes: RwLock<HashMap<Ino, Known>>,
    next_ino: AtomicU64,
    /// `.soma-mount.status`, found by name at the root.
    status: Arc<Node>,
    counts: Arc<TreeCounts>,
    open_files: Mutex<HashMap<u64, Arc<OpenFile>>>,
    /// Open handles of files generated while they are read, by inode: a `stat` waits for
    /// the generation such a handle reads while the handle is open (the last one opened).
    streams: Mutex<HashMap<Ino, Weak<OpenFile>>>,
    next_fh: AtomicU64,
    /// Requests that may wait on the store or on a generation.
    requests: Arc<Pool>,
    /// Member objects opened ahead of looks into them.
    ahead: Arc<Pool>,
}

impl Tree {
    /// A tree whose root is the object at `root_uri`, whose generations take from
    /// `budgets` (`status` shows them).
    pub fn new(
        store: impl Objects + 'static,
        root_uri: &str,
        data: DataOptions,
        budgets: Budgets,
    ) -> Arc<Tree> {
        let counts = Arc::new(TreeCounts::default());
        let root = Node::new(
            ROOT,
            String::new(),
            NodeKind::Dir(Arc::new(ObjectDir::root(root_uri))),
            &counts,
        );
        let status = Node::new(
            ROOT + 1,
            STATUS_NAME.to_owned(),
            NodeKind::File(Arc::new(StatusFile::new(root_uri, counts.clone()))),
            &counts,
        );
        let background = Arc::new(Background::default());
        let inodes = HashMap::from([(ROOT, Known::new(root))]);
        counts.inodes.store(inodes.len(), Ordering::Relaxed);
        Arc::new_cyclic(|me| Tree {
            me: me.clone(),
            background: background.clone(),
            files: FileContext {
                options: data,
                background: background.clone(),
                store: Arc::new(store),
                budgets,
                activity: Arc::default(),
                named: Default::default(),
                generation: None,
            },
            inodes: RwLock::new(inodes),
            next_ino: AtomicU64::new(ROOT + 2),
            status,
            counts,
            open_files: Mutex::new(HashMap::new()),
            streams: Mutex::new(HashMap::new()),
            next_fh: AtomicU64::new(1),
            requests: Pool::new("soma-request", REQUEST_THREADS, background.clone()),
            ahead: Pool::new("soma-open-ahead", AHEAD_THREADS, background),
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

    /// The generations running, which `status` lists.
    pub fn activity(&self) -> &Activity {
        &self.files.activity
    }

    /// The tree itself, to move into work done elsewhere. `None` only while it is dropped.
    fn me(&self) -> Option<Arc<Tree>> {
        self.me.upgrade()
    }

    /// Runs `work` on the request pool with `answer`, where its result goes; once the
    /// daemon is ending, calls `failed` with the answer instead. Every request that may wait
    /// goes through here, so an answer is always given exactly once.
    fn on_request_pool<A: Send + 'static>(
        &self,
        answer: A,
        work: impl FnOnce(&Arc<Tree>, A) + Send + 'static,
        failed: impl FnOnce(A, FsError),
    ) {
        let ending = || FsError::io("the daemon", "is ending");
        let Some(tree) = self.me() else {
            return failed(answer, ending());
        };
        // `run` gives the job back unrun only by dropping it: the answer is in it, so it
        // is taken back here instead.
        let queued = Arc::new(Mutex::new(Some((work, answer))));
        let job = queued.clone();
        let ran = self.requests.run(move || {
            if let Some((work, answer)) = job.lock().recover().take() {
                work(&tree, answer);
            }
        });
        let unrun = if ran {
            None
        } else {
            queued.lock().recover().take()
        };
        if let Some((_, answer)) = unrun {
            failed(answer, ending());
        }
    }

    fn node(&self, ino: Ino) -> FsResult<Arc<Node>> {
        if ino == self.status.ino {
            return Ok(self.status.clone());
        }
        let inodes = self.inodes.read().recover();
        inodes
            .get(&ino)
            .map(|known| known.node.clone())
            .ok_or(FsError::NotFound)
    }

    /// A lookup gave `node` to the kernel: it holds it until it forgets it.
    fn remember(&self, node: &Arc<Node>) {
        let mut inodes = self.inodes.write().recover();
        inodes
            .entry(node.ino)
            .or_insert_with(|| Known::new(node.clone()))
            .lookups += 1;
        self.counts.inodes.store(inodes.len(), Ordering::Relaxed);
    }

    /// The kernel forgets `lookups` of its lookups of `ino`. Once it holds none, the inode
    /// leaves the table, and a directory lets go of its entries (they are made again if it
    /// is looked at again).
    pub fn forget(&self, ino: Ino, lookups: u64) {
        if ino == ROOT || ino == self.status.ino {
            return;
        }
        let mut inodes = self.inodes.write().recover();
        let Some(known) = inodes.get_mut(&ino) else {
            return;
        };
        known.lookups = known.lookups.saturating_sub(lookups);
        if known.lookups > 0 {
            return;
        }
        let forgotten = inodes.remove(&ino);
        self.counts.inodes.store(inodes.len(), Ordering::Relaxed);
        drop(inodes);
        if let Some(known) = forgotten {
            *known.node.listing.write().recover() = None;
            known.node.found.lock().recover().clear();
        }
    }

    /// How many inodes the kernel holds (and the root).
    pub fn inodes(&self) -> usize {
        self.inodes.read().recover().len()
    }

    fn attr_of(&self, node: &Node) -> FsResult<Attr> {
        let size = match &node.kind {
            NodeKind::File(file) => file.size(&self.files)?,
            _ => Some(0),
        };
        Ok(Attr {
            ino: node.ino,
            is_dir: node.kind.is_dir(),
            size: size.unwrap_or(0),
            size_known: size.is_some(),
        })
    }

    /// What `stat` shows of an inode as things are: a data file not generated yet shows
    /// size 0, its size not known.
    pub fn attr(&self, ino: Ino) -> FsResult<Attr> {
        self.attr_of(&*self.node(ino)?)
    }

    /// Answers a `stat` of an inode. A data file whose size is not known yet is answered
    /// once it is, when it is being generated for a reader (the size-trusting readers,
    /// DuckDB and polars, open a file and then `fstat` it), or when a `stat` generates it
    /// ([`FileKind::sized_on_stat`]: `fread`, `tar` and `rsync` take sizes from `stat`
    /// before they open); otherwise at once, with size 0.
    pub fn stat(&self, ino: Ino, answer: AttrAnswer) {
        match self.node(ino) {
            Ok(node) => self.stat_node(node, answer),
            Err(e) => answer(Err(e)),
        }
    }

    fn stat_node(&self, node: Arc<Node>, answer: AttrAnswer) {
        let attr = match self.attr_of(&node) {
            Ok(attr) if !attr.size_known => attr,
            known_or_failed => return answer(known_or_failed),
        };
        if let Some(stream) = self.stream_of(node.ino) {
            let Some(tree) = self.me() else {
                return answer(Ok(attr));
            };
            return stream.when_finished(move |outcome| match outcome {
                Outcome::Failed(e) => answer(Err(FsError::Io(e.clone()))),
                Outcome::Done(_) | Outcome::NotCached | Outcome::Stopped => {
                    answer(tree.attr_of(&node))
                }
            });
        }
        let file = match &node.kind {
            NodeKind::File(file) if file.sized_on_stat(&self.files) => file.clone(),
            _ => return answer(Ok(attr)),
        };
        self.on_request_pool(
            answer,
            move |tree, answer| {
                let settled =
                    crate::sync::catch_panic(|| file.settle_size(&tree.files.for_file(&node.path)))
                        .unwrap_or_else(|panic| Err(FsError::io("sizing on stat", panic)));
                answer(settled.and_then(|()| tree.attr_of(&node)));
            },
            move |answer, _| answer(Ok(attr)),
        );
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

    /// Looks up a name in a directory and answers as [`Self::stat`] does.
    pub fn lookup(&self, parent: Ino, name: &str, answer: AttrAnswer) {
        let parent = match self.node(parent) {
            Ok(parent) => parent,
            Err(e) => return answer(Err(e)),
        };
        self.open_named_member_early(&parent, name);
        let name = name.to_owned();
        self.with_listing(parent.clone(), move |tree, listing| {
            let child = listing.and_then(|listing| {
                let child = tree.child(&parent, &listing, &name)?;
                tree.settle_sizes_ahead(&listing, &child);
                Ok(child)
            });
            match child {
                Ok(child) => {
                    let remembered = child.clone();
                    let (tree_here, tree_there) = (tree.clone(), tree.clone());
                    tree_here.stat_node(
                        child,
                        Box::new(move |attr| {
                            if attr.is_ok() {
                                tree_there.remember(&remembered);
                            }
                            answer(attr)
                        }),
                    )
                }
                Err(e) => answer(Err(e)),
            }
        });
    }

    /// A look by name into a group not listed yet: the member it names is opened as soon as
    /// the group's members are read, while the group's open still reads its metadata, so
    /// that each level of a path (`cat ms/RNA/var/data.csv`) starts opening a round of
    /// requests earlier. Nothing is opened for a name that is no member, and nothing twice:
    /// the group's listing and the member's share the opens under way.
    fn open_named_member_early(&self, parent: &Node, name: &str) {
        let Some(ObjectDir {
            uri,
            recorded: Some(ObjectType::Group),
            ..
        }) = parent.kind.dir().and_then(|dir| dir.object())
        else {
            return;
        };
        if self
            .fresh(parent, &parent.listing.read().recover())
            .is_some()
        {
            return;
        }
        let (uri, name) = (uri.clone(), name.to_owned());
        // Errors show in the member's own listing when it is looked at.
        self.on_request_pool(
            (),
            move |tree, ()| {
                let Ok(members) = tree.files.store.members(&uri) else {
                    return;
                };
                if let Some(member) = dirs::member_named(&members, &name) {
                    let _ = tree.files.store.open(&member.uri, Some(member.object_type));
                }
            },
            |(), _| {},
        );
    }

    /// The entry of a directory named `name`.
    fn child(&self, parent: &Node, listing: &Listing, name: &str) -> FsResult<Arc<Node>> {
        if let Some(child) = listing.get(name) {
            return Ok(child.clone());
        }
        if parent.ino == ROOT && name == STATUS_NAME {
            return Ok(self.status.clone());
        }
        // A slice can be opened by name without being listed.
        let dir = parent.kind.dir().ok_or(FsError::NotADirectory)?;
        let mut found = parent.found.lock().recover();
        if let Some(node) = found.get(name).and_then(Weak::upgrade) {
            return Ok(node);
        }
        let kind = dir.find(name).ok_or(FsError::NotFound)?;
        let node = self.new_node(&parent.path, name, kind);
        // Names the kernel forgot leave their nodes behind only as dead links: swept
        // whenever the map has doubled.
        if found.len() >= 1024 && found.len().is_power_of_two() {
            found.retain(|_, node| node.strong_count() > 0);
        }
        found.insert(name.to_owned(), Arc::downgrade(&node));
        Ok(node)
    }

    /// The entries of a directory, in listing order, with whether each is a directory.
    /// Listing a directory also opens its member objects ahead of looks into them.
    pub fn readdir(&self, ino: Ino, answer: EntriesAnswer) {
        let node = match self.node(ino) {
            Ok(node) => node,
            Err(e) => return answer(Err(e)),
        };
        self.with_listing(node.clone(), move |tree, listing| {
            let entries = listing.map(|listing| {
                tree.open_members_ahead(&node, &listing, AHEAD_LEVELS);
                listing.shown.store(true, Ordering::Relaxed);
                listing
                    .entries
                    .iter()
                    .map(|(name, child)| (child.ino, child.kind.is_dir(), name.clone()))
                    .collect()
            });
            answer(entries)
        });
    }

    /// Opens a file for reading: on the request pool, since opening may generate it.
    pub fn open(&self, ino: Ino, answer: OpenAnswer) {
        let node = match self.node(ino) {
            Ok(node) => node,
            Err(e) => return answer(Err(e)),
        };
        let NodeKind::File(file) = &node.kind else {
            return answer(Err(FsError::IsADirectory));
        };
        let file = file.clone();
        self.on_request_pool(
            answer,
            move |tree, answer| {
                let opened = crate::sync::catch_panic(|| tree.open_file(&node, &*file))
                    .unwrap_or_else(|panic| Err(FsError::io("opening", panic)));
                answer(opened);
            },
            |answer, e| answer(Err(e)),
        );
    }

    fn open_file(&self, node: &Node, file: &dyn FileKind) -> FsResult<Opened> {
        let open_file = file.open(&self.files.for_file(&node.path))?;
        // A file whose size is not known yet is read with direct I/O.
        let direct_io =
            matches!(open_file, OpenFile::Streaming(_)) || file.size(&self.files)?.is_none();
        let cache_file = match &open_file {
            OpenFile::Cached(file) => file.try_clone().ok(),
            _ => None,
        };
        let open_file = Arc::new(open_file);
        if let OpenFile::Streaming(_) = *open_file {
            let mut streams = self.streams.lock().recover();
            streams.retain(|_, handle| handle.strong_count() > 0);
            streams.insert(node.ino, Arc::downgrade(&open_file));
        }
        let fh = self.next_fh.fetch_add(1, Ordering::Relaxed);
        let mut open_files = self.open_files.lock().recover();
        open_files.insert(fh, open_file);
        self.counts
            .open_handles
            .store(open_files.len(), Ordering::Relaxed);
        Ok(Opened {
            fh,
            direct_io,
            cache_file,
        })
    }

    /// Reads from an open file: at once from memory or the cache, when generated that far
    /// from a stream, on the request pool from the store.
    pub fn read(&self, fh: u64, offset: u64, size: u32, answer: ReadAnswer) {
        let Some(open_file) = self.open_files.lock().recover().get(&fh).cloned() else {
            return answer(Err(std::io::Error::other("no such file handle")));
        };
        if !open_file.reads_from_store() {
            return open_file.read(offset, size, answer);
        }
        self.on_request_pool(
            answer,
            move |_, answer| open_file.read(offset, size, answer),
            |answer, e| answer(Err(std::io::Error::other(format!("{e:?}")))),
        );
    }

    /// Closes a file handle.
    pub fn release(&self, fh: u64) {
        let mut open_files = self.open_files.lock().recover();
        let removed = open_files.remove(&fh);
        self.counts
            .open_handles
            .store(open_files.len(), Ordering::Relaxed);
        drop(open_files);
        if let Some(open_file) = removed {
            open_file.close();
        }
    }

    /// Calls `then` with a directory's listing: at once when it is made and fresh, else
    /// from the request pool once it is made.
    fn with_listing(
        &self,
        node: Arc<Node>,
        then: impl FnOnce(&Arc<Tree>, FsResult<Arc<Listing>>) + Send + 'static,
    ) {
        let Some(tree) = self.me() else {
            return;
        };
        if !node.kind.is_dir() {
            return then(&tree, Err(FsError::NotADirectory));
        }
        if let Some(listing) = self.fresh(&node, &node.listing.read().recover()) {
            return then(&tree, Ok(listing));
        }
        self.on_request_pool(
            then,
            move |tree, then| then(tree, tree.listing(&node)),
            |then, e| then(&tree, Err(e)),
        );
    }

    /// A node's listing if it is made and still fresh: object directories are listed again
    /// once older than the metadata TTL.
    fn fresh(&self, node: &Node, current: &Option<Arc<Listing>>) -> Option<Arc<Listing>> {
        let expires = node.kind.is_object();
        current
            .as_ref()
            .filter(|l| !expires || l.made.elapsed() < self.files.options.metadata_ttl)
            .cloned()
    }

    /// A directory's listing: made on first look, and for object directories made again
    /// once older than the metadata TTL (kept, with its nodes, when the object is unchanged).
    fn listing(&self, node: &Node) -> FsResult<Arc<Listing>> {
        let dir = node.kind.dir().ok_or(FsError::NotADirectory)?;
        if let Some(listing) = self.fresh(node, &node.listing.read().recover()) {
            return Ok(listing);
        }
        let _making = node.making.lock().recover();
        // Another look may have made it while this one waited.
        let current = node.listing.read().recover().clone();
        if let Some(listing) = self.fresh(node, &current) {
            return Ok(listing);
        }
        let listed = dir.list(&DirContext {
            store: &*self.files.store,
            files: &self.files,
        });
        // A refresh that fails keeps the last good listing (a store that is briefly
        // unreachable must not look emptied); the next look tries again.
        if let Some(last) = current
            .as_ref()
            .filter(|l| listed.failed && l.fingerprint.is_some())
        {
            warn!(
                "{}: keeping the last listing until the store answers again",
                node.path
            );
            let kept = last.renewed();
            *node.listing.write().recover() = Some(kept.clone());
            return Ok(kept);
        }
        let fingerprint = listed.fingerprint;
        let listing = match current {
            Some(old) if old.fingerprint == fingerprint => old.renewed(),
            _ => Arc::new(self.add_entries(&node.path, listed.entries, fingerprint)),
        };
        *node.listing.write().recover() = Some(listing.clone());
        Ok(listing)
    }

    /// Starts listing the not-yet-listed object directories among a listing's entries, on
    /// the open-ahead pool, once per listing, and `levels - 1` levels below them. A look
    /// into one of them meanwhile waits for its listing (see `Node::making`) or makes it
    /// first.
    fn open_members_ahead(&self, node: &Node, listing: &Listing, levels: u32) {
        if !node.kind.is_object() || listing.members_ahead.swap(true, Ordering::Relaxed) {
            return;
        }
        let members = listing
            .entries
            .iter()
            .map(|(_, member)| member)
            .filter(|n| n.kind.is_object())
            .filter(|n| n.listing.read().recover().is_none());
        for member in members {
            let Some(tree) = self.me() else {
                return;
            };
            let member = member.clone();
            // Errors show in the member's own listing (error.txt) when it is looked at.
            let started = self.ahead.run(move || {
                if tree.background.stopped() {
                    return;
                }
                if let Ok(listing) = tree.listing(&member) {
                    if levels > 1 {
                        tree.open_members_ahead(&member, &listing, levels - 1);
                    }
                }
            });
            if !started {
                return;
            }
        }
    }

    /// A look at `child`, a file of a listing that a `readdir` showed, whose size is
    /// settled by counting alone (sized Parquet: see [`FileKind::settled_by_counting`]) and
    /// not known yet: that is `ls -l`, or a dataset reader sizing the files it listed. So
    /// every such file of the listing is settled at once, on the open-ahead pool, and the
    /// looks that come one by one next find them counted or being counted. Once per
    /// listing; errors show at each file's own look. A plain `ls` settles nothing, and a
    /// look by name without a listing (`cat`) only its own file.
    fn settle_sizes_ahead(&self, listing: &Listing, child: &Node) {
        let NodeKind::File(file) = &child.kind else {
            return;
        };
        if !file.settled_by_counting()
            || !matches!(file.size(&self.files), Ok(None))
            || !listing.shown.load(Ordering::Relaxed)
            || listing.sizes_ahead.swap(true, Ordering::Relaxed)
        {
            return;
        }
        let files = listing
            .entries
            .iter()
            .filter_map(|(_, child)| match &child.kind {
                NodeKind::File(file)
                    if file.settled_by_counting() && matches!(file.size(&self.files), Ok(None)) =>
                {
                    Some((child.path.clone(), file.clone()))
                }
                _ => None,
            });
        for (path, file) in files {
            let Some(tree) = self.me() else {
                return;
            };
            // Named, as every request's work is, so that `soma-mount status` shows which
            // file each count is for.
            let started = self.ahead.run(move || {
                if !tree.background.stopped() {
                    let _ = file.settle_size(&tree.files.for_file(&path));
                }
            });
            if !started {
                return;
            }
        }
    }

    /// A new node, with the next inode number.
    fn new_node(&self, parent_path: &str, name: &str, kind: NodeKind) -> Arc<Node> {
        let ino = self.next_ino.fetch_add(1, Ordering::Relaxed);
        let path = if parent_path.is_empty() {
            name.to_owned()
        } else {
            format!("{parent_path}/{name}")
        };
        Node::new(ino, path, kind, &self.counts)
    }

    /// Gives every entry a node.
    fn add_entries(
        &self,
        parent_path: &str,
        named: Vec<(String, NodeKind)>,
        fingerprint: Option<String>,
    ) -> Listing {
        let mut listing = Listing {
            entries: Vec::with_capacity(named.len()),
            by_name: HashMap::with_capacity(named.len()),
            fingerprint,
            made: Instant::now(),
            members_ahead: AtomicBool::new(false),
            shown: AtomicBool::new(false),
            sizes_ahead: AtomicBool::new(false),
        };
        for (name, kind) in named {
            if listing.by_name.contains_key(&name) {
                // Members come first, so a member keeps its name over a generated file.
                warn!("two entries are named {name:?}; showing only the first");
                continue;
            }
            let node = self.new_node(parent_path, &name, kind);
            listing.by_name.insert(name.clone(), listing.entries.len());
            listing.entries.push((name, node));
        }
        listing
    }
}

impl Known {
    fn new(node: Arc<Node>) -> Known {
        Known { node, lookups: 0 }
    }
}

impl Node {
    fn new(ino: Ino, path: String, kind: NodeKind, counts: &Arc<TreeCounts>) -> Arc<Node> {
        counts.nodes.fetch_add(1, Ordering::Relaxed);
        Arc::new(Node {
            ino,
            path,
            kind,
            listing: RwLock::new(None),
            making: Mutex::new(()),
            found: Mutex::new(HashMap::new()),
            counts: counts.clone(),
        })
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        self.counts.nodes.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Counts kept for tests of the tree.
#[cfg(test)]
impl Tree {
    pub fn nodes(&self) -> usize {
        self.counts.nodes.load(Ordering::Relaxed)
    }
}
