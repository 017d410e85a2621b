//! Every libtiledb setting soma-mount makes, and every `vfs.s3.` setting a user may give,
//! decided in one place. [`ALWAYS`] is the table of fixed settings, each with why;
//! the computed ones are the functions beside it; the keys soma-mount sets per query or per
//! group are named here. docs/PERFORMANCE.md ("libtiledb settings") has the measurements.
//! Whatever `--config` gives is set on top of these.
//!
//! The S3 settings are sorted in two: those the daemon's front follows
//! ([`S3_FOLLOWED_BY_THE_FRONT`]) and those that only tune libtiledb's own side
//! ([`S3_LIBTILEDB_SIDE`]). A `vfs.s3.` setting in neither leaves libtiledb to talk to the
//! store itself, so a new one must be put in one list or left out knowingly.

/// A libtiledb setting soma-mount always makes.
pub struct Setting {
    pub key: &'static str,
    pub value: &'static str,
    /// Why, in a line.
    pub why: &'static str,
}

/// The settings of every store, under the user's.
pub const ALWAYS: [Setting; 7] = [
    Setting {
        key: "vfs.read_ahead_size",
        value: "1048576",
        why: "over object storage a read's first tiles are fetched once and kept for the rest \
              of the band (local files are not read ahead)",
    },
    Setting {
        key: "sm.io_concurrency_level",
        value: "8",
        why: "a query's tiles, enumerations and fragment metadata are fetched 8 at a time, \
              not one per core",
    },
    Setting {
        key: "sm.var_offsets.bitsize",
        value: "64",
        why: "var-sized buffers come out as Arrow's large offsets",
    },
    Setting {
        key: "sm.var_offsets.extra_element",
        value: "true",
        why: "with Arrow's final offset",
    },
    Setting {
        key: "sm.var_offsets.mode",
        value: "bytes",
        why: "in bytes, as Arrow counts them",
    },
    Setting {
        key: "sm.mem.malloc_trim",
        value: "false",
        why: "freed memory is kept for the next query; the daemon's allocator decides what \
              goes back",
    },
    Setting {
        key: "sm.query.sparse_global_order.preprocess_tile_merge",
        value: "0",
        why: "libtiledb 2.30's tile merge can free its memory under running tasks when a \
              query ends early (fixed after 2.30, TileDB pull request 5723)",
    },
];

/// The setting for the threads of libtiledb's compute pool: see [`compute_threads`].
pub const COMPUTE_THREADS: &str = "sm.compute_concurrency_level";

/// The threads of libtiledb's compute pool for a store on local disk (`local`) or object
/// storage, on `cores` cores. A thread that submits a query does the query's tasks itself
/// while it waits, so on local disk, where reads are CPU-bound, one fewer than the cores
/// keeps each reader on as many threads as cores. On object storage the pool loads
/// fragment metadata, three requests one after another per fragment, so a wider pool
/// (three per core) loads more fragments at once.
pub fn compute_threads(local: bool, cores: usize) -> usize {
    if local {
        cores.saturating_sub(1).max(1)
    } else {
        3 * cores
    }
}

/// The setting that bounds the memory libtiledb's reader holds for one query.
pub const QUERY_MEMORY_BUDGET: &str = "sm.mem.total_budget";

/// The setting that opens a group as of a time (milliseconds since the epoch).
pub const GROUP_TIMESTAMP_END: &str = "sm.group.timestamp_end";

/// The `vfs.s3.` settings the daemon's S3 front reads to reach the store as libtiledb would.
pub const S3_FOLLOWED_BY_THE_FRONT: [&str; 13] = [
    "vfs.s3.endpoint_override",
    "vfs.s3.scheme",
    "vfs.s3.region",
    "vfs.s3.use_virtual_addressing",
    "vfs.s3.aws_access_key_id",
    "vfs.s3.aws_secret_access_key",
    "vfs.s3.aws_session_token",
    "vfs.s3.no_sign_request",
    "vfs.s3.connect_timeout_ms",
    "vfs.s3.request_timeout_ms",
    "vfs.s3.verify_ssl",
    "vfs.s3.ca_file",
    "vfs.s3.ca_path",
];

/// The `vfs.s3.` settings that only tune libtiledb's own side of the front, or its writes.
pub const S3_LIBTILEDB_SIDE: [&str; 13] = [
    "vfs.s3.max_parallel_ops",
    "vfs.s3.multipart_part_size",
    "vfs.s3.use_multipart_upload",
    "vfs.s3.connect_max_tries",
    "vfs.s3.connect_scale_factor",
    "vfs.s3.logging_level",
    "vfs.s3.skip_init",
    "vfs.s3.install_sigpipe_handler",
    "vfs.s3.sse",
    "vfs.s3.sse_kms_key_id",
    "vfs.s3.storage_class",
    "vfs.s3.object_canned_acl",
    "vfs.s3.bucket_canned_acl",
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_compute_pool_is_one_fewer_than_the_cores_locally_and_three_per_core_remotely() {
        assert_eq!(compute_threads(true, 1), 1);
        assert_eq!(compute_threads(true, 2), 1);
        assert_eq!(compute_threads(true, 8), 7);
        assert_eq!(compute_threads(false, 2), 6);
    }

    #[test]
    fn no_setting_is_decided_twice() {
        let mut keys: Vec<&str> = (ALWAYS.iter().map(|s| s.key))
            .chain([COMPUTE_THREADS, QUERY_MEMORY_BUDGET, GROUP_TIMESTAMP_END])
            .chain(S3_FOLLOWED_BY_THE_FRONT)
            .chain(S3_LIBTILEDB_SIDE)
            .collect();
        let all = keys.len();
        keys.sort();
        keys.dedup();
        assert_eq!(keys.len(), all);
    }
}
