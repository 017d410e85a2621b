//! Read queries: a subarray, a layout, optional conditions, and per-column buffers of bounded
//! size that libtiledb fills batch by batch until the query completes.

use std::ffi::{c_void, CString};
use std::ptr;
use std::sync::Arc;

use super::array::{Array, VAR_NUM};
use super::context::{c_string, tiledb_call};
use super::datatype::{Datatype, Value};
use super::handle::handle;
use super::{ffi, Error, Result};

handle!(
    /// A read query (`tiledb_query_t`).
    Query,
    tiledb_query_t,
    tiledb_query_free
);
handle!(
    /// The ranges a query reads (`tiledb_subarray_t`).
    Subarray,
    tiledb_subarray_t,
    tiledb_subarray_free
);
handle!(
    /// A filter on attribute values pushed into libtiledb (`tiledb_query_condition_t`).
    QueryCondition,
    tiledb_query_condition_t,
    tiledb_query_condition_free
);

/// The order of the cells a read returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// Sorted by the first dimension, then the second, …
    RowMajor,
    /// Whatever order is fastest.
    Unordered,
    /// The array's global order: tile by tile in the tile order, cells in the cell order.
    GlobalOrder,
}

/// A column to read: its name and how its values are laid out.
#[derive(Debug, Clone)]
pub struct ColumnSpec {
    pub name: String,
    pub datatype: Datatype,
    pub cell_val_num: u32,
    pub nullable: bool,
}

impl ColumnSpec {
    fn is_var(&self) -> bool {
        self.cell_val_num == VAR_NUM
    }

    /// Bytes of one fixed-size cell.
    fn cell_size(&self) -> usize {
        self.datatype.size() * self.cell_val_num.max(1) as usize
    }
}

/// The buffers of one column for one submission. libtiledb gets their addresses and
/// capacities and writes into their spare capacity; its reported sizes then become their
/// lengths, and the filled vectors are handed out as a batch (fresh ones take their place).
struct ColumnBuffers {
    name: CString,
    spec: ColumnSpec,
    data: Vec<u8>,
    data_size: Box<u64>,
    offsets: Vec<u64>,
    offsets_size: Box<u64>,
    validity: Vec<u8>,
    validity_size: Box<u64>,
    /// Capacities of the next submission's buffers: data bytes, offsets, validity bytes.
    capacity: (usize, usize, usize),
}

/// One column of a batch, owned: its buffers as libtiledb filled them.
pub struct ColumnData {
    /// Values, fixed-size cells back to back, or the bytes of var-sized cells.
    pub data: Vec<u8>,
    /// For var-sized columns: `cells + 1` byte offsets into `data` (Arrow large offsets).
    pub offsets: Option<Vec<u64>>,
    /// For nullable columns: one byte per cell, non-zero where the cell is valid.
    pub validity: Option<Vec<u8>>,
}

/// A batch of cells: every requested column, `cells` long.
pub struct Batch {
    pub cells: usize,
    pub columns: Vec<ColumnData>,
}

/// A read query over an open array that yields batches of at most its buffers' size.
pub struct ReadQuery {
    // Field order matters: the query is freed before the buffers it points into.
    query: Query,
    columns: Vec<ColumnBuffers>,
    _array: Arc<Array>,
    done: bool,
    /// Buffers start small, so the first batch comes quickly, and double after each batch
    /// until their data buffers reach this many bytes in all.
    target_bytes: usize,
}

/// Bytes per cell assumed for var-sized columns when sizing buffers.
const VAR_CELL_GUESS: usize = 32;

/// Cells in the first batch of a query.
const FIRST_BATCH_CELLS: usize = 8192;

