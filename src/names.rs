//! File names for names that come from the store (member names, enumeration labels).
//!
//! A name is shown as it is when it is a valid file name and holds nothing that reads as a
//! percent escape (`%` and two hex digits). Any other name is percent-encoded: `%` → `%25`,
//! `/` → `%2F`, NUL → `%00`, and the whole of `.`, `..` and the empty name become `%2E`,
//! `%2E%2E` and `%00`. So every shown name decodes back to one store name alone: a name
//! shown as it is has no escape in it, an encoded one always has (`a/b` is `a%2Fb`, and the
//! member literally named `a%2Fb` is `a%252Fb`). Lookups go through the listing, never
//! through decoding, so no path can reach outside the mount.

/// The file name under which a store name is shown.
pub fn file_name(name: &str) -> String {
    match name {
        "" => "%00".to_owned(),
        "." => "%2E".to_owned(),
        ".." => "%2E%2E".to_owned(),
        _ if !name.contains(['/', '\0']) && !has_escape(name) => name.to_owned(),
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

/// Whether `name` holds a `%` followed by two hex digits.
fn has_escape(name: &str) -> bool {
    name.as_bytes()
        .windows(3)
        .any(|w| w[0] == b'%' && w[1].is_ascii_hexdigit() && w[2].is_ascii_hexdigit())
}

#[cfg(test)]
mod tests {
    use super::file_name;

    /// The store name a shown name stands for, by the rule of docs/REFERENCE.md (the inverse of
    /// [`file_name`], written from the rule rather than from the encoder).
    fn decode(shown: &str) -> String {
        match shown {
            "%00" => return String::new(),
            "%2E" => return ".".into(),
            "%2E%2E" => return "..".into(),
            _ => {}
        }
        let bytes = shown.as_bytes();
        let mut out = Vec::new();
        let mut i = 0;
        while i < bytes.len() {
            let hex = bytes
                .get(i + 1..i + 3)
                .and_then(|h| std::str::from_utf8(h).ok());
            match (bytes[i], hex.and_then(|h| u8::from_str_radix(h, 16).ok())) {
                (b'%', Some(byte)) => {
                    out.push(byte);
                    i += 3;
                }
                (byte, _) => {
                    out.push(byte);
                    i += 1;
                }
            }
        }
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn valid_names_are_kept() {
        for name in [
            "obs",
            "my data",
            "données-ß-細胞",
            "50%",
            "100% pure",
            "%zz",
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

    #[test]
    fn names_that_look_encoded_are_encoded() {
        assert_eq!(file_name("a%2Fb"), "a%252Fb");
        assert_eq!(file_name("%00"), "%2500");
        assert_eq!(file_name("%2E"), "%252E");
        assert_ne!(file_name("a/b"), file_name("a%2Fb"));
    }

    proptest::proptest! {
        #[test]
        fn encoded_names_are_always_file_names(name in "\\PC*") {
            let encoded = file_name(&name);
            proptest::prop_assert!(!encoded.is_empty());
            proptest::prop_assert!(!encoded.contains('/') && !encoded.contains('\0'));
            proptest::prop_assert!(encoded != "." && encoded != "..");
        }

        #[test]
        fn every_name_decodes_back_to_itself(name in "[a-c%/.2EF0]{0,8}") {
            // Names of the characters that matter: `%`, `/`, `.` and hex digits.
            proptest::prop_assert_eq!(decode(&file_name(&name)), name);
        }
    }
}
