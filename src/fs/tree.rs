//! The inode table: every directory and file soma-mount has shown, what it stands for, and the
//! decisions of the filesystem (what a directory lists, what a file holds, which errors).
//!
//! Directories are filled on first look: opening the object behind a directory reads its
//! metadata and structure (never array data), and every entry gets an inode then. Inodes live
//! as long as the mount; the tree is as big as the part of the store that was looked at.

use std::collections::HashMap;
use std::sync::{Arc, OnceLock, RwLock};

use log::{error, warn};

use crate::format::json;
use crate::soma::{SomaObject, Store};

use super::names::file_name;

pub type Ino = u64;
pub const ROOT: Ino = 1;

/// Why an operation failed, as the filesystem will report it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FsError {
    /// No such entry (`ENOENT`).
    NotFound,
    /// A directory where a file was needed, or the reverse.
    NotADirectory,
    IsADirectory,
    /// The backend failed (`EIO`); the message has already been logged.
    Io(String),
}

pub type FsResult<T> = Result<T, FsError>;

/// The files soma-mount generates.
#[derive(Debug, Clone)]
pub enum FileKind {
    /// `metadata.json` of an object.
    Metadata(Arc<SomaObject>),
    /// `schema.json` of an array.
    Schema(Arc<SomaObject>),
    /// `error.txt` of a member that cannot be opened.
    ErrorText(Arc<str>),
}

impl FileKind {
    fn generate(&self, store: &Store) -> FsResult<Vec<u8>> {
        match self {
            FileKind::Metadata(object) => Ok(json::metadata_json(object.metadata())),
            FileKind::Schema(object) => {
                let SomaObject::Array(array) = object.as_ref() else {
                    return Err(FsError::NotFound);
                };
                let cells = store.stored_cells(&array.uri).map_err(|e| {
                    error!("cannot count the cells of {}: {e}", array.uri);
                    FsError::Io(e.to_string())
                })?;
                Ok(json::schema_json(array, cells))
            }
            FileKind::ErrorText(message) => Ok(format!("{message}\n").into_bytes()),
        }
    }
}

/// What an inode stands for.
enum NodeKind {
    /// The directory of the object at `uri` (a group, an array, or a member that fails to open).
    Object {
        uri: String,
    },
    File(FileKind),
}

/// A directory's entries, made on first look.
struct Listing {
    entries: Vec<(String, Ino)>,
    by_name: HashMap<String, Ino>,
}

struct Node {
    kind: NodeKind,
    listing: OnceLock<Listing>,
    content: OnceLock<FsResult<Arc<[u8]>>>,
}

/// What `stat` shows of an inode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Attr {
    pub ino: Ino,
    pub is_dir: bool,
    pub size: u64,
}

/// The mounted tree.
pub struct Tree {
    store: Store,
    nodes: RwLock<Vec<Arc<Node>>>,
}

/// The names soma-mount adds to a directory.
const METADATA_JSON: &str = "metadata.json";
const SCHEMA_JSON: &str = "schema.json";
const ERROR_TXT: &str = "error.txt";

impl Tree {
    /// A tree whose root is the object at `root_uri`.
    pub fn new(store: Store, root_uri: &str) -> Tree {
        let root = Node::new(NodeKind::Object {
            uri: root_uri.to_owned(),
        });
        Tree {
            store,
            // Inode numbers start at 1 (`ROOT`): slot 0 is never handed out.
            nodes: RwLock::new(vec![root.clone(), root]),
        }
    }

    fn node(&self, ino: Ino) -> FsResult<Arc<Node>> {
        let nodes = self.nodes.read().unwrap_or_else(|e| e.into_inner());
        match usize::try_from(ino).ok().filter(|&i| i >= 1) {
            Some(i) => nodes.get(i).cloned().ok_or(FsError::NotFound),
            None => Err(FsError::NotFound),
        }
    }

    fn add_node(&self, kind: NodeKind) -> Ino {
        let mut nodes = self.nodes.write().unwrap_or_else(|e| e.into_inner());
        nodes.push(Node::new(kind));
        (nodes.len() - 1) as Ino
    }

