//! The spatial objects' JSON metadata, decoded: a coordinate space, the transforms a Scene's
//! collections register, and a multiscale image's schema and levels.
//!
//! Both spellings are read: tiledbsoma's (`soma_scene_registry_<name>`, a nested
//! `"transform"` object) and the spec's (`somascene_registry<name>`, the fields at the top,
//! the matrix flattened and sometimes spelled `maxtrix`).

use serde_json::{Map, Value as Json};

use crate::tiledb::Metadata;

/// A spatial document that could not be decoded: which key, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpatialError(pub String);

impl std::fmt::Display for SpatialError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

fn parse(metadata: &Metadata, key: &str) -> Option<Result<Json, SpatialError>> {
    let entry = metadata.get(key)?;
    Some(match entry.as_str() {
        Some(text) => serde_json::from_str(text)
            .map_err(|e| SpatialError(format!("metadata {key:?} is not valid JSON: {e}"))),
        None => Err(SpatialError(format!("metadata {key:?} is not a string"))),
    })
}

/// The decoded `soma_coordinate_space`: an array of `{"name", "unit"}` axes.
pub fn coordinate_space(metadata: &Metadata) -> Option<Result<Json, SpatialError>> {
    parse(metadata, "soma_coordinate_space").map(|parsed| {
        let space = parsed?;
        let valid = space.as_array().is_some_and(|axes| {
            axes.iter()
                .all(|a| a.get("name").is_some_and(Json::is_string))
        });
        if valid {
            Ok(space)
        } else {
            Err(SpatialError(
                "soma_coordinate_space is not an array of axes with names".into(),
            ))
        }
    })
}

/// A transform in one shape: `transform_type`, `input_axes`, `output_axes`, and its
/// parameters (`scale`, `scale_factors`, or `matrix` as rows).
fn normalise_transform(raw: Json) -> Result<Json, SpatialError> {
    let Json::Object(mut top) = raw else {
        return Err(SpatialError("a transform is not a JSON object".into()));
    };
    if let Some(Json::Object(inner)) = top.remove("transform") {
        for (k, v) in inner {
            top.entry(k).or_insert(v);
        }
    }
    if let Some(m) = top.remove("maxtrix") {
        top.entry("matrix").or_insert(m);
    }
    // A flattened (row-major) square matrix becomes rows.
    if let Some(Json::Array(flat)) = top.get("matrix") {
        if flat.iter().all(Json::is_number) {
            let n = (flat.len() as f64).sqrt() as usize;
            if n * n == flat.len() && n > 0 {
                let rows = flat.chunks(n).map(|r| Json::Array(r.to_vec())).collect();
                top.insert("matrix".into(), Json::Array(rows));
            }
        }
    }
    if !top.get("transform_type").is_some_and(Json::is_string) {
        return Err(SpatialError("a transform has no transform_type".into()));
    }
    Ok(Json::Object(top))
}

/// The transforms a collection in a Scene registers, member name to transform; `None` when
/// it registers none.
pub fn transforms(metadata: &Metadata) -> Option<Result<Json, SpatialError>> {
    let mut out = Map::new();
    for key in metadata.keys() {
        let Some(name) = key
            .strip_prefix("soma_scene_registry_")
            .or_else(|| key.strip_prefix("somascene_registry"))
        else {
            continue;
        };
        let decoded = parse(metadata, key)?.and_then(normalise_transform);
        match decoded {
            Ok(t) => {
                out.insert(name.to_owned(), t);
            }
            Err(e) => return Some(Err(SpatialError(format!("{key}: {e}")))),
        }
    }
    (!out.is_empty()).then_some(Ok(Json::Object(out)))
}

/// One level of a multiscale image.
#[derive(Debug, Clone, PartialEq)]
pub struct Level {
    pub name: String,
    pub shape: Vec<u64>,
}

/// A multiscale image's schema (decoded) and its levels, largest first.
#[derive(Debug, Clone, PartialEq)]
pub struct ImageSchema {
    pub schema: Map<String, Json>,
    pub levels: Vec<Level>,
}

impl ImageSchema {
    /// For each level's array dimension: which image axis it holds (an index into the
    /// coordinate space's axes, or the number of axes for the channel axis).
    pub fn axis_permutation(&self) -> Option<Vec<usize>> {
        self.schema
            .get("data_axis_permutation")?
            .as_array()?
            .iter()
            .map(|v| v.as_u64().map(|u| u as usize))
            .collect()
    }

