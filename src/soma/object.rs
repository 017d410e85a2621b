//! Opening a URI as a SOMA object: its type, metadata and members or schema.

use std::collections::HashMap;
use std::ops::RangeInclusive;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use crate::budget::Budget;
use crate::libtiledb_settings;
use crate::s3::{Front, Opening};
use crate::sync::{at_once, Recover, SingleFlight};
use crate::tiledb::{
    self, Array, Config, Context, Fragment, FragmentInfo, FragmentShape, Group, Member, Metadata,
    ObjectType,
};

use super::read::MemoryCells;
use super::schema::SomaSchema;
use super::soma_type::SomaType;
use super::tiles::{commits_may_delete, FragmentTiles, NotCountable, TileCounts};

/// A group, read whole: its metadata and members.
#[derive(Debug)]
pub struct GroupObject {
    pub uri: String,
    pub soma_type: SomaType,
    pub metadata: Metadata,
    pub members: Vec<Member>,
}

/// An array, described: its metadata and schema. Data is read by queries, elsewhere.
#[derive(Debug)]
pub struct ArrayObject {
    pub uri: String,
    pub soma_type: SomaType,
    pub metadata: Metadata,
    pub schema: SomaSchema,
    /// The bounding box of the stored cells, one entry per index column (`None`: no cells).
    pub non_empty_domain: Vec<Option<tiledb::Bounds>>,
    /// libtiledb's estimate of a sparse array's stored cells, made with the open (see
    /// `Store::open_array`); `None` for a dense array, or one only described.
    pub stored_cells_estimate: Option<tiledb::CellEstimate>,
    /// The fragments the open reads: what every read of the snapshot sees.
    fragments: Fragments,
    /// The mount's `--timestamp`, if any.
    pub mount_timestamp_ms: Option<u64>,
    /// What the content depends on, digested (see `content_digest`).
    pub content_id: String,
    /// Where its cells are read from.
    data: ArrayData,
    /// The last chunks `slices/` cut the array into, and of about how many cells.
    chunks: Mutex<Option<(u64, Chunks)>>,
    /// What its readers' buffers take from: the memory budget of the store that opened it.
    memory: Arc<Budget>,
}

/// Where an array's cells are read from.
#[derive(Debug, Clone)]
pub enum ArrayData {
    /// Nowhere: the array is only described, and every read of its cells fails.
    Described,
    /// libtiledb's array as the snapshot opened it. Every read goes through it: libtiledb
    /// shares an open array between concurrent queries, and a reopen would cost round trips
    /// on S3.
    Tiledb(Arc<Array>),
    /// Cells held in memory, for the unit tests of what is built on reads.
    Memory(Arc<MemoryCells>),
}

/// Ranges of the first index column (see [`super::chunks`]).
pub type Chunks = Option<Arc<[(i128, i128)]>>;

/// The fragments of a snapshot: named by its open, and described (cell counts, the range
/// of the first dimension) by the array's fragment list, loaded when first needed. Listing
/// and reading an array need neither: the list serves `schema.json`'s count, `slices/` and
/// the Zarr stores' entry counts. On object storage it costs six requests over three round
/// trips (the array's directories listed again), which every array of `ls -R` would pay.
#[derive(Debug)]
struct Fragments {
    /// The names of the fragments the open reads, sorted (by their timestamps first).
    names: Vec<String>,
    /// The fragments the list describes, loaded once.
    described: OnceLock<tiledb::Result<Arc<[Fragment]>>>,
    /// Their data tiles, from their metadata, loaded once (see [`ArrayObject::tile_counts`]).
    tiles: OnceLock<Result<Arc<TileCounts>, NotCountable>>,
}

