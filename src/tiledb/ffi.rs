//! Hand-written declarations of the part of libtiledb's C API that soma-mount uses.
//!
//! Every declaration here is checked mechanically against TileDB 2.30.0's C headers (under
//! `tiledb/api/c_api/`, and `tiledb/sm/c_api/tiledb.h` for queries) by `scripts/check-ffi`,
//! which CI runs: it compares them with `ffi.manifest`, extracted from those headers, and
//! checks that the linked libtiledb exports every function. C enums are `int`-sized (`u32`,
//! as none has a negative value) and keep their C typedef names; constants keep their C
//! names. Nothing outside `src/tiledb/` uses this module: the safe wrappers beside it own
//! every handle.

#![allow(non_camel_case_types)]
// The declarations are the checked C API surface; queries use the rest.
#![allow(dead_code)]

use std::ffi::{c_char, c_int, c_void};

/// Return code of every C API call: `TILEDB_OK` (0) or an error.
pub type capi_return_t = i32;
pub const TILEDB_OK: capi_return_t = 0;

pub type tiledb_datatype_t = u32;
pub type tiledb_object_t = u32;
pub type tiledb_query_type_t = u32;
pub type tiledb_array_type_t = u32;
pub type tiledb_layout_t = u32;
pub type tiledb_query_status_t = u32;
pub type tiledb_query_condition_op_t = u32;
pub type tiledb_query_condition_combination_op_t = u32;
pub type tiledb_current_domain_type_t = u32;

pub const TILEDB_GROUP: tiledb_object_t = 1;
pub const TILEDB_ARRAY: tiledb_object_t = 2;

pub const TILEDB_READ: tiledb_query_type_t = 0;

pub const TILEDB_DENSE: tiledb_array_type_t = 0;

pub const TILEDB_ROW_MAJOR: tiledb_layout_t = 0;
pub const TILEDB_COL_MAJOR: tiledb_layout_t = 1;
pub const TILEDB_GLOBAL_ORDER: tiledb_layout_t = 2;
pub const TILEDB_UNORDERED: tiledb_layout_t = 3;
pub const TILEDB_HILBERT: tiledb_layout_t = 4;

pub const TILEDB_FAILED: tiledb_query_status_t = 0;
pub const TILEDB_COMPLETED: tiledb_query_status_t = 1;
pub const TILEDB_INCOMPLETE: tiledb_query_status_t = 3;

pub const TILEDB_LT: tiledb_query_condition_op_t = 0;
pub const TILEDB_LE: tiledb_query_condition_op_t = 1;
pub const TILEDB_GT: tiledb_query_condition_op_t = 2;
pub const TILEDB_GE: tiledb_query_condition_op_t = 3;
pub const TILEDB_EQ: tiledb_query_condition_op_t = 4;
pub const TILEDB_NE: tiledb_query_condition_op_t = 5;
pub const TILEDB_IN: tiledb_query_condition_op_t = 6;
pub const TILEDB_NOT_IN: tiledb_query_condition_op_t = 7;
pub const TILEDB_AND: tiledb_query_condition_combination_op_t = 0;
pub const TILEDB_OR: tiledb_query_condition_combination_op_t = 1;

pub const TILEDB_NDRECTANGLE: tiledb_current_domain_type_t = 0;

/// Declares opaque C handle types: only ever seen behind a pointer.
macro_rules! opaque {
    ($($name:ident),* $(,)?) => {
        $(
            #[repr(C)]
            pub struct $name {
                _private: [u8; 0],
            }
        )*
    };
}

opaque!(
    tiledb_config_t,
    tiledb_error_t,
    tiledb_ctx_t,
    tiledb_string_t,
    tiledb_group_t,
    tiledb_array_t,
    tiledb_array_schema_t,
    tiledb_domain_t,
    tiledb_dimension_t,
    tiledb_attribute_t,
    tiledb_enumeration_t,
    tiledb_current_domain_t,
    tiledb_ndrectangle_t,
    tiledb_fragment_info_t,
    tiledb_query_t,
    tiledb_subarray_t,
    tiledb_query_condition_t,
    tiledb_consolidation_plan_t,
    tiledb_query_channel_t,
    tiledb_channel_operation_t,
    tiledb_channel_operator_t,
    tiledb_vfs_t,
);

