//! JSON header (serialize type 0).
//!
//! Writing mirrors Java's fastjson output byte for byte (compact, keys sorted, nulls omitted,
//! every extFields value a string — Go quirk Q6). Reading is lenient (spec §4.3): keys in any
//! order, unknown keys ignored, trailing whitespace, language by name or number, numbers or
//! numeric strings for the integer fields, numbers/booleans/null inside extFields.

use std::fmt;

use bytes::BytesMut;
use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, Visitor};

use crate::code::LanguageCode;
use crate::command::{ExtFields, RemotingCommand};
use crate::error::WireHeaderError;
use crate::header_encoding::HeaderKey as Key;
use crate::header_encoding::{json_fast, scan};

/// Writes the header JSON of `cmd` into `dst`.
///
/// One pass sizes the text (exactly, but for strings that need escapes, which are given room
/// for the worst case), `dst` grows once, and the writes go to that slice.
pub fn encode(cmd: &RemotingCommand, dst: &mut BytesMut) {
    let ext = cmd.ext_fields();
    let language = cmd.language().json_name().as_bytes();
    let remark = cmd.remark().map(str::as_bytes);
    let mut bound = FIXED_LEN + language.len() + 4 * I32_MAX_LEN;
    if !ext.is_empty() {
        // `,"extFields":{` `}`, and `"k":"v"` plus a comma per entry.
        bound += 15 + 6 * ext.len() + ext.text_len() + (ESCAPED_MAX - 1) * ext.escape_text_len();
    }
    if let Some(r) = remark {
        // Room for the worst case only when there is something to escape (long error texts).
        let per_byte = match scan::first_special(r) {
            Some(_) => ESCAPED_MAX,
            None => 1,
        };
        bound += REMARK_KEY.len() + 2 + per_byte * r.len();
    }
    let start = dst.len();
    loop {
        dst.resize(start + bound, 0);
        let mut w = Writer {
            rest: &mut dst[start..],
            overflow: false,
        };
        write_header(&mut w, cmd, language, remark);
        if !w.overflow {
            let unused = w.rest.len();
            dst.truncate(start + bound - unused);
            return;
        }
        // The bound holds by construction (checked by the encoder property test); were it
        // ever short, a larger one still gives the right text.
        debug_assert!(false, "JSON header bound {bound} too small");
        bound *= 2;
    }
}

/// The header text, in fastjson's key order.
fn write_header(w: &mut Writer<'_>, cmd: &RemotingCommand, language: &[u8], remark: Option<&[u8]>) {
    let ext = cmd.ext_fields();
    w.put(b"{\"code\":");
    w.int(cmd.code());
    if !ext.is_empty() {
        w.put(b",\"extFields\":{");
        for (i, (k, v, escape)) in ext.iter_bytes_with_escape().enumerate() {
            if i > 0 {
                w.put(b",");
            }
            if escape {
                w.string(k);
                w.put(b":");
                w.string(v);
            } else {
                // Known to need no escaping: copied as is.
                w.put(b"\"");
                w.put_text(k);
                w.put(b"\":\"");
                w.put_text(v);
                w.put(b"\"");
            }
        }
        w.put(b"}");
    }
    w.put(b",\"flag\":");
    w.int(cmd.flag());
    w.put(b",\"language\":\"");
    // Language names are plain upper-case ASCII: nothing to escape.
    w.put_text(language);
    w.put(b"\",\"opaque\":");
    w.int(cmd.opaque());
    if let Some(r) = remark {
        w.put(REMARK_KEY);
        w.string(r);
    }
    w.put(b",\"serializeTypeCurrentRPC\":\"JSON\",\"version\":");
    w.int(cmd.version());
    w.put(b"}");
}

/// Bytes of the header outside the integers, the language name, extFields and remark.
const FIXED_LEN: usize = b"{\"code\":,\"flag\":,\"language\":\"\",\"opaque\":,\"serializeTypeCurrentRPC\":\"JSON\",\"version\":}".len();
/// `,"remark":` (the value's quotes are counted with the value).
const REMARK_KEY: &[u8] = b",\"remark\":";
/// Longest decimal i32 (`-2147483648`).
const I32_MAX_LEN: usize = 11;
/// Longest escape of one byte (`\u00XX`).
const ESCAPED_MAX: usize = 6;

