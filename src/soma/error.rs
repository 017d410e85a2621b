//! The error type of the SOMA layer: a read fails because libtiledb did, because Arrow
//! refused what was read, because whoever consumes the rows failed (a reader that went
//! away), or because the store holds something that is not SOMA as soma-mount reads it.
//! Each keeps its kind, so the layers above can tell a broken pipe from a broken store.

use std::fmt;
use std::io;

use arrow_schema::ArrowError;

use crate::tiledb;

#[derive(Debug)]
pub enum Error {
    /// libtiledb failed, with its message.
    TileDb(tiledb::Error),
    /// Arrow refused data.
    Arrow(ArrowError),
    /// The consumer of the rows failed: its error, kind and all.
    Io(io::Error),
    /// The store holds what soma-mount cannot read (a column of an unexpected type), or a
    /// read broke its own promise (fewer cells than it selects).
    Invalid(String),
}

pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    pub fn invalid(message: impl Into<String>) -> Error {
        Error::Invalid(message.into())
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::TileDb(e) => write!(f, "{e}"),
            Error::Arrow(e) => write!(f, "{e}"),
            Error::Io(e) => write!(f, "{e}"),
            Error::Invalid(message) => f.write_str(message),
        }
    }
}

impl std::error::Error for Error {}

impl From<tiledb::Error> for Error {
    fn from(e: tiledb::Error) -> Error {
        Error::TileDb(e)
    }
}

impl From<ArrowError> for Error {
    fn from(e: ArrowError) -> Error {
        Error::Arrow(e)
    }
}

impl From<io::Error> for Error {
    fn from(e: io::Error) -> Error {
        Error::Io(e)
    }
}

/// Back to I/O for a writer: an I/O error comes out as it went in (a reader that went
/// away is still a broken pipe); the others are I/O errors that carry them.
impl From<Error> for io::Error {
    fn from(e: Error) -> io::Error {
        match e {
            Error::Io(e) => e,
            other => io::Error::other(other),
        }
    }
}