/// One dimension's range in an ND rectangle (`ndrectangle_api_external_experimental.h`).
#[repr(C)]
pub struct tiledb_range_t {
    pub min: *const c_void,
    pub min_size: u64,
    pub max: *const c_void,
    pub max_size: u64,
}

extern "C" {
    // config_api_external.h
    pub fn tiledb_config_alloc(
        config: *mut *mut tiledb_config_t,
        error: *mut *mut tiledb_error_t,
    ) -> capi_return_t;
    pub fn tiledb_config_free(config: *mut *mut tiledb_config_t);
    pub fn tiledb_config_set(
        config: *mut tiledb_config_t,
        param: *const c_char,
        value: *const c_char,
        error: *mut *mut tiledb_error_t,
    ) -> capi_return_t;

    // context_api_external.h, error_api_external.h
    pub fn tiledb_ctx_alloc(
        config: *mut tiledb_config_t,
        ctx: *mut *mut tiledb_ctx_t,
    ) -> capi_return_t;
    pub fn tiledb_ctx_free(ctx: *mut *mut tiledb_ctx_t);
    pub fn tiledb_ctx_get_last_error(
        ctx: *mut tiledb_ctx_t,
        err: *mut *mut tiledb_error_t,
    ) -> capi_return_t;
    pub fn tiledb_error_message(
        err: *mut tiledb_error_t,
        errmsg: *mut *const c_char,
    ) -> capi_return_t;
    pub fn tiledb_error_free(err: *mut *mut tiledb_error_t);

    // string_api_external.h
    pub fn tiledb_string_view(
        s: *mut tiledb_string_t,
        data: *mut *const c_char,
        length: *mut usize,
    ) -> capi_return_t;
    pub fn tiledb_string_free(s: *mut *mut tiledb_string_t) -> capi_return_t;

    // group_api_external.h
    pub fn tiledb_group_alloc(
        ctx: *mut tiledb_ctx_t,
        group_uri: *const c_char,
        group: *mut *mut tiledb_group_t,
    ) -> capi_return_t;
    pub fn tiledb_group_free(group: *mut *mut tiledb_group_t);
    pub fn tiledb_group_set_config(
        ctx: *mut tiledb_ctx_t,
        group: *mut tiledb_group_t,
        config: *mut tiledb_config_t,
    ) -> capi_return_t;
    pub fn tiledb_group_open(
        ctx: *mut tiledb_ctx_t,
        group: *mut tiledb_group_t,
        query_type: tiledb_query_type_t,
    ) -> capi_return_t;
    pub fn tiledb_group_close(ctx: *mut tiledb_ctx_t, group: *mut tiledb_group_t) -> capi_return_t;
    pub fn tiledb_group_get_metadata_num(
        ctx: *mut tiledb_ctx_t,
        group: *mut tiledb_group_t,
        num: *mut u64,
    ) -> capi_return_t;
    pub fn tiledb_group_get_metadata_from_index(
        ctx: *mut tiledb_ctx_t,
        group: *mut tiledb_group_t,
        index: u64,
        key: *mut *const c_char,
        key_len: *mut u32,
        value_type: *mut tiledb_datatype_t,
        value_num: *mut u32,
        value: *mut *const c_void,
    ) -> capi_return_t;
    pub fn tiledb_group_get_member_count(
        ctx: *mut tiledb_ctx_t,
        group: *mut tiledb_group_t,
        count: *mut u64,
    ) -> capi_return_t;
    pub fn tiledb_group_get_member_by_index_v2(
        ctx: *mut tiledb_ctx_t,
        group: *mut tiledb_group_t,
        index: u64,
        uri: *mut *mut tiledb_string_t,
        object_type: *mut tiledb_object_t,
        name: *mut *mut tiledb_string_t,
    ) -> capi_return_t;

    // array_api_external.h
    pub fn tiledb_array_alloc(
        ctx: *mut tiledb_ctx_t,
        array_uri: *const c_char,
        array: *mut *mut tiledb_array_t,
    ) -> capi_return_t;
    pub fn tiledb_array_free(array: *mut *mut tiledb_array_t);
    pub fn tiledb_array_set_open_timestamp_end(
        ctx: *mut tiledb_ctx_t,
        array: *mut tiledb_array_t,
        timestamp_end: u64,
    ) -> capi_return_t;
    pub fn tiledb_array_open(
        ctx: *mut tiledb_ctx_t,
        array: *mut tiledb_array_t,
        query_type: tiledb_query_type_t,
    ) -> capi_return_t;
    pub fn tiledb_array_close(ctx: *mut tiledb_ctx_t, array: *mut tiledb_array_t) -> capi_return_t;
    pub fn tiledb_array_get_schema(
        ctx: *mut tiledb_ctx_t,
        array: *mut tiledb_array_t,
        array_schema: *mut *mut tiledb_array_schema_t,
    ) -> capi_return_t;
    pub fn tiledb_array_get_non_empty_domain_from_index(
        ctx: *mut tiledb_ctx_t,
        array: *mut tiledb_array_t,
        idx: u32,
        domain: *mut c_void,
        is_empty: *mut i32,
    ) -> capi_return_t;
    pub fn tiledb_array_get_non_empty_domain_var_size_from_index(
        ctx: *mut tiledb_ctx_t,
        array: *mut tiledb_array_t,
        idx: u32,
        start_size: *mut u64,
        end_size: *mut u64,
        is_empty: *mut i32,
    ) -> capi_return_t;
    pub fn tiledb_array_get_non_empty_domain_var_from_index(
        ctx: *mut tiledb_ctx_t,
        array: *mut tiledb_array_t,
        idx: u32,
        start: *mut c_void,
        end: *mut c_void,
        is_empty: *mut i32,
    ) -> capi_return_t;
    pub fn tiledb_array_get_metadata_num(
        ctx: *mut tiledb_ctx_t,
        array: *mut tiledb_array_t,
        num: *mut u64,
    ) -> capi_return_t;
    pub fn tiledb_array_get_metadata_from_index(
        ctx: *mut tiledb_ctx_t,
        array: *mut tiledb_array_t,
        index: u64,
        key: *mut *const c_char,
        key_len: *mut u32,
        value_type: *mut tiledb_datatype_t,
        value_num: *mut u32,
        value: *mut *const c_void,
    ) -> capi_return_t;
    // array_api_experimental.h
    pub fn tiledb_array_get_enumeration(
        ctx: *mut tiledb_ctx_t,
        array: *const tiledb_array_t,
        name: *const c_char,
        enumeration: *mut *mut tiledb_enumeration_t,
    ) -> capi_return_t;
    pub fn tiledb_array_load_all_enumerations(
        ctx: *mut tiledb_ctx_t,
        array: *const tiledb_array_t,
    ) -> capi_return_t;

    // array_schema_api_external.h, array_schema_api_experimental.h
    pub fn tiledb_array_schema_free(array_schema: *mut *mut tiledb_array_schema_t);
    pub fn tiledb_array_schema_get_array_type(
        ctx: *mut tiledb_ctx_t,
        array_schema: *const tiledb_array_schema_t,
        array_type: *mut tiledb_array_type_t,
    ) -> capi_return_t;
    pub fn tiledb_array_schema_get_tile_order(
        ctx: *mut tiledb_ctx_t,
        array_schema: *const tiledb_array_schema_t,
        tile_order: *mut tiledb_layout_t,
    ) -> capi_return_t;
    pub fn tiledb_array_schema_get_cell_order(
        ctx: *mut tiledb_ctx_t,
        array_schema: *const tiledb_array_schema_t,
        cell_order: *mut tiledb_layout_t,
    ) -> capi_return_t;
    pub fn tiledb_array_schema_get_capacity(
        ctx: *mut tiledb_ctx_t,
        array_schema: *const tiledb_array_schema_t,
        capacity: *mut u64,
    ) -> capi_return_t;
    pub fn tiledb_array_schema_get_allows_dups(
        ctx: *mut tiledb_ctx_t,
        array_schema: *mut tiledb_array_schema_t,
        allows_dups: *mut c_int,
    ) -> capi_return_t;
    pub fn tiledb_array_schema_get_domain(
        ctx: *mut tiledb_ctx_t,
        array_schema: *const tiledb_array_schema_t,
        domain: *mut *mut tiledb_domain_t,
    ) -> capi_return_t;
    pub fn tiledb_array_schema_get_attribute_num(
        ctx: *mut tiledb_ctx_t,
        array_schema: *const tiledb_array_schema_t,
        attribute_num: *mut u32,
    ) -> capi_return_t;
    pub fn tiledb_array_schema_get_attribute_from_index(
        ctx: *mut tiledb_ctx_t,
        array_schema: *const tiledb_array_schema_t,
        index: u32,
        attr: *mut *mut tiledb_attribute_t,
    ) -> capi_return_t;
    pub fn tiledb_array_schema_get_current_domain(
        ctx: *mut tiledb_ctx_t,
        array_schema: *mut tiledb_array_schema_t,
        current_domain: *mut *mut tiledb_current_domain_t,
    ) -> capi_return_t;

    // domain_api_external.h, dimension_api_external.h
    pub fn tiledb_domain_free(domain: *mut *mut tiledb_domain_t);
    pub fn tiledb_domain_get_ndim(
        ctx: *mut tiledb_ctx_t,
        domain: *const tiledb_domain_t,
        ndim: *mut u32,
    ) -> capi_return_t;
    pub fn tiledb_domain_get_dimension_from_index(
        ctx: *mut tiledb_ctx_t,
        domain: *const tiledb_domain_t,
        index: u32,
        dim: *mut *mut tiledb_dimension_t,
    ) -> capi_return_t;
    pub fn tiledb_dimension_free(dim: *mut *mut tiledb_dimension_t);
    pub fn tiledb_dimension_get_name(
        ctx: *mut tiledb_ctx_t,
        dim: *const tiledb_dimension_t,
        name: *mut *const c_char,
    ) -> capi_return_t;
    pub fn tiledb_dimension_get_type(
        ctx: *mut tiledb_ctx_t,
        dim: *const tiledb_dimension_t,
        datatype: *mut tiledb_datatype_t,
    ) -> capi_return_t;
    pub fn tiledb_dimension_get_domain(
        ctx: *mut tiledb_ctx_t,
        dim: *const tiledb_dimension_t,
        domain: *mut *const c_void,
    ) -> capi_return_t;
    pub fn tiledb_dimension_get_tile_extent(
        ctx: *mut tiledb_ctx_t,
        dim: *const tiledb_dimension_t,
        tile_extent: *mut *const c_void,
    ) -> capi_return_t;
    pub fn tiledb_dimension_get_cell_val_num(
        ctx: *mut tiledb_ctx_t,
        dim: *const tiledb_dimension_t,
        cell_val_num: *mut u32,
    ) -> capi_return_t;

    // attribute_api_external.h, attribute_api_external_experimental.h
    pub fn tiledb_attribute_free(attr: *mut *mut tiledb_attribute_t);
    pub fn tiledb_attribute_get_name(
        ctx: *mut tiledb_ctx_t,
        attr: *const tiledb_attribute_t,
        name: *mut *const c_char,
    ) -> capi_return_t;
    pub fn tiledb_attribute_get_type(
        ctx: *mut tiledb_ctx_t,
        attr: *const tiledb_attribute_t,
        datatype: *mut tiledb_datatype_t,
    ) -> capi_return_t;
    pub fn tiledb_attribute_get_nullable(
        ctx: *mut tiledb_ctx_t,
        attr: *mut tiledb_attribute_t,
        nullable: *mut u8,
    ) -> capi_return_t;
    pub fn tiledb_attribute_get_cell_val_num(
        ctx: *mut tiledb_ctx_t,
        attr: *const tiledb_attribute_t,
        cell_val_num: *mut u32,
    ) -> capi_return_t;
    pub fn tiledb_attribute_get_enumeration_name(
        ctx: *mut tiledb_ctx_t,
        attr: *mut tiledb_attribute_t,
        name: *mut *mut tiledb_string_t,
    ) -> capi_return_t;

    // enumeration_api_experimental.h
    pub fn tiledb_enumeration_free(enumeration: *mut *mut tiledb_enumeration_t);
    pub fn tiledb_enumeration_get_type(
        ctx: *mut tiledb_ctx_t,
        enumeration: *mut tiledb_enumeration_t,
        datatype: *mut tiledb_datatype_t,
    ) -> capi_return_t;
    pub fn tiledb_enumeration_get_cell_val_num(
        ctx: *mut tiledb_ctx_t,
        enumeration: *mut tiledb_enumeration_t,
        cell_val_num: *mut u32,
    ) -> capi_return_t;
    pub fn tiledb_enumeration_get_ordered(
        ctx: *mut tiledb_ctx_t,
        enumeration: *mut tiledb_enumeration_t,
        ordered: *mut c_int,
    ) -> capi_return_t;
    pub fn tiledb_enumeration_get_data(
        ctx: *mut tiledb_ctx_t,
        enumeration: *mut tiledb_enumeration_t,
        data: *mut *const c_void,
        data_size: *mut u64,
    ) -> capi_return_t;
    pub fn tiledb_enumeration_get_offsets(
        ctx: *mut tiledb_ctx_t,
        enumeration: *mut tiledb_enumeration_t,
        offsets: *mut *const c_void,
        offsets_size: *mut u64,
    ) -> capi_return_t;

    // current_domain_api_external_experimental.h, ndrectangle_api_external_experimental.h
    pub fn tiledb_current_domain_free(
        current_domain: *mut *mut tiledb_current_domain_t,
    ) -> capi_return_t;
    pub fn tiledb_current_domain_get_type(
        ctx: *mut tiledb_ctx_t,
        current_domain: *mut tiledb_current_domain_t,
        cd_type: *mut tiledb_current_domain_type_t,
    ) -> capi_return_t;
    pub fn tiledb_current_domain_get_is_empty(
        ctx: *mut tiledb_ctx_t,
        current_domain: *mut tiledb_current_domain_t,
        is_empty: *mut u32,
    ) -> capi_return_t;
    pub fn tiledb_current_domain_get_ndrectangle(
        ctx: *mut tiledb_ctx_t,
        current_domain: *mut tiledb_current_domain_t,
        ndr: *mut *mut tiledb_ndrectangle_t,
    ) -> capi_return_t;
    pub fn tiledb_ndrectangle_free(ndr: *mut *mut tiledb_ndrectangle_t) -> capi_return_t;
    pub fn tiledb_ndrectangle_get_range(
        ctx: *mut tiledb_ctx_t,
        ndr: *mut tiledb_ndrectangle_t,
        idx: u32,
        range: *mut tiledb_range_t,
    ) -> capi_return_t;

    // fragment_info_api_external.h
    pub fn tiledb_fragment_info_alloc(
        ctx: *mut tiledb_ctx_t,
        array_uri: *const c_char,
        fragment_info: *mut *mut tiledb_fragment_info_t,
    ) -> capi_return_t;
    pub fn tiledb_fragment_info_free(fragment_info: *mut *mut tiledb_fragment_info_t);
    pub fn tiledb_fragment_info_set_config(
        ctx: *mut tiledb_ctx_t,
        fragment_info: *mut tiledb_fragment_info_t,
        config: *mut tiledb_config_t,
    ) -> capi_return_t;
    pub fn tiledb_fragment_info_load(
        ctx: *mut tiledb_ctx_t,
        fragment_info: *mut tiledb_fragment_info_t,
    ) -> capi_return_t;
    pub fn tiledb_fragment_info_get_fragment_num(
        ctx: *mut tiledb_ctx_t,
        fragment_info: *mut tiledb_fragment_info_t,
        fragment_num: *mut u32,
    ) -> capi_return_t;
    pub fn tiledb_fragment_info_get_fragment_uri(
        ctx: *mut tiledb_ctx_t,
        fragment_info: *mut tiledb_fragment_info_t,
        fid: u32,
        uri: *mut *const c_char,
    ) -> capi_return_t;
    pub fn tiledb_fragment_info_get_cell_num(
        ctx: *mut tiledb_ctx_t,
        fragment_info: *mut tiledb_fragment_info_t,
        fid: u32,
        cell_num: *mut u64,
    ) -> capi_return_t;
    pub fn tiledb_fragment_info_get_non_empty_domain_from_index(
        ctx: *mut tiledb_ctx_t,
        fragment_info: *mut tiledb_fragment_info_t,
        fid: u32,
        did: u32,
        domain: *mut c_void,
    ) -> capi_return_t;
    pub fn tiledb_fragment_info_get_mbr_num(
        ctx: *mut tiledb_ctx_t,
        fragment_info: *mut tiledb_fragment_info_t,
        fid: u32,
        mbr_num: *mut u64,
    ) -> capi_return_t;
    pub fn tiledb_fragment_info_get_mbr_from_index(
        ctx: *mut tiledb_ctx_t,
        fragment_info: *mut tiledb_fragment_info_t,
        fid: u32,
        mid: u32,
        did: u32,
        mbr: *mut c_void,
    ) -> capi_return_t;
}