impl ReadQuery {
    /// A query reading `columns` of `array` in `layout`, within `ranges` (one list of
    /// inclusive ranges per dimension; an empty list means the whole dimension) and, when
    /// given, only the cells matching `condition`. Each batch holds about `batch_bytes`;
    /// when `expected_cells` fit in that, the first batch is sized for all of them, else it is
    /// small so that the first rows come at once.
    pub fn new(
        array: Arc<Array>,
        layout: Layout,
        ranges: &[Vec<(Value, Value)>],
        columns: &[ColumnSpec],
        condition: Option<&QueryCondition>,
        batch_bytes: usize,
        expected_cells: u64,
    ) -> Result<ReadQuery> {
        let ctx = array.context().clone();
        let mut raw = ptr::null_mut();
        tiledb_call!(
            &ctx,
            tiledb_query_alloc(array.as_ptr(), ffi::TILEDB_READ, &mut raw)
        )?;
        let query = Query::from_raw(&ctx, raw)?;
        let layout = match layout {
            Layout::RowMajor => ffi::TILEDB_ROW_MAJOR,
            Layout::Unordered => ffi::TILEDB_UNORDERED,
            Layout::GlobalOrder => ffi::TILEDB_GLOBAL_ORDER,
        };
        tiledb_call!(&ctx, tiledb_query_set_layout(query.as_ptr(), layout))?;

        if ranges.iter().any(|r| !r.is_empty()) {
            let dimensions = array.schema()?.info()?.dimensions;
            let mut raw = ptr::null_mut();
            tiledb_call!(&ctx, tiledb_subarray_alloc(array.as_ptr(), &mut raw))?;
            let subarray = Subarray::from_raw(&ctx, raw)?;
            for (dim, (dim_ranges, info)) in ranges.iter().zip(&dimensions).enumerate() {
                for (lo, hi) in dim_ranges {
                    subarray.add_range(dim as u32, info.datatype, lo, hi)?;
                }
            }
            tiledb_call!(
                &ctx,
                tiledb_query_set_subarray_t(query.as_ptr(), subarray.as_ptr())
            )?;
        }
        if let Some(condition) = condition {
            tiledb_call!(
                &ctx,
                tiledb_query_set_condition(query.as_ptr(), condition.as_ptr())
            )?;
        }

        let row_bytes: usize = columns
            .iter()
            .map(|c| {
                let value = if c.is_var() {
                    8 + VAR_CELL_GUESS
                } else {
                    c.cell_size()
                };
                value + usize::from(c.nullable)
            })
            .sum::<usize>()
            .max(1);
        // The first batch is small: its rows reach a reader (`head`) at once.
        let batch_cells = (batch_bytes / row_bytes).max(1024);
        // A quarter more than expected: estimates are averages.
        let expected = (expected_cells as usize).saturating_add(expected_cells as usize / 4);
        let cells = if expected < batch_cells {
            expected.max(1024)
        } else {
            batch_cells.min(FIRST_BATCH_CELLS)
        };
        let columns = columns
            .iter()
            .map(|spec| {
                let data = cells
                    * if spec.is_var() {
                        VAR_CELL_GUESS
                    } else {
                        spec.cell_size()
                    };
                let offsets = if spec.is_var() { cells + 1 } else { 0 };
                let validity = if spec.nullable { cells } else { 0 };
                Ok(ColumnBuffers {
                    name: c_string(&spec.name)?,
                    data: Vec::new(),
                    data_size: Box::new(0),
                    offsets: Vec::new(),
                    offsets_size: Box::new(0),
                    validity: Vec::new(),
                    validity_size: Box::new(0),
                    spec: spec.clone(),
                    capacity: (data, offsets, validity),
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(ReadQuery {
            query,
            columns,
            _array: array,
            done: false,
            target_bytes: batch_bytes,
        })
    }

    /// Gives every column empty buffers of its capacities and points libtiledb at them.
    fn set_buffers(&mut self) -> Result<()> {
        let ctx = self.query.context().clone();
        let q = self.query.as_ptr();
        for c in &mut self.columns {
            let (data, offsets, validity) = c.capacity;
            c.data = Vec::with_capacity(data);
            c.offsets = Vec::with_capacity(offsets);
            c.validity = Vec::with_capacity(validity);
            *c.data_size = c.data.capacity() as u64;
            *c.offsets_size = (c.offsets.capacity() * 8) as u64;
            *c.validity_size = c.validity.capacity() as u64;
            // SAFETY (all three calls): libtiledb writes at most the given sizes, the vectors'
            // capacities, through these pointers. The vectors and boxed sizes stay in
            // `self.columns`, untouched, until the submission returns, and the query is freed
            // before them (field order) or gets new buffers before its next submission.
            tiledb_call!(
                &ctx,
                tiledb_query_set_data_buffer(
                    q,
                    c.name.as_ptr(),
                    c.data.as_mut_ptr() as *mut c_void,
                    &mut *c.data_size
                )
            )?;
            if c.spec.is_var() {
                tiledb_call!(
                    &ctx,
                    tiledb_query_set_offsets_buffer(
                        q,
                        c.name.as_ptr(),
                        c.offsets.as_mut_ptr(),
                        &mut *c.offsets_size
                    )
                )?;
            }
            if c.spec.nullable {
                tiledb_call!(
                    &ctx,
                    tiledb_query_set_validity_buffer(
                        q,
                        c.name.as_ptr(),
                        c.validity.as_mut_ptr(),
                        &mut *c.validity_size
                    )
                )?;
            }
        }
        Ok(())
    }

    fn capacity_bytes(&self) -> usize {
        self.columns
            .iter()
            .map(|c| c.capacity.0 + c.capacity.1 * 8 + c.capacity.2)
            .sum()
    }

    /// Doubles every capacity: a batch did not fit even one cell, or batches grow to the
    /// target.
    fn grow(&mut self) -> Result<()> {
        for c in &mut self.columns {
            let (data, offsets, validity) = c.capacity;
            if data > (1 << 31) {
                return Err(Error::new(format!(
                    "a single cell of {} does not fit in 2 GiB",
                    c.spec.name
                )));
            }
            c.capacity = (data * 2, offsets * 2, validity * 2);
        }
        Ok(())
    }

    /// Reads the next batch; `None` once the query has returned everything.
    pub fn next_batch(&mut self) -> Result<Option<Batch>> {
        loop {
            if self.done {
                return Ok(None);
            }
            self.set_buffers()?;
            let ctx = self.query.context().clone();
            tiledb_call!(&ctx, tiledb_query_submit(self.query.as_ptr()))?;
            let mut status = 0;
            tiledb_call!(
                &ctx,
                tiledb_query_get_status(self.query.as_ptr(), &mut status)
            )?;
            self.take_results()?;
            let cells = self.result_cells();
            match status {
                ffi::TILEDB_COMPLETED => self.done = true,
                ffi::TILEDB_INCOMPLETE if cells == 0 => {
                    self.grow()?;
                    continue;
                }
                ffi::TILEDB_INCOMPLETE => {}
                other => return Err(Error::new(format!("read query ended with status {other}"))),
            }
            if cells == 0 && self.done {
                return Ok(None);
            }
            let batch = self.batch(cells);
            if self.capacity_bytes() * 2 <= self.target_bytes {
                self.grow()?;
            }
            return Ok(Some(batch));
        }
    }

    /// Makes the sizes libtiledb reported the lengths of the buffers it wrote into.
    fn take_results(&mut self) -> Result<()> {
        for c in &mut self.columns {
            let data = *c.data_size as usize;
            let offsets = *c.offsets_size as usize / 8;
            let validity = *c.validity_size as usize;
            if data > c.data.capacity()
                || offsets > c.offsets.capacity()
                || validity > c.validity.capacity()
            {
                return Err(Error::new(format!(
                    "libtiledb reported more results for {} than its buffers hold",
                    c.spec.name
                )));
            }
            // SAFETY: libtiledb initialised the first `size` elements of each buffer it was
            // given (the sizes it reports), and each is within the capacity (checked above).
            unsafe {
                c.data.set_len(data);
                c.offsets.set_len(offsets);
                c.validity.set_len(validity);
            }
        }
        Ok(())
    }

    /// The number of cells the last submission returned.
    fn result_cells(&self) -> usize {
        let Some(c) = self.columns.first() else {
            return 0;
        };
        if c.spec.is_var() {
            // With the extra element, a batch of n cells has n + 1 offsets (none when empty).
            c.offsets.len().saturating_sub(1)
        } else {
            c.data.len() / c.spec.cell_size()
        }
    }

    /// Hands out the filled buffers (the next submission gets new ones).
    fn batch(&mut self, cells: usize) -> Batch {
        let columns = self
            .columns
            .iter_mut()
            .map(|c| {
                let mut offsets = std::mem::take(&mut c.offsets);
                if offsets.is_empty() {
                    offsets.push(0);
                }
                ColumnData {
                    data: std::mem::take(&mut c.data),
                    offsets: c.spec.is_var().then_some(offsets),
                    validity: c.spec.nullable.then(|| std::mem::take(&mut c.validity)),
                }
            })
            .collect();
        Batch { cells, columns }
    }
}

impl Subarray {
    /// Adds the inclusive range `lo..=hi` on dimension `dim` of type `datatype`.
    fn add_range(&self, dim: u32, datatype: Datatype, lo: &Value, hi: &Value) -> Result<()> {
        let ctx = self.context();
        match (lo, hi) {
            (Value::Text(lo), Value::Text(hi)) => tiledb_call!(
                ctx,
                tiledb_subarray_add_range_var(
                    self.as_ptr(),
                    dim,
                    lo.as_ptr() as *const c_void,
                    lo.len() as u64,
                    hi.as_ptr() as *const c_void,
                    hi.len() as u64
                )
            ),
            _ => {
                let (lo, hi) = (lo.to_native(datatype)?, hi.to_native(datatype)?);
                tiledb_call!(
                    ctx,
                    tiledb_subarray_add_range(
                        self.as_ptr(),
                        dim,
                        lo.as_ptr() as *const c_void,
                        hi.as_ptr() as *const c_void,
                        ptr::null()
                    )
                )
            }
        }
    }
}

impl Value {
    /// This value as native bytes of `datatype` (for range bounds and conditions).
    pub fn to_native(&self, datatype: Datatype) -> Result<Vec<u8>> {
        use Datatype::*;
        let int = |v: &Value| -> Result<i128> {
            match v {
                Value::Int(i) => Ok(*i as i128),
                Value::UInt(u) => Ok(*u as i128),
                Value::Float(f) if f.fract() == 0.0 => Ok(*f as i128),
                Value::Bool(b) => Ok(i128::from(*b)),
                other => Err(Error::new(format!("{other:?} is not an integer"))),
            }
        };
        let float = |v: &Value| -> Result<f64> {
            match v {
                Value::Int(i) => Ok(*i as f64),
                Value::UInt(u) => Ok(*u as f64),
                Value::Float(f) => Ok(*f),
                other => Err(Error::new(format!("{other:?} is not a number"))),
            }
        };
        macro_rules! narrow {
            ($t:ty) => {{
                let i = int(self)?;
                <$t>::try_from(i)
                    .map(|x| x.to_ne_bytes().to_vec())
                    .map_err(|_| Error::new(format!("{i} is out of range for {datatype:?}")))
            }};
        }
        match datatype {
            Int8 => narrow!(i8),
            Int16 => narrow!(i16),
            Int32 => narrow!(i32),
            Int64 | DateTime(_) | Time(_) => narrow!(i64),
            UInt8 | Bool => narrow!(u8),
            UInt16 => narrow!(u16),
            UInt32 => narrow!(u32),
            UInt64 => narrow!(u64),
            Float32 => Ok((float(self)? as f32).to_ne_bytes().to_vec()),
            Float64 => Ok(float(self)?.to_ne_bytes().to_vec()),
            _ => match self {
                Value::Text(s) => Ok(s.as_bytes().to_vec()),
                Value::Bytes(b) => Ok(b.clone()),
                other => Err(Error::new(format!("{other:?} does not fit {datatype:?}"))),
            },
        }
    }
}

impl QueryCondition {
    /// `name == value` (`value` in the attribute's native bytes; `None` matches nulls). On an
    /// enumerated attribute the value is a label.
    pub fn equals(array: &Array, name: &str, value: Option<&[u8]>) -> Result<QueryCondition> {
        let ctx = array.context();
        let mut raw = ptr::null_mut();
        tiledb_call!(ctx, tiledb_query_condition_alloc(&mut raw))?;
        let condition = QueryCondition::from_raw(ctx, raw)?;
        let c_name = c_string(name)?;
        let (ptr, len) = match value {
            Some(v) => (v.as_ptr() as *const c_void, v.len() as u64),
            None => (ptr::null(), 0),
        };
        tiledb_call!(
            ctx,
            tiledb_query_condition_init(
                condition.as_ptr(),
                c_name.as_ptr(),
                ptr,
                len,
                ffi::TILEDB_EQ
            )
        )?;
        Ok(condition)
    }
}
