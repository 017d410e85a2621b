//! Digests for cache keys and snapshot identities: BLAKE3 over structured bytes, 128 bits
//! as hex. Every item is written with a tag and its length, so that no two different
//! sequences of items (`["ab", ""]` and `["a", "b"]`, a number and the text of it) feed the
//! hash the same bytes; the same items give the same digest in every run.

use crate::tiledb::Value;

/// A digest being made: items go in with [`Digest::text`], [`Digest::bytes`],
/// [`Digest::number`] and [`Digest::flag`], and [`Digest::finish`] gives its hex.
#[derive(Clone)]
pub struct Digest(blake3::Hasher);

impl Digest {
    /// A digest for `purpose`: digests made for different purposes never collide.
    pub fn new(purpose: &str) -> Digest {
        let mut digest = Digest(blake3::Hasher::new());
        digest.text(purpose);
        digest
    }

    fn item(&mut self, tag: u8, bytes: &[u8]) -> &mut Self {
        self.0.update(&[tag]);
        self.0.update(&(bytes.len() as u64).to_le_bytes());
        self.0.update(bytes);
        self
    }

    pub fn text(&mut self, text: &str) -> &mut Self {
        self.item(b't', text.as_bytes())
    }

    pub fn bytes(&mut self, bytes: &[u8]) -> &mut Self {
        self.item(b'b', bytes)
    }

    pub fn number(&mut self, number: u64) -> &mut Self {
        self.item(b'n', &number.to_le_bytes())
    }

    pub fn flag(&mut self, flag: bool) -> &mut Self {
        self.item(b'f', &[u8::from(flag)])
    }

    /// Marks what comes next (a variant, an optional value present or not): `tag` must be
    /// one byte of the caller's own choosing per kind of item.
    pub fn mark(&mut self, tag: u8) -> &mut Self {
        self.item(b'm', &[tag])
    }

    /// A value of a cell or a bound, its variant marked.
    pub fn value(&mut self, value: &Value) -> &mut Self {
        match value {
            Value::Int(i) => self.mark(b'i').bytes(&i.to_le_bytes()),
            Value::UInt(u) => self.mark(b'u').number(*u),
            Value::Float(f) => self.mark(b'f').number(f.to_bits()),
            Value::Bool(b) => self.mark(b'b').flag(*b),
            Value::Text(t) => self.mark(b't').text(t),
            Value::Bytes(b) => self.mark(b'y').bytes(b),
        }
    }

    /// The first 128 bits of the hash, as 32 hex digits.
    pub fn finish(&self) -> String {
        let hash = self.0.finalize();
        hash.as_bytes()[..16]
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::Digest;

    fn of(items: &[&str]) -> String {
        let mut d = Digest::new("test");
        for item in items {
            d.text(item);
        }
        d.finish()
    }

    #[test]
    fn digests_are_stable_and_distinguish_splits_and_kinds() {
        assert_eq!(of(&["a", "b"]), of(&["a", "b"]));
        assert_ne!(of(&["ab", ""]), of(&["a", "b"]));
        assert_ne!(of(&["ab"]), of(&["a", "b"]));
        assert_eq!(of(&["a"]).len(), 32);
        let mut number = Digest::new("test");
        number.number(7);
        let mut text = Digest::new("test");
        text.bytes(&7u64.to_le_bytes());
        assert_ne!(number.finish(), text.finish());
        assert_ne!(Digest::new("a").finish(), Digest::new("b").finish());
    }
}