impl ArrayObject {
    /// An array described without libtiledb: it lists, sizes and names files like any
    /// other, and every read of its data fails. For tests of what is built on arrays.
    pub fn described(
        uri: &str,
        soma_type: SomaType,
        metadata: Metadata,
        schema: SomaSchema,
        non_empty_domain: Vec<Option<tiledb::Bounds>>,
        fragments: Vec<Fragment>,
    ) -> ArrayObject {
        let mut names: Vec<String> = fragments.iter().map(|f| f.name().to_owned()).collect();
        names.sort();
        let mut array = ArrayObject {
            uri: uri.to_owned(),
            soma_type,
            metadata,
            schema,
            non_empty_domain,
            stored_cells_estimate: None,
            fragments: Fragments {
                names,
                described: OnceLock::from(Ok(fragments.into())),
                tiles: OnceLock::new(),
            },
            mount_timestamp_ms: None,
            content_id: String::new(),
            data: ArrayData::Described,
            chunks: Mutex::new(None),
            memory: Budget::new(crate::budget::DEFAULT_MEMORY_BYTES),
        };
        array.content_id = array.content_digest();
        array
    }

    /// The memory budget its readers take from: its store's (an array only described has
    /// one of its own).
    pub fn memory_budget(&self) -> &Arc<Budget> {
        &self.memory
    }

    /// The digest of what the array's content depends on: the URI, the mount's timestamp,
    /// the schema (enumerations included) and the fragments. Snapshots with equal digests
    /// hold equal data; cache keys are made from it.
    fn content_digest(&self) -> String {
        let mut digest = crate::digest::Digest::new("soma-mount array snapshot");
        digest.text(&self.uri);
        match self.mount_timestamp_ms {
            None => digest.mark(b'-'),
            Some(ms) => digest.mark(b't').number(ms),
        };
        self.schema.digest_into(&mut digest);
        digest.number(self.fragments.names.len() as u64);
        for name in &self.fragments.names {
            digest.text(name);
        }
        digest.finish()
    }

    /// The fragments the snapshot reads, with their cell counts and ranges, from the
    /// array's fragment list, loaded on the first call (see [`Fragments`]). An error when
    /// one of them has left the list since the open: the store was consolidated and
    /// vacuumed meanwhile, and the snapshot's reads would fail too.
    pub fn fragments(&self) -> tiledb::Result<&[Fragment]> {
        match self
            .fragments
            .described
            .get_or_init(|| self.load_fragments())
        {
            Ok(fragments) => Ok(fragments),
            Err(e) => Err(e.clone()),
        }
    }

    /// The chunks of about `chunk_cells` cells `cut` makes, cut once for the snapshot: every
    /// format's directory of `slices/`, and every listing of one again, lists the same.
    pub(super) fn chunks_of(
        &self,
        chunk_cells: u64,
        cut: impl FnOnce() -> super::Result<Option<Vec<(i128, i128)>>>,
    ) -> super::Result<Chunks> {
        let mut kept = self.chunks.lock().recover();
        if let Some((_, chunks)) = kept.as_ref().filter(|(cells, _)| *cells == chunk_cells) {
            return Ok(chunks.clone());
        }
        let chunks: Chunks = cut()?.map(Into::into);
        *kept = Some((chunk_cells, chunks.clone()));
        Ok(chunks)
    }

    /// The data tiles of the snapshot's sparse fragments, from their metadata, loaded on the
    /// first call: what counts cells without reading them (see [`TileCounts`]). With them
    /// comes the fragment list, when it is not loaded yet.
    pub fn tile_counts(&self) -> Result<Arc<TileCounts>, NotCountable> {
        (self.fragments.tiles)
            .get_or_init(|| self.load_tile_counts().map(Arc::new))
            .clone()
    }

