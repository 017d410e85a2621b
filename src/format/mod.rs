//! Rendering: SOMA objects and Arrow record batches to the bytes of the files soma-mount
//! shows. Each submodule renders one kind of file and knows nothing of FUSE.

pub mod json;