    pub fn getattr(&self, ino: Ino) -> FsResult<Attr> {
        let node = self.node(ino)?;
        let size = match &node.kind {
            NodeKind::Object { .. } => 0,
            NodeKind::File(_) => self.content_of(&node)?.len() as u64,
        };
        Ok(Attr {
            ino,
            is_dir: matches!(node.kind, NodeKind::Object { .. }),
            size,
        })
    }

    pub fn lookup(&self, parent: Ino, name: &str) -> FsResult<Attr> {
        let node = self.node(parent)?;
        let ino = *self
            .listing(&node)?
            .by_name
            .get(name)
            .ok_or(FsError::NotFound)?;
        self.getattr(ino)
    }

    /// The entries of a directory, in listing order, with whether each is a directory.
    pub fn readdir(&self, ino: Ino) -> FsResult<Vec<(Ino, bool, String)>> {
        let node = self.node(ino)?;
        let listing = self.listing(&node)?;
        let nodes = self.nodes.read().unwrap_or_else(|e| e.into_inner());
        Ok(listing
            .entries
            .iter()
            .map(|(name, child)| {
                let is_dir = matches!(nodes[*child as usize].kind, NodeKind::Object { .. });
                (*child, is_dir, name.clone())
            })
            .collect())
    }

    /// The whole content of a file.
    pub fn content(&self, ino: Ino) -> FsResult<Arc<[u8]>> {
        let node = self.node(ino)?;
        self.content_of(&node)
    }

    fn content_of(&self, node: &Node) -> FsResult<Arc<[u8]>> {
        let NodeKind::File(file) = &node.kind else {
            return Err(FsError::IsADirectory);
        };
        node.content
            .get_or_init(|| file.generate(&self.store).map(Arc::from))
            .clone()
    }

    fn listing<'a>(&self, node: &'a Node) -> FsResult<&'a Listing> {
        let NodeKind::Object { uri } = &node.kind else {
            return Err(FsError::NotADirectory);
        };
        Ok(node.listing.get_or_init(|| self.make_listing(uri)))
    }

    /// Opens the object at `uri` and gives every entry of its directory an inode.
    fn make_listing(&self, uri: &str) -> Listing {
        let mut named: Vec<(String, NodeKind)> = Vec::new();
        match self.store.open(uri) {
            Ok(object) => {
                let object = Arc::new(object);
                if let SomaObject::Group(group) = object.as_ref() {
                    for member in &group.members {
                        named.push((
                            file_name(&member.name),
                            NodeKind::Object {
                                uri: member.uri.clone(),
                            },
                        ));
                    }
                }
                named.push((
                    METADATA_JSON.into(),
                    NodeKind::File(FileKind::Metadata(object.clone())),
                ));
                if matches!(object.as_ref(), SomaObject::Array(_)) {
                    named.push((
                        SCHEMA_JSON.into(),
                        NodeKind::File(FileKind::Schema(object.clone())),
                    ));
                }
            }
            Err(e) => {
                warn!("cannot open {uri}: {e}");
                let message = format!("cannot open {uri}: {e}");
                named.push((
                    ERROR_TXT.into(),
                    NodeKind::File(FileKind::ErrorText(message.into())),
                ));
            }
        }
        let mut listing = Listing {
            entries: Vec::with_capacity(named.len()),
            by_name: HashMap::with_capacity(named.len()),
        };
        for (name, kind) in named {
            if listing.by_name.contains_key(&name) {
                // Members come first, so a member keeps its name over a generated file.
                warn!("{uri}: two entries are named {name:?}; showing only the first");
                continue;
            }
            let ino = self.add_node(kind);
            listing.by_name.insert(name.clone(), ino);
            listing.entries.push((name, ino));
        }
        listing
    }
}

impl Node {
    fn new(kind: NodeKind) -> Arc<Node> {
        Arc::new(Node {
            kind,
            listing: OnceLock::new(),
            content: OnceLock::new(),
        })
    }
}