    fn load_tile_counts(&self) -> Result<TileCounts, NotCountable> {
        let integers = self
            .schema
            .index_columns()
            .all(|c| c.arrow_type.is_integer());
        let capacity = self
            .schema
            .tile_cells
            .filter(|_| integers && !self.schema.dense);
        let capacity = capacity.ok_or(NotCountable::NotIntegerSparse)?;
        let unreadable = |e: &dyn std::fmt::Display| NotCountable::Irregular(format!("{e}"));
        let handle = self.handle().map_err(|e| unreadable(&e))?;
        let commits = format!("{}/__commits", self.uri.trim_end_matches('/'));
        let commits = (tiledb::Vfs::new(handle.context()).and_then(|vfs| vfs.ls(&commits)))
            .map_err(|e| unreadable(&e))?;
        if commits_may_delete(&commits) {
            return Err(NotCountable::Deletes);
        }
        let info = FragmentInfo::load(handle.context(), &self.uri).map_err(|e| unreadable(&e))?;
        let dims = (handle.schema().and_then(|s| s.info()))
            .map_err(|e| unreadable(&e))?
            .dimensions;
        let listed = info.fragments(dims.first()).map_err(|e| unreadable(&e))?;
        let names = &self.fragments.names;
        let mut snapshot = Vec::new();
        let mut tiles = Vec::new();
        for (fid, fragment) in listed.into_iter().enumerate() {
            if names
                .binary_search_by(|n| n.as_str().cmp(fragment.name()))
                .is_err()
            {
                continue;
            }
            let shape = (info.shape(fid as u32, &dims))
                .map_err(|e| unreadable(&e))?
                .ok_or(NotCountable::NotIntegerSparse)?;
            tiles.push(fragment_tiles(fragment.cell_num, &shape).ok_or_else(|| {
                NotCountable::Irregular(format!("{}: bounds that are not integers", fragment.uri))
            })?);
            snapshot.push(fragment);
        }
        if snapshot.len() != names.len() {
            return Err(NotCountable::Irregular(format!(
                "{} of the snapshot's fragments have left the fragment list",
                names.len() - snapshot.len()
            )));
        }
        let _ = self.fragments.described.set(Ok(snapshot.into()));
        TileCounts::of(&tiles, capacity, self.schema.allows_duplicates)
    }

    fn load_fragments(&self) -> tiledb::Result<Arc<[Fragment]>> {
        let handle = self
            .handle()
            .map_err(|e| tiledb::Error::new(e.to_string()))?;
        let first_dimension = handle.schema()?.info()?.dimensions.into_iter().next();
        let names = &self.fragments.names;
        // A snapshot of one fragment is described by the open alone: its cells are the
        // open's exact estimate, its range the non-empty domain.
        if let ([name], Some(estimate)) = (
            names.as_slice(),
            self.stored_cells_estimate.filter(|e| e.exact),
        ) {
            let fixed_size = first_dimension
                .as_ref()
                .is_some_and(|d| d.cell_val_num != tiledb::VAR_NUM);
            return Ok(Arc::from([Fragment {
                uri: format!("{}/__fragments/{name}", self.uri.trim_end_matches('/')),
                cell_num: estimate.cells,
                first_dimension: self
                    .non_empty_domain
                    .first()
                    .cloned()
                    .flatten()
                    .filter(|_| fixed_size),
            }]));
        }
        // The list may hold fragments committed since the open: they are not the snapshot's.
        let fragments: Arc<[Fragment]> = FragmentInfo::load(handle.context(), &self.uri)?
            .fragments(first_dimension.as_ref())?
            .into_iter()
            .filter(|f| {
                names
                    .binary_search_by(|name| name.as_str().cmp(f.name()))
                    .is_ok()
            })
            .collect();
        if fragments.len() != names.len() {
            return Err(tiledb::Error::new(format!(
                "{}: {} of the {} fragments opened have since been removed (consolidated and \
                 vacuumed): the array is shown as opened until the metadata TTL ends",
                self.uri,
                names.len() - fragments.len(),
                names.len()
            )));
        }
        Ok(fragments)
    }

    /// The fragments the snapshot reads, as [`Self::fragments`], when they cost no round
    /// trip: their list is loaded already, or the array is on local disk (where loading it
    /// takes about a millisecond). On object storage the list costs three round trips,
    /// which what only wants it for an estimate does not wait for. `None` also when it
    /// cannot be loaded.
    pub fn fragments_at_hand(&self) -> Option<&[Fragment]> {
        match self.fragments.described.get() {
            Some(loaded) => loaded.as_deref().ok(),
            None if on_local_disk(&self.uri) => self.fragments().ok(),
            None => None,
        }
    }

