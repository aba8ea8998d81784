//! LSNs (WAL positions) in PostgreSQL's text form, `16/B374D848`.

/// Formats an LSN as PostgreSQL does: `16/B374D848`.
pub fn format_lsn(lsn: u64) -> String {
    format!("{:X}/{:X}", lsn >> 32, lsn & 0xFFFF_FFFF)
}

/// Parses an LSN as PostgreSQL's `pg_lsn` input does: two groups of 1 to 8 hex digits
/// (either case) around a `/`, nothing else.
pub fn parse_lsn(text: &str) -> Option<u64> {
    let (high, low) = text.split_once('/')?;
    let part = |p: &str| {
        let hex = !p.is_empty() && p.len() <= 8 && p.bytes().all(|b| b.is_ascii_hexdigit());
        hex.then(|| u32::from_str_radix(p, 16).ok()).flatten()
    };
    Some((u64::from(part(high)?) << 32) | u64::from(part(low)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lsns_format_and_parse_as_postgresql_does() {
        assert_eq!(format_lsn(0x16_B374_D848), "16/B374D848");
        assert_eq!(format_lsn(0), "0/0");
        assert_eq!(format_lsn(u64::MAX), "FFFFFFFF/FFFFFFFF");
        assert_eq!(parse_lsn("16/B374D848"), Some(0x16_B374_D848));
        assert_eq!(parse_lsn("16/b374d848"), Some(0x16_B374_D848));
        assert_eq!(parse_lsn("00000016/0000000A"), Some(0x16_0000_000A));
        for bad in [
            "",
            "/",
            "1/",
            "/1",
            "+1/2",
            "1/+2",
            "-1/2",
            "123456789/0",
            "0/123456789",
            "1/2/3",
            " 1/2",
            "1/2 ",
            "G/0",
            "1_0/0",
            "1.5/0",
        ] {
            assert_eq!(parse_lsn(bad), None, "{bad:?}");
        }
    }
}
