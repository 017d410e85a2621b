//! TileDB arrays opened for reading: schema (dimensions, attributes, enumerations, current
//! domain), non-empty domain, metadata and fragments.

use std::collections::{BTreeSet, HashMap};
use std::ffi::c_void;
use std::ptr;

use super::context::{c_string, tiledb_call};
use super::datatype::{Datatype, Value};
use super::handle::{copy_c_str, handle, take_string};
use super::metadata::{self, Metadata};
use super::{ffi, Context, Error, Result};

/// `TILEDB_VAR_NUM`: the cell value count of var-sized dimensions and attributes.
pub const VAR_NUM: u32 = u32::MAX;

handle!(
    /// An array open for reading (`tiledb_array_t`); closed and freed on drop.
    Array,
    tiledb_array_t,
    tiledb_array_free,
    close = tiledb_array_close
);
handle!(
    /// A plan of which fragments of an open array to consolidate together
    /// (`tiledb_consolidation_plan_t`): here, only a way to the fragments the open reads.
    ConsolidationPlan,
    tiledb_consolidation_plan_t,
    tiledb_consolidation_plan_free
);
handle!(
    /// An array's schema (`tiledb_array_schema_t`).
    ArraySchema,
    tiledb_array_schema_t,
    tiledb_array_schema_free
);
handle!(
    /// A schema's domain (`tiledb_domain_t`).
    Domain,
    tiledb_domain_t,
    tiledb_domain_free
);
handle!(
    /// One dimension (`tiledb_dimension_t`).
    Dimension,
    tiledb_dimension_t,
    tiledb_dimension_free
);
handle!(
    /// One attribute (`tiledb_attribute_t`).
    Attribute,
    tiledb_attribute_t,
    tiledb_attribute_free
);
handle!(
    /// An enumeration of an attribute's labels (`tiledb_enumeration_t`).
    Enumeration,
    tiledb_enumeration_t,
    tiledb_enumeration_free
);
handle!(
    /// A schema's current domain (`tiledb_current_domain_t`).
    CurrentDomain,
    tiledb_current_domain_t,
    tiledb_current_domain_free
);
handle!(
    /// The ND rectangle of a current domain (`tiledb_ndrectangle_t`).
    NdRectangle,
    tiledb_ndrectangle_t,
    tiledb_ndrectangle_free
);
handle!(
    /// The fragments of an array (`tiledb_fragment_info_t`), loaded.
    FragmentInfo,
    tiledb_fragment_info_t,
    tiledb_fragment_info_free
);

// Each `Send` below: libtiledb handles have no thread affinity, and each wrapper
// owns its handle alone, so moving it to another thread moves every use of it there.
// SAFETY: see above: `Array` owns its handle alone, which has no thread affinity.
unsafe impl Send for Array {}
// SAFETY: see above: `ConsolidationPlan` owns its handle alone, which has no thread affinity.
unsafe impl Send for ConsolidationPlan {}
// SAFETY: see above: `ArraySchema` owns its handle alone, which has no thread affinity.
unsafe impl Send for ArraySchema {}
// SAFETY: see above: `Domain` owns its handle alone, which has no thread affinity.
unsafe impl Send for Domain {}
// SAFETY: see above: `Dimension` owns its handle alone, which has no thread affinity.
unsafe impl Send for Dimension {}
// SAFETY: see above: `Attribute` owns its handle alone, which has no thread affinity.
unsafe impl Send for Attribute {}
// SAFETY: see above: `Enumeration` owns its handle alone, which has no thread affinity.
unsafe impl Send for Enumeration {}
// SAFETY: see above: `CurrentDomain` owns its handle alone, which has no thread affinity.
unsafe impl Send for CurrentDomain {}
// SAFETY: see above: `NdRectangle` owns its handle alone, which has no thread affinity.
unsafe impl Send for NdRectangle {}
// SAFETY: see above: `FragmentInfo` owns its handle alone, which has no thread affinity.
unsafe impl Send for FragmentInfo {}
// SAFETY: libtiledb serves concurrent queries on one open array (tiledbsoma shares one
// between threads too): what it loads lazily, fragment metadata and R-trees, it loads under
// its own locks, and the wrapper's `&self` methods only read. The other handles here are not
// shared: libtiledb does not lock their lazy loads.
unsafe impl Sync for Array {}

