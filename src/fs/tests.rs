//! The tree's decisions, tested over a store made up in memory (no libtiledb): what
//! directories list, what names find, what sizes `stat` shows, how snapshots are kept and
//! renewed, and how failures show. Reading data needs libtiledb; the integration tests in
//! `tests/python/` compare that with tiledbsoma.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;

use crate::format::parquet_sized::SizedParquet;
use crate::soma::fixtures::{dataframe, dense_array, group, sparse_array};
use crate::soma::{Objects, SomaObject};
use crate::tiledb::{self, Member, ObjectType};

use super::cache::ContentCache;
use super::data::DataOptions;
use super::error::FsError;
use super::tree::{Attr, Ino, Tree, ROOT};

/// A store in memory: objects by URI (or why each cannot be opened), and how many opens
/// were asked of it.
#[derive(Default)]
pub(super) struct FakeStore {
    objects: Mutex<HashMap<String, Result<Arc<SomaObject>, String>>>,
    opens: Mutex<HashMap<String, usize>>,
}

impl Objects for Arc<FakeStore> {
    fn open(&self, uri: &str, _: Option<ObjectType>) -> tiledb::Result<Arc<SomaObject>> {
        *self
            .opens
            .lock()
            .unwrap()
            .entry(uri.to_owned())
            .or_default() += 1;
        match self.objects.lock().unwrap().get(uri) {
            Some(Ok(object)) => Ok(object.clone()),
            Some(Err(message)) => Err(tiledb::Error::new(message.clone())),
            None => Err(tiledb::Error::new(format!(
                "no TileDB group or array at {uri}"
            ))),
        }
    }

    /// A group's members, read without counting an open (as the store reads them in the
    /// group's open).
    fn members(&self, uri: &str) -> tiledb::Result<Vec<Member>> {
        match self.objects.lock().unwrap().get(uri) {
            Some(Ok(object)) => Ok(match object.as_ref() {
                SomaObject::Group(group) => group.members.clone(),
                SomaObject::Array(_) => Vec::new(),
            }),
            Some(Err(message)) => Err(tiledb::Error::new(message.clone())),
            None => Err(tiledb::Error::new(format!("no TileDB group at {uri}"))),
        }
    }
}

impl FakeStore {
    pub(super) fn put(&self, object: SomaObject) {
        let uri = object.uri().to_owned();
        self.objects
            .lock()
            .unwrap()
            .insert(uri, Ok(Arc::new(object)));
    }

    fn fail(&self, uri: &str, message: &str) {
        self.objects
            .lock()
            .unwrap()
            .insert(uri.to_owned(), Err(message.to_owned()));
    }

    /// The object at `uri`, as put.
    pub(super) fn object(&self, uri: &str) -> Arc<SomaObject> {
        match self.objects.lock().unwrap().get(uri) {
            Some(Ok(object)) => object.clone(),
            _ => panic!("no object at {uri}"),
        }
    }

    /// How many times `uri` was opened.
    pub(super) fn opens(&self, uri: &str) -> usize {
        self.opens.lock().unwrap().get(uri).copied().unwrap_or(0)
    }
}

/// An experiment: obs, ms/ (empty), members named a/b and a%2Fb, a member named like a
/// generated file, and a member that cannot be opened.
pub(super) fn store() -> Arc<FakeStore> {
    let store = Arc::new(FakeStore::default());
    store.put(group(
        "mem://exp",
        "SOMAExperiment",
        &[
            ("obs", "mem://exp/obs", ObjectType::Array),
            ("ms", "mem://exp/ms", ObjectType::Group),
            ("a/b", "mem://exp/slash", ObjectType::Group),
            ("a%2Fb", "mem://exp/looks_encoded", ObjectType::Group),
            ("metadata.json", "mem://exp/clash", ObjectType::Group),
            ("gone", "mem://exp/gone", ObjectType::Group),
        ],
    ));
    store.put(dataframe("mem://exp/obs", "frag-1"));
    for uri in ["ms", "slash", "looks_encoded", "clash"] {
        store.put(group(&format!("mem://exp/{uri}"), "SOMACollection", &[]));
    }
    store.fail("mem://exp/gone", "Group does not exist");
    store
}

