//! A stable 128-bit digest of text parts (two FNV-1a hashes), for cache keys and snapshot
//! identities: the same parts give the same digest in every run and version of Rust.

/// The digest of `parts`, as 32 hex digits. Each part is hashed with its length, so
/// different splits of the same text differ.
pub fn digest<'a>(parts: impl IntoIterator<Item = &'a str>) -> String {
    let mut a: u64 = 0xcbf2_9ce4_8422_2325;
    let mut b: u64 = 0x6c62_272e_07bb_0142;
    let mut eat = |bytes: &[u8]| {
        for &byte in bytes {
            a = (a ^ u64::from(byte)).wrapping_mul(0x0000_0100_0000_01b3);
            b = (b ^ u64::from(byte)).wrapping_mul(0x0000_0100_0000_01b3);
        }
    };
    for part in parts {
        eat(&(part.len() as u64).to_le_bytes());
        eat(part.as_bytes());
    }
    format!("{a:016x}{b:016x}")
}

#[cfg(test)]
mod tests {
    use super::digest;

    #[test]
    fn digests_are_stable_and_distinguish_splits() {
        assert_eq!(digest(["a", "b"]), digest(["a", "b"]));
        assert_ne!(digest(["ab", ""]), digest(["a", "b"]));
        assert_eq!(digest(["a"]).len(), 32);
    }
}