/// Writes into a slice sized in advance: one length check per write, no growth check.
struct Writer<'a> {
    /// What is left to write into.
    rest: &'a mut [u8],
    /// A write did not fit (never, as the caller sizes the slice).
    overflow: bool,
}

impl<'a> Writer<'a> {
    /// The next `n` bytes to write.
    #[inline(always)]
    fn take(&mut self, n: usize) -> Option<&'a mut [u8]> {
        match std::mem::take(&mut self.rest).split_at_mut_checked(n) {
            Some((head, tail)) => {
                self.rest = tail;
                Some(head)
            }
            None => {
                self.overflow = true;
                None
            }
        }
    }

    /// Writes `s`; meant for constants (their copy compiles to a few moves).
    #[inline(always)]
    fn put(&mut self, s: &[u8]) {
        if let Some(d) = self.take(s.len()) {
            d.copy_from_slice(s);
        }
    }

    /// Writes `s` of any length; the short ones (keys, most values) without a `memcpy` call.
    #[inline(always)]
    fn put_text(&mut self, s: &[u8]) {
        if let Some(d) = self.take(s.len()) {
            copy_short(d, s);
        }
    }

    fn int(&mut self, v: i32) {
        if let Ok(digit @ 0..=9) = u8::try_from(v) {
            // flag, code 0 and the like: one digit.
            return self.put(&[b'0' + digit]);
        }
        let mut buf = [0u8; I32_MAX_LEN];
        let from = format_int(&mut buf, i64::from(v));
        self.put_text(&buf[from..]);
    }

    /// A JSON string the way fastjson writes it: `"` `\` and control characters escaped
    /// (short escapes where JSON has them, `\u00XX` otherwise), everything else verbatim.
    fn string(&mut self, s: &[u8]) {
        const HEX: &[u8; 16] = b"0123456789ABCDEF";
        let mut rest = s;
        self.put(b"\"");
        // Copy plain runs whole; most values are one run.
        while let Some(i) = scan::first_special(rest) {
            self.put_text(&rest[..i]);
            let b = rest[i];
            rest = &rest[i + 1..];
            match b {
                b'"' => self.put(b"\\\""),
                b'\\' => self.put(b"\\\\"),
                b'\n' => self.put(b"\\n"),
                b'\r' => self.put(b"\\r"),
                b'\t' => self.put(b"\\t"),
                0x08 => self.put(b"\\b"),
                0x0c => self.put(b"\\f"),
                _ => self.put(&[
                    b'\\',
                    b'u',
                    b'0',
                    b'0',
                    HEX[usize::from(b >> 4)],
                    HEX[usize::from(b & 0xf)],
                ]),
            }
        }
        self.put_text(rest);
        self.put(b"\"");
    }
}

/// `d.copy_from_slice(s)` (same lengths); up to 16 bytes as two overlapping fixed-size
/// copies, which compile to plain moves.
#[inline(always)]
fn copy_short(d: &mut [u8], s: &[u8]) {
    let n = s.len();
    if n != d.len() {
        return;
    }
    if n > 16 {
        d.copy_from_slice(s);
    } else if n >= 8 {
        d[..8].copy_from_slice(&s[..8]);
        d[n - 8..].copy_from_slice(&s[n - 8..]);
    } else if n >= 4 {
        d[..4].copy_from_slice(&s[..4]);
        d[n - 4..].copy_from_slice(&s[n - 4..]);
    } else if n > 0 {
        d[0] = s[0];
        d[n / 2] = s[n / 2];
        d[n - 1] = s[n - 1];
    }
}

/// "00" "01" .. "99": integers are written two digits per division.
const DIGIT_PAIRS: &[u8; 200] = b"\
0001020304050607080910111213141516171819\
2021222324252627282930313233343536373839\
4041424344454647484950515253545556575859\
6061626364656667686970717273747576777879\
8081828384858687888990919293949596979899";

