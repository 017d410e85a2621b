//! The files of a table (an array, or the rows of one): `data.<ext>` in every format and
//! `slices/`; and the rows of a data frame split by its enumerated columns' labels (`by/`).

use std::sync::Arc;

use crate::format::TableFormat;
use crate::soma::{ArrayObject, Selection};
use crate::tiledb::Value;

use super::super::files::{Shown, Table, TableFile};
use super::by::Split;
use super::slices::SlicesDir;
use super::{dir, file, DirContext, DirKind, Entries, Listed, NodeKind};

/// The files of a table: `data.<ext>` in every format, and `slices/`.
pub fn table_entries(table: &Table) -> Entries {
    let mut named = data_entries(table);
    named.push(("slices".into(), dir(SlicesDir(table.clone()))));
    named
}

/// `data.<ext>` of a table in every format.
pub fn data_entries(table: &Table) -> Entries {
    TableFormat::ALL
        .into_iter()
        .map(|format| {
            (
                format!("data.{}", format.extension()),
                file(TableFile::new(table.clone(), format, Shown::Listed)),
            )
        })
        .collect()
}

/// A directory of a table's files: `by/<column>/<label>/` of a data frame.
#[derive(Debug)]
pub struct TableDir(pub Table);

impl DirKind for TableDir {
    fn list(&self, _: &DirContext) -> Listed {
        Listed::of(table_entries(&self.0))
    }
}

/// A data frame's rows, split by its enumerated columns: each label's rows are a table.
#[derive(Debug)]
pub struct FrameSplit(pub Arc<ArrayObject>);

impl Split for FrameSplit {
    fn frame(&self) -> &ArrayObject {
        &self.0
    }

    fn part(&self, column: &str, label: Option<Value>) -> NodeKind {
        dir(TableDir(Table {
            array: self.0.clone(),
            selection: Selection {
                equals: Some((column.to_owned(), label)),
                ..Selection::default()
            },
        }))
    }
}
