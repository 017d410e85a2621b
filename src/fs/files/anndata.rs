//! What the filesystem keeps of a measurement's AnnData containers ([`crate::export`]
//! makes them): the cache key of a measurement's AnnData, and where the entries per row of
//! CSR matrices read in blocks are kept (the content cache, with the files).

use std::io;
use std::sync::Arc;

use log::warn;

use crate::soma::anndata::{AnnDataElements, RowCountsKept};

use super::super::cache::{CacheKey, ContentCache};
use super::super::data::{content_key, generate_whole};

/// The cache key of content made of a measurement's AnnData elements (`kind`: which
/// container); `describe` tells which part of it. Made from every array read, the names they
/// are stored under, the uns collections' metadata and members, and the cells selected.
pub(super) fn measurement_key(
    kind: &str,
    elements: &AnnDataElements,
    describe: impl FnOnce(&mut crate::digest::Digest),
) -> CacheKey {
    let m = &elements.measurement;
    let arrays = std::iter::once(&*elements.obs.array).chain(m.arrays());
    content_key(arrays, |digest| {
        digest.text(kind).text(&m.name);
        for (part, members) in [
            ("X", &m.layers),
            ("obsm", &m.obsm),
            ("varm", &m.varm),
            ("obsp", &m.obsp),
            ("varp", &m.varp),
        ] {
            digest.text(part).number(members.len() as u64);
            for member in members {
                digest.text(&member.name);
            }
        }
        if let Some(uns) = &m.uns {
            uns.fingerprints(&mut |fingerprint| {
                digest.text(fingerprint);
            });
        }
        elements.obs.rows.digest_into(digest);
        elements.var.rows.digest_into(digest);
        describe(digest);
    })
}

/// Where the entries per row of a container's CSR matrices are kept: in the content cache,
/// with the files, as little-endian u64s.
pub struct CountsInCache(pub Arc<ContentCache>);

impl std::fmt::Debug for CountsInCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("entries per row in the content cache")
    }
}

impl RowCountsKept for CountsInCache {
    fn kept(&self, name: &[&str]) -> io::Result<Option<Vec<u64>>> {
        let key = CacheKey::new(name.iter().copied());
        let Some((file, size)) = self.0.open_entry(&key) else {
            return Ok(None);
        };
        let mut bytes = Vec::with_capacity(size as usize);
        io::Read::read_to_end(&mut &file, &mut bytes)?;
        let counts = bytes
            .chunks_exact(8)
            .map(|b| u64::from_le_bytes(b.try_into().expect("8 bytes")))
            .collect();
        Ok(Some(counts))
    }

    fn keep(&self, name: &[&str], what: &str, counts: &[u64]) {
        let key = CacheKey::new(name.iter().copied());
        let kept = generate_whole(&self.0, &key, what, |out| {
            counts
                .iter()
                .try_for_each(|count| out.write_all(&count.to_le_bytes()))
        });
        if let Err(e) = kept {
            warn!("{what} cannot be kept in the cache: {e:?}");
        }
    }
}
