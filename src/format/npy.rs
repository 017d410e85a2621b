//! NumPy `.npy` (format version 1.0): a header naming the dtype and shape, then the values in
//! C order. The size follows from the shape alone, so any byte range maps to a range of cells.

use arrow_schema::DataType;

/// The NumPy dtype of an Arrow type, when it has one `.npy` can hold.
pub fn dtype(t: &DataType) -> Option<(&'static str, usize)> {
    Some(match t {
        DataType::Int8 => ("|i1", 1),
        DataType::Int16 => ("<i2", 2),
        DataType::Int32 => ("<i4", 4),
        DataType::Int64 => ("<i8", 8),
        DataType::UInt8 => ("|u1", 1),
        DataType::UInt16 => ("<u2", 2),
        DataType::UInt32 => ("<u4", 4),
        DataType::UInt64 => ("<u8", 8),
        DataType::Float32 => ("<f4", 4),
        DataType::Float64 => ("<f8", 8),
        DataType::Boolean => ("|b1", 1),
        _ => return None,
    })
}

/// The header of an array of `descr` values and `shape`, padded so the data starts at a
/// multiple of 64 bytes, as NumPy writes it.
pub fn header(descr: &str, shape: &[u64]) -> Vec<u8> {
    let dims: Vec<String> = shape.iter().map(u64::to_string).collect();
    let shape = match dims.len() {
        1 => format!("({},)", dims[0]),
        _ => format!("({})", dims.join(", ")),
    };
    let mut dict = format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape}, }}");
    let unpadded = 10 + dict.len() + 1;
    dict.push_str(&" ".repeat((64 - unpadded % 64) % 64));
    dict.push('\n');
    let mut out = Vec::with_capacity(10 + dict.len());
    out.extend_from_slice(b"\x93NUMPY\x01\x00");
    out.extend_from_slice(&(dict.len() as u16).to_le_bytes());
    out.extend_from_slice(dict.as_bytes());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_is_aligned_and_readable() {
        let h = header("<f4", &[3, 4, 5]);
        assert_eq!(h.len() % 64, 0);
        let text = std::str::from_utf8(&h[10..]).unwrap();
        assert!(text.starts_with("{'descr': '<f4', 'fortran_order': False, 'shape': (3, 4, 5), }"));
        assert!(text.ends_with('\n'));
        assert_eq!(u16::from_le_bytes([h[8], h[9]]) as usize, h.len() - 10);
        assert!(std::str::from_utf8(&header("|i1", &[7])[10..])
            .unwrap()
            .contains("(7,)"));
    }
}