/// Dense or sparse.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ArrayType {
    Dense,
    Sparse,
}

/// An inclusive range of a dimension, as typed values.
pub type Bounds = (Value, Value);

/// A dimension described in plain Rust values.
#[derive(Debug, Clone, PartialEq)]
pub struct DimensionInfo {
    pub name: String,
    pub datatype: Datatype,
    /// `VAR_NUM` for strings.
    pub cell_val_num: u32,
    /// The schema's (maximum) domain; `None` for string dimensions, which have none.
    pub domain: Option<Bounds>,
    /// The space tile's extent along this dimension; `None` for string dimensions.
    pub tile_extent: Option<Value>,
}

/// An attribute described in plain Rust values.
#[derive(Debug, Clone, PartialEq)]
pub struct AttributeInfo {
    pub name: String,
    pub datatype: Datatype,
    pub cell_val_num: u32,
    pub nullable: bool,
    pub enumeration: Option<String>,
}

/// An enumeration's labels, in index order.
#[derive(Debug, Clone, PartialEq)]
pub struct EnumerationInfo {
    pub datatype: Datatype,
    pub ordered: bool,
    pub values: Vec<Value>,
}

/// One fragment of an array.
#[derive(Debug, Clone, PartialEq)]
pub struct Fragment {
    pub uri: String,
    pub cell_num: u64,
    /// The range of the first dimension the fragment's cells cover (fixed-size dimensions).
    pub first_dimension: Option<Bounds>,
}

impl Fragment {
    /// The fragment's name: its directory's, the last part of its URI.
    pub fn name(&self) -> &str {
        let uri = self.uri.trim_end_matches('/');
        uri.rsplit_once('/').map_or(uri, |(_, name)| name)
    }
}

/// The order of tiles, or of cells within a tile.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Order {
    RowMajor,
    ColMajor,
    Hilbert,
    Other,
}

impl Order {
    fn from_raw(raw: ffi::tiledb_layout_t) -> Order {
        match raw {
            ffi::TILEDB_ROW_MAJOR => Order::RowMajor,
            ffi::TILEDB_COL_MAJOR => Order::ColMajor,
            ffi::TILEDB_HILBERT => Order::Hilbert,
            _ => Order::Other,
        }
    }
}

/// Everything soma-mount needs from a schema, read once.
#[derive(Debug, Clone, PartialEq)]
pub struct SchemaInfo {
    pub array_type: ArrayType,
    pub allows_dups: bool,
    /// Cells per data tile of a sparse array (meaningless for a dense one).
    pub capacity: u64,
    pub tile_order: Order,
    pub cell_order: Order,
    pub dimensions: Vec<DimensionInfo>,
    pub attributes: Vec<AttributeInfo>,
    /// The current domain, one range per dimension, when the schema has one.
    pub current_domain: Option<Vec<Bounds>>,
}

/// Reads two values of `datatype` from a buffer holding `[lo, hi]`.
fn bounds_from_bytes(datatype: Datatype, bytes: &[u8]) -> Result<Bounds> {
    let mut values = datatype.decode(bytes).into_iter();
    match (values.next(), values.next()) {
        (Some(lo), Some(hi)) => Ok((lo, hi)),
        _ => Err(Error::new("malformed domain from libtiledb")),
    }
}

fn text_bounds(lo: &[u8], hi: &[u8]) -> Bounds {
    (
        Value::Text(String::from_utf8_lossy(lo).into_owned()),
        Value::Text(String::from_utf8_lossy(hi).into_owned()),
    )
}

impl Array {
    /// Opens the array at `uri` for reading, as of `timestamp_ms` when given.
    pub fn open(ctx: &Context, uri: &str, timestamp_ms: Option<u64>) -> Result<Array> {
        let c_uri = c_string(uri)?;
        let mut raw = ptr::null_mut();
        // SAFETY: `c_uri` outlives the call; on success libtiledb stores a new array handle in
        // `raw`, which nothing else frees, and the wrapper takes it over.
        let array = unsafe {
            tiledb_call!(ctx, tiledb_array_alloc(c_uri.as_ptr(), &mut raw))?;
            Array::from_raw(ctx, raw)?
        };
        // SAFETY: `array.raw` is the live, not yet opened array owned by `array`.
        unsafe {
            if let Some(ts) = timestamp_ms {
                tiledb_call!(ctx, tiledb_array_set_open_timestamp_end(array.raw, ts))?;
            }
            tiledb_call!(ctx, tiledb_array_open(array.raw, ffi::TILEDB_READ))?;
        }
        Ok(array)
    }

