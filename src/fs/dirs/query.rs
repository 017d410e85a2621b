//! `where/` of a data frame: a directory per value filter, entered by name (it lists
//! nothing), holding the rows that satisfy the filter as `data.<ext>` in every format, with
//! the frame's `schema.json`. The filter runs inside libtiledb as the rows are read. A
//! filter that cannot be read is a directory holding only `error.txt`, which says what is
//! wrong and where.

use std::sync::Arc;

use crate::soma::filter::Filter;
use crate::soma::{ArrayObject, Selection, SomaObject};

use super::super::files::{Document, Table};
use super::super::node::{dir, file, NodeKind};
use super::object::ErrorDir;
use super::table::data_entries;
use super::{DirContext, DirKind, Listed};

/// `<dataframe>/where/`.
#[derive(Debug)]
pub struct WhereDir {
    object: Arc<SomaObject>,
    frame: Arc<ArrayObject>,
}

impl WhereDir {
    pub fn new(object: Arc<SomaObject>, frame: Arc<ArrayObject>) -> WhereDir {
        WhereDir { object, frame }
    }
}

impl DirKind for WhereDir {
    fn list(&self, _: &DirContext) -> Listed {
        Listed::of(Vec::new())
    }

    fn find(&self, name: &str) -> Option<NodeKind> {
        Some(match Filter::parse(name, &self.frame.schema) {
            Ok(filter) => dir(FilteredFrameDir {
                object: self.object.clone(),
                table: Table {
                    array: self.frame.clone(),
                    selection: Selection {
                        filter: filter.condition.map(Arc::new),
                        ..Selection::default()
                    },
                },
            }),
            Err(e) => dir(ErrorDir(e.to_string().into())),
        })
    }
}

/// `<dataframe>/where/<filter>/`: the rows that satisfy the filter.
#[derive(Debug)]
struct FilteredFrameDir {
    object: Arc<SomaObject>,
    table: Table,
}

impl DirKind for FilteredFrameDir {
    fn list(&self, _: &DirContext) -> Listed {
        let mut named = data_entries(&self.table);
        let schema = file(Document::schema(self.object.clone()));
        named.push(("schema.json".into(), schema));
        Listed::of(named)
    }
}
