//! What a `blob` or `kv` line's hex holds, read the one way both passes of
//! an import read it: the whole-file check ([`super::check`]), which keeps
//! nothing, and the write pass (`import.rs`), which keeps the bytes. So a
//! line the write pass would refuse is refused by the check, before
//! anything is written, with the same error.
//!
//! Hex is decoded a piece at a time into a buffer of [`PIECE`] bytes, so
//! the check holds no blob's bytes besides its line.

use crate::store::rules::Digester;

use super::{Error, Result};

/// Bytes decoded per piece: a blob's bytes are hashed a piece at a time.
const PIECE: usize = 64 << 10;

/// The bytes of blob line `number`, named `digest`, written as `hex`:
/// each piece given to `keep`, in order. Refused unless `hex` is hex and
/// the bytes' digest is `digest` (the content names a blob).
pub(super) fn blob(
    number: usize,
    digest: &str,
    hex: &str,
    mut keep: impl FnMut(&[u8]),
) -> Result<()> {
    let mut digester = Digester::default();
    decode(hex, |piece| {
        digester.update(piece);
        keep(piece);
    })
    .map_err(|e| Error::Damaged(format!("line {number}: blob bytes: {e}")))?;
    let held = digester.finish();
    if held != digest {
        return Err(Error::Damaged(format!(
            "line {number}: blob {digest} holds bytes of digest {held}"
        )));
    }
    Ok(())
}

/// The value of KV line `number`, written as `hex`: each piece given to
/// `keep`, in order. Refused unless `hex` is hex.
pub(super) fn kv_value(number: usize, hex: &str, keep: impl FnMut(&[u8])) -> Result<()> {
    decode(hex, keep).map_err(|e| Error::Damaged(format!("line {number}: KV value: {e}")))
}

/// Decodes `text` (hex, either case) a piece at a time, giving each piece
/// to `keep`; the errors `hex::decode` gives, positions counted from the
/// start of `text`.
fn decode(text: &str, mut keep: impl FnMut(&[u8])) -> Result<(), hex::FromHexError> {
    let text = text.as_bytes();
    if !text.len().is_multiple_of(2) {
        return Err(hex::FromHexError::OddLength);
    }
    let mut buffer = vec![0; PIECE.min(text.len() / 2)];
    for (n, digits) in text.chunks(2 * PIECE).enumerate() {
        let piece = &mut buffer[..digits.len() / 2];
        hex::decode_to_slice(digits, piece).map_err(|e| match e {
            hex::FromHexError::InvalidHexCharacter { c, index } => {
                hex::FromHexError::InvalidHexCharacter {
                    c,
                    index: index + n * 2 * PIECE,
                }
            }
            e => e,
        })?;
        keep(piece);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::rules::digest_of;

    fn decoded(text: &str) -> Result<Vec<u8>, hex::FromHexError> {
        let mut out = Vec::new();
        decode(text, |piece| out.extend_from_slice(piece)).map(|()| out)
    }

    /// Pieces decode what one call of `hex::decode` would, errors and
    /// their positions included, on either side of a piece's end.
    #[test]
    fn decoding_in_pieces_is_decoding_whole() {
        let bytes: Vec<u8> = (0..2 * PIECE + 7).map(|i| (i * 7) as u8).collect();
        let text = hex::encode(&bytes);
        assert_eq!(decoded(&text).unwrap(), bytes);
        assert_eq!(decoded(&text.to_uppercase()).unwrap(), bytes);
        assert_eq!(decoded("").unwrap(), Vec::<u8>::new());
        for at in [
            0,
            1,
            2 * PIECE - 1,
            2 * PIECE,
            2 * PIECE + 3,
            text.len() - 1,
        ] {
            let mut bad = text.clone();
            bad.replace_range(at..at + 1, "g");
            assert_eq!(decoded(&bad), hex::decode(&bad), "a bad digit at {at}");
        }
        assert_eq!(decoded("abc"), Err(hex::FromHexError::OddLength));
    }

    #[test]
    fn a_blob_is_its_bytes_named_by_their_digest() {
        let bytes = vec![1u8; PIECE + 1];
        let digest = digest_of(&bytes);
        let mut kept = Vec::new();
        blob(3, &digest, &hex::encode(&bytes), |p| {
            kept.extend_from_slice(p)
        })
        .unwrap();
        assert_eq!(kept, bytes);
        let e = blob(3, &digest_of(b"other"), &hex::encode(&bytes), |_| {}).unwrap_err();
        assert!(
            e.to_string()
                .contains(&format!("line 3: blob {}", digest_of(b"other"))),
            "{e}"
        );
        let e = blob(4, &digest, "zz", |_| {}).unwrap_err();
        assert!(
            e.to_string()
                .contains("line 4: blob bytes: Invalid character"),
            "{e}"
        );
        let e = kv_value(5, "0", |_| {}).unwrap_err();
        assert!(
            e.to_string().contains("line 5: KV value: Odd number"),
            "{e}"
        );
    }
}