    /// The names of the fragments this open reads (their directories under `__fragments/`,
    /// or beside the schema in the layout before format 12), without a request: the
    /// fragments libtiledb loaded when it opened the array.
    ///
    /// libtiledb 2.30 shows them only through a consolidation plan. A plan for fragments of
    /// a desired size of 0 holds every fragment the open loaded: fragments that overlap are
    /// planned together, and every other one is planned alone, since none is smaller than
    /// half of 0 bytes to be merged nor smaller than 1.5 times 0 bytes to be left out
    /// (`ConsolidationPlan::generate`).
    pub fn fragment_names(&self) -> Result<BTreeSet<String>> {
        let mut raw = ptr::null_mut();
        // SAFETY: `self.raw` is the open array `self` owns; the plan stored in the local
        // `raw` is taken over by the wrapper.
        let plan = unsafe {
            tiledb_call!(
                &self.ctx,
                tiledb_consolidation_plan_create_with_mbr(self.raw, 0, &mut raw)
            )?;
            ConsolidationPlan::from_raw(&self.ctx, raw)?
        };
        let mut names = BTreeSet::new();
        let mut nodes = 0u64;
        // SAFETY: `plan.raw` is the live plan owned by `plan`; `nodes` is a local.
        unsafe {
            tiledb_call!(
                &self.ctx,
                tiledb_consolidation_plan_get_num_nodes(plan.raw, &mut nodes)
            )
        }?;
        for node in 0..nodes {
            let mut fragments = 0u64;
            // SAFETY: as above; `node` is below the plan's node count.
            unsafe {
                tiledb_call!(
                    &self.ctx,
                    tiledb_consolidation_plan_get_num_fragments(plan.raw, node, &mut fragments)
                )
            }?;
            for fragment in 0..fragments {
                let mut name = ptr::null();
                // SAFETY: as above, with `fragment` below the node's fragment count; the
                // name is a NUL-terminated string owned by the plan, copied before it drops.
                unsafe {
                    tiledb_call!(
                        &self.ctx,
                        tiledb_consolidation_plan_get_fragment_uri(
                            plan.raw, node, fragment, &mut name
                        )
                    )?;
                    names.insert(copy_c_str(name));
                }
            }
        }
        Ok(names)
    }

    pub fn schema(&self) -> Result<ArraySchema> {
        let mut raw = ptr::null_mut();
        // SAFETY: `self.raw` is the open array `self` owns; libtiledb stores a new schema handle
        // in the local `raw`, which the wrapper takes over.
        unsafe {
            tiledb_call!(&self.ctx, tiledb_array_get_schema(self.raw, &mut raw))?;
            ArraySchema::from_raw(&self.ctx, raw)
        }
    }

    pub fn metadata(&self) -> Result<Metadata> {
        // SAFETY: `self.raw` is the array `self` opened for reading, and stays open while
        // `self` is borrowed; the two functions are the array ones.
        unsafe {
            metadata::read_all(
                &self.ctx,
                self.raw,
                ffi::tiledb_array_get_metadata_num,
                ffi::tiledb_array_get_metadata_from_index,
            )
        }
    }