extern "C" {
    // query_api_external.h (tiledb/sm/c_api/tiledb.h in 2.30)
    pub fn tiledb_query_alloc(
        ctx: *mut tiledb_ctx_t,
        array: *mut tiledb_array_t,
        query_type: tiledb_query_type_t,
        query: *mut *mut tiledb_query_t,
    ) -> capi_return_t;
    pub fn tiledb_query_free(query: *mut *mut tiledb_query_t);
    pub fn tiledb_query_set_layout(
        ctx: *mut tiledb_ctx_t,
        query: *mut tiledb_query_t,
        layout: tiledb_layout_t,
    ) -> capi_return_t;
    pub fn tiledb_query_set_subarray_t(
        ctx: *mut tiledb_ctx_t,
        query: *mut tiledb_query_t,
        subarray: *const tiledb_subarray_t,
    ) -> capi_return_t;
    pub fn tiledb_query_get_est_result_size(
        ctx: *mut tiledb_ctx_t,
        query: *const tiledb_query_t,
        name: *const c_char,
        size: *mut u64,
    ) -> capi_return_t;
    pub fn tiledb_query_get_est_result_size_var(
        ctx: *mut tiledb_ctx_t,
        query: *const tiledb_query_t,
        name: *const c_char,
        size_off: *mut u64,
        size_val: *mut u64,
    ) -> capi_return_t;
    pub fn tiledb_query_set_config(
        ctx: *mut tiledb_ctx_t,
        query: *mut tiledb_query_t,
        config: *mut tiledb_config_t,
    ) -> capi_return_t;
    pub fn tiledb_query_set_condition(
        ctx: *mut tiledb_ctx_t,
        query: *mut tiledb_query_t,
        cond: *const tiledb_query_condition_t,
    ) -> capi_return_t;
    pub fn tiledb_query_set_data_buffer(
        ctx: *mut tiledb_ctx_t,
        query: *mut tiledb_query_t,
        name: *const c_char,
        buffer: *mut c_void,
        buffer_size: *mut u64,
    ) -> capi_return_t;
    pub fn tiledb_query_set_offsets_buffer(
        ctx: *mut tiledb_ctx_t,
        query: *mut tiledb_query_t,
        name: *const c_char,
        buffer: *mut u64,
        buffer_size: *mut u64,
    ) -> capi_return_t;
    pub fn tiledb_query_set_validity_buffer(
        ctx: *mut tiledb_ctx_t,
        query: *mut tiledb_query_t,
        name: *const c_char,
        buffer: *mut u8,
        buffer_size: *mut u64,
    ) -> capi_return_t;
    pub fn tiledb_query_submit(ctx: *mut tiledb_ctx_t, query: *mut tiledb_query_t)
        -> capi_return_t;
    pub fn tiledb_query_get_status(
        ctx: *mut tiledb_ctx_t,
        query: *mut tiledb_query_t,
        status: *mut tiledb_query_status_t,
    ) -> capi_return_t;

    // subarray_api_external.h
    pub fn tiledb_subarray_alloc(
        ctx: *mut tiledb_ctx_t,
        array: *const tiledb_array_t,
        subarray: *mut *mut tiledb_subarray_t,
    ) -> capi_return_t;
    pub fn tiledb_subarray_free(subarray: *mut *mut tiledb_subarray_t);
    pub fn tiledb_subarray_add_range(
        ctx: *mut tiledb_ctx_t,
        subarray: *mut tiledb_subarray_t,
        dim_idx: u32,
        start: *const c_void,
        end: *const c_void,
        stride: *const c_void,
    ) -> capi_return_t;
    pub fn tiledb_subarray_add_range_var(
        ctx: *mut tiledb_ctx_t,
        subarray: *mut tiledb_subarray_t,
        dim_idx: u32,
        start: *const c_void,
        start_size: u64,
        end: *const c_void,
        end_size: u64,
    ) -> capi_return_t;

    // query_condition (tiledb/sm/c_api/tiledb.h, tiledb_experimental.h in 2.30)
    pub fn tiledb_query_condition_alloc(
        ctx: *mut tiledb_ctx_t,
        cond: *mut *mut tiledb_query_condition_t,
    ) -> capi_return_t;
    pub fn tiledb_query_condition_free(cond: *mut *mut tiledb_query_condition_t);
    pub fn tiledb_query_condition_init(
        ctx: *mut tiledb_ctx_t,
        cond: *mut tiledb_query_condition_t,
        attribute_name: *const c_char,
        condition_value: *const c_void,
        condition_value_size: u64,
        op: tiledb_query_condition_op_t,
    ) -> capi_return_t;
    pub fn tiledb_query_condition_combine(
        ctx: *mut tiledb_ctx_t,
        left_cond: *const tiledb_query_condition_t,
        right_cond: *const tiledb_query_condition_t,
        combination_op: tiledb_query_condition_combination_op_t,
        combined_cond: *mut *mut tiledb_query_condition_t,
    ) -> capi_return_t;
    pub fn tiledb_query_condition_alloc_set_membership(
        ctx: *mut tiledb_ctx_t,
        field_name: *const c_char,
        data: *const c_void,
        data_size: u64,
        offsets: *const c_void,
        offsets_size: u64,
        op: tiledb_query_condition_op_t,
        cond: *mut *mut tiledb_query_condition_t,
    ) -> capi_return_t;
    pub fn tiledb_query_condition_negate(
        ctx: *mut tiledb_ctx_t,
        cond: *const tiledb_query_condition_t,
        negated_cond: *mut *mut tiledb_query_condition_t,
    ) -> capi_return_t;
    pub fn tiledb_query_condition_set_use_enumeration(
        ctx: *mut tiledb_ctx_t,
        cond: *const tiledb_query_condition_t,
        use_enumeration: c_int,
    ) -> capi_return_t;
    // consolidation plan (tiledb/sm/c_api/tiledb_experimental.h)
    pub fn tiledb_consolidation_plan_create_with_mbr(
        ctx: *mut tiledb_ctx_t,
        array: *mut tiledb_array_t,
        fragment_size: u64,
        consolidation_plan: *mut *mut tiledb_consolidation_plan_t,
    ) -> capi_return_t;
    pub fn tiledb_consolidation_plan_free(
        consolidation_plan: *mut *mut tiledb_consolidation_plan_t,
    );
    pub fn tiledb_consolidation_plan_get_num_nodes(
        ctx: *mut tiledb_ctx_t,
        consolidation_plan: *mut tiledb_consolidation_plan_t,
        num_nodes: *mut u64,
    ) -> capi_return_t;
    pub fn tiledb_consolidation_plan_get_num_fragments(
        ctx: *mut tiledb_ctx_t,
        consolidation_plan: *mut tiledb_consolidation_plan_t,
        node_index: u64,
        num_fragments: *mut u64,
    ) -> capi_return_t;
    pub fn tiledb_consolidation_plan_get_fragment_uri(
        ctx: *mut tiledb_ctx_t,
        consolidation_plan: *mut tiledb_consolidation_plan_t,
        node_index: u64,
        fragment_index: u64,
        uri: *mut *const c_char,
    ) -> capi_return_t;
    // query aggregates (query_aggregate_api_external_experimental.h)
    pub fn tiledb_channel_operator_null_count_get(
        ctx: *mut tiledb_ctx_t,
        op: *mut *const tiledb_channel_operator_t,
    ) -> capi_return_t;
    pub fn tiledb_aggregate_count_get(
        ctx: *mut tiledb_ctx_t,
        operation: *mut *const tiledb_channel_operation_t,
    ) -> capi_return_t;
    pub fn tiledb_query_get_default_channel(
        ctx: *mut tiledb_ctx_t,
        query: *mut tiledb_query_t,
        channel: *mut *mut tiledb_query_channel_t,
    ) -> capi_return_t;
    pub fn tiledb_create_unary_aggregate(
        ctx: *mut tiledb_ctx_t,
        query: *mut tiledb_query_t,
        op: *const tiledb_channel_operator_t,
        input_field_name: *const c_char,
        operation: *mut *mut tiledb_channel_operation_t,
    ) -> capi_return_t;
    pub fn tiledb_channel_apply_aggregate(
        ctx: *mut tiledb_ctx_t,
        channel: *mut tiledb_query_channel_t,
        output_field_name: *const c_char,
        operation: *const tiledb_channel_operation_t,
    ) -> capi_return_t;
    pub fn tiledb_aggregate_free(
        ctx: *mut tiledb_ctx_t,
        op: *mut *mut tiledb_channel_operation_t,
    ) -> capi_return_t;
    pub fn tiledb_query_channel_free(
        ctx: *mut tiledb_ctx_t,
        channel: *mut *mut tiledb_query_channel_t,
    ) -> capi_return_t;
}

extern "C" {
    // vfs_api_external.h
    pub fn tiledb_vfs_alloc(
        ctx: *mut tiledb_ctx_t,
        config: *mut tiledb_config_t,
        vfs: *mut *mut tiledb_vfs_t,
    ) -> capi_return_t;
    pub fn tiledb_vfs_free(vfs: *mut *mut tiledb_vfs_t);
    pub fn tiledb_vfs_ls(
        ctx: *mut tiledb_ctx_t,
        vfs: *mut tiledb_vfs_t,
        path: *const c_char,
        callback: Option<unsafe extern "C" fn(*const c_char, *mut c_void) -> i32>,
        data: *mut c_void,
    ) -> capi_return_t;
}
