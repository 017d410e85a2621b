//! `by/`, wherever something is split by a data frame's enumerated columns: `by/` lists the
//! columns, `by/<column>/` the column's labels, and each label is the directory of the part
//! holding it, which the split thing makes ([`Split`]): the rows of a data frame, the cells
//! of a 10x matrix, the cells of an AnnData view.

use std::sync::Arc;

use crate::format::text::float_text;
use crate::soma::{self, ArrayObject};
use crate::tiledb::{Datatype, Value};

use super::{dir, DirContext, DirKind, Entries, Listed, NodeKind};
use crate::names::file_name;

/// The name under which null is listed among a column's labels.
pub const NULL_LABEL: &str = "__null__";

/// Something split by the labels of a data frame's enumerated columns.
pub trait Split: std::fmt::Debug + Send + Sync {
    /// The data frame whose enumerated columns split it.
    fn frame(&self) -> &ArrayObject;

    /// The directory of the part whose `column` holds `label` (`None`: null).
    fn part(&self, column: &str, label: Option<Value>) -> NodeKind;
}

/// The `by/` entry of what `split` splits: none when its data frame has no enumerated column.
pub fn entry(split: Arc<dyn Split>) -> Option<(String, NodeKind)> {
    let any = enumerated_columns(split.frame()).next().is_some();
    any.then(|| ("by".to_owned(), dir(ByDir(split))))
}

/// `by/`: the enumerated columns.
#[derive(Debug)]
struct ByDir(Arc<dyn Split>);

impl DirKind for ByDir {
    fn list(&self, _: &DirContext) -> Listed {
        let column = |c: &soma::Column| {
            let split = self.0.clone();
            let column = c.name.clone();
            (file_name(&c.name), dir(ByColumnDir { split, column }))
        };
        Listed::of(enumerated_columns(self.0.frame()).map(column).collect())
    }
}

/// `by/<column>/`: every label of the column (and `__null__` when it is nullable).
#[derive(Debug)]
struct ByColumnDir {
    split: Arc<dyn Split>,
    column: String,
}

impl DirKind for ByColumnDir {
    fn list(&self, _: &DirContext) -> Listed {
        let entries: Entries = labels(self.split.frame(), &self.column)
            .into_iter()
            .map(|(name, label)| (name, self.split.part(&self.column, label)))
            .collect();
        Listed::of(entries)
    }
}

fn enumerated_columns(array: &ArrayObject) -> impl Iterator<Item = &soma::Column> {
    array
        .schema
        .columns
        .iter()
        .filter(|c| c.enumeration.is_some())
}

/// A column's labels, each with its file name; `__null__` for nulls when it is nullable.
fn labels(array: &ArrayObject, column: &str) -> Vec<(String, Option<Value>)> {
    let Some(col) = array.schema.columns.iter().find(|c| c.name == column) else {
        return Vec::new();
    };
    let Some(enumeration) = &col.enumeration else {
        return Vec::new();
    };
    let mut out: Vec<(String, Option<Value>)> = enumeration
        .values
        .iter()
        .map(|label| {
            let text = label_text(label, enumeration.datatype);
            (file_name(&text), Some(label.clone()))
        })
        .collect();
    if col.nullable {
        out.push((NULL_LABEL.into(), None));
    }
    out
}

/// A label as the text a CSV shows for it.
fn label_text(label: &Value, datatype: Datatype) -> String {
    match label {
        Value::Text(s) => s.clone(),
        Value::Int(i) => i.to_string(),
        Value::UInt(u) => u.to_string(),
        Value::Float(f) if datatype == Datatype::Float32 => float_text(*f as f32),
        Value::Float(f) => float_text(*f),
        Value::Bool(b) => b.to_string(),
        Value::Bytes(b) => b.iter().map(|x| format!("{x:02x}")).collect(),
    }
}