    /// The bounding box of the written cells along dimension `index`, `None` when empty.
    pub fn non_empty_domain(&self, index: u32, dim: &DimensionInfo) -> Result<Option<Bounds>> {
        let mut is_empty = 0i32;
        if dim.cell_val_num == VAR_NUM {
            let (mut lo_size, mut hi_size) = (0u64, 0u64);
            // SAFETY: `self.raw` is the open array `self` owns; the out-pointers are locals.
            unsafe {
                tiledb_call!(
                    &self.ctx,
                    tiledb_array_get_non_empty_domain_var_size_from_index(
                        self.raw,
                        index,
                        &mut lo_size,
                        &mut hi_size,
                        &mut is_empty
                    )
                )
            }?;
            if is_empty != 0 {
                return Ok(None);
            }
            let mut lo = vec![0u8; lo_size as usize];
            let mut hi = vec![0u8; hi_size as usize];
            // SAFETY: as above; libtiledb writes the `lo_size` and `hi_size` bytes it just
            // reported into `lo` and `hi`, which are that long.
            unsafe {
                tiledb_call!(
                    &self.ctx,
                    tiledb_array_get_non_empty_domain_var_from_index(
                        self.raw,
                        index,
                        lo.as_mut_ptr() as *mut c_void,
                        hi.as_mut_ptr() as *mut c_void,
                        &mut is_empty
                    )
                )
            }?;
            return Ok(Some(text_bounds(&lo, &hi)));
        }
        let len = 2 * dim.datatype.size() * dim.cell_val_num.max(1) as usize;
        let mut buf = vec![0u8; len.max(FIXED_BOUNDS_MAX)];
        // SAFETY: `self.raw` is the open array `self` owns and `is_empty` a local. libtiledb
        // writes dimension `index`'s `[lo, hi]` (it refuses a var-sized one): at most
        // `FIXED_BOUNDS_MAX` bytes, or `len` when `dim` describes it, and `buf` holds both.
        unsafe {
            tiledb_call!(
                &self.ctx,
                tiledb_array_get_non_empty_domain_from_index(
                    self.raw,
                    index,
                    buf.as_mut_ptr() as *mut c_void,
                    &mut is_empty
                )
            )
        }?;
        if is_empty != 0 {
            return Ok(None);
        }
        bounds_from_bytes(dim.datatype, &buf[..len]).map(Some)
    }

    /// The enumerations named (attributes' `enumeration`s), by name. libtiledb loads every
    /// enumeration of the schema in one call, fetching them at once (on object storage, one
    /// round trip for all rather than one each); an array without any costs nothing.
    pub fn enumerations<'a>(
        &self,
        names: impl IntoIterator<Item = &'a str>,
    ) -> Result<HashMap<String, EnumerationInfo>> {
        let names: BTreeSet<&str> = names.into_iter().collect();
        if names.is_empty() {
            return Ok(HashMap::new());
        }
        // SAFETY: `self.raw` is the open array `self` owns.
        unsafe { tiledb_call!(&self.ctx, tiledb_array_load_all_enumerations(self.raw)) }?;
        names
            .into_iter()
            .map(|name| Ok((name.to_owned(), self.enumeration(name)?)))
            .collect()
    }

    /// The enumeration named `name`, as loaded (a load of its own when it was not).
    fn enumeration(&self, name: &str) -> Result<EnumerationInfo> {
        let c_name = c_string(name)?;
        let mut raw = ptr::null_mut();
        // SAFETY: `self.raw` is the open array `self` owns and `c_name` outlives the call;
        // libtiledb stores a new enumeration handle in `raw`, which the wrapper takes over.
        let enumeration = unsafe {
            tiledb_call!(
                &self.ctx,
                tiledb_array_get_enumeration(self.raw, c_name.as_ptr(), &mut raw)
            )?;
            Enumeration::from_raw(&self.ctx, raw)?
        };
        enumeration.info()
    }
}

impl ArraySchema {
    /// Reads the whole schema into plain values.
    pub fn info(&self) -> Result<SchemaInfo> {
        let ctx = &self.ctx;
        let (mut array_type, mut allows_dups, mut capacity) = (0, 0, 0);
        let (mut tile_order, mut cell_order, mut nattr) = (0, 0, 0u32);
        let mut domain = ptr::null_mut();
        // SAFETY: `self.raw` is the live schema `self` owns; each call writes one value of its
        // out-parameter's type to a local, and the domain handle it hands over in `domain` is
        // taken over by the wrapper.
        let domain = unsafe {
            tiledb_call!(
                ctx,
                tiledb_array_schema_get_array_type(self.raw, &mut array_type)
            )?;
            tiledb_call!(
                ctx,
                tiledb_array_schema_get_allows_dups(self.raw, &mut allows_dups)
            )?;
            tiledb_call!(
                ctx,
                tiledb_array_schema_get_capacity(self.raw, &mut capacity)
            )?;
            tiledb_call!(
                ctx,
                tiledb_array_schema_get_tile_order(self.raw, &mut tile_order)
            )?;
            tiledb_call!(
                ctx,
                tiledb_array_schema_get_cell_order(self.raw, &mut cell_order)
            )?;
            tiledb_call!(ctx, tiledb_array_schema_get_domain(self.raw, &mut domain))?;
            Domain::from_raw(ctx, domain)?
        };
        let dimensions = domain.dimensions()?;
        // SAFETY: as above.
        unsafe {
            tiledb_call!(
                ctx,
                tiledb_array_schema_get_attribute_num(self.raw, &mut nattr)
            )
        }?;
        let attributes = (0..nattr)
            .map(|i| {
                let mut raw = ptr::null_mut();
                // SAFETY: `self.raw` is live and `i` below its attribute count; the new
                // attribute handle stored in `raw` is taken over by the wrapper.
                let attribute = unsafe {
                    tiledb_call!(
                        ctx,
                        tiledb_array_schema_get_attribute_from_index(self.raw, i, &mut raw)
                    )?;
                    Attribute::from_raw(ctx, raw)?
                };
                attribute.info()
            })
            .collect::<Result<Vec<_>>>()?;
        let current_domain = self.current_domain(&dimensions)?;
        Ok(SchemaInfo {
            array_type: if array_type == ffi::TILEDB_DENSE {
                ArrayType::Dense
            } else {
                ArrayType::Sparse
            },
            allows_dups: allows_dups != 0,
            capacity,
            tile_order: Order::from_raw(tile_order),
            cell_order: Order::from_raw(cell_order),
            dimensions,
            attributes,
            current_domain,
        })
    }