    /// How many fragments the snapshot reads.
    pub fn fragment_count(&self) -> usize {
        self.fragments.names.len()
    }

    /// The array open at this snapshot, for queries.
    pub fn handle(&self) -> super::Result<Arc<Array>> {
        match &self.data {
            ArrayData::Tiledb(array) => Ok(array.clone()),
            _ => Err(super::Error::invalid(format!(
                "{}: described only, no data to read",
                self.uri
            ))),
        }
    }

    /// Where the array's cells are read from.
    pub fn data(&self) -> &ArrayData {
        &self.data
    }

    /// The array described, its cells held in memory.
    pub fn with_cells(self, cells: MemoryCells) -> ArrayObject {
        ArrayObject {
            data: ArrayData::Memory(Arc::new(cells)),
            ..self
        }
    }

    /// The number of stored cells.
    ///
    /// Sparse: the fragments' cell counts added up (tiledbsoma never writes the same
    /// coordinates twice into a SOMA array, so fragments do not overlap): the open's estimate
    /// of the whole array where it is exact, else from the fragment list. Dense fragments
    /// count whole tiles, so a dense array's count is the cells of its non-empty domain.
    pub fn stored_cells(&self) -> tiledb::Result<u64> {
        if !self.schema.dense {
            if let Some(estimate) = self.stored_cells_estimate.filter(|e| e.exact) {
                return Ok(estimate.cells);
            }
            return Ok(self.fragments()?.iter().map(|f| f.cell_num).sum());
        }
        Ok(self.dense_cells())
    }

    /// The join ids of a data frame indexed by `soma_joinid` alone, when its open tells
    /// them with no read: its one fragment holds as many cells as its stored range of join
    /// ids has values. A fragment of an array that allows no duplicates holds each join id
    /// at most once, so it holds every one of the range. (Over several fragments a join id
    /// may be stored twice, written again, so the cells are not the rows.)
    pub fn joinids_from_open(&self) -> Option<RangeInclusive<i64>> {
        let mut index = self.schema.index_columns();
        let (Some(joinid), None) = (index.next(), index.next()) else {
            return None;
        };
        let one_fragment = self.fragments.names.len() == 1;
        if joinid.name != "soma_joinid"
            || self.schema.dense
            || self.schema.allows_duplicates
            || !one_fragment
        {
            return None;
        }
        let cells = self.stored_cells_estimate.filter(|e| e.exact)?.cells;
        match self.non_empty_domain.first()? {
            Some((tiledb::Value::Int(lo), tiledb::Value::Int(hi)))
                if i128::from(*hi) - i128::from(*lo) + 1 == i128::from(cells) =>
            {
                Some(*lo..=*hi)
            }
            _ => None,
        }
    }

    /// The cells of a dense array's non-empty domain.
    fn dense_cells(&self) -> u64 {
        self.non_empty_domain
            .iter()
            .map(|bounds| match bounds {
                Some((tiledb::Value::Int(lo), tiledb::Value::Int(hi))) => {
                    (hi - lo + 1).max(0) as u64
                }
                Some((tiledb::Value::UInt(lo), tiledb::Value::UInt(hi))) => {
                    hi.saturating_sub(*lo) + 1
                }
                _ => 0,
            })
            .product()
    }
}

/// An opened object.
#[derive(Debug)]
pub enum SomaObject {
    Group(GroupObject),
    Array(Arc<ArrayObject>),
}

impl SomaObject {
    pub fn uri(&self) -> &str {
        match self {
            SomaObject::Group(g) => &g.uri,
            SomaObject::Array(a) => &a.uri,
        }
    }

    pub fn metadata(&self) -> &Metadata {
        match self {
            SomaObject::Group(g) => &g.metadata,
            SomaObject::Array(a) => &a.metadata,
        }
    }

