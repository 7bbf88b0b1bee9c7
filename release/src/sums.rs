//! SHA256SUMS, as `sha256sum` writes it and `sha256sum -c` reads it.

use sha2::{Digest, Sha256};
use std::fmt::Write;

/// The sha256 of `bytes` in lowercase hex.
pub fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .fold(String::with_capacity(64), |mut hex, byte| {
            let _ = write!(hex, "{byte:02x}");
            hex
        })
}

/// A line `<sha256>  <name>` per file, in the order given.
pub fn sha256sums<'a>(files: impl IntoIterator<Item = (&'a str, &'a str)>) -> String {
    files
        .into_iter()
        .map(|(name, sha256)| format!("{sha256}  {name}\n"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lines_are_sha256sums() {
        let empty = sha256_hex(b"");
        assert_eq!(
            empty,
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
        assert_eq!(sha256sums([("a", empty.as_str())]), format!("{empty}  a\n"));
    }
}