    fn current_domain(&self, dims: &[DimensionInfo]) -> Result<Option<Vec<Bounds>>> {
        let ctx = &self.ctx;
        let mut raw = ptr::null_mut();
        // SAFETY: `self.raw` is the live schema `self` owns; the new current-domain handle
        // stored in `raw` is taken over by the wrapper.
        let current = unsafe {
            tiledb_call!(
                ctx,
                tiledb_array_schema_get_current_domain(self.raw, &mut raw)
            )?;
            CurrentDomain::from_raw(ctx, raw)?
        };
        let (mut is_empty, mut cd_type) = (0u32, 0);
        // SAFETY: `current.raw` is live (owned by `current`); the out-pointers are locals.
        unsafe {
            tiledb_call!(
                ctx,
                tiledb_current_domain_get_is_empty(current.raw, &mut is_empty)
            )?;
            if is_empty != 0 {
                return Ok(None);
            }
            tiledb_call!(
                ctx,
                tiledb_current_domain_get_type(current.raw, &mut cd_type)
            )?;
        }
        if cd_type != ffi::TILEDB_NDRECTANGLE {
            return Ok(None);
        }
        let mut ndr = ptr::null_mut();
        // SAFETY: `current.raw` is a live current domain of the ND-rectangle type; the new
        // rectangle handle stored in `ndr` is taken over by the wrapper.
        let ndr = unsafe {
            tiledb_call!(
                ctx,
                tiledb_current_domain_get_ndrectangle(current.raw, &mut ndr)
            )?;
            NdRectangle::from_raw(ctx, ndr)?
        };
        dims.iter()
            .enumerate()
            .map(|(i, dim)| {
                let mut range = ffi::tiledb_range_t {
                    min: ptr::null(),
                    min_size: 0,
                    max: ptr::null(),
                    max_size: 0,
                };
                // SAFETY: `ndr.raw` is live (owned by `ndr`) and `range` a local; libtiledb
                // points `min`/`max` at `min_size`/`max_size` bytes owned by the rectangle,
                // which lives until the end of this function; they are copied below.
                let (lo, hi) = unsafe {
                    tiledb_call!(
                        ctx,
                        tiledb_ndrectangle_get_range(ndr.raw, i as u32, &mut range)
                    )?;
                    (
                        byte_slice(range.min, range.min_size),
                        byte_slice(range.max, range.max_size),
                    )
                };
                if dim.cell_val_num == VAR_NUM {
                    Ok(text_bounds(lo, hi))
                } else {
                    let mut both = lo.to_vec();
                    both.extend_from_slice(hi);
                    bounds_from_bytes(dim.datatype, &both)
                }
            })
            .collect::<Result<Vec<_>>>()
            .map(Some)
    }
}

/// Views `len` bytes at `p` (empty for a null pointer).
///
/// # Safety
/// `p` is null or valid for `len` bytes for the returned lifetime.
unsafe fn byte_slice<'a>(p: *const c_void, len: u64) -> &'a [u8] {
    if p.is_null() || len == 0 {
        &[]
    } else {
        // SAFETY: `p` is non-null here, so valid for `len` bytes (the caller's contract).
        unsafe { std::slice::from_raw_parts(p as *const u8, len as usize) }
    }
}

