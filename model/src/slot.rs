//! Redis Cluster hash slots: which of the 16,384 slots a key belongs to, as every cluster
//! node computes it (`keyHashSlot` in Redis's `cluster.c`): CRC16-CCITT (XMODEM) of the key,
//! or of its hash tag, modulo 16,384.
//!
//! A hash tag is the part between the first `{` and the first `}` after it, when that part
//! is not empty: `{user1000}.following` and `{user1000}.followers` share a slot, so a
//! multi-key command over them is legal in a cluster. `foo{}{bar}` hashes whole (its first
//! tag is empty). Cluster mode (issue #9, item 4) computes the slot when a request is made,
//! so the cluster-wide rate stays the target whatever the node count.

/// Slots in a Redis Cluster.
pub const SLOTS: u16 = 16_384;

/// CRC16-CCITT (XMODEM: polynomial 0x1021, initial value 0), as Redis's `crc16.c`.
pub fn crc16(bytes: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &b in bytes {
        crc ^= u16::from(b) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc
}

/// The part of `key` that is hashed: its hash tag when it has a non-empty one, else all.
pub fn hashed_part(key: &[u8]) -> &[u8] {
    if let Some(open) = key.iter().position(|&b| b == b'{')
        && let Some(len) = key[open + 1..].iter().position(|&b| b == b'}')
        && len > 0
    {
        return &key[open + 1..open + 1 + len];
    }
    key
}

/// The cluster slot of `key` (0 to 16,383).
pub fn key_slot(key: &[u8]) -> u16 {
    crc16(hashed_part(key)) & (SLOTS - 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc16_is_xmodem() {
        // The check value of CRC-16/XMODEM, and Redis's own test vector in crc16.c.
        assert_eq!(crc16(b"123456789"), 0x31c3);
        assert_eq!(crc16(b""), 0);
    }

    #[test]
    fn slots_match_cluster_keyslot_including_hash_tags() {
        // `CLUSTER KEYSLOT` on redis 7.0 and valkey 8.1.
        assert_eq!(key_slot(b"foo"), 12182);
        assert_eq!(key_slot(b"{user1000}.following"), 3443);
        assert_eq!(key_slot(b"{user1000}.followers"), 3443);
        assert_eq!(key_slot(b"foo{}{bar}"), 8363);
        // Only the first tag counts, and an unclosed brace hashes the whole key.
        assert_eq!(key_slot(b"foo{bar}{zap}"), key_slot(b"bar"));
        assert_eq!(key_slot(b"foo{{bar}}zap"), key_slot(b"{bar"));
        assert_eq!(key_slot(b"foo{bar"), crc16(b"foo{bar") & 16383);
        assert_eq!(hashed_part(b"a{b}c"), b"b");
        assert_eq!(hashed_part(b"{}"), b"{}");
    }

    proptest::proptest! {
        /// Every slot is in range, and a tag decides the slot whatever surrounds it.
        #[test]
        fn a_tag_decides_the_slot(pre in "[a-z:]{0,8}", tag in "[a-z0-9]{1,12}", post in "[a-z{}:]{0,8}") {
            let key = format!("{pre}{{{tag}}}{post}");
            proptest::prop_assert_eq!(key_slot(key.as_bytes()), key_slot(tag.as_bytes()));
            proptest::prop_assert!(key_slot(key.as_bytes()) < SLOTS);
        }
    }
}