/// [`store`] whose `ms` holds a measurement RNA: var, and X with a sparse layer `data`.
pub(super) fn store_with_measurement() -> Arc<FakeStore> {
    let store = store();
    let array = ObjectType::Array;
    store.put(group(
        "mem://exp/ms",
        "SOMACollection",
        &[("RNA", "mem://exp/ms/RNA", ObjectType::Group)],
    ));
    store.put(group(
        "mem://exp/ms/RNA",
        "SOMAMeasurement",
        &[
            ("var", "mem://exp/ms/RNA/var", array),
            ("X", "mem://exp/ms/RNA/X", ObjectType::Group),
        ],
    ));
    store.put(dataframe("mem://exp/ms/RNA/var", "frag-var"));
    store.put(group(
        "mem://exp/ms/RNA/X",
        "SOMACollection",
        &[("data", "mem://exp/ms/RNA/X/data", array)],
    ));
    store.put(sparse_array("mem://exp/ms/RNA/X/data"));
    store
}

pub(super) struct Mounted {
    pub(super) tree: Arc<Tree>,
    pub(super) store: Arc<FakeStore>,
    pub(super) cache_dir: std::path::PathBuf,
}

impl Drop for Mounted {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.cache_dir);
    }
}

pub(super) fn mount_with(store: Arc<FakeStore>, ttl: Duration) -> Mounted {
    mount_at(store, "mem://exp", ttl)
}

/// A mount whose root is the object at `root`.
pub(super) fn mount_at(store: Arc<FakeStore>, root: &str, ttl: Duration) -> Mounted {
    mount_materializing(store, root, ttl, 64 << 20)
}

/// [`mount_with`], where no data file is generated whole before it is read: each streams.
pub(super) fn mount_streaming(store: Arc<FakeStore>) -> Mounted {
    mount_materializing(store, "mem://exp", Duration::from_secs(60), 0)
}

/// A mount whose root is the object at `root`, generating files whole below
/// `materialize_limit` bytes.
fn mount_materializing(
    store: Arc<FakeStore>,
    root: &str,
    ttl: Duration,
    materialize_limit: u64,
) -> Mounted {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let n = NEXT.fetch_add(1, Ordering::SeqCst);
    let cache_dir =
        std::env::temp_dir().join(format!("soma-mount-tree-{}-{n}", std::process::id()));
    let options = DataOptions {
        cache: Arc::new(ContentCache::open(&cache_dir, 1 << 30).unwrap()),
        materialize_limit,
        exact_sizes: false,
        chunk_cells: 1_000_000,
        metadata_ttl: ttl,
    };
    let tree = Tree::new(store.clone(), root, options, Default::default());
    Mounted {
        tree,
        store,
        cache_dir,
    }
}

fn mount() -> Mounted {
    mount_with(store(), Duration::from_secs(60))
}

/// Waits up to ten seconds for what a callback of the tree is given.
fn answered<T: Send + 'static>(ask: impl FnOnce(Box<dyn FnOnce(T) + Send>)) -> T {
    let (tx, rx) = mpsc::channel();
    ask(Box::new(move |answer| tx.send(answer).unwrap()));
    rx.recv_timeout(Duration::from_secs(10))
        .expect("the tree never answered")
}

