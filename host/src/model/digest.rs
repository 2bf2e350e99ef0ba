//! Content addresses: the sha256 of some bytes, in lower-case hex. A
//! plugin blob is named by its digest, and so is a stored task definition
//! ([`super::definition::Definition::digest`]).

use sha2::{Digest, Sha256};

/// The sha256 of `bytes`, in lower-case hex: the name of a blob.
pub fn digest_of(bytes: &[u8]) -> String {
    let mut digester = Digester::default();
    digester.update(bytes);
    digester.finish()
}

/// [`digest_of`] of bytes given a piece at a time (an import checks a
/// blob's digest without holding its bytes: `crate::store::dump`).
#[derive(Default)]
pub struct Digester(Sha256);

impl Digester {
    /// Adds the next piece of the bytes.
    pub fn update(&mut self, piece: &[u8]) {
        self.0.update(piece);
    }

    /// The digest of every piece added, in order.
    pub fn finish(self) -> String {
        hex::encode(self.0.finalize())
    }
}
