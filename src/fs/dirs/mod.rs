//! The kinds of directory soma-mount shows, each in a module of its own that answers what it
//! lists and what it finds by a name it does not list. The tree asks these questions through
//! [`DirKind`] and decides nothing about any kind; a new kind of directory is a new module
//! here and a line in the listing that shows it.
//!
//! The directory of a SOMA object ([`ObjectDir`]) is the one kind the tree tells apart: its
//! listing is made again once older than the metadata TTL, and listing it opens its members
//! ahead of looks into them.

mod anndata;
mod by;
mod object;
mod query;
mod slices;
mod table;
mod tenx;
mod zarr;

use std::fmt;

use crate::soma::Objects;

use super::files::FileContext;
use super::node::{Entries, NodeKind};

pub use object::{member_named, ObjectDir};

/// What directories are listed with: the store their objects are opened from, and what
/// their files are generated with.
pub struct DirContext<'a> {
    pub store: &'a dyn Objects,
    pub files: &'a FileContext,
}

/// A directory's listing as made.
pub struct Listed {
    pub entries: Entries,
    /// What the entries were made from, for an object's directory: equal fingerprints mean
    /// equal listings. `None` for every other kind.
    pub fingerprint: Option<String>,
    /// The object behind it could not be opened: the entries only say why, and a listing
    /// made before stays in its place until the store answers again.
    pub failed: bool,
}

impl Listed {
    /// Entries made from what the directory stands for alone.
    pub fn of(entries: Entries) -> Listed {
        Listed {
            entries,
            fingerprint: None,
            failed: false,
        }
    }
}

/// One kind of directory.
pub trait DirKind: fmt::Debug + Send + Sync {
    /// Its entries, in listing order.
    fn list(&self, cx: &DirContext) -> Listed;

    /// An entry it opens by a name that its listing does not show (a slice by its name).
    fn find(&self, _name: &str) -> Option<NodeKind> {
        None
    }

    /// The SOMA object's directory it is, if it is one.
    fn object(&self) -> Option<&ObjectDir> {
        None
    }
}