    /// What the object's files are made from, as text: metadata and members, or metadata,
    /// fragments and schema. Equal fingerprints mean the object did not change.
    pub fn fingerprint(&self) -> String {
        match self {
            SomaObject::Group(g) => format!("{:?}{:?}", g.metadata, g.members),
            SomaObject::Array(a) => format!("{:?}{}", a.metadata, a.content_id),
        }
    }
}

/// Where the filesystem gets its objects: a [`Store`], or in tests a store made up in
/// memory.
pub trait Objects: Send + Sync {
    /// The object at `uri`; `recorded` is what the group listing it records it as.
    fn open(&self, uri: &str, recorded: Option<ObjectType>) -> tiledb::Result<Arc<SomaObject>>;

    /// The members of the group at `uri`. A [`Store`] knows them before the group's open
    /// ends (its metadata comes last): the open in which they were read, or the one under
    /// way, is the group's snapshot too.
    fn members(&self, uri: &str) -> tiledb::Result<Vec<Member>> {
        Ok(match self.open(uri, Some(ObjectType::Group))?.as_ref() {
            SomaObject::Group(group) => group.members.clone(),
            SomaObject::Array(_) => Vec::new(),
        })
    }
}

impl Objects for Store {
    fn open(&self, uri: &str, recorded: Option<ObjectType>) -> tiledb::Result<Arc<SomaObject>> {
        Store::open(self, uri, recorded)
    }

    fn members(&self, uri: &str) -> tiledb::Result<Vec<Member>> {
        Store::members(self, uri)
    }
}

/// Things opened by URI, each once at a time and kept for a while: an open that comes while
/// another of the same URI is under way waits for it and takes its outcome, the thing or
/// the error, and one opened less than `reuse_for` ago is taken as it is.
struct OpenedLately<T> {
    recent: Mutex<HashMap<String, (Instant, T)>>,
    reuse_for: Duration,
    opening: SingleFlight<String, tiledb::Result<T>>,
}

impl<T: Clone> OpenedLately<T> {
    fn new(reuse_for: Duration) -> Self {
        OpenedLately {
            recent: Mutex::default(),
            reuse_for,
            opening: SingleFlight::default(),
        }
    }

    /// What was opened at `uri` less than `reuse_for` ago.
    fn lately(&self, uri: &str) -> Option<T> {
        let recent = self.recent.lock().recover();
        let (opened, thing) = recent.get(uri)?;
        (opened.elapsed() < self.reuse_for).then(|| thing.clone())
    }

    /// What is at `uri`: opened lately, being opened, or opened now by `open`.
    fn get(&self, uri: &str, open: impl FnOnce() -> tiledb::Result<T>) -> tiledb::Result<T> {
        if let Some(thing) = self.lately(uri) {
            return Ok(thing);
        }
        self.opening.run(uri.to_owned(), || {
            // An open that ended just before this one's flight began is as good.
            if let Some(thing) = self.lately(uri) {
                return Ok(thing);
            }
            let thing = open()?;
            let mut recent = self.recent.lock().recover();
            recent.retain(|_, (opened, _)| opened.elapsed() < self.reuse_for);
            recent.insert(uri.to_owned(), (Instant::now(), thing.clone()));
            Ok(thing)
        })
    }
}

/// A group open for reading and its members, read before its metadata.
struct OpenGroup {
    /// Its metadata is read by one look at a time (libtiledb loads it without a lock).
    group: Mutex<Group>,
    members: Vec<Member>,
}