/// Writes `v` in decimal at the end of `buf`; returns where it starts. `buf` must hold the
/// longest value given (20 bytes for any i64).
fn format_int<const N: usize>(buf: &mut [u8; N], v: i64) -> usize {
    let mut n = v.unsigned_abs();
    let mut i = N;
    while n >= 100 {
        let pair = (n % 100) as usize * 2;
        n /= 100;
        i -= 2;
        buf[i..i + 2].copy_from_slice(&DIGIT_PAIRS[pair..pair + 2]);
    }
    if n >= 10 {
        let pair = n as usize * 2;
        i -= 2;
        buf[i..i + 2].copy_from_slice(&DIGIT_PAIRS[pair..pair + 2]);
    } else {
        i -= 1;
        buf[i] = b'0' + n as u8;
    }
    if v < 0 {
        i -= 1;
        buf[i] = b'-';
    }
    i
}

/// Parses header JSON leniently into a command (body empty, serialize type JSON).
///
/// The common shape goes through a hand-written parser (`json_fast`); anything it is not sure
/// about, and every error, goes through the general serde-based parser below.
pub fn decode(bytes: &[u8]) -> Result<RemotingCommand, WireHeaderError> {
    match json_fast::decode(bytes) {
        Some(cmd) => Ok(cmd),
        None => decode_general(bytes),
    }
}

/// The general lenient parser (serde_json), the reference for every §4.3 rule.
pub(crate) fn decode_general(bytes: &[u8]) -> Result<RemotingCommand, WireHeaderError> {
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let cmd = de
        .deserialize_map(HeaderVisitor)
        .map_err(|e| WireHeaderError::Json(e.to_string()))?;
    de.end().map_err(|e| WireHeaderError::Json(e.to_string()))?;
    Ok(cmd)
}

impl<'de> de::Deserialize<'de> for Key {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct KeyVisitor;
        impl<'de> Visitor<'de> for KeyVisitor {
            type Value = Key;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a header key")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Key, E> {
                Ok(Key::of(v))
            }
        }
        d.deserialize_identifier(KeyVisitor)
    }
}

struct HeaderVisitor;

impl<'de> Visitor<'de> for HeaderVisitor {
    type Value = RemotingCommand;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a RemotingCommand header object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<RemotingCommand, A::Error> {
        let mut code = None;
        let mut language = LanguageCode::OTHER;
        let mut version = 0;
        let mut opaque = 0;
        let mut flag = 0;
        let mut remark = None;
        let mut ext = ExtFields::new();
        while let Some(key) = map.next_key::<Key>()? {
            match key {
                Key::Code => code = Some(map.next_value::<LenientI32>()?.0),
                Key::Language => language = map.next_value::<LenientLanguage>()?.0,
                Key::Version => version = map.next_value::<LenientI32>()?.0,
                Key::Opaque => opaque = map.next_value::<LenientI32>()?.0,
                Key::Flag => flag = map.next_value::<LenientI32>()?.0,
                Key::Remark => remark = map.next_value::<Option<String>>()?,
                Key::ExtFields => map.next_value_seed(ExtFieldsSeed(&mut ext))?,
                Key::Other => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        let code = code.ok_or_else(|| de::Error::missing_field("code"))?;
        Ok(RemotingCommand::from_parts(
            code, language, version, opaque, flag, remark, ext,
        ))
    }
}

/// An i32 given as a JSON number or a numeric string; `null` reads as 0.
struct LenientI32(i32);

impl<'de> de::Deserialize<'de> for LenientI32 {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = LenientI32;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a 32-bit integer or numeric string")
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<LenientI32, E> {
                i32::try_from(v)
                    .map(LenientI32)
                    .map_err(|_| E::custom(format!("integer {v} out of 32-bit range")))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<LenientI32, E> {
                i32::try_from(v)
                    .map(LenientI32)
                    .map_err(|_| E::custom(format!("integer {v} out of 32-bit range")))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<LenientI32, E> {
                v.trim()
                    .parse::<i32>()
                    .map(LenientI32)
                    .map_err(|_| E::custom(format!("not an integer: {v:?}")))
            }
            fn visit_unit<E: de::Error>(self) -> Result<LenientI32, E> {
                Ok(LenientI32(0))
            }
        }
        d.deserialize_any(V)
    }
}

/// Language by name or number; anything unknown (or null) is `OTHER`.
struct LenientLanguage(LanguageCode);

impl<'de> de::Deserialize<'de> for LenientLanguage {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = LenientLanguage;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a language name or code")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<LenientLanguage, E> {
                Ok(LenientLanguage(LanguageCode::from_name(v)))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<LenientLanguage, E> {
                Ok(LenientLanguage(LanguageCode::from_number(v)))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<LenientLanguage, E> {
                Ok(LenientLanguage(LanguageCode::from_number(
                    i64::try_from(v).unwrap_or(-1),
                )))
            }
            fn visit_f64<E: de::Error>(self, _: f64) -> Result<LenientLanguage, E> {
                Ok(LenientLanguage(LanguageCode::OTHER))
            }
            fn visit_bool<E: de::Error>(self, _: bool) -> Result<LenientLanguage, E> {
                Ok(LenientLanguage(LanguageCode::OTHER))
            }
            fn visit_unit<E: de::Error>(self) -> Result<LenientLanguage, E> {
                Ok(LenientLanguage(LanguageCode::OTHER))
            }
        }
        d.deserialize_any(V)
    }
}

/// extFields: null or an object whose values are strings, numbers, booleans or null.
struct ExtFieldsSeed<'a>(&'a mut ExtFields);

