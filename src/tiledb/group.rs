//! TileDB groups opened for reading: their members and metadata.

use std::ptr;

use super::context::{c_string, tiledb_call};
use super::handle::{handle, take_string};
use super::metadata::{self, Metadata};
use super::{ffi, Config, Context, ObjectType, Result};

handle!(
    /// A group open for reading (`tiledb_group_t`); closed and freed on drop.
    Group,
    tiledb_group_t,
    tiledb_group_free,
    close = tiledb_group_close
);

// SAFETY: libtiledb handles have no thread affinity, and the wrapper owns its handle alone,
// so moving it to another thread moves every use of it there. Not `Sync`: libtiledb loads a
// group's metadata on first use without a lock, so shared use is serialized by its owner.
unsafe impl Send for Group {}

/// One member of a group, as the group records it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    /// The member's name in the group (for old groups without names, libtiledb's fallback).
    pub name: String,
    /// The member's URI, resolved against the group's when it is relative.
    pub uri: String,
    pub object_type: ObjectType,
}

impl Group {
    /// Opens the group at `uri` for reading, as of `timestamp_ms` when given.
    pub fn open(ctx: &Context, uri: &str, timestamp_ms: Option<u64>) -> Result<Group> {
        let c_uri = c_string(uri)?;
        let mut raw = ptr::null_mut();
        // SAFETY: `c_uri` outlives the call; on success libtiledb stores a new group handle in
        // `raw`, which nothing else frees, and the wrapper takes it over.
        let group = unsafe {
            tiledb_call!(ctx, tiledb_group_alloc(c_uri.as_ptr(), &mut raw))?;
            Group::from_raw(ctx, raw)?
        };
        if let Some(ts) = timestamp_ms {
            let mut config = Config::new()?;
            config.set(
                crate::libtiledb_settings::GROUP_TIMESTAMP_END,
                &ts.to_string(),
            )?;
            // SAFETY: `group.raw` and `config` are live; libtiledb copies the config.
            unsafe { tiledb_call!(ctx, tiledb_group_set_config(group.raw, config.as_ptr())) }?;
        }
        // SAFETY: `group.raw` is the live, not yet opened group owned by `group`.
        unsafe { tiledb_call!(ctx, tiledb_group_open(group.raw, ffi::TILEDB_READ)) }?;
        Ok(group)
    }

    pub fn members(&self) -> Result<Vec<Member>> {
        let mut count = 0u64;
        // SAFETY: `self.raw` is the open group `self` owns; `count` is a local.
        unsafe {
            tiledb_call!(
                &self.ctx,
                tiledb_group_get_member_count(self.raw, &mut count)
            )
        }?;
        (0..count)
            .map(|index| {
                let (mut uri, mut name) = (ptr::null_mut(), ptr::null_mut());
                let mut object_type = 0;
                // SAFETY: `self.raw` is the open group `self` owns and `index` is below its
                // member count; the out-pointers are locals. libtiledb hands over a new string
                // in `uri` and in `name` (or null for no name): each is taken, and freed, once.
                let (uri, name) = unsafe {
                    tiledb_call!(
                        &self.ctx,
                        tiledb_group_get_member_by_index_v2(
                            self.raw,
                            index,
                            &mut uri,
                            &mut object_type,
                            &mut name
                        )
                    )?;
                    let uri = take_string(uri);
                    let name = (!name.is_null()).then(|| take_string(name));
                    (uri?, name.transpose()?)
                };
                // A member without a name gives a null name: it is listed by its URI's last part.
                let name = name.unwrap_or_else(|| {
                    uri.trim_end_matches('/')
                        .rsplit('/')
                        .next()
                        .unwrap_or_default()
                        .to_owned()
                });
                Ok(Member {
                    name,
                    uri,
                    object_type: ObjectType::from_raw(object_type),
                })
            })
            .collect()
    }

    pub fn metadata(&self) -> Result<Metadata> {
        // SAFETY: `self.raw` is the group `self` opened for reading, and stays open while
        // `self` is borrowed; the two functions are the group ones.
        unsafe {
            metadata::read_all(
                &self.ctx,
                self.raw,
                ffi::tiledb_group_get_metadata_num,
                ffi::tiledb_group_get_metadata_from_index,
            )
        }
    }
}
