//! What each inode stands for ([`NodeKind`]: a kind of file, from [`super::files`], or a
//! kind of directory), and the kinds of directory soma-mount shows, each in a module of its
//! own that answers what it lists and what it finds by a name it does not list. The tree asks
//! these questions through [`DirKind`] and decides nothing about any kind; a new kind of
//! directory is a new module here and a line in the listing that shows it.
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
use std::sync::Arc;

use crate::soma::Objects;

use super::files::{Document, FileContext, FileKind};

pub use object::{member_named, ObjectDir};

/// What an inode stands for.
#[derive(Debug, Clone)]
pub enum NodeKind {
    Dir(Arc<dyn DirKind>),
    File(Arc<dyn FileKind>),
}

impl NodeKind {
    pub fn is_dir(&self) -> bool {
        matches!(self, NodeKind::Dir(_))
    }

    /// The directory it is, if it is one.
    pub fn dir(&self) -> Option<&Arc<dyn DirKind>> {
        match self {
            NodeKind::Dir(dir) => Some(dir),
            NodeKind::File(_) => None,
        }
    }

    /// Whether it is a SOMA object's directory (see [`DirKind::object`]).
    pub fn is_object(&self) -> bool {
        self.dir().is_some_and(|dir| dir.object().is_some())
    }
}

/// A file of a kind.
pub fn file(kind: impl FileKind + 'static) -> NodeKind {
    NodeKind::File(Arc::new(kind))
}

/// A directory of a kind.
pub fn dir(kind: impl DirKind + 'static) -> NodeKind {
    NodeKind::Dir(Arc::new(kind))
}

/// A directory's entries: names and what each stands for, in listing order.
pub type Entries = Vec<(String, NodeKind)>;

/// The listing of a directory that only says what is wrong.
pub fn error_entries(message: &str) -> Entries {
    vec![(
        "error.txt".into(),
        file(Document::error_text(message.into())),
    )]
}

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

/// A directory holding only `error.txt`: a member that cannot be shown as itself, or a
/// query that cannot be read.
#[derive(Debug)]
pub struct ErrorDir(pub Arc<str>);

impl DirKind for ErrorDir {
    fn list(&self, _: &DirContext) -> Listed {
        Listed::of(error_entries(&self.0))
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
