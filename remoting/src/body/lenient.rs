//! Tolerance helpers: bare-key quoting for fastjson output and serde adapters that accept a
//! number, a numeric string or null for integer members, and Java-style booleans.

use std::borrow::Cow;
use std::fmt;

use serde::de::{self, Deserializer, Visitor};

/// Rewrites `{0:"a",1:"b"}` (fastjson's integer-keyed maps, Q13) into `{"0":"a","1":"b"}`.
/// Returns the input unchanged (borrowed) when nothing needs quoting. Strings are skipped
/// correctly (escapes included); arrays are told apart from objects, so numbers in arrays
/// are left alone. Invalid JSON stays invalid and is rejected by the parser afterwards.
pub fn quote_bare_keys(input: &[u8]) -> Cow<'_, [u8]> {
    if !needs_quoting(input) {
        return Cow::Borrowed(input);
    }
    let mut out = Vec::with_capacity(input.len() + 16);
    scan(input, Some(&mut out));
    Cow::Owned(out)
}

fn needs_quoting(input: &[u8]) -> bool {
    scan(input, None)
}

/// Walks the text; with `out` it writes the rewritten text, without it reports whether any
/// bare key exists.
fn scan(input: &[u8], mut out: Option<&mut Vec<u8>>) -> bool {
    // true = object, false = array
    let mut stack: Vec<bool> = Vec::new();
    let mut expect_key = false;
    let mut found = false;
    let mut i = 0;
    while i < input.len() {
        let c = input[i];
        match c {
            b'"' => {
                let start = i;
                i += 1;
                while i < input.len() && input[i] != b'"' {
                    if input[i] == b'\\' {
                        i += 1;
                    }
                    i += 1;
                }
                let end = (i + 1).min(input.len());
                if let Some(o) = out.as_deref_mut() {
                    o.extend_from_slice(&input[start..end]);
                }
                expect_key = false;
                i = end;
                continue;
            }
            b'{' => {
                stack.push(true);
                expect_key = true;
            }
            b'[' => {
                stack.push(false);
                expect_key = false;
            }
            b'}' | b']' => {
                stack.pop();
                expect_key = false;
            }
            b',' => expect_key = stack.last() == Some(&true),
            b':' => expect_key = false,
            b'-' | b'0'..=b'9' if expect_key => {
                let start = i;
                while i < input.len()
                    && matches!(input[i], b'-' | b'+' | b'.' | b'e' | b'E' | b'0'..=b'9')
                {
                    i += 1;
                }
                found = true;
                match out.as_deref_mut() {
                    Some(o) => {
                        o.push(b'"');
                        o.extend_from_slice(&input[start..i]);
                        o.push(b'"');
                    }
                    None => return true,
                }
                expect_key = false;
                continue;
            }
            _ => {}
        }
        if let Some(o) = out.as_deref_mut() {
            o.push(c);
        }
        i += 1;
    }
    found
}

macro_rules! lenient_int {
    ($fn_name:ident, $opt_name:ident, $t:ty) => {
        /// serde adapter: a number, a numeric string, or null (-> 0).
        pub fn $fn_name<'de, D: Deserializer<'de>>(d: D) -> Result<$t, D::Error> {
            Ok($opt_name(d)?.unwrap_or(0))
        }

        /// serde adapter: a number, a numeric string, or null (-> None).
        pub fn $opt_name<'de, D: Deserializer<'de>>(d: D) -> Result<Option<$t>, D::Error> {
            struct V;
            impl<'de> Visitor<'de> for V {
                type Value = Option<$t>;
                fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                    f.write_str("an integer or numeric string")
                }
                fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
                    <$t>::try_from(v)
                        .map(Some)
                        .map_err(|_| E::custom("integer out of range"))
                }
                fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
                    <$t>::try_from(v)
                        .map(Some)
                        .map_err(|_| E::custom("integer out of range"))
                }
                fn visit_f64<E: de::Error>(self, v: f64) -> Result<Self::Value, E> {
                    if v.fract() == 0.0 && v >= <$t>::MIN as f64 && v <= <$t>::MAX as f64 {
                        Ok(Some(v as $t))
                    } else {
                        Err(E::custom("not an integer"))
                    }
                }
                fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
                    let t = v.trim();
                    if t.is_empty() {
                        return Ok(None);
                    }
                    t.parse::<$t>()
                        .map(Some)
                        .map_err(|_| E::custom("not an integer"))
                }
                fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
                    Ok(None)
                }
                fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
                    Ok(None)
                }
                fn visit_some<D2: Deserializer<'de>>(
                    self,
                    d: D2,
                ) -> Result<Self::Value, D2::Error> {
                    d.deserialize_any(V)
                }
            }
            d.deserialize_any(V)
        }
    };
}

lenient_int!(int32, opt_int32, i32);
lenient_int!(int64, opt_int64, i64);

/// serde adapter: a boolean, a string (Java `parseBoolean`), a number (non-zero = true), or
/// null (-> false).
pub fn java_bool<'de, D: Deserializer<'de>>(d: D) -> Result<bool, D::Error> {
    struct V;
    impl<'de> Visitor<'de> for V {
        type Value = bool;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a boolean")
        }
        fn visit_bool<E: de::Error>(self, v: bool) -> Result<bool, E> {
            Ok(v)
        }
        fn visit_str<E: de::Error>(self, v: &str) -> Result<bool, E> {
            Ok(crate::custom_headers::parse_java_bool(v))
        }
        fn visit_i64<E: de::Error>(self, v: i64) -> Result<bool, E> {
            Ok(v != 0)
        }
        fn visit_u64<E: de::Error>(self, v: u64) -> Result<bool, E> {
            Ok(v != 0)
        }
        fn visit_unit<E: de::Error>(self) -> Result<bool, E> {
            Ok(false)
        }
    }
    d.deserialize_any(V)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quotes_only_bare_object_keys() {
        let src = br#"{"a":{0:"x",12:"y",-1:"z"},"b":[1,2,{3:4}],"s":"{5:6}","e":"\"{7:8}"}"#;
        let out = quote_bare_keys(src);
        assert_eq!(
            std::str::from_utf8(&out).unwrap(),
            r#"{"a":{"0":"x","12":"y","-1":"z"},"b":[1,2,{"3":4}],"s":"{5:6}","e":"\"{7:8}"}"#
        );
        let plain = br#"{"a":[1,2],"b":{"0":1}}"#;
        assert!(matches!(quote_bare_keys(plain), Cow::Borrowed(_)));
        // Whitespace before a bare key.
        assert_eq!(&quote_bare_keys(b"{ 1 : 2 }")[..], b"{ \"1\" : 2 }");
        // Garbage never panics.
        for g in [&b"{"[..], b"\"", b"{\"\\", b"}}]]", b"{-", b"[{,1:"] {
            let _ = quote_bare_keys(g);
        }
    }
}
