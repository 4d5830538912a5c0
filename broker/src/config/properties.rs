//! The Java `Properties` lexer: splits a properties text into `(key, value)` pairs (comments,
//! `\` continuations, `=`/`:`/whitespace separators, escapes), knowing nothing of the keys.

/// Splits Java properties text into (key, value) pairs in file order.
pub fn parse_properties(text: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut logical = String::new();
    for line in text.lines() {
        let trimmed = line.trim_start();
        if logical.is_empty() && (trimmed.is_empty() || trimmed.starts_with(['#', '!'])) {
            continue;
        }
        // A line ending in an odd number of backslashes continues on the next line.
        let trailing = trimmed.chars().rev().take_while(|&c| c == '\\').count();
        if trailing % 2 == 1 {
            logical.push_str(&trimmed[..trimmed.len() - 1]);
            continue;
        }
        logical.push_str(trimmed);
        if let Some(kv) = split_key_value(&logical) {
            out.push(kv);
        }
        logical.clear();
    }
    if !logical.is_empty() {
        if let Some(kv) = split_key_value(&logical) {
            out.push(kv);
        }
    }
    out
}

fn split_key_value(line: &str) -> Option<(String, String)> {
    let mut key = String::new();
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' => {
                if let Some(n) = chars.next() {
                    key.push(unescape(n));
                }
            }
            '=' | ':' => break,
            c if c.is_whitespace() => {
                // Whitespace ends the key; an '=' or ':' may still follow.
                while chars.peek().is_some_and(|c| c.is_whitespace()) {
                    chars.next();
                }
                if chars.peek().is_some_and(|&c| c == '=' || c == ':') {
                    chars.next();
                }
                break;
            }
            c => key.push(c),
        }
    }
    if key.is_empty() {
        return None;
    }
    let mut value = String::new();
    let rest: String = chars.collect();
    let mut it = rest.trim().chars();
    while let Some(c) = it.next() {
        if c == '\\' {
            if let Some(n) = it.next() {
                value.push(unescape(n));
            }
        } else {
            value.push(c);
        }
    }
    Some((key, value))
}

fn unescape(c: char) -> char {
    match c {
        't' => '\t',
        'n' => '\n',
        'r' => '\r',
        'f' => '\u{c}',
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn properties_syntax() {
        let pairs = parse_properties(
            "# comment\n! also\n  a = 1 \nb:2\nc 3\nd=multi\\\n  line\ne\\=x=y\n\nf=\n",
        );
        let expect: Vec<(String, String)> = [
            ("a", "1"),
            ("b", "2"),
            ("c", "3"),
            ("d", "multiline"),
            ("e=x", "y"),
            ("f", ""),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        assert_eq!(pairs, expect);
    }
}
