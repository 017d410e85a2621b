//! File names for names that come from the store (member names, later enumeration labels).
//!
//! A name that is a valid file name is shown as it is. One that cannot be (empty, `.`, `..`,
//! or containing `/` or NUL) is percent-encoded: `%` → `%25`, `/` → `%2F`, NUL → `%00`, and
//! the whole of `.`, `..` and the empty name (`%2E`, `%2E%2E`, `%00`). Lookups go through the
//! listing, never through decoding, so no path can reach outside the mount.

/// The file name under which a store name is shown.
pub fn file_name(name: &str) -> String {
    match name {
        "" => "%00".to_owned(),
        "." => "%2E".to_owned(),
        ".." => "%2E%2E".to_owned(),
        _ if !name.contains(['/', '\0']) => name.to_owned(),
        _ => {
            let mut out = String::with_capacity(name.len() + 8);
            for ch in name.chars() {
                match ch {
                    '%' => out.push_str("%25"),
                    '/' => out.push_str("%2F"),
                    '\0' => out.push_str("%00"),
                    c => out.push(c),
                }
            }
            out
        }
    }
}

#[cfg(test)]
mod tests {
    use super::file_name;

    #[test]
    fn valid_names_are_kept() {
        for name in [
            "obs",
            "my data",
            "données-ß-細胞",
            "50%",
            "a.b",
            "...",
            ".hidden",
        ] {
            assert_eq!(file_name(name), name);
        }
    }

    #[test]
    fn invalid_names_are_encoded() {
        assert_eq!(file_name(""), "%00");
        assert_eq!(file_name("."), "%2E");
        assert_eq!(file_name(".."), "%2E%2E");
        assert_eq!(file_name("a/b"), "a%2Fb");
        assert_eq!(file_name("50%/x"), "50%25%2Fx");
        assert_eq!(file_name("a\0b"), "a%00b");
    }

    proptest::proptest! {
        #[test]
        fn encoded_names_are_always_file_names(name in "\\PC*") {
            let encoded = file_name(&name);
            proptest::prop_assert!(!encoded.is_empty());
            proptest::prop_assert!(!encoded.contains('/') && !encoded.contains('\0'));
            proptest::prop_assert!(encoded != "." && encoded != "..");
        }
    }
}
