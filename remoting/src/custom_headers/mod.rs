//! Typed custom headers: structs that convert to and from a command's `extFields`, so
//! processors never touch the raw map (spec §8, §11).
//!
//! Conventions follow Java: every field is written as its text (`42`, `true`); numbers are
//! parsed like `Integer.parseInt`/`Long.parseLong` (a JSON number from a C++ client arrives
//! already converted to text by the header decoder); booleans like `Boolean.parseBoolean`
//! (case-insensitive `"true"` is true, anything else false). A missing required field is
//! [`HeaderError::MissingField`], which a server answers with `SYSTEM_ERROR`.

use crate::command::ExtFields;
use crate::error::HeaderError;

mod broker;
mod client;
mod message;
mod namesrv;
mod offset;
mod pull;
mod send;
mod send_view;
mod transaction;

pub use broker::*;
pub use client::*;
pub use message::*;
pub use namesrv::*;
pub use offset::*;
pub use pull::*;
pub use send::*;
pub use send_view::*;
pub use transaction::*;

/// A struct that is carried in `extFields`.
pub trait CommandHeader {
    /// Writes every present field as `key -> text`.
    fn write_to(&self, ext: &mut ExtFields);
    /// Reads the struct back; fails on a missing required or unparsable field.
    fn read_from(ext: &ExtFields) -> Result<Self, HeaderError>
    where
        Self: Sized;
}

/// No custom header (HEART_BEAT, LOCK_BATCH_MQ, ...).
impl CommandHeader for () {
    fn write_to(&self, _: &mut ExtFields) {}
    fn read_from(_: &ExtFields) -> Result<(), HeaderError> {
        Ok(())
    }
}

/// A raw map is its own header (escape hatch for rarely used requests).
impl CommandHeader for ExtFields {
    fn write_to(&self, ext: &mut ExtFields) {
        ext.extend(self.iter());
    }
    fn read_from(ext: &ExtFields) -> Result<ExtFields, HeaderError> {
        Ok(ext.clone())
    }
}

/// Java's `Boolean.parseBoolean`: only a case-insensitive `"true"` is true.
pub fn parse_java_bool(s: &str) -> bool {
    s.eq_ignore_ascii_case("true")
}

/// A scalar type that can live in extFields.
pub trait HeaderValue: Sized {
    /// Parses the text form; `key` is for the error.
    fn parse(key: &'static str, text: &str) -> Result<Self, HeaderError>;
    /// The text form.
    fn render(&self) -> String;
}

impl HeaderValue for String {
    fn parse(_: &'static str, text: &str) -> Result<Self, HeaderError> {
        Ok(text.to_owned())
    }
    fn render(&self) -> String {
        self.clone()
    }
}

impl HeaderValue for bool {
    fn parse(_: &'static str, text: &str) -> Result<Self, HeaderError> {
        Ok(parse_java_bool(text))
    }
    fn render(&self) -> String {
        if *self { "true" } else { "false" }.to_owned()
    }
}

macro_rules! int_value {
    ($t:ty, $name:literal) => {
        impl HeaderValue for $t {
            fn parse(key: &'static str, text: &str) -> Result<Self, HeaderError> {
                text.parse::<$t>().or_else(|_| {
                    // JSON-number sourced text may be a float such as "4.0".
                    text.parse::<f64>()
                        .ok()
                        .filter(|f| {
                            f.fract() == 0.0 && *f >= <$t>::MIN as f64 && *f <= <$t>::MAX as f64
                        })
                        .map(|f| f as $t)
                        .ok_or_else(|| HeaderError::InvalidField {
                            field: key,
                            value: text.chars().take(64).collect(),
                            expected: $name,
                        })
                })
            }
            fn render(&self) -> String {
                self.to_string()
            }
        }
    };
}
int_value!(i32, "Integer");
int_value!(i64, "Long");

/// Reads a required field.
pub fn read_required<T: HeaderValue>(ext: &ExtFields, key: &'static str) -> Result<T, HeaderError> {
    match ext.get(key) {
        Some(v) => T::parse(key, v),
        None => Err(HeaderError::MissingField { field: key }),
    }
}

/// Reads an optional field (absent -> `None`, present but unparsable -> error).
pub fn read_optional<T: HeaderValue>(
    ext: &ExtFields,
    key: &'static str,
) -> Result<Option<T>, HeaderError> {
    ext.get(key).map(|v| T::parse(key, v)).transpose()
}

/// Writes a field.
pub fn write_value<T: HeaderValue>(ext: &mut ExtFields, key: &str, value: &T) {
    ext.set(key, &value.render());
}

/// Declares a header struct and its [`CommandHeader`] impl. Each field is `req` (must be
/// present) or `opt` (an `Option`), with its extFields key.
macro_rules! command_header {
    (
        $(#[$meta:meta])*
        pub struct $name:ident {
            $( $(#[$fmeta:meta])* $field:ident : $ty:ty => $kind:ident $key:literal ),* $(,)?
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, PartialEq, Eq, Default)]
        pub struct $name {
            $( $(#[$fmeta])* pub $field: $ty, )*
        }

        impl $crate::custom_headers::CommandHeader for $name {
            fn write_to(&self, ext: &mut $crate::command::ExtFields) {
                $( command_header!(@write $kind, ext, $key, &self.$field); )*
            }
            fn read_from(ext: &$crate::command::ExtFields) -> Result<Self, $crate::error::HeaderError> {
                Ok($name {
                    $( $field: command_header!(@read $kind, ext, $key)?, )*
                })
            }
        }
    };
    (@write req, $ext:ident, $key:literal, $v:expr) => {
        $crate::custom_headers::write_value($ext, $key, $v)
    };
    (@write opt, $ext:ident, $key:literal, $v:expr) => {
        if let Some(v) = $v {
            $crate::custom_headers::write_value($ext, $key, v)
        }
    };
    (@read req, $ext:ident, $key:literal) => {
        $crate::custom_headers::read_required($ext, $key)
    };
    (@read opt, $ext:ident, $key:literal) => {
        $crate::custom_headers::read_optional($ext, $key)
    };
}
pub(crate) use command_header;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn java_boolean_parsing() {
        assert!(parse_java_bool("true"));
        assert!(parse_java_bool("TRUE"));
        assert!(parse_java_bool("True"));
        for f in ["false", "0", "1", "", "yes", " true"] {
            assert!(!parse_java_bool(f), "{f}");
        }
    }

    #[test]
    fn numbers_from_strings_or_json_numbers() {
        assert_eq!(i32::parse("q", "42"), Ok(42));
        assert_eq!(i32::parse("q", "-3"), Ok(-3));
        assert_eq!(i64::parse("q", "1700000000000"), Ok(1_700_000_000_000));
        assert_eq!(i32::parse("q", "4.0"), Ok(4));
        assert!(i32::parse("q", "4.5").is_err());
        assert!(i32::parse("q", "abc").is_err());
        assert!(i32::parse("q", "99999999999").is_err());
        assert!(i64::parse("q", "NaN").is_err());
    }
}
