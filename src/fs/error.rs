//! Why a filesystem operation failed, as the kernel is told (`ENOENT`, `ENOTDIR`, `EISDIR`,
//! `EIO`). A backend failure carries what went wrong, in words, from where it happened; it
//! is logged once, where it leaves the daemon ([`super::fuse`]).

use std::fmt::Display;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FsError {
    /// No such entry (`ENOENT`).
    NotFound,
    /// A directory where a file was needed, or the reverse.
    NotADirectory,
    IsADirectory,
    /// The backend failed (`EIO`): what was being done, and why it failed.
    Io(String),
}

pub type FsResult<T> = Result<T, FsError>;

impl std::fmt::Display for FsError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FsError::NotFound => f.write_str("no such entry"),
            FsError::NotADirectory => f.write_str("not a directory"),
            FsError::IsADirectory => f.write_str("a directory"),
            FsError::Io(message) => f.write_str(message),
        }
    }
}

impl std::error::Error for FsError {}

impl FsError {
    /// A backend failure while doing `what`.
    pub fn io(what: impl Display, cause: impl Display) -> FsError {
        FsError::Io(format!("{what}: {cause}"))
    }
}
