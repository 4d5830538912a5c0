//! HeartbeatData (spec §12.3) — loose JSON (Q19): enums by name or ordinal, `subVersion` as
//! string, missing `tagsSet`/`codeSet`/`expressionType`/`classFilterMode`.

use std::fmt;

use serde::de::{self, Deserializer, Visitor};
use serde::{Deserialize, Serialize, Serializer};

use super::lenient;

macro_rules! java_enum {
    ($(#[$m:meta])* $name:ident { $( $variant:ident = $ord:literal => $text:literal ),* $(,)? } default $def:ident) => {
        $(#[$m])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
        pub enum $name {
            $( #[doc = $text] $variant, )*
            /// A name or ordinal this version does not know (kept, not fatal).
            #[default]
            Unknown,
        }

        impl $name {
            /// Java enum name.
            pub fn name(self) -> &'static str {
                match self {
                    $( $name::$variant => $text, )*
                    $name::Unknown => stringify!($def),
                }
            }
            /// Java enum ordinal.
            pub fn from_ordinal(n: i64) -> Self {
                match n {
                    $( $ord => $name::$variant, )*
                    _ => $name::Unknown,
                }
            }
            /// Parses a Java enum name.
            pub fn from_name(s: &str) -> Self {
                match s {
                    $( $text => $name::$variant, )*
                    _ => $name::Unknown,
                }
            }
        }

        impl Serialize for $name {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(self.name())
            }
        }

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                struct V;
                impl<'de> Visitor<'de> for V {
                    type Value = $name;
                    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                        f.write_str("an enum name or ordinal")
                    }
                    fn visit_str<E: de::Error>(self, v: &str) -> Result<$name, E> {
                        match v.trim().parse::<i64>() {
                            Ok(n) => Ok($name::from_ordinal(n)),
                            Err(_) => Ok($name::from_name(v)),
                        }
                    }
                    fn visit_i64<E: de::Error>(self, v: i64) -> Result<$name, E> {
                        Ok($name::from_ordinal(v))
                    }
                    fn visit_u64<E: de::Error>(self, v: u64) -> Result<$name, E> {
                        Ok($name::from_ordinal(i64::try_from(v).unwrap_or(-1)))
                    }
                    fn visit_unit<E: de::Error>(self) -> Result<$name, E> {
                        Ok($name::Unknown)
                    }
                }
                d.deserialize_any(V)
            }
        }
    };
}

java_enum! {
    /// How a consumer fetches messages.
    ConsumeType {
        Actively = 0 => "CONSUME_ACTIVELY",
        Passively = 1 => "CONSUME_PASSIVELY",
        Pop = 2 => "CONSUME_POP",
    } default CONSUME_PASSIVELY
}

java_enum! {
    /// Clustering (shared offsets) or broadcasting.
    MessageModel {
        Broadcasting = 0 => "BROADCASTING",
        Clustering = 1 => "CLUSTERING",
    } default CLUSTERING
}

java_enum! {
    /// Where a new consumer group starts.
    ConsumeFromWhere {
        LastOffset = 0 => "CONSUME_FROM_LAST_OFFSET",
        LastOffsetAndFromMinWhenBootFirst = 1 => "CONSUME_FROM_LAST_OFFSET_AND_FROM_MIN_WHEN_BOOT_FIRST",
        MinOffset = 2 => "CONSUME_FROM_MIN_OFFSET",
        MaxOffset = 3 => "CONSUME_FROM_MAX_OFFSET",
        FirstOffset = 4 => "CONSUME_FROM_FIRST_OFFSET",
        Timestamp = 5 => "CONSUME_FROM_TIMESTAMP",
    } default CONSUME_FROM_LAST_OFFSET
}

/// Body of HEART_BEAT.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct HeartbeatData {
    #[serde(rename = "clientID")]
    pub client_id: String,
    pub consumer_data_set: Vec<ConsumerData>,
    /// 5.x; non-zero means heartbeat v2.
    #[serde(deserialize_with = "lenient::int32")]
    pub heartbeat_fingerprint: i32,
    pub producer_data_set: Vec<ProducerData>,
    #[serde(deserialize_with = "lenient::java_bool")]
    pub without_sub: bool,
}

/// A producer group of the client.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ProducerData {
    pub group_name: String,
}

/// A consumer group of the client with its subscriptions.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ConsumerData {
    pub consume_from_where: ConsumeFromWhere,
    pub consume_type: ConsumeType,
    pub group_name: String,
    pub message_model: MessageModel,
    pub subscription_data_set: Vec<SubscriptionData>,
    #[serde(deserialize_with = "lenient::java_bool")]
    pub unit_mode: bool,
}

/// One topic subscription.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct SubscriptionData {
    #[serde(deserialize_with = "lenient::java_bool")]
    pub class_filter_mode: bool,
    pub code_set: Vec<i32>,
    /// `TAG` (default when absent) or `SQL92`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expression_type: Option<String>,
    pub sub_string: String,
    #[serde(deserialize_with = "lenient::int64")]
    pub sub_version: i64,
    pub tags_set: Vec<String>,
    pub topic: String,
}

impl SubscriptionData {
    /// Expression type with Java's default.
    pub fn expression_type(&self) -> &str {
        self.expression_type.as_deref().unwrap_or("TAG")
    }

    /// Builds a TAG subscription the way Java does: `*`/empty = all, else split on `||`.
    pub fn tag(topic: impl Into<String>, expression: &str, sub_version: i64) -> Self {
        let tags = parse_tags(expression);
        SubscriptionData {
            topic: topic.into(),
            sub_string: if tags.is_empty() {
                "*".to_owned()
            } else {
                expression.to_owned()
            },
            code_set: tags.iter().map(|t| java_string_hash(t)).collect(),
            tags_set: tags,
            sub_version,
            expression_type: Some("TAG".to_owned()),
            class_filter_mode: false,
        }
    }

    /// Tags to match: `tags_set` when given, else parsed from `sub_string`. Empty = all.
    pub fn effective_tags(&self) -> Vec<String> {
        if self.tags_set.is_empty() {
            parse_tags(&self.sub_string)
        } else {
            self.tags_set.clone()
        }
    }
}

/// Java's tag-expression parsing: empty or `*` means all (empty list), else split on `||`,
/// trim, drop empties.
pub fn parse_tags(expression: &str) -> Vec<String> {
    let e = expression.trim();
    if e.is_empty() || e == "*" {
        return Vec::new();
    }
    e.split("||")
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .map(str::to_owned)
        .collect()
}

/// Java `String.hashCode` (UTF-16 code units), the tag code stored in consume queues.
pub fn java_string_hash(s: &str) -> i32 {
    s.encode_utf16()
        .fold(0i32, |h, c| h.wrapping_mul(31).wrapping_add(i32::from(c)))
}
