//! Bash's `$'…'` escapes, decoded once for the two places that read them: the classifier (a
//! command name written as `$'\x67it'`) and the runtime (the exported variables bash reports as
//! `declare -x V=$'…'`).

/// Decodes the inside of `$'…'` (without the quotes): backslash escapes as in C (`\x67`, `\147`,
/// `\u0067`, `\n`, `\cX`, …). An escape bash would leave alone (`\q`, `\x` without digits, an
/// invalid code point) stays as written. NULs are kept: a caller that needs bash's word semantics
/// cuts at the first one.
pub fn decode(text: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(text.len());
    let digits = |from: usize, max: usize, radix: u32| -> (u32, usize) {
        let mut value = 0u32;
        let mut n = 0;
        while n < max {
            match text
                .get(from.saturating_add(n))
                .and_then(|&c| (c as char).to_digit(radix))
            {
                Some(d) => value = value.saturating_mul(radix).saturating_add(d),
                None => break,
            }
            n += 1;
        }
        (value, n)
    };
    let mut i = 0;
    while let Some(&b) = text.get(i) {
        let Some(&c) = text.get(i.saturating_add(1)).filter(|_| b == b'\\') else {
            out.push(b);
            i = i.saturating_add(1);
            continue;
        };
        i = i.saturating_add(2);
        let simple = match c {
            b'a' => Some(7),
            b'b' => Some(8),
            b'e' | b'E' => Some(27),
            b'f' => Some(12),
            b'n' => Some(b'\n'),
            b'r' => Some(b'\r'),
            b't' => Some(b'\t'),
            b'v' => Some(11),
            b'\\' | b'\'' | b'"' | b'?' => Some(c),
            _ => None,
        };
        if let Some(byte) = simple {
            out.push(byte);
            continue;
        }
        match c {
            b'0'..=b'7' => {
                let (v, n) = digits(i.saturating_sub(1), 3, 8);
                out.push((v & 0xff) as u8);
                i = i.saturating_add(n).saturating_sub(1);
            }
            b'x' => match digits(i, 2, 16) {
                (_, 0) => out.extend_from_slice(b"\\x"),
                (v, n) => {
                    out.push(v as u8);
                    i = i.saturating_add(n);
                }
            },
            b'u' | b'U' => {
                let (v, n) = digits(i, if c == b'u' { 4 } else { 8 }, 16);
                match char::from_u32(v).filter(|_| n > 0) {
                    Some(ch) => {
                        let mut buf = [0u8; 4];
                        out.extend_from_slice(ch.encode_utf8(&mut buf).as_bytes());
                        i = i.saturating_add(n);
                    }
                    None => out.extend_from_slice(&[b'\\', c]),
                }
            }
            b'c' => {
                if let Some(&ctl) = text.get(i) {
                    out.push(ctl.to_ascii_uppercase() ^ 0x40);
                    i = i.saturating_add(1);
                }
            }
            other => out.extend_from_slice(&[b'\\', other]),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::decode;

    #[test]
    fn decodes_what_bash_decodes() {
        let cases: [(&[u8], &[u8]); 9] = [
            (br"\x67it", b"git"),
            (br"\147it", b"git"),
            (br"\u0067it", b"git"),
            (br"a\nb\tc", b"a\nb\tc"),
            (br"\cA\c?", b"\x01\x7f"),
            (br"it\'s", b"it's"),
            (br"\q\x", br"\q\x"),
            (br"\0", b"\0"),
            (br"\U0001F600", "\u{1F600}".as_bytes()),
        ];
        for (input, want) in cases {
            assert_eq!(decode(input), want, "{}", String::from_utf8_lossy(input));
        }
    }

    #[test]
    fn a_trailing_backslash_stays() {
        assert_eq!(decode(br"abc\"), br"abc\");
    }
}
