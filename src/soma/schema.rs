//! A SOMA object's schema as Arrow: columns in order (index columns first), their types,
//! nullability, domains and enumerations.

use std::collections::HashMap;
use std::sync::Arc;

use arrow_schema::{DataType, Field, Schema, SchemaRef, TimeUnit as ArrowUnit};

use crate::tiledb::{
    Bounds, Datatype, EnumerationInfo, Order, SchemaInfo, TimeUnit, Value, VAR_NUM,
};

use super::soma_type::SomaType;

/// One column of a SOMA object: an index column (a TileDB dimension) or a value column.
#[derive(Debug, Clone)]
pub struct Column {
    pub name: String,
    pub datatype: Datatype,
    /// Values per cell (`VAR_NUM` for strings and bytes).
    pub cell_val_num: u32,
    /// The Arrow type of the column as read (an enumerated column is a dictionary).
    pub arrow_type: DataType,
    pub nullable: bool,
    pub is_index: bool,
    /// For index columns: the current domain where the array has one, else the schema's.
    pub domain: Option<Bounds>,
    /// For index columns: the schema's domain, which libtiledb lays its space tiles out from
    /// (tiledbsoma sets it far wider than the current domain: for an int64 column, nearly the
    /// whole int64 range).
    pub schema_domain: Option<Bounds>,
    /// For integer index columns: the space tile's extent.
    pub tile_extent: Option<Value>,
    /// For enumerated columns: the labels.
    pub enumeration: Option<EnumerationInfo>,
}

/// The columns of an array and its shape.
#[derive(Debug, Clone)]
pub struct SomaSchema {
    pub columns: Vec<Column>,
    /// For ND arrays: the current domain's size along each dimension.
    pub shape: Option<Vec<u64>>,
    pub dense: bool,
    /// The order of tiles and of cells within a tile, which decide what a global-order
    /// read returns.
    pub tile_order: Order,
    pub cell_order: Order,
    /// For sparse arrays: the cells of one data tile (the schema's capacity), the unit
    /// libtiledb decompresses.
    pub tile_cells: Option<u64>,
    /// For sparse arrays: whether a cell's coordinates may be stored more than once (never
    /// in an array tiledbsoma writes).
    pub allows_duplicates: bool,
}

/// The Arrow type of a TileDB value type, as tiledbsoma presents it.
pub fn arrow_type(datatype: Datatype, cell_val_num: u32) -> DataType {
    use Datatype::*;
    // Fixed-size multi-value cells do not occur in SOMA; they read as bytes.
    if cell_val_num != 1 && cell_val_num != VAR_NUM && !datatype.is_string() {
        return DataType::LargeBinary;
    }
    match datatype {
        Int8 => DataType::Int8,
        Int16 => DataType::Int16,
        Int32 => DataType::Int32,
        Int64 => DataType::Int64,
        UInt8 => DataType::UInt8,
        UInt16 => DataType::UInt16,
        UInt32 => DataType::UInt32,
        UInt64 => DataType::UInt64,
        Float32 => DataType::Float32,
        Float64 => DataType::Float64,
        Bool => DataType::Boolean,
        DateTime(TimeUnit::Day) => DataType::Date32,
        DateTime(TimeUnit::Second) => DataType::Timestamp(ArrowUnit::Second, None),
        DateTime(TimeUnit::Millisecond) => DataType::Timestamp(ArrowUnit::Millisecond, None),
        DateTime(TimeUnit::Microsecond) => DataType::Timestamp(ArrowUnit::Microsecond, None),
        DateTime(TimeUnit::Nanosecond) => DataType::Timestamp(ArrowUnit::Nanosecond, None),
        DateTime(_) | Time(_) => DataType::Int64,
        // tiledbsoma stores Arrow binary columns as CHAR.
        Char => DataType::LargeBinary,
        t if t.is_string() => DataType::LargeUtf8,
        _ => DataType::LargeBinary,
    }
}

/// The Arrow type of an enumeration's labels (tiledbsoma reads string labels as
/// `large_string`, like string columns).
fn label_type(e: &EnumerationInfo) -> DataType {
    arrow_type(e.datatype, if e.datatype.is_string() { VAR_NUM } else { 1 })
}

/// A string dimension's current domain as tiledbsoma shows it: `("", "\x7f")` and
/// `("", "\xff")` are how it stores "no bounds", shown as `("", "")`.
fn unbounded_text(bounds: &Bounds) -> Bounds {
    match bounds {
        (Value::Text(lo), Value::Text(hi))
            if lo.is_empty() && (hi == "\u{7f}" || hi == "\u{fffd}" || hi.is_empty()) =>
        {
            (Value::Text(String::new()), Value::Text(String::new()))
        }
        other => other.clone(),
    }
}

/// The shape of a current (or maximum) domain: `hi + 1` along each integer dimension.
fn shape_of(columns: &[Column]) -> Vec<u64> {
    columns
        .iter()
        .filter(|c| c.is_index)
        .map(|c| match &c.domain {
            Some((_, Value::Int(hi))) => (*hi + 1).max(0) as u64,
            Some((_, Value::UInt(hi))) => hi.saturating_add(1),
            _ => 0,
        })
        .collect()
}

