//! Prometheus text exposition format, version 0.0.4: per family one `# HELP` line (help text
//! with `\` and newline escaped), one `# TYPE` line, then its samples
//! `name{label="value",...} value`, label values with `\`, `"` and newline escaped; every line
//! ends with `\n`. Histograms expand to cumulative `_bucket{le="..."}` samples ending with
//! `le="+Inf"`, then `_sum` and `_count`. Pure string building: no IO.

use std::fmt::Write as _;

use crate::histogram::HistogramSnapshot;

/// Content type of the exposition (the HTTP `Content-Type` header).
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// The `# TYPE` of a family.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MetricKind {
    Counter,
    Gauge,
    Histogram,
}

impl MetricKind {
    fn as_str(self) -> &'static str {
        match self {
            MetricKind::Counter => "counter",
            MetricKind::Gauge => "gauge",
            MetricKind::Histogram => "histogram",
        }
    }
}

/// Name, help and type of a metric family (static: defined once per metric set).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Desc {
    pub name: &'static str,
    pub help: &'static str,
    pub kind: MetricKind,
}

impl Desc {
    /// A counter family (by convention its name ends with `_total`).
    pub const fn counter(name: &'static str, help: &'static str) -> Self {
        Desc {
            name,
            help,
            kind: MetricKind::Counter,
        }
    }

    /// A gauge family.
    pub const fn gauge(name: &'static str, help: &'static str) -> Self {
        Desc {
            name,
            help,
            kind: MetricKind::Gauge,
        }
    }

    /// A histogram family (by convention its name ends with the unit, e.g. `_seconds`).
    pub const fn histogram(name: &'static str, help: &'static str) -> Self {
        Desc {
            name,
            help,
            kind: MetricKind::Histogram,
        }
    }
}

/// Text being rendered for one scrape. Callers emit all samples of a family one after the
/// other; the header is written before the first sample of each family.
#[derive(Debug, Default)]
pub struct Exposition {
    out: String,
    /// Family whose header was written last, and whether its name is valid.
    current: Option<(&'static str, bool)>,
}

impl Exposition {
    /// An empty exposition.
    pub fn new() -> Self {
        Self::default()
    }

    /// The rendered text.
    pub fn finish(self) -> String {
        self.out
    }

    /// Text rendered so far.
    pub fn as_str(&self) -> &str {
        &self.out
    }

    /// Writes the family header unless it was just written; false when the family name is
    /// invalid (then its samples are dropped rather than corrupting the output).
    fn begin(&mut self, desc: &Desc) -> bool {
        if let Some((name, valid)) = self.current {
            if name == desc.name {
                return valid;
            }
        }
        let valid = is_valid_metric_name(desc.name);
        debug_assert!(valid, "invalid metric name {:?}", desc.name);
        self.current = Some((desc.name, valid));
        if valid {
            self.out.push_str("# HELP ");
            self.out.push_str(desc.name);
            self.out.push(' ');
            escape_help(&mut self.out, desc.help);
            self.out.push('\n');
            self.out.push_str("# TYPE ");
            self.out.push_str(desc.name);
            self.out.push(' ');
            self.out.push_str(desc.kind.as_str());
            self.out.push('\n');
        }
        valid
    }

    /// Only the header, for a family that has no sample right now (e.g. no peers).
    pub fn header(&mut self, desc: &Desc) {
        self.begin(desc);
    }

    /// One counter sample.
    pub fn counter(&mut self, desc: &Desc, labels: &[(&str, &str)], value: u64) {
        if self.begin(desc) {
            self.sample(desc.name, "", labels, None);
            let _ = writeln!(self.out, "{value}");
        }
    }

    /// One integer gauge sample.
    pub fn gauge(&mut self, desc: &Desc, labels: &[(&str, &str)], value: i64) {
        if self.begin(desc) {
            self.sample(desc.name, "", labels, None);
            let _ = writeln!(self.out, "{value}");
        }
    }

    /// One floating-point gauge sample.
    pub fn gauge_f64(&mut self, desc: &Desc, labels: &[(&str, &str)], value: f64) {
        if self.begin(desc) {
            self.sample(desc.name, "", labels, None);
            write_f64(&mut self.out, value);
            self.out.push('\n');
        }
    }