/// Opens objects of one store: the libtiledb context, the mount's timestamp, and the
/// objects opened lately.
pub struct Store {
    ctx: Context,
    timestamp_ms: Option<u64>,
    /// Objects opened lately (the metadata TTL), or being opened, by URI: opening one again
    /// meanwhile gives the same snapshot without a round of requests (`10x/` opens obs, var
    /// and X, which the listings around it have just opened; a listing of `10x/` while obs
    /// is opened ahead of a look waits for that open).
    objects: OpenedLately<Arc<SomaObject>>,
    /// Groups opened lately, or being opened, with their members: a group's open reads its
    /// members a round before its metadata, and a look by name into it can open the member
    /// it names meanwhile ([`Store::members`]); both are one open of the group.
    groups: OpenedLately<Arc<OpenGroup>>,
    /// The daemon's S3 front, when libtiledb reads the store through it: told of each open
    /// before libtiledb lists what it opens.
    front: Option<Front>,
    /// The memory budget the readers of its arrays take from.
    memory: Arc<Budget>,
}

/// Whether `uri` names local disk: a path, or a `file://` URI (not object storage, not
/// TileDB Cloud).
pub fn on_local_disk(uri: &str) -> bool {
    uri.starts_with("file://") || !uri.contains("://")
}

impl Store {
    /// A store of the objects under `root_uri`, with the user's libtiledb settings on top of
    /// soma-mount's own (a wider compute pool when `root_uri` is not on local disk), read
    /// through `front` when there is one. An object opened again within `reuse_for` (the
    /// metadata TTL) is the snapshot opened first. Its arrays' readers take from `memory`.
    pub fn new(
        root_uri: &str,
        settings: &[(String, String)],
        front: Option<Front>,
        timestamp_ms: Option<u64>,
        reuse_for: Duration,
        memory: Arc<Budget>,
    ) -> tiledb::Result<Self> {
        let mut config = Config::new()?;
        for setting in &libtiledb_settings::ALWAYS {
            config.set(setting.key, setting.value)?;
        }
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let threads = libtiledb_settings::compute_threads(on_local_disk(root_uri), cores);
        config.set(libtiledb_settings::COMPUTE_THREADS, &threads.to_string())?;
        let settings = match &front {
            Some(front) => front.libtiledb_settings(settings),
            None => settings.to_vec(),
        };
        for (key, value) in &settings {
            config.set(key, value)?;
        }
        let ctx = Context::new(&config)?;
        Ok(Store {
            ctx,
            timestamp_ms,
            objects: OpenedLately::new(reuse_for),
            groups: OpenedLately::new(reuse_for),
            front,
            memory,
        })
    }

    pub fn context(&self) -> &Context {
        &self.ctx
    }

    /// Opens the object at `uri`, reading its metadata and structure. `recorded` is what
    /// the group holding it records it as, when it is a member: it is opened as that, as
    /// tiledbsoma opens members. Otherwise (the mount's root) it is opened as a group, else
    /// as an array, without asking libtiledb what `uri` holds. An object opened less than the
    /// metadata TTL ago is not opened again: it is that snapshot. Nor is one being opened
    /// now: this waits for that open and takes its outcome, the snapshot or the error.
    pub fn open(&self, uri: &str, recorded: Option<ObjectType>) -> tiledb::Result<Arc<SomaObject>> {
        self.objects
            .get(uri, || self.open_afresh(uri, recorded).map(Arc::new))
    }

    /// The members of the group at `uri`: of its snapshot opened lately, or read by the
    /// open of it under way (or by a new one, which its snapshot then comes from), without
    /// waiting for its metadata.
    pub fn members(&self, uri: &str) -> tiledb::Result<Vec<Member>> {
        if let Some(object) = self.objects.lately(uri) {
            return Ok(match object.as_ref() {
                SomaObject::Group(group) => group.members.clone(),
                SomaObject::Array(_) => Vec::new(),
            });
        }
        Ok(self.open_group_members(uri)?.members.clone())
    }

