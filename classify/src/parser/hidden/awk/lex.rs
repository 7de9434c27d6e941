//! awk's tokens: a lexer good enough to find calls, pipes and strings in a program (not a parser).

/// Keywords after which an operand (so a regular expression) is expected.
pub const OPERAND_NEXT: &[&str] = &[
    "print", "printf", "return", "case", "in", "do", "else", "exit",
];
/// Keywords whose `(…)` condition is followed by a statement, which may begin with a regexp.
pub const CONDITION: &[&str] = &["if", "while", "for", "switch"];

/// `awk::system` is `system`.
pub fn unqualified(name: &str) -> &str {
    name.rsplit("::").next().unwrap_or(name)
}

#[derive(Debug, PartialEq, Eq)]
pub enum Tok<'a> {
    /// A string constant's bytes after escapes; `false` when an escape's meaning differs between
    /// awk versions (`\x` with more than two hex digits).
    Str(Vec<u8>, bool),
    Regex,
    Num,
    Name(&'a str),
    /// `@include`, `@load`, `@namespace`, or an indirect call `@f`.
    At(&'a str),
    Op(&'a [u8]),
    Newline,
}

const OPS3: &[&[u8]] = &[b"**="];
const OPS2: &[&[u8]] = &[
    b"||", b"&&", b"|&", b"==", b"!=", b"<=", b">=", b"++", b"--", b"+=", b"-=", b"*=", b"/=",
    b"%=", b"^=", b"**", b"!~", b">>",
];

pub fn lex(src: &[u8]) -> Result<Vec<Tok<'_>>, ()> {
    let mut toks: Vec<Tok> = Vec::new();
    // Whether a `/` here starts a regular expression (an operand is expected).
    let mut regex_ok = true;
    // For each open parenthesis: whether it holds an `if`/`while`/`for`/`switch` condition.
    let mut parens: Vec<bool> = Vec::new();
    let mut i = 0;
    while let Some(&c) = src.get(i) {
        match c {
            b' ' | b'\t' | b'\r' | b'\x0b' | b'\x0c' => i += 1,
            b'\\' => match (src.get(i + 1), src.get(i + 2)) {
                (Some(b'\n'), _) => i += 2,
                (Some(b'\r'), Some(b'\n')) => i += 3,
                _ => return Err(()),
            },
            b'\n' => {
                toks.push(Tok::Newline);
                regex_ok = true;
                i += 1;
            }
            b'#' => {
                while src.get(i).is_some_and(|&b| b != b'\n') {
                    i += 1;
                }
            }
            b'"' => {
                let (value, certain, end) = string(src, i + 1)?;
                toks.push(Tok::Str(value, certain));
                regex_ok = false;
                i = end;
            }
            b'/' if regex_ok => {
                i = regex_end(src, i + 1)?;
                toks.push(Tok::Regex);
                regex_ok = false;
            }
            b'@' if src.get(i + 1) == Some(&b'/') => {
                // gawk's strongly typed regexp constant `@/…/`.
                i = regex_end(src, i + 2)?;
                toks.push(Tok::Regex);
                regex_ok = false;
            }
            b'@' => {
                let end = name_end(src, i + 1);
                let name = std::str::from_utf8(&src[i + 1..end]).map_err(|_| ())?;
                toks.push(Tok::At(name));
                regex_ok = false;
                i = end;
            }
            b'0'..=b'9' | b'.' if c != b'.' || src.get(i + 1).is_some_and(u8::is_ascii_digit) => {
                i += 1;
                while let Some(&b) = src.get(i) {
                    let sign = matches!(b, b'+' | b'-') && matches!(src[i - 1], b'e' | b'E');
                    if b.is_ascii_alphanumeric() || b == b'.' || sign {
                        i += 1;
                    } else {
                        break;
                    }
                }
                toks.push(Tok::Num);
                regex_ok = false;
            }
            b'a'..=b'z' | b'A'..=b'Z' | b'_' => {
                let end = name_end(src, i);
                let name = std::str::from_utf8(&src[i..end]).map_err(|_| ())?;
                regex_ok = OPERAND_NEXT.contains(&unqualified(name));
                toks.push(Tok::Name(name));
                i = end;
            }
            _ => {
                let len = [OPS3, OPS2]
                    .iter()
                    .zip([3, 2])
                    .find(|(ops, n)| src.get(i..i + n).is_some_and(|s| ops.contains(&s)))
                    .map_or(1, |(_, n)| n);
                let op = &src[i..i + len];
                match op {
                    b"(" => {
                        let condition = matches!(toks.last(), Some(Tok::Name(n)) if CONDITION.contains(&unqualified(n)));
                        parens.push(condition);
                        regex_ok = true;
                    }
                    b")" => regex_ok = parens.pop().unwrap_or(false),
                    b"]" | b"++" | b"--" => regex_ok = false,
                    _ => regex_ok = true,
                }
                toks.push(Tok::Op(op));
                i += len;
            }
        }
    }
    Ok(toks)
}

/// End of a name: letters, digits, `_`, and gawk's `ns::name`.
fn name_end(src: &[u8], mut i: usize) -> usize {
    loop {
        match src.get(i) {
            Some(b) if b.is_ascii_alphanumeric() || *b == b'_' => i += 1,
            Some(b':') if src.get(i + 1) == Some(&b':') => i += 2,
            _ => return i,
        }
    }
}

/// Reads a string constant after its opening quote: its bytes, whether every escape is read the
/// same by all awks, and the index after the closing quote. A raw newline is an error in awk.
fn string(src: &[u8], mut i: usize) -> Result<(Vec<u8>, bool, usize), ()> {
    let mut value = Vec::new();
    let mut certain = true;
    loop {
        let c = *src.get(i).ok_or(())?;
        i += 1;
        match c {
            b'"' => return Ok((value, certain, i)),
            b'\n' => return Err(()),
            b'\\' => {
                let e = *src.get(i).ok_or(())?;
                i += 1;
                match e {
                    b'\n' => {}
                    b'n' => value.push(b'\n'),
                    b't' => value.push(b'\t'),
                    b'r' => value.push(b'\r'),
                    b'a' => value.push(7),
                    b'b' => value.push(8),
                    b'f' => value.push(12),
                    b'v' => value.push(11),
                    b'0'..=b'7' => {
                        let mut n = u32::from(e - b'0');
                        for _ in 0..2 {
                            match src.get(i) {
                                Some(d @ b'0'..=b'7') => {
                                    n = n * 8 + u32::from(d - b'0');
                                    i += 1;
                                }
                                _ => break,
                            }
                        }
                        value.push((n & 0xff) as u8);
                    }
                    b'x' => {
                        let digits = src[i..]
                            .iter()
                            .take_while(|d| d.is_ascii_hexdigit())
                            .count();
                        // gawk 5 reads two hex digits; older awks read them all.
                        certain &= digits <= 2;
                        let take = digits.min(2);
                        match std::str::from_utf8(&src[i..i + take])
                            .ok()
                            .and_then(|h| u8::from_str_radix(h, 16).ok())
                        {
                            Some(b) => value.push(b),
                            None => {
                                value.extend_from_slice(b"\\x");
                                certain = false;
                            }
                        }
                        i += take;
                    }
                    // `\"`, `\\`, `\/`, and (gawk: with a warning) any other character as itself.
                    other => value.push(other),
                }
            }
            _ => value.push(c),
        }
    }
}

/// Reads a regular expression constant after its opening `/`; returns the index after the
/// closing `/`. A `/` inside a bracket expression does not close it (gawk and mawk agree).
fn regex_end(src: &[u8], mut i: usize) -> Result<usize, ()> {
    let mut in_bracket = false;
    loop {
        let c = *src.get(i).ok_or(())?;
        match c {
            b'\n' => return Err(()),
            b'\\' => {
                src.get(i + 1).ok_or(())?;
                i += 2;
            }
            b'[' if !in_bracket => {
                in_bracket = true;
                i += 1;
                if src.get(i) == Some(&b'^') {
                    i += 1;
                }
                if src.get(i) == Some(&b']') {
                    i += 1;
                }
            }
            b'[' if matches!(src.get(i + 1), Some(b':' | b'.' | b'=')) => {
                // `[:alpha:]`, `[.x.]`, `[=x=]` inside a bracket expression.
                let close = [src[i + 1], b']'];
                let rest = &src[i + 2..];
                let end = rest.windows(2).position(|w| w == close).ok_or(())?;
                i += 2 + end + 2;
            }
            b']' if in_bracket => {
                in_bracket = false;
                i += 1;
            }
            b'/' if !in_bracket => return Ok(i + 1),
            _ => i += 1,
        }
    }
}