/// Waits up to ten seconds for `condition`.
fn eventually(condition: impl Fn() -> bool) -> bool {
    let started = std::time::Instant::now();
    while started.elapsed() < Duration::from_secs(10) {
        if condition() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    false
}

impl Mounted {
    fn readdir(&self, ino: Ino) -> Result<Vec<(Ino, bool, String)>, FsError> {
        answered(|answer| self.tree.readdir(ino, answer))
    }

    pub(super) fn names(&self, ino: Ino) -> Vec<String> {
        let entries = self.readdir(ino).unwrap();
        entries.into_iter().map(|(_, _, name)| name).collect()
    }

    pub(super) fn open(&self, ino: Ino) -> Result<super::tree::Opened, FsError> {
        answered(|answer| self.tree.open(ino, answer))
    }

    /// `stat` of a path from the root, as the kernel asks: a lookup per name.
    pub(super) fn stat(&self, path: &str) -> Result<Attr, FsError> {
        let mut attr = self.tree.attr(ROOT)?;
        for name in path.split('/').filter(|n| !n.is_empty()) {
            attr = answered(|answer| self.tree.lookup(attr.ino, name, answer))?;
        }
        Ok(attr)
    }

    /// Every byte of the file at `path`, read as the kernel reads: from offset 0 until a
    /// read returns nothing.
    pub(super) fn read_all(&self, path: &str) -> Result<Vec<u8>, FsError> {
        let attr = self.stat(path)?;
        let opened = self.open(attr.ino)?;
        let mut bytes = Vec::new();
        let result = loop {
            let offset = bytes.len() as u64;
            match answered(|answer| self.tree.read(opened.fh, offset, 1 << 16, answer)) {
                Ok(piece) if piece.is_empty() => break Ok(bytes),
                Ok(piece) => bytes.extend_from_slice(&piece),
                Err(e) => break Err(FsError::io("read", e)),
            }
        };
        self.tree.release(opened.fh);
        result
    }

    /// At most `size` bytes of the file at `path` from `offset`, in one read of one open.
    pub(super) fn read_at(&self, path: &str, offset: u64, size: u32) -> Result<Vec<u8>, FsError> {
        let attr = self.stat(path)?;
        let opened = self.open(attr.ino)?;
        let bytes = answered(|answer| self.tree.read(opened.fh, offset, size, answer));
        self.tree.release(opened.fh);
        bytes.map_err(|e| FsError::io("read", e))
    }

    pub(super) fn read(&self, path: &str) -> Result<Vec<u8>, FsError> {
        let attr = self.stat(path)?;
        let opened = self.open(attr.ino)?;
        let bytes = answered(|answer| self.tree.read(opened.fh, 0, 1 << 20, answer));
        self.tree.release(opened.fh);
        bytes.map_err(|e| FsError::io("read", e))
    }
}

#[test]
fn a_group_lists_its_members_under_one_to_one_names_and_its_metadata() {
    let m = mount();
    assert_eq!(
        m.names(ROOT),
        [
            "obs",
            "ms",
            "a%2Fb",
            "a%252Fb",
            "metadata.json",
            "gone",
            "anndata",
            "where"
        ],
        "members in order, then the experiment's anndata/ and where/; a member wins over a generated name"
    );
    assert!(m.stat("metadata.json").unwrap().is_dir);
    assert!(m.stat("a%2Fb").unwrap().is_dir);
    assert!(m.stat("a%252Fb").unwrap().is_dir);
    assert_ne!(m.stat("a%2Fb").unwrap().ino, m.stat("a%252Fb").unwrap().ino);
}

#[test]
fn an_array_lists_its_files() {
    let m = mount();
    let obs = m.stat("obs").unwrap();
    assert_eq!(
        m.names(obs.ino),
        [
            "metadata.json",
            "schema.json",
            "data.csv",
            "data.tsv",
            "data.parquet",
            "data.jsonl",
            "slices",
            "by",
            "where"
        ]
    );
    assert_eq!(m.names(m.stat("obs/by").unwrap().ino), ["cell_type"]);
    assert_eq!(
        m.names(m.stat("obs/by/cell_type").unwrap().ino),
        ["a", "b%2Fc", "__null__"]
    );
    assert_eq!(
        m.names(m.stat("obs/by/cell_type/b%2Fc").unwrap().ino),
        [
            "data.csv",
            "data.tsv",
            "data.parquet",
            "data.jsonl",
            "slices"
        ]
    );
}

#[test]
fn tenx_splits_a_layer_by_obs_labels_into_matrix_directories() {
    let m = mount_with(store_with_measurement(), Duration::from_secs(60));
    assert_eq!(m.names(m.stat("ms/RNA/10x").unwrap().ino), ["data"]);
    let matrix = [
        "matrix.mtx",
        "matrix.h5",
        "genes.tsv",
        "features.tsv",
        "barcodes.tsv",
    ];
    let layer = m.names(m.stat("ms/RNA/10x/data").unwrap().ino);
    assert_eq!(layer, [&matrix[..], &["by"]].concat());
    let by = m.stat("ms/RNA/10x/data/by").unwrap();
    assert_eq!(m.names(by.ino), ["cell_type"]);
    let labels = m.stat("ms/RNA/10x/data/by/cell_type").unwrap();
    assert_eq!(m.names(labels.ino), ["a", "b%2Fc", "__null__"]);
    // A category is a matrix directory of its own, with no by/ below it.
    for label in ["a", "b%2Fc", "__null__"] {
        let category = m.stat(&format!("ms/RNA/10x/data/by/cell_type/{label}"));
        assert_eq!(m.names(category.unwrap().ino), matrix, "{label}");
    }
    assert_eq!(
        m.stat("ms/RNA/10x/data/by/cell_type/a/by"),
        Err(FsError::NotFound)
    );
}

#[test]
fn anndata_lists_each_measurement_and_splits_the_cells_by_obs_labels() {
    let m = mount_with(store_with_measurement(), Duration::from_secs(60));
    let anndata = m.stat("anndata").unwrap();
    assert_eq!(m.names(anndata.ino), ["RNA.h5ad", "RNA.zarr", "by"]);
    assert!(m.stat("anndata/RNA.zarr").unwrap().is_dir);
    assert_eq!(m.names(m.stat("anndata/by").unwrap().ino), ["cell_type"]);
    let labels = m.stat("anndata/by/cell_type").unwrap();
    assert_eq!(m.names(labels.ino), ["a", "b%2Fc", "__null__"]);
    let category = m.stat("anndata/by/cell_type/b%2Fc").unwrap();
    assert_eq!(m.names(category.ino), ["RNA.h5ad"]);
    // A small listed h5ad is generated by its first stat: here there is no data behind it.
    match m.stat("anndata/by/cell_type/b%2Fc/RNA.h5ad") {
        Err(FsError::Io(message)) => assert!(message.contains("no data"), "{message}"),
        other => panic!("expected EIO, got {other:?}"),
    }
}

#[test]
fn an_experiment_without_a_measurement_shows_no_anndata_files() {
    // ms is an empty collection: anndata/ is listed (obs and ms are there) but holds nothing.
    let m = mount();
    assert!(m.names(m.stat("anndata").unwrap().ino).is_empty());
    assert_eq!(m.stat("ms/10x"), Err(FsError::NotFound));
}

#[test]
fn where_opens_a_directory_per_filter_by_name_and_lists_none() {
    let m = mount();
    let queries = m.stat("obs/where").unwrap();
    assert!(queries.is_dir);
    assert!(m.names(queries.ino).is_empty(), "where/ lists nothing");
    let query = m
        .stat("obs/where/cell_type == 'b%2Fc' and x > 0.5")
        .unwrap();
    assert!(query.is_dir);
    assert_eq!(
        m.names(query.ino),
        [
            "data.csv",
            "data.tsv",
            "data.parquet",
            "data.jsonl",
            "schema.json"
        ]
    );
    // The same name finds the same directory while the kernel holds it.
    let again = m
        .stat("obs/where/cell_type == 'b%2Fc' and x > 0.5")
        .unwrap();
    assert_eq!(again.ino, query.ino);
    let all = m.stat("obs/where/all").unwrap();
    assert!(m.names(all.ino).contains(&"data.parquet".to_owned()));
    // The frame's own schema.json, byte for byte.
    let schema = m.read("obs/schema.json").unwrap();
    assert_eq!(m.read("obs/where/all/schema.json").unwrap(), schema);
}

#[test]
fn a_filter_that_cannot_be_read_is_a_directory_holding_only_error_txt() {
    let m = mount();
    for (filter, says) in [
        ("nope == 1", "no column is named `nope`"),
        ("x == 'a'", "`x` holds numbers"),
        ("x ==", "found the end"),
        ("cell_type > 'a'", "categorical without an order"),
    ] {
        let dir = m.stat(&format!("obs/where/{filter}")).unwrap();
        assert!(dir.is_dir, "{filter}");
        assert_eq!(m.names(dir.ino), ["error.txt"], "{filter}");
        let text = m.read(&format!("obs/where/{filter}/error.txt")).unwrap();
        let text = String::from_utf8(text).unwrap();
        assert!(
            text.contains(says) && text.contains(filter),
            "{filter}: {text}"
        );
    }
    // Only data frames have where/.
    let store = store();
    store.put(dense_array("mem://dense"));
    let m = mount_at(store, "mem://dense", Duration::from_secs(60));
    assert_eq!(m.stat("where"), Err(FsError::NotFound));
}

#[test]
fn an_experiment_query_holds_obs_each_measurement_and_anndata_and_a_var_query_below() {
    let m = mount_with(store_with_measurement(), Duration::from_secs(60));
    assert!(m.names(m.stat("where").unwrap().ino).is_empty());
    let query = "where/x > 1 and cell_type in ['a']";
    assert_eq!(
        m.names(m.stat(query).unwrap().ino),
        ["obs", "ms", "anndata"]
    );
    let obs = m.stat(&format!("{query}/obs")).unwrap();
    assert!(m.names(obs.ino).contains(&"schema.json".to_owned()));
    assert_eq!(
        m.names(m.stat(&format!("{query}/ms")).unwrap().ino),
        ["RNA"]
    );
    let rna = m.stat(&format!("{query}/ms/RNA")).unwrap();
    assert_eq!(m.names(rna.ino), ["var", "X", "obsm", "10x", "where"]);
    assert_eq!(
        m.names(m.stat(&format!("{query}/ms/RNA/X")).unwrap().ino),
        ["data"]
    );
    assert_eq!(
        m.names(m.stat(&format!("{query}/ms/RNA/10x/data")).unwrap().ino),
        [
            "matrix.mtx",
            "matrix.h5",
            "genes.tsv",
            "features.tsv",
            "barcodes.tsv"
        ]
    );
    let anndata = m.stat(&format!("{query}/anndata")).unwrap();
    assert_eq!(m.names(anndata.ino), ["RNA.h5ad"]);
    // The cells' join ids are read from obs when a matrix is listed: here obs has no data,
    // and the matrix's directory says so.
    let x = m.stat(&format!("{query}/ms/RNA/X/data")).unwrap();
    assert_eq!(m.names(x.ino), ["error.txt"]);
    let genes = format!("{query}/ms/RNA/where/x < 3");
    assert_eq!(
        m.names(m.stat(&genes).unwrap().ino),
        ["var", "X", "obsm", "10x", "anndata.h5ad"]
    );
    // A filter that cannot be read, on obs or on var: only error.txt.
    for bad in ["where/nope == 1", &format!("{query}/ms/RNA/where/x == 'a'")] {
        assert_eq!(m.names(m.stat(bad).unwrap().ino), ["error.txt"], "{bad}");
    }
}

#[test]
fn documents_have_exact_sizes_and_data_files_size_zero_until_generated() {
    let m = mount();
    let metadata = m.read("metadata.json/metadata.json").unwrap();
    let text = String::from_utf8(metadata.clone()).unwrap();
    assert!(text.contains("\"SOMACollection\""), "{text}");
    let attr = m.stat("metadata.json/metadata.json").unwrap();
    assert_eq!((attr.size, attr.size_known), (metadata.len() as u64, true));
    let schema = m.stat("obs/schema.json").unwrap();
    assert!(schema.size_known && schema.size > 0);
    // Above the limit nothing is generated by a stat: size 0, not known.
    let slice = m.stat("obs/slices/0-9.csv").unwrap();
    assert_eq!((slice.size, slice.size_known), (0, false));
}

#[test]
fn a_stat_of_a_small_whole_array_file_generates_it_and_a_failure_is_eio() {
    let m = mount();
    // The described array has no data behind it: the generation a stat starts fails, and
    // the stat says so rather than show an empty file.
    match m.stat("obs/data.csv") {
        Err(FsError::Io(message)) => assert!(message.contains("no data"), "{message}"),
        other => panic!("expected EIO, got {other:?}"),
    }
    assert!(matches!(m.read("obs/data.tsv"), Err(FsError::Io(_))));
}

#[test]
fn unknown_and_malformed_names_are_not_found() {
    let m = mount();
    for path in [
        "nope",
        "obs/nope.csv",
        "obs/slices/9-3.csv",
        "obs/slices/x.csv",
        "obs/slices/1,2.csv",
        "obs/by/x",
        "obs/by/cell_type/z",
    ] {
        assert_eq!(m.stat(path), Err(FsError::NotFound), "{path}");
    }
    // A valid slice opens by name without being listed, and names one inode.
    let slice = m.stat("obs/slices/0-9.jsonl").unwrap();
    assert_eq!(m.stat("obs/slices/0-9.jsonl").unwrap().ino, slice.ino);
    assert!(!slice.is_dir);
}

#[test]
fn slices_is_a_directory_per_format_each_opening_slices_of_its_own_format_by_name() {
    let m = mount();
    let slices = m.stat("obs/slices").unwrap();
    assert_eq!(m.names(slices.ino), ["csv", "tsv", "parquet", "jsonl"]);
    for format in ["csv", "tsv", "parquet", "jsonl"] {
        let dir = m.stat(&format!("obs/slices/{format}")).unwrap();
        assert!(dir.is_dir, "{format}");
        let slice = m
            .stat(&format!("obs/slices/{format}/0-9.{format}"))
            .unwrap();
        assert!(!slice.is_dir);
        // A slice opened by name is not listed: a stat does not generate it.
        assert_eq!((slice.size, slice.size_known), (0, false), "{format}");
    }
    for path in [
        "obs/slices/csv/0-9.tsv",
        "obs/slices/parquet/0-9.csv",
        "obs/slices/jsonl/9-3.jsonl",
        "obs/slices/tsv/csv",
        "obs/slices/xml",
    ] {
        assert_eq!(m.stat(path), Err(FsError::NotFound), "{path}");
    }
    // The names of today open under slices/ itself, in any format.
    assert!(!m.stat("obs/slices/0-9.parquet").unwrap().is_dir);
}

#[test]
fn the_parquet_of_an_nd_array_has_its_exact_size_at_its_first_stat_without_a_read() {
    let store = store();
    let dense = dense_array("mem://dense");
    let schema = match &dense {
        SomaObject::Array(array) => array.schema.arrow(),
        SomaObject::Group(_) => unreachable!("dense_array makes an array"),
    };
    store.put(dense);
    let m = mount_at(store, "mem://dense", Duration::from_secs(60));
    let sized = |rows: u64| SizedParquet::of(&schema, rows).unwrap().size();
    // The array has no data behind it: a size that needed a read would fail.
    let whole = m.stat("data.parquet").unwrap();
    assert_eq!((whole.size, whole.size_known), (sized(1000), true));
    let chunks = m.stat("slices/parquet").unwrap();
    assert_eq!(m.names(chunks.ino), ["0-99.parquet"]);
    let chunk = m.stat("slices/parquet/0-99.parquet").unwrap();
    assert_eq!((chunk.size, chunk.size_known), (sized(1000), true));
    let named = m.stat("slices/5-9,2-3.parquet").unwrap();
    assert_eq!((named.size, named.size_known), (sized(10), true));
    // The other formats are generated to be sized, which fails here.
    assert!(matches!(m.stat("data.csv"), Err(FsError::Io(_))));
}

#[test]
fn files_and_directories_are_not_confused() {
    let m = mount();
    let obs = m.stat("obs").unwrap();
    let schema = m.stat("obs/schema.json").unwrap();
    assert_eq!(m.readdir(schema.ino), Err(FsError::NotADirectory));
    assert!(matches!(m.open(obs.ino), Err(FsError::IsADirectory)));
}

#[test]
fn a_member_that_cannot_be_opened_holds_error_txt() {
    let m = mount();
    assert_eq!(m.names(m.stat("gone").unwrap().ino), ["error.txt"]);
    let text = String::from_utf8(m.read("gone/error.txt").unwrap()).unwrap();
    assert!(text.contains("mem://exp/gone") && text.contains("Group does not exist"));
}

#[test]
fn a_listing_is_kept_for_the_ttl_then_renewed_keeping_inodes_of_what_did_not_change() {
    let store = store();
    let m = mount_with(store.clone(), Duration::from_millis(200));
    let obs = m.stat("obs").unwrap().ino;
    m.stat("obs/schema.json").unwrap();
    m.names(obs);
    assert_eq!(
        store.opens("mem://exp/obs"),
        1,
        "within the TTL obs is opened once"
    );
    std::thread::sleep(Duration::from_millis(250));
    let schema = m.stat("obs/schema.json").unwrap().ino;
    assert_eq!(
        store.opens("mem://exp/obs"),
        2,
        "after the TTL it is looked at again"
    );
    assert_eq!(m.stat("obs").unwrap().ino, obs);
    assert_eq!(
        m.stat("obs/schema.json").unwrap().ino,
        schema,
        "unchanged: same inodes"
    );
    // A new fragment is a new snapshot: new entries.
    m.store.put(dataframe("mem://exp/obs", "frag-2"));
    std::thread::sleep(Duration::from_millis(250));
    let after = m.stat("obs/schema.json").unwrap().ino;
    assert_ne!(after, schema, "changed: new inodes");
}

#[test]
fn a_refresh_that_fails_keeps_the_last_listing() {
    let store = store();
    let m = mount_with(store.clone(), Duration::from_millis(100));
    let before = m.names(m.stat("obs").unwrap().ino);
    store.fail("mem://exp/obs", "the store does not answer");
    std::thread::sleep(Duration::from_millis(150));
    assert_eq!(m.names(m.stat("obs").unwrap().ino), before);
}

#[test]
fn the_kernel_forgetting_an_inode_lets_go_of_it_and_of_what_it_listed() {
    let m = mount();
    // The root listed: what stays whatever happens to obs.
    m.stat("gone").unwrap();
    let before = (m.tree.inodes(), m.tree.nodes());
    let slices: Vec<Ino> = (0..50)
        .map(|i| m.stat(&format!("obs/slices/{i}-{i}.csv")).unwrap().ino)
        .collect();
    let obs = m.stat("obs").unwrap().ino;
    let slices_dir = m.stat("obs/slices").unwrap().ino;
    assert_eq!(
        m.tree.inodes(),
        before.0 + 52,
        "every looked-up inode is held"
    );
    // One lookup of obs each time it was walked through: 50 slices, 1 + 1 more.
    for ino in slices {
        m.tree.forget(ino, 1);
    }
    m.tree.forget(slices_dir, 51);
    assert_eq!(m.tree.inodes(), before.0 + 1, "obs is still held");
    m.tree.forget(obs, 52);
    assert_eq!(m.tree.inodes(), before.0);
    // (A request thread may still hold what it answered about for a moment.)
    assert!(
        eventually(|| m.tree.nodes() == before.1),
        "obs's listing and the slices found by name are gone with it: {} nodes, {} before",
        m.tree.nodes(),
        before.1
    );
    assert!(matches!(m.tree.attr(obs), Err(FsError::NotFound)));
    // Looked up again, obs is listed again.
    assert_eq!(m.names(m.stat("obs").unwrap().ino).len(), 9);
    m.tree.forget(ROOT, 1000);
    assert!(m.tree.attr(ROOT).is_ok(), "the root is never forgotten");
}

#[test]
fn the_status_file_is_found_by_name_at_the_root_and_never_listed() {
    let m = mount();
    assert!(!m.names(ROOT).iter().any(|n| n.starts_with('.')));
    let attr = m.stat(".soma-mount.status").unwrap();
    assert!(!attr.size_known, "made at each open: read with direct I/O");
    let status: serde_json::Value =
        serde_json::from_slice(&m.read(".soma-mount.status").unwrap()).unwrap();
    assert_eq!(status["uri"], "mem://exp");
    assert!(status["inodes"].as_u64().unwrap() >= 1);
    assert!(status["memory"]["budget_bytes"].as_u64().unwrap() > 0);
    assert!(status["generations"]["running"].is_array());
    assert_eq!(m.stat("obs/.soma-mount.status"), Err(FsError::NotFound));
}

#[test]
fn listing_a_directory_opens_its_members_ahead_and_a_look_by_name_does_not() {
    let m = mount();
    m.stat("obs/schema.json").unwrap();
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(
        m.store.opens("mem://exp/ms"),
        0,
        "a look by name opens what it names"
    );
    m.names(ROOT);
    assert!(
        eventually(|| m.store.opens("mem://exp/ms") == 1 && m.store.opens("mem://exp/clash") == 1),
        "ls opens the members ahead, once"
    );
    assert_eq!(m.store.opens("mem://exp/obs"), 1, "obs was open already");
}

#[test]
fn a_look_by_name_into_a_group_not_listed_opens_the_member_it_names_early() {
    let store = store();
    store.put(group(
        "mem://exp/ms",
        "SOMACollection",
        &[
            ("RNA", "mem://exp/ms/RNA", ObjectType::Group),
            ("a/b", "mem://exp/ms/slash", ObjectType::Group),
            ("other", "mem://exp/ms/other", ObjectType::Group),
        ],
    ));
    for uri in ["RNA", "slash", "other"] {
        store.put(group(
            &format!("mem://exp/ms/{uri}"),
            "SOMAMeasurement",
            &[],
        ));
    }
    let m = mount_with(store.clone(), Duration::from_secs(60));
    // Looking up a member needs ms listed; the member is opened at the same time. Names
    // are matched as the directory lists them (percent-encoded).
    assert!(m.stat("ms/a%2Fb").unwrap().is_dir);
    assert!(
        eventually(|| m.store.opens("mem://exp/ms/slash") == 1),
        "the member named is opened while its group is"
    );
    assert!(m.stat("ms/RNA").unwrap().is_dir);
    assert_eq!(m.stat("ms/nothing"), Err(FsError::NotFound));
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(
        m.store.opens("mem://exp/ms/RNA"),
        0,
        "once its group is listed, a look at a member opens nothing ahead"
    );
    assert_eq!(
        m.store.opens("mem://exp/ms/other"),
        0,
        "a look by name opens only what it names"
    );
}
