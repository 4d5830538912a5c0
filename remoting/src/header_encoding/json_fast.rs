//! Allocation-light parser for the JSON headers real clients send (fastjson, Go, C++ shape):
//! one flat object whose known keys hold integers, strings or null and whose `extFields` is a
//! flat object of strings, integers, booleans or null.
//!
//! It answers `None` for anything it is not sure about (floats, nested unknown values,
//! surrogate escapes, out-of-range numbers, malformed text, ...), and the caller then runs the
//! lenient serde parser, which stays the single source of truth for every error and every
//! unusual input. Invariant: whenever this returns `Some(cmd)`, the serde path returns
//! `Ok(cmd)` for the same bytes (checked by the differential property test below).
//!
//! Cost model: the header is not checked for UTF-8 as a whole. Outside strings the parser
//! only accepts ASCII syntax, the known keys and `"JAVA"` are matched as bytes, and the text
//! it keeps is checked where it is kept: from the first non-empty `extFields` object to the
//! end of the header (copied once into the map's text buffer, so entries are spans into it),
//! and each string read elsewhere (remark, unknown keys, numeric strings, other languages).

use std::borrow::Cow;

use crate::code::LanguageCode;
use crate::command::RemotingCommand;
use crate::ext_fields::{ExtFieldsBuf, Span};
use crate::header_encoding::scan;

use crate::header_encoding::HeaderKey as Key;

/// Parses the common header shape; `None` means "use the general parser".
pub(crate) fn decode(bytes: &[u8]) -> Option<RemotingCommand> {
    let mut p = Parser {
        b: bytes,
        i: 0,
        valid: "",
        valid_from: bytes.len(),
    };
    let mut code = None;
    let mut language = LanguageCode::OTHER;
    let mut version = 0;
    let mut opaque = 0;
    let mut flag = 0;
    let mut remark = None;
    let mut ext = ExtFieldsBuf::new();
    p.ws();
    p.eat(b'{')?;
    p.ws();
    if p.peek()? == b'}' {
        return None; // no `code`: the general parser reports it
    }
    loop {
        let key = p.key()?;
        p.ws();
        p.eat(b':')?;
        p.ws();
        match key {
            Key::Code => code = Some(p.lenient_i32()?),
            Key::Language => language = p.language()?,
            Key::Version => version = p.lenient_i32()?,
            Key::Opaque => opaque = p.lenient_i32()?,
            Key::Flag => flag = p.lenient_i32()?,
            Key::Remark => remark = p.nullable_string()?,
            Key::ExtFields => p.ext_fields(&mut ext)?,
            Key::Other => p.skip_scalar()?,
        }
        p.ws();
        match p.next()? {
            b',' => p.ws(),
            b'}' => break,
            _ => return None,
        }
    }
    p.ws();
    if p.i != p.b.len() {
        return None;
    }
    Some(RemotingCommand::from_parts(
        code?,
        language,
        version,
        opaque,
        flag,
        remark,
        ext.into(),
    ))
}

/// The common form of an `extFields` entry, `"key":"value"` written compactly with a key
/// without escapes (fastjson, Go and this crate), at `at`: where the key lies, where the
/// value starts and the index of the first byte in the value that is not plain text (its
/// closing quote unless it has escapes). `None` for any other form.
#[inline(always)]
fn compact_entry(b: &[u8], at: usize) -> Option<(Span, usize, usize)> {
    if b.get(at) != Some(&b'"') {
        return None;
    }
    let key = at + 1;
    let key_end = key + scan::first_special(b.get(key..)?)?;
    if b.get(key_end..key_end + 3)? != b"\":\"" {
        return None;
    }
    let value = key_end + 3;
    let stop = value + scan::first_special(b.get(value..)?)?;
    Some(((key, key_end), value, stop))
}

/// The value of one hex digit.
fn hex(h: u8) -> Option<u8> {
    match h {
        b'0'..=b'9' => Some(h - b'0'),
        b'a'..=b'f' => Some(h - b'a' + 10),
        b'A'..=b'F' => Some(h - b'A' + 10),
        _ => None,
    }
}