/// Room for a fixed-size dimension's `[lo, hi]` however it is described: libtiledb only makes
/// fixed-size dimensions of one value of at most 8 bytes. Buffers that libtiledb fills with
/// such a range are never smaller, so a wrong `DimensionInfo` cannot make it write past them.
const FIXED_BOUNDS_MAX: usize = 2 * 8;

impl Domain {
    fn dimensions(&self) -> Result<Vec<DimensionInfo>> {
        let mut ndim = 0u32;
        // SAFETY: `self.raw` is the live domain `self` owns; `ndim` is a local.
        unsafe { tiledb_call!(&self.ctx, tiledb_domain_get_ndim(self.raw, &mut ndim)) }?;
        (0..ndim)
            .map(|i| {
                let mut raw = ptr::null_mut();
                // SAFETY: `self.raw` is live and `i` below its dimension count; the new
                // dimension handle stored in `raw` is taken over by the wrapper.
                let dimension = unsafe {
                    tiledb_call!(
                        &self.ctx,
                        tiledb_domain_get_dimension_from_index(self.raw, i, &mut raw)
                    )?;
                    Dimension::from_raw(&self.ctx, raw)?
                };
                dimension.info()
            })
            .collect()
    }
}

impl Dimension {
    fn info(&self) -> Result<DimensionInfo> {
        let ctx = &self.ctx;
        let (mut name, mut datatype, mut cell_val_num) = (ptr::null(), 0, 0u32);
        let (mut domain, mut extent) = (ptr::null(), ptr::null());
        // SAFETY: `self.raw` is the live dimension `self` owns; each call writes one value to a
        // local. The name, domain and extent pointers it returns are owned by the dimension.
        unsafe {
            tiledb_call!(ctx, tiledb_dimension_get_name(self.raw, &mut name))?;
            tiledb_call!(ctx, tiledb_dimension_get_type(self.raw, &mut datatype))?;
            tiledb_call!(
                ctx,
                tiledb_dimension_get_cell_val_num(self.raw, &mut cell_val_num)
            )?;
            tiledb_call!(ctx, tiledb_dimension_get_domain(self.raw, &mut domain))?;
            tiledb_call!(ctx, tiledb_dimension_get_tile_extent(self.raw, &mut extent))?;
        }
        let datatype = Datatype::from_raw(datatype)?;
        let domain = if domain.is_null() || cell_val_num == VAR_NUM {
            None
        } else {
            // SAFETY: a fixed-size dimension's domain is two values of its type, owned by the
            // dimension handle, which is alive here; they are copied.
            let bytes = unsafe { byte_slice(domain, 2 * datatype.size() as u64) };
            Some(bounds_from_bytes(datatype, bytes)?)
        };
        let tile_extent = if extent.is_null() || cell_val_num == VAR_NUM {
            None
        } else {
            // SAFETY: a fixed-size dimension's tile extent is one value of its type, owned by
            // the dimension handle; it is copied.
            let bytes = unsafe { byte_slice(extent, datatype.size() as u64) };
            datatype.decode(bytes).into_iter().next()
        };
        Ok(DimensionInfo {
            // SAFETY: the name is a NUL-terminated string owned by the live dimension handle.
            name: unsafe { copy_c_str(name) },
            datatype,
            cell_val_num,
            domain,
            tile_extent,
        })
    }
}

impl Attribute {
    fn info(&self) -> Result<AttributeInfo> {
        let ctx = &self.ctx;
        let (mut name, mut datatype, mut cell_val_num) = (ptr::null(), 0, 0u32);
        let (mut nullable, mut enumeration) = (0u8, ptr::null_mut());
        // SAFETY: `self.raw` is the live attribute `self` owns; each call writes one value to a
        // local. The name is owned by the attribute; the enumeration name, when not null, is a
        // new string handed over to us and taken (and freed) once, here.
        let enumeration = unsafe {
            tiledb_call!(ctx, tiledb_attribute_get_name(self.raw, &mut name))?;
            tiledb_call!(ctx, tiledb_attribute_get_type(self.raw, &mut datatype))?;
            tiledb_call!(
                ctx,
                tiledb_attribute_get_cell_val_num(self.raw, &mut cell_val_num)
            )?;
            tiledb_call!(ctx, tiledb_attribute_get_nullable(self.raw, &mut nullable))?;
            tiledb_call!(
                ctx,
                tiledb_attribute_get_enumeration_name(self.raw, &mut enumeration)
            )?;
            if enumeration.is_null() {
                None
            } else {
                Some(take_string(enumeration)?)
            }
        };
        Ok(AttributeInfo {
            // SAFETY: the name is a NUL-terminated string owned by the live attribute handle.
            name: unsafe { copy_c_str(name) },
            datatype: Datatype::from_raw(datatype)?,
            cell_val_num,
            nullable: nullable != 0,
            enumeration,
        })
    }
}

