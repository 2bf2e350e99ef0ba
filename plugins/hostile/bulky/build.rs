//! Writes the plugin's data: `BULKY_BYTES` of pseudo-random bytes (xorshift,
//! fixed seed, so every build is the same). Random rather than zero so the
//! bytes land in a data segment (zeroes would go to `.bss` and cost nothing).

use std::io::Write as _;

/// 4 MiB: large enough that a few distinct copies dominate what the host
/// keeps per loaded plugin, small enough to upload many in a test.
const BULKY_BYTES: usize = 4 << 20;

fn main() {
    let out = std::path::PathBuf::from(std::env::var_os("OUT_DIR").expect("set by cargo"));
    let mut state: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut bytes = Vec::with_capacity(BULKY_BYTES);
    while bytes.len() < BULKY_BYTES {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        bytes.extend_from_slice(&state.to_le_bytes());
    }
    let mut file = std::fs::File::create(out.join("bulky.bin")).expect("creating bulky.bin");
    file.write_all(&bytes).expect("writing bulky.bin");
    println!("cargo:rerun-if-changed=build.rs");
}