/// An integer literal's value.
struct Int {
    value: i128,
}

struct Parser<'a> {
    b: &'a [u8],
    i: usize,
    /// `b[valid_from..]`, checked to be UTF-8 (empty, with `valid_from` at the end, until an
    /// `extFields` object needs it).
    valid: &'a str,
    valid_from: usize,
}

impl<'a> Parser<'a> {
    fn peek(&self) -> Option<u8> {
        self.b.get(self.i).copied()
    }

    fn next(&mut self) -> Option<u8> {
        let c = self.peek()?;
        self.i += 1;
        Some(c)
    }

    fn eat(&mut self, c: u8) -> Option<()> {
        (self.next()? == c).then_some(())
    }

    /// The bytes from the current position on.
    fn rest(&self) -> &'a [u8] {
        self.b.get(self.i..).unwrap_or_default()
    }

    /// JSON whitespace (the same four bytes serde_json skips).
    fn ws(&mut self) {
        while let Some(b' ' | b'\n' | b'\t' | b'\r') = self.peek() {
            self.i += 1;
        }
    }

    /// Consumes `lit` (`null`, `true`, `false`) if it comes next.
    fn literal(&mut self, lit: &[u8]) -> bool {
        if self.rest().starts_with(lit) {
            self.i += lit.len();
            true
        } else {
            false
        }
    }

    /// The text between `start` and `end` (both at ASCII bytes of a string's content, so on
    /// char boundaries of valid text); `None` when it is not UTF-8.
    fn text(&self, start: usize, end: usize) -> Option<&'a str> {
        match start.checked_sub(self.valid_from) {
            Some(from) => self.valid.get(from..from + (end - start)),
            None => std::str::from_utf8(self.b.get(start..end)?).ok(),
        }
    }

    /// Skips to the next byte that ends a plain run inside a string (`"`, `\\`, control).
    fn plain_run(&mut self) -> Option<u8> {
        let rest = self.rest();
        let n = scan::first_special(rest)?;
        self.i += n;
        Some(rest[n])
    }

    /// A top-level key. The keys this parser knows are matched as bytes when they come
    /// without escapes (always, in practice); any other key is read as a string.
    fn key(&mut self) -> Option<Key> {
        self.eat(b'"')?;
        let rest = self.rest();
        let (key, len) = match rest.first()? {
            b'c' if rest.starts_with(b"code\"") => (Key::Code, 4),
            b'e' if rest.starts_with(b"extFields\"") => (Key::ExtFields, 9),
            b'f' if rest.starts_with(b"flag\"") => (Key::Flag, 4),
            b'l' if rest.starts_with(b"language\"") => (Key::Language, 8),
            b'o' if rest.starts_with(b"opaque\"") => (Key::Opaque, 6),
            b'r' if rest.starts_with(b"remark\"") => (Key::Remark, 6),
            b's' if rest.starts_with(b"serializeTypeCurrentRPC\"") => (Key::Other, 23),
            b'v' if rest.starts_with(b"version\"") => (Key::Version, 7),
            _ => {
                self.i -= 1;
                return Some(Key::of(&self.string()?));
            }
        };
        self.i += len + 1;
        Some(key)
    }

    /// A string value; borrowed when it holds no escapes.
    fn string(&mut self) -> Option<Cow<'a, str>> {
        self.eat(b'"')?;
        let start = self.i;
        match self.plain_run()? {
            b'"' => {
                let s = self.text(start, self.i)?;
                self.i += 1;
                return Some(Cow::Borrowed(s));
            }
            b'\\' => {}
            _ => return None,
        }
        let mut out = String::with_capacity(self.i - start + 64);
        self.unescape_into(start, &mut out)?;
        Some(Cow::Owned(out))
    }

    /// The rest of a string with escapes, from `start` (after the opening quote; `self.i` at
    /// the first backslash), unescaped onto `out`; `self.i` ends after the closing quote.
    /// Answers whether an escape produced a byte JSON must escape (`"`, `\`, a control).
    fn unescape_into(&mut self, start: usize, out: &mut String) -> Option<bool> {
        let mut run = start;
        let mut special = false;
        loop {
            out.push_str(self.text(run, self.i)?);
            if self.next()? == b'"' {
                return Some(special);
            }
            // At a backslash.
            let c = match self.next()? {
                b'"' => '"',
                b'\\' => '\\',
                b'/' => '/',
                b'b' => '\u{8}',
                b'f' => '\u{c}',
                b'n' => '\n',
                b'r' => '\r',
                b't' => '\t',
                b'u' => match *self.b.get(self.i..self.i + 4)? {
                    // `\u00XX`, the usual form (properties separators): one byte, no lookup
                    // of a surrogate range.
                    [b'0', b'0', h, l] => {
                        self.i += 4;
                        char::from(hex(h)? << 4 | hex(l)?)
                    }
                    _ => self.unicode_escape()?,
                },
                _ => return None,
            };
            special |= c < ' ' || c == '"' || c == '\\';
            out.push(c);
            run = self.i;
            let n = scan::first_special(self.rest())?;
            self.i += n;
            if !matches!(self.b.get(self.i), Some(b'"' | b'\\')) {
                return None;
            }
        }
    }

    /// The four hex digits after `\u`; surrogates are left to the general parser.
    fn unicode_escape(&mut self) -> Option<char> {
        let digits = self.b.get(self.i..self.i + 4)?;
        let mut v = 0u32;
        for &h in digits {
            v = v * 16 + u32::from(hex(h)?);
        }
        self.i += 4;
        if (0xD800..=0xDFFF).contains(&v) {
            return None;
        }
        char::from_u32(v)
    }

    /// An integer literal exactly as serde_json reads it into i64/u64; `None` for floats,
    /// `-0`, leading zeros and values serde_json would turn into floats.
    fn int(&mut self) -> Option<Int> {
        let start = self.i;
        let neg = self.peek()? == b'-';
        if neg {
            self.i += 1;
        }
        let first = self.peek()?;
        if !first.is_ascii_digit() || (first == b'0' && neg) {
            return None;
        }
        let mut magnitude = 0u64;
        while let Some(d @ b'0'..=b'9') = self.peek() {
            magnitude = magnitude
                .checked_mul(10)?
                .checked_add(u64::from(d - b'0'))?;
            self.i += 1;
        }
        if first == b'0' && self.i - start > 1 {
            return None; // leading zero
        }
        if let Some(b'.' | b'e' | b'E') = self.peek() {
            return None;
        }
        let value = if neg {
            if magnitude > 1u64 << 63 {
                return None;
            }
            -i128::from(magnitude)
        } else {
            i128::from(magnitude)
        };
        Some(Int { value })
    }

    /// `code`/`version`/`opaque`/`flag`: a number, a numeric string, or null (0).
    #[inline]
    fn lenient_i32(&mut self) -> Option<i32> {
        match self.short_uint() {
            Some(v) => Some(v),
            None => self.other_i32(),
        }
    }

    /// [`Parser::lenient_i32`] past its common case.
    #[inline(never)]
    fn other_i32(&mut self) -> Option<i32> {
        match self.peek()? {
            b'"' => self.string()?.trim().parse::<i32>().ok(),
            b'n' => self.literal(b"null").then_some(0),
            _ => i32::try_from(self.int()?.value).ok(),
        }
    }

    /// The common case of an integer field: 1 to 9 plain digits (no sign, no leading zero)
    /// followed by a byte that cannot continue a number. Anything else (including the end
    /// of the input) is left to [`Parser::int`], which agrees on every input this accepts.
    #[inline]
    fn short_uint(&mut self) -> Option<i32> {
        let digits = self.b.get(self.i..)?;
        let mut v = 0i32;
        let mut n = 0;
        for &d in digits.iter().take(9) {
            if !d.is_ascii_digit() {
                break;
            }
            v = v * 10 + i32::from(d - b'0');
            n += 1;
        }
        let next = *digits.get(n)?;
        if n == 0
            || (n > 1 && digits[0] == b'0')
            || matches!(next, b'0'..=b'9' | b'.' | b'e' | b'E')
        {
            return None;
        }
        self.i += n;
        Some(v)
    }

    /// `language`: a name, a number or null; unknown ones are OTHER.
    fn language(&mut self) -> Option<LanguageCode> {
        match self.peek()? {
            b'"' if self.literal(b"\"JAVA\"") => Some(LanguageCode::JAVA),
            b'"' => Some(LanguageCode::from_name(&self.string()?)),
            b'n' => self.literal(b"null").then_some(LanguageCode::OTHER),
            _ => Some(LanguageCode::from_number(
                i64::try_from(self.int()?.value).unwrap_or(-1),
            )),
        }
    }

    /// `remark`: a string or null.
    fn nullable_string(&mut self) -> Option<Option<String>> {
        if self.literal(b"null") {
            return Some(None);
        }
        Some(Some(self.string()?.into_owned()))
    }

    /// `extFields`: null or a flat object; null values are dropped.
    ///
    /// The map's text buffer starts as a copy of the header from this object to the end, so
    /// keys and values without escapes (nearly all) are entries pointing into it: no copy
    /// per entry. A second object in one header adds to the first, pointing into the same
    /// copy.
    fn ext_fields(&mut self, ext: &mut ExtFieldsBuf) -> Option<()> {
        if self.literal(b"null") {
            return Some(());
        }
        self.eat(b'{')?;
        self.ws();
        if self.peek()? == b'}' {
            self.i += 1;
            return Some(());
        }
        if self.valid_from == self.b.len() {
            self.valid = std::str::from_utf8(self.rest()).ok()?;
            self.valid_from = self.i;
            *ext = ExtFieldsBuf::over_text(self.valid, 16);
        }
        // Spans count from `base` (where the copy starts in the header).
        let base = self.valid_from;
        // Inserting in order keeps the map semantics (last duplicate wins); sorted input, as
        // fastjson and this crate write it, appends at the end without searching.
        loop {
            match compact_entry(self.b, self.i) {
                Some((key, value, stop)) => {
                    let key = (key.0 - base, key.1 - base);
                    if self.b.get(stop) == Some(&b'"') {
                        ext.set_spans(key, (value - base, stop - base), false);
                        self.i = stop + 1;
                    } else {
                        // Escapes (the properties value), or a control byte (no answer).
                        self.i = stop;
                        let (value, escape) = self.escaped_span(ext, value)?;
                        ext.set_spans(key, value, escape);
                    }
                }
                None => self.ext_entry(ext, base)?,
            }
            self.ws();
            match self.next()? {
                b',' => self.ws(),
                b'}' => break,
                _ => return None,
            }
        }
        Some(())
    }

    /// One `extFields` entry in any form (whitespace, escapes, numbers, booleans, null).
    #[inline(never)]
    fn ext_entry(&mut self, ext: &mut ExtFieldsBuf, base: usize) -> Option<()> {
        let (key, key_escape) = self.string_span(ext, base)?;
        self.ws();
        self.eat(b':')?;
        self.ws();
        let start = self.i;
        match self.peek()? {
            b'"' => {
                let (value, value_escape) = self.string_span(ext, base)?;
                ext.set_spans(key, value, key_escape || value_escape);
            }
            b'n' => {
                if !self.literal(b"null") {
                    return None;
                }
            }
            b't' | b'f' => {
                if !(self.literal(b"true") || self.literal(b"false")) {
                    return None;
                }
                ext.set_spans(key, (start - base, self.i - base), key_escape);
            }
            _ => {
                self.int()?;
                ext.set_spans(key, (start - base, self.i - base), key_escape);
            }
        }
        Some(())
    }

    /// A string for `ext`: its span in the map's copy of the header (which starts at `base`)
    /// when it has no escapes, else its unescaped text appended to `ext`. The flag tells
    /// whether the text holds bytes JSON must escape.
    #[inline(always)]
    fn string_span(&mut self, ext: &mut ExtFieldsBuf, base: usize) -> Option<(Span, bool)> {
        self.eat(b'"')?;
        let start = self.i;
        let rest = self.rest();
        let n = scan::first_special(rest)?;
        if rest[n] == b'"' {
            self.i += n + 1;
            return Some(((start - base, start + n - base), false));
        }
        self.i += n;
        self.escaped_span(ext, start)
    }

    /// [`Parser::string_span`] from the first byte that is not plain text (`self.i`).
    #[inline(never)]
    fn escaped_span(&mut self, ext: &mut ExtFieldsBuf, start: usize) -> Option<(Span, bool)> {
        if self.peek()? != b'\\' {
            return None;
        }
        ext.push_text_with(|text| self.unescape_into(start, text))
    }

    /// The value of an unknown key: only scalars are skipped here.
    fn skip_scalar(&mut self) -> Option<()> {
        match self.peek()? {
            // `serializeTypeCurrentRPC` (fastjson, this crate) needs no look at its text.
            b'"' if self.literal(b"\"JSON\"") => Some(()),
            b'"' => self.string().map(drop),
            b'n' => self.literal(b"null").then_some(()),
            b't' => self.literal(b"true").then_some(()),
            b'f' => self.literal(b"false").then_some(()),
            _ => self.int().map(drop),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::header_encoding::json;
    use proptest::prelude::*;
    use proptest::test_runner::{Config, RngSeed, TestRunner};

    /// Asserts the invariant on `text` and returns whether the fast path answered.
    fn check(text: &[u8]) -> bool {
        let slow = json::decode_general(text);
        match decode(text) {
            Some(fast) => {
                assert_eq!(
                    Ok(&fast),
                    slow.as_ref(),
                    "{:?}",
                    String::from_utf8_lossy(text)
                );
                true
            }
            None => false,
        }
    }

    #[test]
    fn common_shapes_take_the_fast_path_and_agree() {
        for text in [
            &br#"{"code":310,"extFields":{"a":"b","i":"TAGS\u0001TagA\u0002"},"flag":0,"language":"JAVA","opaque":5,"serializeTypeCurrentRPC":"JSON","version":401}"#[..],
            b"{\"code\":310,\"extFields\":{\"AccessKey\":\"\",\"d\":4,\"e\":-3,\"k\":\"false\",\"y\":true,\"n\":false,\"z\":null},\"flag\":0,\"language\":\"CPP\",\"opaque\":5,\"remark\":\"\",\"version\":333}\n",
            br#" { "code" : "34" , "language" : 9 , "remark" : null , "extFields" : null } "#,
            br#"{"language":"RUST_NEW","code":1,"opaque":null,"remark":"caf\u00e9 \"q\" \\ \/ \b\f\n\r\t","x":1,"y":"s","z":null,"w":true}"#,
            br#"{"code":-2147483648,"extFields":{},"flag":2147483647,"language":null,"version":" 7 "}"#,
            br#"{"code":1,"extFields":{"k":"1"},"extFields":{"k":"2","j":"x"},"code":2}"#,
            br#"{"code":0,"flag":10,"opaque":123456789,"version":1234567890,"language":7}"#,
            br#"{"code":2147483647,"flag":0 ,"opaque":987654321}"#,
            "{\"code\":1,\"remark\":\"é漢字🎉\",\"extFields\":{\"ключ\":\"значение\"}}".as_bytes(),
            // Unsorted keys, a duplicate, escapes in a compact entry, the literals read as bytes.
            br#"{"code":1,"extFields":{"k":"a\u0001b\u00E9","j":"x","k":"y\n","a":"1"},"serializeTypeCurrentRPC":"JSON","language":"JAVA"}"#,
            br#"{"code":1,"extFields":{"i":"TAGS\u0001A\u0002","a":"b"},"extFields":{"c":"d"}}"#,
        ] {
            assert!(check(text), "{:?}", String::from_utf8_lossy(text));
        }
    }

    #[test]
    fn unusual_inputs_fall_back() {
        for text in [
            &b"{}"[..],
            b"{\"code\":1.0}",
            b"{\"code\":-0}",
            b"{\"code\":01}",
            b"{\"code\":1e2}",
            b"{\"code\":12.5}",
            b"{\"code\":00}",
            b"{\"code\":2147483648}",
            b"{\"code\":99999999999}",
            b"{\"code\":1,\"extFields\":{\"x\":1.5}}",
            b"{\"code\":1,\"extFields\":{\"a\":[1]}}",
            b"{\"code\":1,\"unknown\":[1,{\"a\":2}]}",
            b"{\"code\":1,\"remark\":\"\\ud83c\\udf89\"}",
            b"{\"code\":1,\"remark\":\"a\x01\"}",
            b"{\"code\":1,\"remark\":\"\xff\"}",
            b"{\"code\":1,\"x\":\"\xff\",\"extFields\":{\"a\":\"b\"}}",
            b"{\"code\":1,\"extFields\":{\"a\":\"b\"},\"x\":\"\xff\"}",
            b"{\"code\":1,\"extFields\":{\"a\":\"b\x01\"}}",
            b"{\"code\":1,}",
            b"{\"code\":1} x",
            b"{\"code\":1",
            b"",
        ] {
            assert!(!check(text), "{:?}", String::from_utf8_lossy(text));
        }
    }

    fn seed() -> u64 {
        let seed = std::env::var("REMOTING_PROPTEST_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| {
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map(|d| d.as_nanos() as u64)
                    .unwrap_or(1)
            });
        eprintln!("proptest seed: {seed} (replay with REMOTING_PROPTEST_SEED={seed})");
        seed
    }

    fn runner(cases: u32) -> TestRunner {
        TestRunner::new(Config {
            cases,
            rng_seed: RngSeed::Fixed(seed()),
            failure_persistence: None,
            ..Config::default()
        })
    }

    /// JSON text of a string with characters that need (or may get) escapes.
    fn arb_json_string() -> impl Strategy<Value = String> {
        let piece = prop_oneof![
            20 => "[a-zA-Z0-9 _.-]{0,6}".prop_map(|s| s),
            2 => Just("\\\"".to_owned()),
            2 => Just("\\\\".to_owned()),
            2 => Just("\\/".to_owned()),
            2 => Just("\\n\\r\\t\\b\\f".to_owned()),
            2 => Just("\\u0001".to_owned()),
            2 => Just("\\u00e9\\u00E9".to_owned()),
            1 => Just("\\ud83c\\udf89".to_owned()),
            1 => Just("\\u12".to_owned()),
            1 => Just("\\x".to_owned()),
            1 => Just("\u{1}".to_owned()),
            2 => Just("é漢🎉".to_owned()),
            2 => Just(" 42 ".to_owned()),
            2 => Just("-7".to_owned()),
        ];
        prop::collection::vec(piece, 0..4).prop_map(|p| format!("\"{}\"", p.concat()))
    }

    fn arb_number() -> impl Strategy<Value = String> {
        prop_oneof![
            12 => any::<i32>().prop_map(|v| v.to_string()),
            12 => (0i32..1000).prop_map(|v| v.to_string()),
            2 => any::<i64>().prop_map(|v| v.to_string()),
            2 => any::<u64>().prop_map(|v| v.to_string()),
            1 => Just("-0".to_owned()),
            1 => Just("01".to_owned()),
            1 => Just("1.5".to_owned()),
            1 => Just("2e3".to_owned()),
            1 => Just("-9223372036854775808".to_owned()),
            1 => Just("-9223372036854775809".to_owned()),
            1 => Just("18446744073709551616".to_owned()),
            1 => Just("-".to_owned()),
        ]
    }

    fn arb_scalar() -> impl Strategy<Value = String> {
        prop_oneof![
            10 => arb_json_string(),
            10 => arb_number(),
            2 => Just("null".to_owned()),
            2 => Just("true".to_owned()),
            2 => Just("false".to_owned()),
            1 => Just("nul".to_owned()),
            1 => Just("[1]".to_owned()),
            1 => Just("{\"a\":1}".to_owned()),
        ]
    }

    fn arb_ws() -> impl Strategy<Value = &'static str> {
        prop_oneof![4 => Just(""), 1 => Just(" "), 1 => Just("\n\t "), 1 => Just("\r")]
    }

    fn arb_ext() -> impl Strategy<Value = String> {
        prop_oneof![
            1 => Just("null".to_owned()),
            1 => arb_scalar(),
            6 => prop::collection::vec((arb_json_string(), arb_scalar(), arb_ws()), 0..5).prop_map(
                |kv| {
                    let items: Vec<String> =
                        kv.into_iter().map(|(k, v, w)| format!("{w}{k}{w}:{w}{v}{w}")).collect();
                    format!("{{{}}}", items.join(","))
                }
            ),
        ]
    }

    fn arb_header() -> impl Strategy<Value = String> {
        let key = prop_oneof![
            3 => Just("\"language\""),
            3 => Just("\"version\""),
            3 => Just("\"opaque\""),
            3 => Just("\"flag\""),
            3 => Just("\"remark\""),
            6 => Just("\"extFields\""),
            3 => Just("\"serializeTypeCurrentRPC\""),
            1 => Just("\"code\""),
            1 => Just("\"c\\u006fde\""),
            1 => Just("\"other\""),
        ];
        let value = prop_oneof![3 => arb_scalar(), 3 => arb_ext()];
        (
            Just("\"code\""),
            prop::collection::vec((key, value, arb_ws()), 0..6),
            arb_number(),
            arb_ws(),
            prop_oneof![6 => Just(""), 2 => Just("\n"), 1 => Just(" \r\n"), 1 => Just(" x")],
        )
            .prop_map(|(code_key, fields, code, w, tail)| {
                let mut items: Vec<String> = fields
                    .into_iter()
                    .map(|(k, v, w)| format!("{w}{k}{w}:{w}{v}{w}"))
                    .collect();
                items.insert(0, format!("{code_key}:{code}"));
                format!("{w}{{{}}}{tail}", items.join(","))
            })
    }

    #[test]
    fn differential_fast_path_agrees_with_general_parser() {
        let hits = std::cell::Cell::new(0u32);
        let fallbacks = std::cell::Cell::new(0u32);
        let mut runner = runner(4000);
        let strategy = (
            arb_header(),
            any::<u16>(),
            any::<u8>(),
            prop::bool::weighted(0.2),
        );
        runner
            .run(&strategy, |(text, pos, byte, mutate)| {
                let mut bytes = text.into_bytes();
                if mutate && !bytes.is_empty() {
                    let at = usize::from(pos) % bytes.len();
                    bytes[at] = byte;
                }
                if check(&bytes) {
                    hits.set(hits.get() + 1);
                } else if json::decode_general(&bytes).is_ok() {
                    fallbacks.set(fallbacks.get() + 1);
                }
                Ok(())
            })
            .unwrap();
        // The generator must actually exercise the fast path, not only the fallback.
        let hits = hits.get();
        eprintln!(
            "fast path: {hits}, valid but general parser: {}",
            fallbacks.get()
        );
        assert!(hits > 100, "fast path answered only {hits} cases");
    }

    #[test]
    fn encoder_output_always_takes_the_fast_path() {
        let mut runner = runner(500);
        let text = "[ -~\u{0}-\u{1f}é漢🎉\"\\\\]{0,12}";
        let strategy = (
            any::<i32>(),
            any::<i32>(),
            any::<i32>(),
            any::<i32>(),
            any::<u8>(),
            proptest::option::of(text),
            prop::collection::btree_map(text, text, 0..6),
        );
        runner
            .run(
                &strategy,
                |(code, version, opaque, flag, lang, remark, ext)| {
                    let mut cmd = RemotingCommand::request_empty(crate::code::RequestCode(code))
                        .with_version(version)
                        .with_opaque(opaque)
                        .with_flag(flag)
                        .with_language(LanguageCode::from_number(i64::from(lang)));
                    if let Some(r) = remark {
                        cmd.set_remark(r);
                    }
                    *cmd.ext_fields_mut() = ext.into();
                    let mut buf = bytes::BytesMut::new();
                    json::encode(&cmd, &mut buf);
                    let fast = decode(&buf);
                    prop_assert_eq!(fast.as_ref(), Some(&cmd));
                    prop_assert!(check(&buf));
                    Ok(())
                },
            )
            .unwrap();
    }
}
