//! Lower-case hexadecimal, the one spelling of digests and random ids across Warden (a
//! leaf: the plan's digest and config edits' version hashes both use it).

/// Lower-case hexadecimal.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