    /// Opens the object at `uri` (see [`Self::open`]).
    fn open_afresh(&self, uri: &str, recorded: Option<ObjectType>) -> tiledb::Result<SomaObject> {
        let started = Instant::now();
        let open_group = || self.open_group(uri).map(SomaObject::Group);
        let open_array = || self.open_array(uri).map(|a| SomaObject::Array(Arc::new(a)));
        let object = match recorded {
            Some(ObjectType::Group) => open_group(),
            Some(ObjectType::Array) => open_array(),
            // What nothing records (the mount's root) is opened as a group, else as an
            // array. A group's open lists what is at `uri` in its first round and fails
            // there when it finds no group: asking libtiledb what `uri` holds first would
            // cost three requests more on object storage, one after another.
            _ => open_group().or_else(|as_group| {
                open_array().map_err(|as_array| {
                    tiledb::Error::new(format!(
                        "no TileDB group or array at {uri} (as a group: {as_group}; as an \
                         array: {as_array})"
                    ))
                })
            }),
        }?;
        log::debug!("opened {uri} in {:?}", started.elapsed());
        Ok(object)
    }

    /// The group at `uri` opened, with its members (shared, see [`Store::groups`]).
    fn open_group_members(&self, uri: &str) -> tiledb::Result<Arc<OpenGroup>> {
        self.groups.get(uri, || {
            if let Some(front) = &self.front {
                front.opening(uri, Opening::Group);
            }
            let group = Group::open(&self.ctx, uri, self.timestamp_ms)?;
            let members = group.members()?;
            let group = Mutex::new(group);
            Ok(Arc::new(OpenGroup { group, members }))
        })
    }

    fn open_group(&self, uri: &str) -> tiledb::Result<GroupObject> {
        let open = self.open_group_members(uri)?;
        let metadata = open.group.lock().recover().metadata()?;
        Ok(GroupObject {
            uri: uri.to_owned(),
            soma_type: SomaType::recognise(ObjectType::Group, &metadata),
            members: open.members.clone(),
            metadata,
        })
    }

    /// Opens the array at `uri`: its schema, metadata and enumerations, and the names of
    /// the fragments the open reads (their list is loaded when first needed).
    fn open_array(&self, uri: &str) -> tiledb::Result<ArrayObject> {
        if let Some(front) = &self.front {
            front.opening(uri, Opening::Array);
        }
        let array = Array::open(&self.ctx, uri, self.timestamp_ms)?;
        let info = array.schema()?.info()?;
        let names = array.fragment_names()?.into_iter().collect();
        // The metadata, the enumerations and, for a sparse array, libtiledb's estimate of its
        // cells, each fetched on first use: one round trip for the three. The estimate loads
        // the fragments' R-trees, the first thing any read of the array loads (and listing
        // its `slices/`), and sizes reads of the whole array.
        let sparse = info.array_type != tiledb::ArrayType::Dense;
        let (metadata, (enumerations, estimate)) = at_once(
            || array.metadata(),
            || {
                at_once(
                    || {
                        array.enumerations(
                            info.attributes
                                .iter()
                                .filter_map(|attr| attr.enumeration.as_deref()),
                        )
                    },
                    || {
                        sparse
                            .then(|| tiledb::estimated_cells(&array, &[]))
                            .transpose()
                    },
                )
            },
        );
        let (metadata, enumerations, estimate) = (metadata?, enumerations?, estimate?);
        let soma_type = SomaType::recognise(ObjectType::Array, &metadata);
        let non_empty_domain = info
            .dimensions
            .iter()
            .enumerate()
            .map(|(i, dim)| array.non_empty_domain(i as u32, dim))
            .collect::<tiledb::Result<Vec<_>>>()?;
        let mut array = ArrayObject {
            uri: uri.to_owned(),
            soma_type,
            schema: SomaSchema::new(soma_type, &info, &enumerations),
            metadata,
            non_empty_domain,
            stored_cells_estimate: estimate,
            fragments: Fragments {
                names,
                described: OnceLock::new(),
                tiles: OnceLock::new(),
            },
            mount_timestamp_ms: self.timestamp_ms,
            content_id: String::new(),
            data: ArrayData::Tiledb(Arc::new(array)),
            chunks: Mutex::new(None),
            memory: self.memory.clone(),
        };
        array.content_id = array.content_digest();
        Ok(array)
    }
}

