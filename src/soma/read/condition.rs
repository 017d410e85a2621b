//! The conditions a read's queries test each cell against: the label an enumerated column
//! must hold, exact values of text dimensions, and the value filter, as libtiledb's
//! query conditions.

use crate::tiledb::{self, Array, QueryCondition};

use super::Selection;
use crate::soma::error::{Error, Result};
use crate::soma::filter::Condition;
use crate::soma::object::ArrayObject;

/// One test of a read's condition: the column holds `value`, in its native bytes (`None`:
/// the column is null).
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Equality {
    pub(super) column: String,
    pub(super) value: Option<Vec<u8>>,
}

/// The equality `selection.equals` asks for: its column holds the label, in the
/// enumeration's own type (text, or a native value). An error when the column is not
/// enumerated.
pub(super) fn label_equality(
    array: &ArrayObject,
    selection: &Selection,
) -> Result<Option<Equality>> {
    let Some((name, label)) = &selection.equals else {
        return Ok(None);
    };
    let datatype = array
        .schema
        .columns
        .iter()
        .find(|c| &c.name == name)
        .and_then(|c| c.enumeration.as_ref())
        .map(|e| e.datatype)
        .ok_or_else(|| Error::invalid(format!("{name} is not enumerated")))?;
    let value = label.as_ref().map(|v| v.to_native(datatype)).transpose()?;
    Ok(Some(Equality {
        column: name.clone(),
        value,
    }))
}

/// The condition a read's queries test each selected cell against: every one of
/// `equalities`, combined with `and` in order. `None` when there is none: every selected
/// cell is read.
pub(super) fn read_condition(
    array: &Array,
    equalities: &[Equality],
    filter: Option<&Condition>,
) -> Result<Option<QueryCondition>> {
    let mut condition = filter.map(|f| filter_condition(array, f)).transpose()?;
    for equality in equalities {
        let equals = QueryCondition::equals(array, &equality.column, equality.value.as_deref())?;
        condition = Some(match condition {
            Some(other) => other.and(&equals)?,
            None => equals,
        });
    }
    Ok(condition)
}

/// A value filter as libtiledb's condition, each value in its column's native bytes.
pub(super) fn filter_condition(array: &Array, filter: &Condition) -> Result<QueryCondition> {
    Ok(match filter {
        Condition::Compare {
            column,
            datatype,
            op,
            value,
        } => QueryCondition::compare(array, column, *op, &value.to_native(*datatype)?)?,
        Condition::Member {
            column,
            datatype,
            negated,
            values,
        } => {
            let native = (values.iter())
                .map(|v| v.to_native(*datatype))
                .collect::<tiledb::Result<Vec<_>>>()?;
            QueryCondition::member(array, column, &native, *negated)?
        }
        Condition::And(a, b) => filter_condition(array, a)?.and(&filter_condition(array, b)?)?,
        Condition::Or(a, b) => filter_condition(array, a)?.or(&filter_condition(array, b)?)?,
        Condition::Not(a) => filter_condition(array, a)?.negated()?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::soma::read::test_arrays::*;
    use crate::tiledb::{EnumerationInfo, Value};

    #[test]
    fn a_label_is_an_equality_in_its_enumerations_type() {
        let mut category = value_column("cell_type");
        category.enumeration = Some(EnumerationInfo {
            datatype: tiledb::Datatype::StringUtf8,
            ordered: false,
            values: vec![Value::Text("B cell".into())],
        });
        let frame = sparse(vec![int_index("soma_joinid"), value_column("x"), category]);
        let equals = |column: &str, label: Option<Value>| Selection {
            equals: Some((column.to_owned(), label)),
            ..Selection::default()
        };
        let label = Some(Value::Text("B cell".into()));
        assert_eq!(
            label_equality(&frame, &equals("cell_type", label)).unwrap(),
            Some(Equality {
                column: "cell_type".into(),
                value: Some(b"B cell".to_vec())
            })
        );
        // A null label matches nulls.
        let null = label_equality(&frame, &equals("cell_type", None)).unwrap();
        assert_eq!(null.map(|e| e.value), Some(None));
        assert!(label_equality(&frame, &equals("x", Some(Value::Float(1.0)))).is_err());
        assert_eq!(label_equality(&frame, &Selection::default()).unwrap(), None);
    }
}