impl SomaSchema {
    /// A sparse data frame's schema of `columns`, row-major, 100 cells a data tile: for tests
    /// of what is built on arrays described without libtiledb.
    #[cfg(test)]
    pub fn sparse_frame(columns: Vec<Column>) -> SomaSchema {
        SomaSchema {
            columns,
            shape: None,
            dense: false,
            tile_order: Order::RowMajor,
            cell_order: Order::RowMajor,
            tile_cells: Some(100),
            allows_duplicates: false,
        }
    }

    pub fn new(
        soma_type: SomaType,
        info: &SchemaInfo,
        enumerations: &HashMap<String, EnumerationInfo>,
    ) -> SomaSchema {
        let mut columns: Vec<Column> = info
            .dimensions
            .iter()
            .enumerate()
            .map(|(i, dim)| {
                let current = info
                    .current_domain
                    .as_ref()
                    .and_then(|cd| cd.get(i))
                    .map(unbounded_text);
                Column {
                    name: dim.name.clone(),
                    datatype: dim.datatype,
                    cell_val_num: dim.cell_val_num,
                    arrow_type: arrow_type(dim.datatype, dim.cell_val_num),
                    nullable: false,
                    is_index: true,
                    domain: current.or_else(|| dim.domain.clone()),
                    schema_domain: dim.domain.clone(),
                    tile_extent: dim.tile_extent.clone(),
                    enumeration: None,
                }
            })
            .collect();
        columns.extend(info.attributes.iter().map(|attr| {
            let enumeration = attr
                .enumeration
                .as_ref()
                .and_then(|name| enumerations.get(name))
                .cloned();
            let value_type = arrow_type(attr.datatype, attr.cell_val_num);
            let arrow_type = match &enumeration {
                Some(e) => DataType::Dictionary(Box::new(value_type), Box::new(label_type(e))),
                None => value_type,
            };
            Column {
                name: attr.name.clone(),
                datatype: attr.datatype,
                cell_val_num: attr.cell_val_num,
                arrow_type,
                nullable: attr.nullable,
                is_index: false,
                domain: None,
                schema_domain: None,
                tile_extent: None,
                enumeration,
            }
        }));
        let shape = soma_type.is_nd_array().then(|| shape_of(&columns));
        SomaSchema {
            columns,
            shape,
            dense: info.array_type == crate::tiledb::ArrayType::Dense,
            tile_order: info.tile_order,
            cell_order: info.cell_order,
            tile_cells: (info.array_type == crate::tiledb::ArrayType::Sparse && info.capacity > 0)
                .then_some(info.capacity),
            allows_duplicates: info.allows_dups,
        }
    }

    /// Feeds what reads of the schema depend on to a digest: each column's name, type,
    /// nullability, domains and labels, the layout, and whether duplicates are allowed.
    pub fn digest_into(&self, digest: &mut crate::digest::Digest) {
        let bounds = |digest: &mut crate::digest::Digest, bounds: &Option<Bounds>| match bounds {
            None => {
                digest.mark(b'-');
            }
            Some((lo, hi)) => {
                digest.mark(b'd');
                digest.value(lo);
                digest.value(hi);
            }
        };
        digest.number(self.columns.len() as u64);
        for c in &self.columns {
            digest
                .text(&c.name)
                .text(&c.arrow_type.to_string())
                .text(&format!("{:?}/{}", c.datatype, c.cell_val_num))
                .flag(c.nullable)
                .flag(c.is_index);
            bounds(digest, &c.domain);
            bounds(digest, &c.schema_domain);
            match &c.enumeration {
                None => {
                    digest.mark(b'-');
                }
                Some(e) => {
                    digest
                        .mark(b'e')
                        .flag(e.ordered)
                        .number(e.values.len() as u64);
                    for label in &e.values {
                        digest.value(label);
                    }
                }
            }
        }
        digest
            .flag(self.dense)
            .flag(self.allows_duplicates)
            .text(&format!("{:?}/{:?}", self.tile_order, self.cell_order));
    }

    pub fn index_columns(&self) -> impl Iterator<Item = &Column> {
        self.columns.iter().filter(|c| c.is_index)
    }

    /// The tile extent of the first index column, when it has a positive integer one: reads
    /// along it go a tile (a band of rows) at a time, since libtiledb decompresses whole tiles.
    pub fn first_tile_extent(&self) -> Option<i128> {
        let extent = self
            .index_columns()
            .next()?
            .tile_extent
            .as_ref()?
            .as_i128()?;
        (extent > 0).then_some(extent)
    }

    /// The Arrow schema of the object's rows.
    pub fn arrow(&self) -> SchemaRef {
        self.arrow_of(&self.columns)
    }

    /// The Arrow schema of some of the columns.
    pub fn arrow_of(&self, columns: &[Column]) -> SchemaRef {
        Arc::new(Schema::new(
            columns
                .iter()
                .map(|c| {
                    let ordered = c.enumeration.as_ref().is_some_and(|e| e.ordered);
                    let mut field = Field::new(&c.name, c.arrow_type.clone(), c.nullable);
                    if ordered {
                        field = field.with_dict_is_ordered(true);
                    }
                    field
                })
                .collect::<Vec<_>>(),
        ))
    }
}