impl<'de> DeserializeSeed<'de> for ExtFieldsSeed<'_> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for ExtFieldsSeed<'_> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an extFields object or null")
    }
    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        Ok(())
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        while let Some(k) = map.next_key::<String>()? {
            if let Some(v) = map.next_value::<LenientText>()?.0 {
                self.0.insert(k, v);
            }
        }
        Ok(())
    }
}

/// An extFields value converted to its text; `None` for null.
struct LenientText(Option<String>);

impl<'de> de::Deserialize<'de> for LenientText {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = LenientText;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string, number, boolean or null")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<LenientText, E> {
                Ok(LenientText(Some(v.to_owned())))
            }
            fn visit_string<E: de::Error>(self, v: String) -> Result<LenientText, E> {
                Ok(LenientText(Some(v)))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<LenientText, E> {
                Ok(LenientText(Some(v.to_string())))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<LenientText, E> {
                Ok(LenientText(Some(v.to_string())))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<LenientText, E> {
                Ok(LenientText(Some(v.to_string())))
            }
            fn visit_bool<E: de::Error>(self, v: bool) -> Result<LenientText, E> {
                Ok(LenientText(Some(v.to_string())))
            }
            fn visit_unit<E: de::Error>(self) -> Result<LenientText, E> {
                Ok(LenientText(None))
            }
        }
        d.deserialize_any(V)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame::SerializeType;

    #[test]
    fn cpp_style_header_is_accepted() {
        let text = b"{\"code\":310,\"extFields\":{\"AccessKey\":\"\",\"d\":4,\"e\":3,\"k\":\"false\",\"x\":1.5,\"y\":true,\"z\":null},\"flag\":0,\"language\":\"CPP\",\"opaque\":5,\"remark\":\"\",\"version\":333}\n";
        let cmd = decode(text).unwrap();
        assert_eq!(cmd.code(), 310);
        assert_eq!(cmd.language(), LanguageCode::CPP);
        assert_eq!(cmd.version(), 333);
        assert_eq!(cmd.opaque(), 5);
        assert_eq!(cmd.remark(), None);
        assert_eq!(cmd.ext_field("d"), Some("4"));
        assert_eq!(cmd.ext_field("e"), Some("3"));
        assert_eq!(cmd.ext_field("x"), Some("1.5"));
        assert_eq!(cmd.ext_field("y"), Some("true"));
        assert_eq!(cmd.ext_field("z"), None);
        assert_eq!(cmd.ext_field("AccessKey"), Some(""));
    }

    #[test]
    fn go_style_and_numeric_strings_and_missing_fields() {
        let cmd = decode(
            br#"{"code":"34","language":9,"remark":null,"extFields":null,"unknown":[1,{"a":2}]}"#,
        )
        .unwrap();
        assert_eq!(cmd.code(), 34);
        assert_eq!(cmd.language(), LanguageCode::GO);
        assert_eq!((cmd.version(), cmd.opaque(), cmd.flag()), (0, 0, 0));
        assert!(cmd.ext_fields().is_empty());
        let cmd = decode(br#"{"language":"RUST_NEW","code":1}"#).unwrap();
        assert_eq!(cmd.language(), LanguageCode::OTHER);
    }

    #[test]
    fn bad_headers_are_errors() {
        for bad in [
            &b"{"[..],
            b"[]",
            b"{\"flag\":1}",
            b"{\"code\":1} x",
            b"{\"code\":99999999999}",
            b"{\"code\":\"abc\"}",
            b"{\"code\":1,\"extFields\":[1]}",
            b"{\"code\":1,\"extFields\":{\"a\":[1]}}",
            b"",
            b"\xff\xfe",
        ] {
            assert!(decode(bad).is_err(), "{:?}", String::from_utf8_lossy(bad));
        }
    }

    /// `s` as [`Writer::string`] writes it.
    fn json_string(s: &str) -> Vec<u8> {
        let bound = 2 + ESCAPED_MAX * s.len();
        let mut out = vec![0u8; bound];
        let mut w = Writer {
            rest: &mut out,
            overflow: false,
        };
        w.string(s.as_bytes());
        assert!(!w.overflow);
        let unused = w.rest.len();
        out.truncate(bound - unused);
        out
    }

    #[test]
    fn strings_escape_like_fastjson() {
        assert_eq!(
            json_string("a\"b\\c\n\u{1}\u{1f}é/"),
            "\"a\\\"b\\\\c\\n\\u0001\\u001Fé/\"".as_bytes()
        );
        // Every byte that needs the longest escape, back to back, fits the bound.
        let worst: String = (0u8..0x20).map(char::from).collect();
        let out = json_string(&worst);
        assert_eq!(
            serde_json::from_slice::<String>(&out).unwrap(),
            worst,
            "{}",
            String::from_utf8_lossy(&out)
        );
    }

    #[test]
    fn short_copies_copy_every_byte() {
        let src: Vec<u8> = (1..=40).collect();
        for n in 0..=src.len() {
            let mut d = vec![0u8; n];
            copy_short(&mut d, &src[..n]);
            assert_eq!(d, &src[..n]);
        }
    }

    #[test]
    fn integers_are_written_like_display() {
        let mut values = vec![i64::MIN, i64::MAX, i64::from(i32::MIN), i64::from(i32::MAX)];
        for p in 0..19 {
            let t = 10i64.pow(p);
            values.extend([t - 1, t, t + 1, -t + 1, -t, -t - 1]);
        }
        values.extend(-1000..1000);
        for v in values {
            let mut buf = [0u8; 20];
            let from = format_int(&mut buf, v);
            assert_eq!(&buf[from..], v.to_string().as_bytes());
            if let Ok(v32) = i32::try_from(v) {
                let mut small = [0u8; I32_MAX_LEN];
                let from = format_int(&mut small, i64::from(v32));
                assert_eq!(&small[from..], v.to_string().as_bytes());
            }
        }
    }

    #[test]
    fn header_fits_its_bound_and_reads_back() {
        let ext: ExtFields = [
            ("k\"\u{1}".to_owned(), "\u{0}".repeat(40)),
            ("plain".to_owned(), "value".to_owned()),
        ]
        .into_iter()
        .collect();
        let mut cmd = RemotingCommand::request_empty(crate::code::RequestCode(i32::MIN))
            .with_version(i32::MIN)
            .with_opaque(i32::MIN)
            .with_flag(i32::MIN)
            .with_language(LanguageCode::NODE_JS)
            .with_remark("\u{1f}".repeat(30));
        *cmd.ext_fields_mut() = ext;
        let mut b = BytesMut::from(&b"prefix"[..]);
        encode(&cmd, &mut b);
        assert_eq!(&b[..6], b"prefix");
        assert_eq!(decode_general(&b[6..]).unwrap(), cmd);
    }

    #[test]
    fn the_serialize_type_name_is_json() {
        assert_eq!(SerializeType::Json.name(), "JSON");
    }

    #[test]
    fn language_names_need_no_escaping() {
        for n in 0..=255u8 {
            let name = LanguageCode(n).json_name();
            assert_eq!(scan::first_special(name.as_bytes()), None, "{name}");
        }
    }
}
