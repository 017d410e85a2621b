//! What each inode stands for: a kind of file ([`super::files`]) or a kind of directory
//! ([`super::dirs`]). The tree asks both through their traits, and knows no kind by name.

use std::sync::Arc;

use super::dirs::DirKind;
use super::files::{Document, FileKind};

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
