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

impl FsError {
    /// A backend failure while doing `what`.
    pub fn io(what: impl Display, cause: impl Display) -> FsError {
        FsError::Io(format!("{what}: {cause}"))
    }
}
