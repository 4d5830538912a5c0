//! Turns fastjson's non-standard object keys into standard JSON before parsing.
//!
//! Java's fastjson writes maps with integer keys without quotes (`{0:"a",1:"b"}`, spec §12,
//! quirk Q13). `serde_json` only reads quoted keys, so bodies coming from Java brokers are passed
//! through [`quote_numeric_keys`] first. The scan is a single pass over the bytes that tracks
//! whether it is inside a string and whether the next token is an object key; standard input is
//! returned borrowed, without copying.

use std::borrow::Cow;

/// Where the scanner is inside the container it is currently reading.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Container {
    Object,
    Array,
}

/// Returns `input` with every unquoted numeric object key (`{12:...}`, `{-1:...}`) wrapped in
/// double quotes. Anything else is copied unchanged; malformed input is left for the JSON parser
/// to reject.
pub fn quote_numeric_keys(input: &[u8]) -> Cow<'_, [u8]> {
    let Some(first) = find_first_unquoted_key(input) else {
        return Cow::Borrowed(input);
    };
    let mut out = Vec::with_capacity(input.len() + 16);
    out.extend_from_slice(&input[..first]);
    let mut scanner = Scanner::default();
    // Replay the prefix to get the scanner state at `first`.
    for &b in &input[..first] {
        scanner.step(b);
    }
    let mut i = first;
    while i < input.len() {
        let b = input[i];
        if scanner.at_key_position() && is_number_start(b) {
            let end = numeric_key_end(input, i);
            out.push(b'"');
            out.extend_from_slice(&input[i..end]);
            out.push(b'"');
            // The quoted key behaves like a string token followed by the ':' still to come.
            scanner.expect_key = false;
            i = end;
            continue;
        }
        scanner.step(b);
        out.push(b);
        i += 1;
    }
    Cow::Owned(out)
}

/// Offset of the first unquoted numeric key, if there is one.
fn find_first_unquoted_key(input: &[u8]) -> Option<usize> {
    let mut scanner = Scanner::default();
    for (i, &b) in input.iter().enumerate() {
        if scanner.at_key_position() && is_number_start(b) {
            return Some(i);
        }
        scanner.step(b);
    }
    None
}

fn is_number_start(b: u8) -> bool {
    b.is_ascii_digit() || b == b'-'
}

/// End (exclusive) of a key made of number characters starting at `start`.
fn numeric_key_end(input: &[u8], start: usize) -> usize {
    let mut end = start;
    while end < input.len() && matches!(input[end], b'0'..=b'9' | b'-' | b'+' | b'.' | b'e' | b'E')
    {
        end += 1;
    }
    end
}

/// Minimal JSON lexer state: string/escape tracking and "next token is an object key".
#[derive(Default)]
struct Scanner {
    stack: Vec<Container>,
    in_string: bool,
    escaped: bool,
    expect_key: bool,
}

impl Scanner {
    fn at_key_position(&self) -> bool {
        !self.in_string && self.expect_key
    }

    fn step(&mut self, b: u8) {
        if self.in_string {
            if self.escaped {
                self.escaped = false;
            } else if b == b'\\' {
                self.escaped = true;
            } else if b == b'"' {
                self.in_string = false;
            }
            return;
        }
        match b {
            b'"' => {
                self.in_string = true;
                self.expect_key = false;
            }
            b'{' => {
                self.stack.push(Container::Object);
                self.expect_key = true;
            }
            b'[' => {
                self.stack.push(Container::Array);
                self.expect_key = false;
            }
            b'}' | b']' => {
                self.stack.pop();
                self.expect_key = false;
            }
            b',' => {
                self.expect_key = self.stack.last() == Some(&Container::Object);
            }
            b' ' | b'\t' | b'\r' | b'\n' => {}
            _ => self.expect_key = false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(s: &str) -> String {
        String::from_utf8(quote_numeric_keys(s.as_bytes()).into_owned()).unwrap()
    }

    #[test]
    fn standard_json_is_borrowed_unchanged() {
        let s = br#"{"a":[1,2,{"0":"x"}],"b":"{1:2}"}"#;
        assert!(matches!(quote_numeric_keys(s), Cow::Borrowed(_)));
    }

    #[test]
    fn unquoted_integer_keys_get_quotes() {
        assert_eq!(q(r#"{0:"a",1:"b"}"#), r#"{"0":"a","1":"b"}"#);
        assert_eq!(
            q(r#"{"t":{-1:"a", 12 :3}}"#),
            r#"{"t":{"-1":"a", "12" :3}}"#
        );
    }

    #[test]
    fn array_numbers_and_values_are_untouched() {
        assert_eq!(q(r#"{"a":[1,-2,3],5:6}"#), r#"{"a":[1,-2,3],"5":6}"#);
        assert_eq!(q(r#"[{"k":1},{2:3}]"#), r#"[{"k":1},{"2":3}]"#);
    }

    #[test]
    fn strings_containing_braces_are_not_rewritten() {
        assert_eq!(
            q(r#"{"s":"{1:2,3:4}",7:"\"{8:9"}"#),
            r#"{"s":"{1:2,3:4}","7":"\"{8:9"}"#
        );
    }

    #[test]
    fn parses_with_serde_after_rewrite() {
        let v: std::collections::BTreeMap<i64, String> =
            serde_json::from_slice(&quote_numeric_keys(br#"{0:"a",3:"b"}"#)).unwrap();
        assert_eq!(v.get(&3).map(String::as_str), Some("b"));
    }
}