    /// One histogram: its buckets (seconds), `+Inf`, `_sum` (seconds) and `_count`.
    pub fn histogram(&mut self, desc: &Desc, labels: &[(&str, &str)], snap: &HistogramSnapshot) {
        if !self.begin(desc) {
            return;
        }
        let mut le = String::with_capacity(24);
        for (bound_us, count) in snap.bounds_us.iter().zip(&snap.cumulative) {
            le.clear();
            write_f64(&mut le, *bound_us as f64 / 1e6);
            self.sample(desc.name, "_bucket", labels, Some(("le", &le)));
            let _ = writeln!(self.out, "{count}");
        }
        self.sample(desc.name, "_bucket", labels, Some(("le", "+Inf")));
        let _ = writeln!(self.out, "{}", snap.count);
        self.sample(desc.name, "_sum", labels, None);
        write_f64(&mut self.out, snap.sum_ns as f64 / 1e9);
        self.out.push('\n');
        self.sample(desc.name, "_count", labels, None);
        let _ = writeln!(self.out, "{}", snap.count);
    }

    /// `name{labels} ` (value not yet written). Labels with invalid names are skipped.
    fn sample(
        &mut self,
        name: &str,
        suffix: &str,
        labels: &[(&str, &str)],
        extra: Option<(&str, &str)>,
    ) {
        self.out.push_str(name);
        self.out.push_str(suffix);
        let mut first = true;
        for (k, v) in labels.iter().copied().chain(extra) {
            if !is_valid_label_name(k) {
                debug_assert!(false, "invalid label name {k:?}");
                continue;
            }
            self.out.push(if first { '{' } else { ',' });
            first = false;
            self.out.push_str(k);
            self.out.push_str("=\"");
            escape_label_value(&mut self.out, v);
            self.out.push('"');
        }
        if !first {
            self.out.push('}');
        }
        self.out.push(' ');
    }
}

/// `[a-zA-Z_:][a-zA-Z0-9_:]*`
pub fn is_valid_metric_name(name: &str) -> bool {
    let mut bytes = name.bytes();
    matches!(bytes.next(), Some(b) if b.is_ascii_alphabetic() || b == b'_' || b == b':')
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b':')
}

/// `[a-zA-Z_][a-zA-Z0-9_]*`, not starting with the reserved `__`.
pub fn is_valid_label_name(name: &str) -> bool {
    let mut bytes = name.bytes();
    !name.starts_with("__")
        && matches!(bytes.next(), Some(b) if b.is_ascii_alphabetic() || b == b'_')
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

/// HELP text: `\` -> `\\`, newline -> `\n`.
pub fn escape_help(out: &mut String, s: &str) {
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
}

/// Label value: `\` -> `\\`, `"` -> `\"`, newline -> `\n`.
pub fn escape_label_value(out: &mut String, s: &str) {
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
}

/// Float as Prometheus parses it: `NaN`, `+Inf`, `-Inf`, else the shortest decimal that
/// round-trips (never an exponent, so integers print without a fraction).
pub fn write_f64(out: &mut String, v: f64) {
    if v.is_nan() {
        out.push_str("NaN");
    } else if v == f64::INFINITY {
        out.push_str("+Inf");
    } else if v == f64::NEG_INFINITY {
        out.push_str("-Inf");
    } else {
        let _ = write!(out, "{v}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_validated() {
        assert!(is_valid_metric_name("a:b_c9"));
        assert!(is_valid_metric_name("_x"));
        assert!(!is_valid_metric_name(""));
        assert!(!is_valid_metric_name("9a"));
        assert!(!is_valid_metric_name("a-b"));
        assert!(is_valid_label_name("peer_id"));
        assert!(!is_valid_label_name("__name"));
        assert!(!is_valid_label_name("a:b"));
        assert!(!is_valid_label_name(""));
    }

    #[test]
    fn floats_use_prometheus_spellings() {
        let cases = [
            (f64::NAN, "NaN"),
            (f64::INFINITY, "+Inf"),
            (f64::NEG_INFINITY, "-Inf"),
            (1.0, "1"),
            (0.00025, "0.00025"),
            (-2.5, "-2.5"),
        ];
        for (v, want) in cases {
            let mut s = String::new();
            write_f64(&mut s, v);
            assert_eq!(s, want);
        }
    }
}