/// Whether a store shown as of `timestamp_ms` (the mount's `--timestamp`, none for now)
/// shows a time already past, which cannot change.
pub fn shows_the_past(timestamp_ms: Option<u64>) -> bool {
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis());
    timestamp_ms.is_some_and(|ms| u128::from(ms) <= now_ms)
}

/// A fragment's tiles as [`TileCounts`] takes them; `None` when a bound is not an integer.
fn fragment_tiles(cells: u64, shape: &FragmentShape) -> Option<FragmentTiles> {
    let ints = |(lo, hi): &tiledb::Bounds| Some((lo.as_i128()?, hi.as_i128()?));
    Some(FragmentTiles {
        cells,
        non_empty_domain: shape
            .non_empty_domain
            .iter()
            .map(ints)
            .collect::<Option<_>>()?,
        tiles_first_dimension: (shape.tiles_first_dimension.iter())
            .map(ints)
            .collect::<Option<_>>()?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::soma::schema::Column;
    use crate::tiledb::{CellEstimate, Datatype, Fragment, Value};
    use arrow_schema::DataType;

    fn index_column(name: &str) -> Column {
        Column {
            name: name.to_owned(),
            datatype: Datatype::Int64,
            cell_val_num: 1,
            arrow_type: DataType::Int64,
            nullable: false,
            is_index: true,
            domain: Some((Value::Int(0), Value::Int(999))),
            schema_domain: Some((Value::Int(0), Value::Int(i64::MAX - 100))),
            tile_extent: Some(Value::Int(100)),
            enumeration: None,
        }
    }

    /// A data frame indexed by `index`, its cells in `fragments` fragments, its stored join
    /// ids `lo..=hi`, and the open's estimate of its cells.
    fn frame(index: &[&str], fragments: usize, (lo, hi): (i64, i64), cells: u64) -> ArrayObject {
        let schema =
            SomaSchema::sparse_frame(index.iter().map(|name| index_column(name)).collect());
        let fragments = (0..fragments)
            .map(|i| Fragment {
                uri: format!("mem://frame/__fragments/__{i}_{i}_f"),
                cell_num: cells / fragments as u64,
                first_dimension: None,
            })
            .collect();
        let stored = Some((Value::Int(lo), Value::Int(hi)));
        let mut frame = ArrayObject::described(
            "mem://frame",
            SomaType::DataFrame,
            Metadata::new(),
            schema,
            vec![stored; index.len()],
            fragments,
        );
        frame.stored_cells_estimate = Some(CellEstimate { cells, exact: true });
        frame
    }

    #[test]
    fn join_ids_are_told_by_one_fragment_that_holds_every_one_of_its_range() {
        let told = |frame: ArrayObject| frame.joinids_from_open();
        assert_eq!(told(frame(&["soma_joinid"], 1, (0, 99), 100)), Some(0..=99));
        assert_eq!(told(frame(&["soma_joinid"], 1, (5, 7), 3)), Some(5..=7));
        // A gap: fewer cells than join ids in the range.
        assert_eq!(told(frame(&["soma_joinid"], 1, (0, 99), 99)), None);
        // Two fragments may hold a join id twice and leave another out.
        assert_eq!(told(frame(&["soma_joinid"], 2, (0, 99), 100)), None);
        // Indexed by other columns too, or by another column: its values are no join ids.
        assert_eq!(told(frame(&["soma_joinid", "x"], 1, (0, 99), 100)), None);
        assert_eq!(told(frame(&["x"], 1, (0, 99), 100)), None);
        // An estimate that is not the fragment's count, or an array that allows duplicates.
        let mut about = frame(&["soma_joinid"], 1, (0, 99), 100);
        about.stored_cells_estimate = Some(CellEstimate {
            cells: 100,
            exact: false,
        });
        assert_eq!(told(about), None);
        let mut duplicates = frame(&["soma_joinid"], 1, (0, 99), 100);
        duplicates.schema.allows_duplicates = true;
        assert_eq!(told(duplicates), None);
    }
}