impl Enumeration {
    fn info(&self) -> Result<EnumerationInfo> {
        let ctx = &self.ctx;
        let (mut datatype, mut cell_val_num, mut ordered) = (0, 0u32, 0);
        let (mut data, mut data_size) = (ptr::null(), 0u64);
        // SAFETY: `self.raw` is the live enumeration `self` owns; each call writes to locals.
        // The data buffer is owned by the enumeration and copied below.
        let data = unsafe {
            tiledb_call!(ctx, tiledb_enumeration_get_type(self.raw, &mut datatype))?;
            tiledb_call!(
                ctx,
                tiledb_enumeration_get_cell_val_num(self.raw, &mut cell_val_num)
            )?;
            tiledb_call!(ctx, tiledb_enumeration_get_ordered(self.raw, &mut ordered))?;
            tiledb_call!(
                ctx,
                tiledb_enumeration_get_data(self.raw, &mut data, &mut data_size)
            )?;
            byte_slice(data, data_size)
        };
        let datatype = Datatype::from_raw(datatype)?;
        let values = if cell_val_num == VAR_NUM {
            let (mut offsets, mut offsets_size) = (ptr::null(), 0u64);
            // SAFETY: as for `data`: `offsets_size` bytes of u64 offsets owned by the handle.
            let offsets = unsafe {
                tiledb_call!(
                    ctx,
                    tiledb_enumeration_get_offsets(self.raw, &mut offsets, &mut offsets_size)
                )?;
                byte_slice(offsets, offsets_size)
            };
            let starts: Vec<usize> = offsets
                .chunks_exact(8)
                .map(|c| u64::from_ne_bytes(c.try_into().expect("8 bytes")) as usize)
                .collect();
            let mut values = Vec::with_capacity(starts.len());
            for (i, &start) in starts.iter().enumerate() {
                let end = starts.get(i + 1).copied().unwrap_or(data.len());
                let bytes = data
                    .get(start..end)
                    .ok_or_else(|| Error::new("malformed enumeration offsets"))?;
                values.extend(datatype.decode(bytes));
            }
            values
        } else {
            datatype.decode(data)
        };
        Ok(EnumerationInfo {
            datatype,
            ordered: ordered != 0,
            values,
        })
    }
}

/// A sparse fragment's shape, from its metadata: the box its cells lie in, and the range of
/// the first dimension each of its data tiles covers (its MBR's), in the fragment's order.
#[derive(Debug, Clone, PartialEq)]
pub struct FragmentShape {
    pub non_empty_domain: Vec<Bounds>,
    pub tiles_first_dimension: Vec<Bounds>,
}

impl FragmentInfo {
    /// Loads the fragment list of the array at `uri`: the fragments committed now.
    pub fn load(ctx: &Context, uri: &str) -> Result<FragmentInfo> {
        let c_uri = c_string(uri)?;
        let mut raw = ptr::null_mut();
        // SAFETY: `c_uri` outlives the alloc; the new fragment info handle stored in `raw` is
        // taken over by the wrapper, and loaded while `info` owns it.
        unsafe {
            tiledb_call!(ctx, tiledb_fragment_info_alloc(c_uri.as_ptr(), &mut raw))?;
            let info = FragmentInfo::from_raw(ctx, raw)?;
            tiledb_call!(ctx, tiledb_fragment_info_load(info.raw))?;
            Ok(info)
        }
    }

