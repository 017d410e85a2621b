//! The export layer: a SOMA measurement as a whole container file, assembled from
//! [`crate::soma`]'s AnnData model and written with [`crate::format`]'s writers. It decides
//! what each container holds, in which order its elements are read and written, and on
//! which threads; the filesystem only names the files, caches them and serves their bytes.
//! Nothing here depends on the filesystem: what it keeps for a container (the entries per
//! row of CSR matrices) it is given ([`crate::soma::anndata::RowCountsKept`]).
//!
//! - [`anndata`]: what the `.h5ad` and the Zarr store share (the elements as AnnData
//!   encodes them, size estimates) and the h5ad's assembly (early reads, matrices).
//! - [`h5ad`]: a measurement as an `.h5ad`, written whole to a path.
//! - [`zarr`]: a measurement as a Zarr store, its tree made once and its chunks on demand.

pub mod anndata;
pub mod h5ad;
pub mod zarr;

#[cfg(test)]
mod fixtures;
