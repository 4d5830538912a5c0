//! A strict reader of the Prometheus text format 0.0.4, used to check that what we render
//! parses back: every sample belongs to the family declared by the last `# TYPE` line, names
//! and label names are valid, label values unescape, values parse as floats.

#![allow(dead_code)]

use std::collections::BTreeMap;

/// One parsed sample.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub value: f64,
}

/// A parsed exposition: families (name -> type, help) and samples in order.
#[derive(Debug, Default)]
pub struct Parsed {
    pub types: BTreeMap<String, String>,
    pub helps: BTreeMap<String, String>,
    pub samples: Vec<Sample>,
}

impl Parsed {
    /// The value of the sample `name` with exactly `labels`.
    pub fn value(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        let want: BTreeMap<String, String> = labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        self.samples
            .iter()
            .find(|s| s.name == name && s.labels == want)
            .map(|s| s.value)
    }
}

fn unescape(s: &str, quote_allowed: bool) -> Result<String, String> {
    let mut out = String::new();
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c == '\\' {
            match chars.next() {
                Some('\\') => out.push('\\'),
                Some('n') => out.push('\n'),
                Some('"') if quote_allowed => out.push('"'),
                other => return Err(format!("bad escape {other:?} in {s:?}")),
            }
        } else {
            out.push(c);
        }
    }
    Ok(out)
}

fn valid_name(n: &str, colon: bool) -> bool {
    let mut b = n.bytes();
    matches!(b.next(), Some(c) if c.is_ascii_alphabetic() || c == b'_' || (colon && c == b':'))
        && b.all(|c| c.is_ascii_alphanumeric() || c == b'_' || (colon && c == b':'))
}

fn family_of<'a>(sample: &'a str, types: &BTreeMap<String, String>) -> Option<&'a str> {
    if types.get(sample).is_some() {
        return Some(sample);
    }
    for suffix in ["_bucket", "_sum", "_count"] {
        if let Some(base) = sample.strip_suffix(suffix) {
            if types.get(base).map(String::as_str) == Some("histogram") {
                return Some(base);
            }
        }
    }
    None
}

/// Parses `text`, failing on anything a Prometheus server would reject (or that we never
/// emit, such as timestamps).
pub fn parse(text: &str) -> Result<Parsed, String> {
    if !text.is_empty() && !text.ends_with('\n') {
        return Err("missing final newline".into());
    }
    let mut p = Parsed::default();
    let mut current: Option<String> = None;
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let (name, help) = rest.split_once(' ').ok_or("HELP without text")?;
            if p.helps.contains_key(name) {
                return Err(format!("second HELP for {name}"));
            }
            p.helps.insert(name.into(), unescape(help, false)?);
            continue;
        }
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').ok_or("TYPE without kind")?;
            if !["counter", "gauge", "histogram", "summary", "untyped"].contains(&kind) {
                return Err(format!("bad type {kind}"));
            }
            if p.types.insert(name.into(), kind.into()).is_some() {
                return Err(format!("second TYPE for {name}"));
            }
            current = Some(name.into());
            continue;
        }
        if line.starts_with('#') || line.is_empty() {
            return Err(format!("unexpected line {line:?}"));
        }
        let (head, value) = line.rsplit_once(' ').ok_or("sample without value")?;
        let value: f64 = match value {
            "+Inf" => f64::INFINITY,
            "-Inf" => f64::NEG_INFINITY,
            "NaN" => f64::NAN,
            v => v.parse().map_err(|_| format!("bad value {v:?}"))?,
        };
        let (name, labels) = match head.split_once('{') {
            None => (head, BTreeMap::new()),
            Some((name, rest)) => {
                let body = rest.strip_suffix('}').ok_or("unterminated labels")?;
                (name, parse_labels(body)?)
            }
        };
        if !valid_name(name, true) {
            return Err(format!("bad metric name {name:?}"));
        }
        let family = family_of(name, &p.types).ok_or(format!("sample {name} without TYPE"))?;
        if current.as_deref() != Some(family) {
            return Err(format!("sample {name} not inside its family block"));
        }
        p.samples.push(Sample {
            name: name.into(),
            labels,
            value,
        });
    }
    Ok(p)
}

fn parse_labels(mut body: &str) -> Result<BTreeMap<String, String>, String> {
    let mut labels = BTreeMap::new();
    while !body.is_empty() {
        let (name, rest) = body.split_once("=\"").ok_or("label without value")?;
        if !valid_name(name, false) {
            return Err(format!("bad label name {name:?}"));
        }
        // Find the closing quote, skipping escaped characters.
        let bytes = rest.as_bytes();
        let mut i = 0;
        while i < bytes.len() && bytes[i] != b'"' {
            i += if bytes[i] == b'\\' { 2 } else { 1 };
        }
        if i >= bytes.len() {
            return Err("unterminated label value".into());
        }
        let value = unescape(&rest[..i], true)?;
        if labels.insert(name.to_string(), value).is_some() {
            return Err(format!("label {name} twice"));
        }
        body = &rest[i + 1..];
        body = body.strip_prefix(',').unwrap_or(body);
    }
    Ok(labels)
}

/// Checks histogram invariants: cumulative buckets never decrease and `+Inf` == `_count`.
pub fn check_histogram(p: &Parsed, name: &str) -> Result<(), String> {
    let bucket = format!("{name}_bucket");
    let buckets: Vec<&Sample> = p.samples.iter().filter(|s| s.name == bucket).collect();
    let mut last = 0.0;
    let mut last_le = f64::NEG_INFINITY;
    for s in &buckets {
        let le = s.labels.get("le").ok_or("bucket without le")?;
        let le: f64 = if le == "+Inf" {
            f64::INFINITY
        } else {
            le.parse().map_err(|_| "bad le")?
        };
        if le <= last_le || s.value < last {
            return Err(format!("{name}: buckets not increasing at le={le}"));
        }
        last_le = le;
        last = s.value;
    }
    if last_le != f64::INFINITY {
        return Err(format!("{name}: no +Inf bucket"));
    }
    let count = p.value(&format!("{name}_count"), &[]).ok_or("no _count")?;
    if count != last {
        return Err(format!("{name}: +Inf {last} != count {count}"));
    }
    p.value(&format!("{name}_sum"), &[]).ok_or("no _sum")?;
    Ok(())
}
