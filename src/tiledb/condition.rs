//! Conditions on attribute values that libtiledb tests as it reads
//! (`tiledb_query_condition_t`): comparisons with one value, membership in a set of values,
//! and their combinations.

use std::ffi::c_void;
use std::ptr;

use super::array::Array;
use super::context::{c_string, tiledb_call};
use super::handle::handle;
use super::{ffi, Error, Result};

handle!(
    /// A filter on attribute values pushed into libtiledb (`tiledb_query_condition_t`).
    QueryCondition,
    tiledb_query_condition_t,
    tiledb_query_condition_free
);

// SAFETY: `QueryCondition` owns its handle alone, and libtiledb handles have no thread
// affinity: moving it to another thread moves every use of it there (a reader's condition
// goes with its reader). It is not `Sync`.
unsafe impl Send for QueryCondition {}

/// A comparison of a field's values with one value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Comparison {
    Lt,
    Le,
    Gt,
    Ge,
    Eq,
    Ne,
}

impl Comparison {
    fn op(self) -> ffi::tiledb_query_condition_op_t {
        match self {
            Comparison::Lt => ffi::TILEDB_LT,
            Comparison::Le => ffi::TILEDB_LE,
            Comparison::Gt => ffi::TILEDB_GT,
            Comparison::Ge => ffi::TILEDB_GE,
            Comparison::Eq => ffi::TILEDB_EQ,
            Comparison::Ne => ffi::TILEDB_NE,
        }
    }
}

impl QueryCondition {
    /// `name == value` (`value` in the attribute's native bytes; `None` matches nulls). On an
    /// enumerated attribute the value is a label.
    pub fn equals(array: &Array, name: &str, value: Option<&[u8]>) -> Result<QueryCondition> {
        QueryCondition::compare_raw(array, name, value, ffi::TILEDB_EQ)
    }

    /// `name <op> value` (`value` in the field's native bytes; on an enumerated attribute,
    /// a label).
    pub fn compare(
        array: &Array,
        name: &str,
        op: Comparison,
        value: &[u8],
    ) -> Result<QueryCondition> {
        QueryCondition::compare_raw(array, name, Some(value), op.op())
    }

    fn compare_raw(
        array: &Array,
        name: &str,
        value: Option<&[u8]>,
        op: ffi::tiledb_query_condition_op_t,
    ) -> Result<QueryCondition> {
        let ctx = array.context();
        let mut raw = ptr::null_mut();
        // SAFETY: the new condition handle stored in `raw` is taken over by the wrapper.
        let condition = unsafe {
            tiledb_call!(ctx, tiledb_query_condition_alloc(&mut raw))?;
            QueryCondition::from_raw(ctx, raw)?
        };
        let c_name = c_string(name)?;
        let (ptr, len) = match value {
            Some(v) => (v.as_ptr() as *const c_void, v.len() as u64),
            None => (ptr::null(), 0),
        };
        // SAFETY: the condition is live; `c_name` and the `len` bytes at `ptr` (null and 0 for
        // a null test) outlive the call, which copies them.
        unsafe {
            tiledb_call!(
                ctx,
                tiledb_query_condition_init(condition.as_ptr(), c_name.as_ptr(), ptr, len, op)
            )
        }?;
        Ok(condition)
    }

    /// `name in values` (or `not in` when `negated`), each value in the field's native
    /// bytes (on an enumerated attribute, a label). `values` is not empty.
    pub fn member(
        array: &Array,
        name: &str,
        values: &[Vec<u8>],
        negated: bool,
    ) -> Result<QueryCondition> {
        if values.is_empty() {
            return Err(Error::new(format!("{name} in []: a set of no values")));
        }
        let ctx = array.context();
        let c_name = c_string(name)?;
        let mut offsets = Vec::with_capacity(values.len());
        let mut data = Vec::with_capacity(values.iter().map(Vec::len).sum());
        for value in values {
            offsets.push(data.len() as u64);
            data.extend_from_slice(value);
        }
        let op = if negated {
            ffi::TILEDB_NOT_IN
        } else {
            ffi::TILEDB_IN
        };
        let mut raw = ptr::null_mut();
        // SAFETY: `c_name`, `data` and `offsets` outlive the call, which copies them, and
        // their sizes are given in bytes; the new condition stored in `raw` is taken over by
        // the wrapper.
        unsafe {
            tiledb_call!(
                ctx,
                tiledb_query_condition_alloc_set_membership(
                    c_name.as_ptr(),
                    data.as_ptr() as *const c_void,
                    data.len() as u64,
                    offsets.as_ptr() as *const c_void,
                    std::mem::size_of_val(offsets.as_slice()) as u64,
                    op,
                    &mut raw
                )
            )?;
            QueryCondition::from_raw(ctx, raw)
        }
    }

    /// The cells that match both `self` and `other`.
    pub fn and(&self, other: &QueryCondition) -> Result<QueryCondition> {
        self.combine(other, ffi::TILEDB_AND)
    }

    /// The cells that match `self` or `other`.
    pub fn or(&self, other: &QueryCondition) -> Result<QueryCondition> {
        self.combine(other, ffi::TILEDB_OR)
    }

    fn combine(
        &self,
        other: &QueryCondition,
        op: ffi::tiledb_query_condition_combination_op_t,
    ) -> Result<QueryCondition> {
        let ctx = self.context();
        let mut raw = ptr::null_mut();
        // SAFETY: both conditions are live and only read; the new combined condition stored in
        // `raw` is taken over by the wrapper.
        unsafe {
            tiledb_call!(
                ctx,
                tiledb_query_condition_combine(self.as_ptr(), other.as_ptr(), op, &mut raw)
            )?;
            QueryCondition::from_raw(ctx, raw)
        }
    }

    /// The cells that do not match `self`.
    pub fn negated(&self) -> Result<QueryCondition> {
        let ctx = self.context();
        let mut raw = ptr::null_mut();
        // SAFETY: the condition is live and only read; the new negated condition stored in
        // `raw` is taken over by the wrapper.
        unsafe {
            tiledb_call!(ctx, tiledb_query_condition_negate(self.as_ptr(), &mut raw))?;
            QueryCondition::from_raw(ctx, raw)
        }
    }
}
