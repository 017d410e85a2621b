//! The directories of an AnnData Zarr store (`anndata/<measurement>.zarr/`): its groups, with
//! their `.zgroup` and `.zattrs` (and at the root `.zmetadata`), and its arrays, with their
//! `.zarray`, `.zattrs` and a file per chunk.

use std::sync::Arc;

use crate::export::zarr::{ZarrArray, ZarrGroup, ZarrNode, ZarrStore};

use super::super::files::{ZarrChunk, ZarrDocument};
use super::{dir, error_entries, file, DirContext, DirKind, Entries, Listed, NodeKind};

/// The store's root: its metadata (made on the first listing) and its groups. A store that
/// cannot be made lists only `error.txt`.
#[derive(Debug)]
pub struct ZarrStoreDir(pub Arc<ZarrStore>);

#[derive(Debug)]
struct ZarrGroupDir(Arc<ZarrGroup>);

#[derive(Debug)]
struct ZarrArrayDir(Arc<ZarrArray>);

impl DirKind for ZarrStoreDir {
    fn list(&self, _: &DirContext) -> Listed {
        Listed::of(match self.0.root() {
            Ok(root) => group_entries(&root),
            Err(message) => error_entries(&message),
        })
    }
}

impl DirKind for ZarrGroupDir {
    fn list(&self, _: &DirContext) -> Listed {
        Listed::of(group_entries(&self.0))
    }
}

impl DirKind for ZarrArrayDir {
    fn list(&self, _: &DirContext) -> Listed {
        let array = &self.0;
        let mut named = vec![
            (".zarray".into(), document(&array.meta.zarray())),
            (".zattrs".into(), document(&array.attrs.clone().into())),
        ];
        for k in 0..array.meta.chunk_count() {
            let chunk = ZarrChunk::new(array.clone(), k);
            named.push((array.meta.chunk_name(k), file(chunk)));
        }
        Listed::of(named)
    }
}

fn document(value: &serde_json::Value) -> NodeKind {
    file(ZarrDocument::of(value))
}

fn group_entries(group: &ZarrGroup) -> Entries {
    let mut named = vec![
        (".zgroup".into(), document(&crate::format::zarr::zgroup())),
        (".zattrs".into(), document(&group.attrs.clone().into())),
    ];
    if let Some(consolidated) = &group.consolidated {
        let metadata = ZarrDocument(consolidated.clone());
        named.push((".zmetadata".into(), file(metadata)));
    }
    for (name, member) in &group.members {
        let member = match member {
            ZarrNode::Group(group) => dir(ZarrGroupDir(group.clone())),
            ZarrNode::Array(array) => dir(ZarrArrayDir(array.clone())),
        };
        named.push((name.clone(), member));
    }
    named
}