    /// The fragments loaded; `first_dimension` is the array's first dimension, whose range
    /// each fragment covers is read when it is fixed-size.
    pub fn fragments(&self, first_dimension: Option<&DimensionInfo>) -> Result<Vec<Fragment>> {
        let ctx = &self.ctx;
        let mut num = 0u32;
        // SAFETY: `self.raw` is the loaded fragment info `self` owns; `num` is a local.
        unsafe {
            tiledb_call!(
                ctx,
                tiledb_fragment_info_get_fragment_num(self.raw, &mut num)
            )
        }?;
        (0..num)
            .map(|fid| {
                let (mut uri, mut cell_num) = (ptr::null(), 0u64);
                // SAFETY: `self.raw` is the loaded fragment info and `fid` below its fragment
                // count; each call writes to locals. The URI is owned by the fragment info.
                unsafe {
                    tiledb_call!(
                        ctx,
                        tiledb_fragment_info_get_fragment_uri(self.raw, fid, &mut uri)
                    )?;
                    tiledb_call!(
                        ctx,
                        tiledb_fragment_info_get_cell_num(self.raw, fid, &mut cell_num)
                    )?;
                }
                let first_dimension = match first_dimension {
                    Some(dim) if dim.cell_val_num != VAR_NUM => Some(self.bounds(fid, 0, dim)?),
                    _ => None,
                };
                Ok(Fragment {
                    // SAFETY: the URI is a NUL-terminated string owned by the loaded info.
                    uri: unsafe { copy_c_str(uri) },
                    cell_num,
                    first_dimension,
                })
            })
            .collect()
    }

    /// Fragment `fid`'s range of dimension `did`, described by `dim` (fixed-size).
    fn bounds(&self, fid: u32, did: u32, dim: &DimensionInfo) -> Result<Bounds> {
        let len = 2 * dim.datatype.size();
        let mut buf = vec![0u8; len.max(FIXED_BOUNDS_MAX)];
        // SAFETY: `self.raw` is the loaded fragment info `self` owns and `fid` one of its
        // fragments. libtiledb writes the fragment's `[lo, hi]` of dimension `did` (it refuses
        // a var-sized one): at most `FIXED_BOUNDS_MAX` bytes, or `len` when `dim` describes
        // it, and `buf` holds both.
        unsafe {
            tiledb_call!(
                &self.ctx,
                tiledb_fragment_info_get_non_empty_domain_from_index(
                    self.raw,
                    fid,
                    did,
                    buf.as_mut_ptr() as *mut c_void
                )
            )
        }?;
        bounds_from_bytes(dim.datatype, &buf[..len])
    }

    /// Fragment `fid`'s shape when it is sparse and every one of `dims` (the array's
    /// dimensions) is fixed-size; `None` otherwise. Loads the fragment's R-tree.
    pub fn shape(&self, fid: u32, dims: &[DimensionInfo]) -> Result<Option<FragmentShape>> {
        let ctx = &self.ctx;
        if dims.is_empty() || dims.iter().any(|d| d.cell_val_num == VAR_NUM) {
            return Ok(None);
        }
        let mut tiles = 0u64;
        // SAFETY: `self.raw` is the loaded fragment info `self` owns; `tiles` is a local.
        unsafe {
            tiledb_call!(
                ctx,
                tiledb_fragment_info_get_mbr_num(self.raw, fid, &mut tiles)
            )
        }?;
        if tiles == 0 {
            // A dense fragment (or one without cells): no MBRs.
            return Ok(None);
        }
        let non_empty_domain = (dims.iter().enumerate())
            .map(|(did, dim)| self.bounds(fid, did as u32, dim))
            .collect::<Result<Vec<_>>>()?;
        // Each call below writes one `[lo, hi]` of a fixed-size dimension: at most
        // `FIXED_BOUNDS_MAX` bytes, which `buf` holds.
        let mut buf = [0u8; FIXED_BOUNDS_MAX];
        let first = &dims[0];
        let len = 2 * first.datatype.size();
        let tiles_first_dimension = (0..tiles)
            .map(|mid| {
                let mid = u32::try_from(mid).map_err(|_| Error::new("too many tiles"))?;
                // SAFETY: as above; `mid` is below the fragment's MBR count, dimension 0
                // fixed-size, and `buf` holds its bounds.
                unsafe {
                    tiledb_call!(
                        ctx,
                        tiledb_fragment_info_get_mbr_from_index(
                            self.raw,
                            fid,
                            mid,
                            0,
                            buf.as_mut_ptr() as *mut c_void
                        )
                    )
                }?;
                bounds_from_bytes(first.datatype, &buf[..len])
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Some(FragmentShape {
            non_empty_domain,
            tiles_first_dimension,
        }))
    }
}