    pub fn has_channel_axis(&self) -> bool {
        self.schema
            .get("has_channel_axis")
            .and_then(Json::as_bool)
            .unwrap_or(false)
    }

    /// `image.json`: the schema with each level's name and shape.
    pub fn to_json(&self) -> Json {
        let mut doc = self.schema.clone();
        let levels = self
            .levels
            .iter()
            .map(|l| serde_json::json!({"name": l.name, "shape": l.shape}))
            .collect();
        doc.insert("levels".into(), Json::Array(levels));
        Json::Object(doc)
    }
}

/// The image schema of a MultiscaleImage and its levels (from `soma_level_<name>` shapes),
/// ordered largest first so that level 0 is the full resolution.
pub fn image_schema(metadata: &Metadata) -> Option<Result<ImageSchema, SpatialError>> {
    let schema = match parse(metadata, "soma_multiscale_image_schema")? {
        Ok(Json::Object(schema)) => schema,
        Ok(_) => {
            return Some(Err(SpatialError(
                "soma_multiscale_image_schema is not a JSON object".into(),
            )))
        }
        Err(e) => return Some(Err(e)),
    };
    let mut levels = Vec::new();
    for key in metadata.keys() {
        let Some(name) = key.strip_prefix("soma_level_") else {
            continue;
        };
        let shape: Option<Vec<u64>> = match parse(metadata, key)? {
            Ok(Json::Array(dims)) => dims.iter().map(Json::as_u64).collect(),
            _ => None,
        };
        match shape {
            Some(shape) => levels.push(Level {
                name: name.to_owned(),
                shape,
            }),
            None => {
                return Some(Err(SpatialError(format!(
                    "metadata {key:?} is not a shape"
                ))))
            }
        }
    }
    levels.sort_by(|a, b| {
        let size = |l: &Level| l.shape.iter().product::<u64>();
        size(b).cmp(&size(a)).then_with(|| a.name.cmp(&b.name))
    });
    Some(Ok(ImageSchema { schema, levels }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tiledb::{Datatype, MetadataValue, Value};

    fn md(pairs: &[(&str, &str)]) -> Metadata {
        pairs
            .iter()
            .map(|(k, v)| {
                (
                    k.to_string(),
                    MetadataValue {
                        datatype: Datatype::StringUtf8,
                        values: vec![Value::Text(v.to_string())],
                    },
                )
            })
            .collect()
    }

    #[test]
    fn both_registry_spellings_decode_to_one_shape() {
        let ours = md(&[(
            "soma_scene_registry_img",
            r#"{"transform_type": "AffineTransform", "transform": {"input_axes": ["x"], "output_axes": ["y"], "matrix": [[1, 2], [0, 1]]}}"#,
        )]);
        let spec = md(&[(
            "somascene_registryimg",
            r#"{"transform_type": "AffineTransform", "input_axes": ["x"], "output_axes": ["y"], "maxtrix": [1, 2, 0, 1]}"#,
        )]);
        let a = transforms(&ours).unwrap().unwrap();
        let b = transforms(&spec).unwrap().unwrap();
        assert_eq!(a, b);
        assert_eq!(a["img"]["matrix"], serde_json::json!([[1, 2], [0, 1]]));
    }

    #[test]
    fn malformed_json_is_an_error_naming_the_key() {
        let bad = md(&[("soma_coordinate_space", "[{\"name\": ")]);
        let err = coordinate_space(&bad).unwrap().unwrap_err();
        assert!(err.0.contains("soma_coordinate_space"));
    }

    #[test]
    fn levels_are_largest_first() {
        let m = md(&[
            (
                "soma_multiscale_image_schema",
                r#"{"shape": [3, 8, 8], "has_channel_axis": true, "data_axis_permutation": [2, 1, 0], "datatype": "C"}"#,
            ),
            ("soma_level_small", "[3, 2, 2]"),
            ("soma_level_big", "[3, 8, 8]"),
        ]);
        let image = image_schema(&m).unwrap().unwrap();
        assert_eq!(image.levels[0].name, "big");
        assert_eq!(image.axis_permutation(), Some(vec![2, 1, 0]));
        assert_eq!(
            image.to_json()["levels"][1]["shape"],
            serde_json::json!([3, 2, 2])
        );
    }
}
