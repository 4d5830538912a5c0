//! [`ExtFields`]: the "custom header" map of a command (text keys to text values).
//!
//! Why not a `BTreeMap<String, String>`: decoding one is two `String` allocations per entry
//! plus the tree nodes, and a command carries 5–20 entries. Here every key and value lives
//! back to back in one `String`, and a sorted `Vec` of offsets indexes them: decoding a header
//! costs two allocations whatever the number of entries.
//!
//! Invariants: entries are sorted by key (byte order, like `BTreeMap<String, _>`) with no
//! duplicate key, so iteration and encoding order are deterministic; inserting an existing
//! key replaces its value (last one wins). Replaced or removed text stays in the buffer as
//! garbage until it outweighs the live text, then the buffer is compacted.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use crate::header_encoding::scan;

/// One entry: key is `text[key.0..key.1]`, value is `text[value.0..value.1]`.
#[derive(Debug, Clone, Copy)]
struct Entry {
    key: (usize, usize),
    value: (usize, usize),
    /// Key or value holds a byte JSON must escape (`"`, `\`, controls): rare, and known
    /// when the text arrives, so the JSON encoder can copy the others without scanning.
    escape: bool,
}

impl Entry {
    fn len(&self) -> usize {
        (self.key.1 - self.key.0) + (self.value.1 - self.value.0)
    }
}

/// `a.cmp(b)` (byte order); short keys, the usual case, without a `memcmp` call.
#[inline]
fn cmp_keys(a: &[u8], b: &[u8]) -> std::cmp::Ordering {
    if a.len() > 16 || b.len() > 16 {
        return a.cmp(b);
    }
    for (x, y) in a.iter().zip(b) {
        if x != y {
            return x.cmp(y);
        }
    }
    a.len().cmp(&b.len())
}

/// A byte range of an [`ExtFields`] text buffer (crate-internal, for the decoders).
pub(crate) type Span = (usize, usize);

/// Garbage below this many bytes is never worth a compaction.
const COMPACT_MIN_GARBAGE: usize = 1024;

/// The "custom header" map: sorted by key, so encoding is deterministic and matches Java's
/// fastjson key order for the golden vectors. Method names follow `BTreeMap` (`get`,
/// `insert`, `remove`, `contains_key`, `iter`, `len`, `is_empty`), with `&str` views.
///
/// Cloning is a reference-count bump (the text and index are shared, copied on the first
/// change of a shared map): a request built once and sent many times costs no copy.
#[derive(Clone, Default)]
pub struct ExtFields {
    /// `None` for an empty map that never held anything (no allocation).
    inner: Option<Arc<ExtFieldsBuf>>,
}

/// The map itself: one text buffer and the sorted index into it. Decoders build one
/// directly (no sharing check per entry) and turn it into an [`ExtFields`] at the end.
#[derive(Clone, Default)]
pub(crate) struct ExtFieldsBuf {
    text: String,
    entries: Vec<Entry>,
    /// Bytes of `text` that entries refer to; the rest is garbage.
    live: usize,
}

/// What an empty map reads from.
static EMPTY: ExtFieldsBuf = ExtFieldsBuf::new();

impl ExtFields {
    /// An empty map (no allocation).
    pub const fn new() -> ExtFields {
        ExtFields { inner: None }
    }

    fn inner(&self) -> &ExtFieldsBuf {
        self.inner.as_deref().unwrap_or(&EMPTY)
    }

    /// The map to change: allocated on first use, copied first if shared with a clone.
    fn inner_mut(&mut self) -> &mut ExtFieldsBuf {
        Arc::make_mut(self.inner.get_or_insert_with(Default::default))
    }

    /// An empty map with room for `entries` entries holding `text_bytes` bytes of keys and
    /// values in total.
    pub fn with_capacity(entries: usize, text_bytes: usize) -> ExtFields {
        ExtFields {
            inner: Some(Arc::new(ExtFieldsBuf::with_capacity(entries, text_bytes))),
        }
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.inner().entries.len()
    }

    /// True when there is no entry.
    pub fn is_empty(&self) -> bool {
        self.inner().entries.is_empty()
    }

    /// The value of `key`.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.inner().get(key)
    }

    /// True when `key` has a value.
    pub fn contains_key(&self, key: &str) -> bool {
        self.inner().search(key).is_ok()
    }

    /// Sets `key` to `value` (replacing any previous value) without allocating per entry.
    /// Returns true if the key was already present.
    pub fn set(&mut self, key: &str, value: &str) -> bool {
        if self.inner().get(key) == Some(value) {
            return true;
        }
        self.inner_mut().set(key, value)
    }

    /// Inserts `key -> value`; returns the previous value of `key`, like `BTreeMap::insert`.
    pub fn insert(&mut self, key: String, value: String) -> Option<String> {
        let old = self.get(&key).map(str::to_owned);
        self.set(&key, &value);
        old
    }

    /// Removes `key`; returns its value, like `BTreeMap::remove`.
    pub fn remove(&mut self, key: &str) -> Option<String> {
        self.inner().search(key).ok()?;
        self.inner_mut().remove(key)
    }

    /// Removes every entry (keeps the allocations unless shared).
    pub fn clear(&mut self) {
        if let Some(a) = &mut self.inner {
            match Arc::get_mut(a) {
                Some(inner) => inner.clear(),
                None => self.inner = None,
            }
        }
    }

    /// Keeps only the entries for which `keep(key, value)` is true.
    pub fn retain(&mut self, keep: impl FnMut(&str, &str) -> bool) {
        if self.is_empty() {
            return;
        }
        self.inner_mut().retain(keep)
    }

    /// Entries in key order, as bytes, with their "needs JSON escaping" flag (for the JSON
    /// encoder, which copies them).
    pub(crate) fn iter_bytes_with_escape(&self) -> impl Iterator<Item = (&[u8], &[u8], bool)> + '_ {
        self.inner().iter_bytes_with_escape()
    }

    /// Bytes of keys and values of the entries that need JSON escaping (the encoder gives
    /// them room for the worst case).
    pub(crate) fn escape_text_len(&self) -> usize {
        self.inner()
            .entries
            .iter()
            .filter(|e| e.escape)
            .map(Entry::len)
            .sum()
    }

    /// Total bytes of keys and values.
    pub(crate) fn text_len(&self) -> usize {
        self.inner().live
    }

    /// Entries in key order.
    pub fn iter(&self) -> Iter<'_> {
        let map = self.inner();
        Iter {
            map,
            inner: map.entries.iter(),
        }
    }

    /// Keys in order.
    pub fn keys(&self) -> impl DoubleEndedIterator<Item = &str> + ExactSizeIterator + '_ {
        self.iter().map(|(k, _)| k)
    }

    /// Values in key order.
    pub fn values(&self) -> impl DoubleEndedIterator<Item = &str> + ExactSizeIterator + '_ {
        self.iter().map(|(_, v)| v)
    }

    /// A copy as a `BTreeMap` (for code that needs an owned standard map).
    pub fn to_btree_map(&self) -> BTreeMap<String, String> {
        self.iter()
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect()
    }
}

impl ExtFields {
    /// The map of `pairs` given in key order, built in one pass: the text sized and
    /// allocated once, each string scanned once for bytes JSON escapes, no search. For maps
    /// built per message (the send answer). Pairs out of order or with a repeated key are
    /// still placed correctly (by search, the last value winning), only slower.
    pub fn from_sorted_pairs(pairs: &[(&str, &str)]) -> ExtFields {
        let in_order = pairs
            .windows(2)
            .all(|w| cmp_keys(w[0].0.as_bytes(), w[1].0.as_bytes()).is_lt());
        if !in_order {
            return Self::from_pairs_searching(pairs);
        }
        let text_len = pairs.iter().map(|(k, v)| k.len() + v.len()).sum();
        let mut buf = ExtFieldsBuf::with_capacity(pairs.len(), text_len);
        for &(key, value) in pairs {
            let k = buf.push_text(key);
            let v = buf.push_text(value);
            buf.entries.push(Entry {
                key: k,
                value: v,
                escape: false,
            });
        }
        buf.live = text_len;
        // One scan over all the text; per-entry flags only when something needs escaping.
        if scan::first_special(buf.text.as_bytes()).is_some() {
            let text = buf.text.as_bytes();
            for e in &mut buf.entries {
                e.escape = scan::first_special(&text[e.key.0..e.key.1]).is_some()
                    || scan::first_special(&text[e.value.0..e.value.1]).is_some();
            }
        }
        buf.into()
    }

    /// [`ExtFields::from_sorted_pairs`] for pairs out of order or with a repeated key: each
    /// placed by search, the last value of a key winning.
    #[inline(never)]
    fn from_pairs_searching(pairs: &[(&str, &str)]) -> ExtFields {
        let text_len = pairs.iter().map(|(k, v)| k.len() + v.len()).sum();
        let mut buf = ExtFieldsBuf::with_capacity(pairs.len(), text_len);
        for &(key, value) in pairs {
            let escape = scan::first_special(key.as_bytes()).is_some()
                || scan::first_special(value.as_bytes()).is_some();
            let k = buf.push_text(key);
            let v = buf.push_text(value);
            buf.set_spans(k, v, escape);
        }
        buf.into()
    }
}

impl From<ExtFieldsBuf> for ExtFields {
    fn from(buf: ExtFieldsBuf) -> ExtFields {
        ExtFields {
            inner: (!buf.entries.is_empty()).then(|| Arc::new(buf)),
        }
    }
}

impl ExtFieldsBuf {
    pub(crate) const fn new() -> ExtFieldsBuf {
        ExtFieldsBuf {
            text: String::new(),
            entries: Vec::new(),
            live: 0,
        }
    }

    pub(crate) fn with_capacity(entries: usize, text_bytes: usize) -> ExtFieldsBuf {
        ExtFieldsBuf {
            text: String::with_capacity(text_bytes),
            entries: Vec::with_capacity(entries),
            live: 0,
        }
    }

    /// An empty map whose text buffer starts as `text`: a decoder copies the whole header
    /// once and adds entries by [`ExtFieldsBuf::set_spans`] pointing into it.
    pub(crate) fn over_text(text: &str, entries: usize) -> ExtFieldsBuf {
        // Room for a few unescaped strings appended later without a reallocation.
        let mut buf = String::with_capacity(text.len() + (text.len() / 4).max(64));
        buf.push_str(text);
        ExtFieldsBuf {
            text: buf,
            entries: Vec::with_capacity(entries),
            live: 0,
        }
    }

    /// Appends `s` to the text buffer (for text that is not already in it, e.g. unescaped).
    pub(crate) fn push_text(&mut self, s: &str) -> Span {
        let start = self.text.len();
        self.text.push_str(s);
        (start, self.text.len())
    }

    fn insert_entry(&mut self, i: usize, e: Entry) {
        if i == self.entries.len() {
            self.entries.push(e); // sorted input: no shifting
        } else {
            self.entries.insert(i, e);
        }
    }

    /// Appends what `write` pushes onto the text buffer, with what `write` answers; on `None`
    /// the buffer is restored.
    pub(crate) fn push_text_with<T>(
        &mut self,
        write: impl FnOnce(&mut String) -> Option<T>,
    ) -> Option<(Span, T)> {
        let start = self.text.len();
        match write(&mut self.text) {
            Some(t) => Some(((start, self.text.len()), t)),
            None => {
                self.text.truncate(start);
                None
            }
        }
    }

    /// Sets the key at `key` to the value at `value`, both spans of the text buffer.
    /// `escape` must be true if either holds a byte JSON escapes (see `Entry::escape`).
    ///
    /// Decoders call this once per entry: a key that sorts after the last one (as fastjson,
    /// Go and this crate write them) is appended with one comparison.
    #[inline(always)]
    pub(crate) fn set_spans(&mut self, key: Span, value: Span, escape: bool) {
        let appends = match self.entries.last() {
            None => true,
            Some(last) => {
                let text = self.text.as_bytes();
                let last_key = text.get(last.key.0..last.key.1).unwrap_or_default();
                let k = text.get(key.0..key.1).unwrap_or_default();
                cmp_keys(last_key, k).is_lt()
            }
        };
        // The entry is built where it is stored (built earlier, it went through the stack).
        if appends {
            self.live += (key.1 - key.0) + (value.1 - value.0);
            self.entries.push(Entry { key, value, escape });
        } else {
            self.set_spans_searching(Entry { key, value, escape });
        }
    }

    /// [`ExtFieldsBuf::set_spans`] for a key that does not sort after the last one.
    fn set_spans_searching(&mut self, e: Entry) {
        let k = self
            .text
            .as_bytes()
            .get(e.key.0..e.key.1)
            .unwrap_or_default();
        match self.search_bytes(k) {
            Ok(i) => {
                self.live -= self.entries[i].len();
                self.live += e.len();
                self.entries[i] = e;
                self.maybe_compact();
            }
            Err(i) => {
                self.live += e.len();
                self.insert_entry(i, e);
            }
        }
    }

    fn slice(&self, from: usize, to: usize) -> &str {
        // The offsets always sit on char boundaries of `text` (they come from whole `&str`s);
        // `get` keeps this panic-free even if that were ever violated.
        self.text.get(from..to).unwrap_or_default()
    }

    /// Key bytes of `e` (ordering needs no char-boundary check).
    fn key_bytes(&self, e: &Entry) -> &[u8] {
        self.text
            .as_bytes()
            .get(e.key.0..e.key.1)
            .unwrap_or_default()
    }

    fn key_of(&self, e: &Entry) -> &str {
        self.slice(e.key.0, e.key.1)
    }

    fn value_of(&self, e: &Entry) -> &str {
        self.slice(e.value.0, e.value.1)
    }

    /// `Ok(index)` of `key`, or `Err(index)` where it would be inserted.
    fn search(&self, key: &str) -> Result<usize, usize> {
        self.search_bytes(key.as_bytes())
    }

    fn search_bytes(&self, key: &[u8]) -> Result<usize, usize> {
        // Decoders and typed headers mostly add keys in order: check the end first.
        match self.entries.last() {
            None => return Err(0),
            Some(last) => match cmp_keys(self.key_bytes(last), key) {
                std::cmp::Ordering::Less => return Err(self.entries.len()),
                std::cmp::Ordering::Equal => return Ok(self.entries.len() - 1),
                std::cmp::Ordering::Greater => {}
            },
        }
        self.entries
            .binary_search_by(|e| cmp_keys(self.key_bytes(e), key))
    }

    /// The value of `key`.
    fn get(&self, key: &str) -> Option<&str> {
        let i = self.search(key).ok()?;
        Some(self.value_of(&self.entries[i]))
    }

    /// Sets `key` to `value` (replacing any previous value) without allocating per entry.
    /// Returns true if the key was already present.
    pub(crate) fn set(&mut self, key: &str, value: &str) -> bool {
        let found = self.search(key);
        if let Ok(i) = found {
            if self.value_of(&self.entries[i]) == value {
                return true;
            }
        }
        let escape = scan::first_special(key.as_bytes()).is_some()
            || scan::first_special(value.as_bytes()).is_some();
        let k = self.push_text(key);
        let v = self.push_text(value);
        let e = Entry {
            key: k,
            value: v,
            escape,
        };
        self.live += e.len();
        match found {
            Ok(i) => {
                self.live -= self.entries[i].len();
                self.entries[i] = e;
                self.maybe_compact();
                true
            }
            Err(i) => {
                self.insert_entry(i, e);
                false
            }
        }
    }

    /// Removes `key`; returns its value, like `BTreeMap::remove`.
    fn remove(&mut self, key: &str) -> Option<String> {
        let i = self.search(key).ok()?;
        let e = self.entries.remove(i);
        let value = self.value_of(&e).to_owned();
        self.live -= e.len();
        if self.entries.is_empty() {
            self.text.clear();
        } else {
            self.maybe_compact();
        }
        Some(value)
    }

    /// Removes every entry (keeps the allocations).
    fn clear(&mut self) {
        self.entries.clear();
        self.text.clear();
        self.live = 0;
    }

    /// Keeps only the entries for which `keep(key, value)` is true.
    fn retain(&mut self, mut keep: impl FnMut(&str, &str) -> bool) {
        let mut entries = std::mem::take(&mut self.entries);
        entries.retain(|e| {
            let k = keep(self.key_of(e), self.value_of(e));
            if !k {
                self.live -= e.len();
            }
            k
        });
        self.entries = entries;
        self.maybe_compact();
    }

    /// Rewrites the text buffer without garbage once garbage outweighs the live text, so
    /// repeated replacements cannot grow it without bound.
    fn maybe_compact(&mut self) {
        let garbage = self.text.len() - self.live;
        if garbage < COMPACT_MIN_GARBAGE || garbage < self.live {
            return;
        }
        let mut text = String::with_capacity(self.live);
        for e in &mut self.entries {
            let copy = |text: &mut String, (from, to): Span| {
                let start = text.len();
                text.push_str(self.text.get(from..to).unwrap_or_default());
                (start, text.len())
            };
            e.key = copy(&mut text, e.key);
            e.value = copy(&mut text, e.value);
        }
        self.text = text;
    }

    /// Entries in key order, as bytes, with their "needs JSON escaping" flag.
    fn iter_bytes_with_escape(&self) -> impl Iterator<Item = (&[u8], &[u8], bool)> + '_ {
        let text = self.text.as_bytes();
        self.entries.iter().map(move |e| {
            (
                text.get(e.key.0..e.key.1).unwrap_or_default(),
                text.get(e.value.0..e.value.1).unwrap_or_default(),
                e.escape,
            )
        })
    }
}

/// Iterator over `(key, value)` in key order.
#[derive(Clone)]
pub struct Iter<'a> {
    map: &'a ExtFieldsBuf,
    inner: std::slice::Iter<'a, Entry>,
}

impl<'a> Iterator for Iter<'a> {
    type Item = (&'a str, &'a str);

    fn next(&mut self) -> Option<Self::Item> {
        let e = self.inner.next()?;
        Some((self.map.key_of(e), self.map.value_of(e)))
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.inner.size_hint()
    }
}

impl DoubleEndedIterator for Iter<'_> {
    fn next_back(&mut self) -> Option<Self::Item> {
        let e = self.inner.next_back()?;
        Some((self.map.key_of(e), self.map.value_of(e)))
    }
}

impl ExactSizeIterator for Iter<'_> {}

impl<'a> IntoIterator for &'a ExtFields {
    type Item = (&'a str, &'a str);
    type IntoIter = Iter<'a>;

    fn into_iter(self) -> Iter<'a> {
        self.iter()
    }
}

impl IntoIterator for ExtFields {
    type Item = (String, String);
    type IntoIter = std::vec::IntoIter<(String, String)>;

    fn into_iter(self) -> Self::IntoIter {
        self.iter()
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect::<Vec<_>>()
            .into_iter()
    }
}

impl PartialEq for ExtFields {
    fn eq(&self, other: &ExtFields) -> bool {
        self.len() == other.len() && self.iter().eq(other.iter())
    }
}

impl Eq for ExtFields {}

impl fmt::Debug for ExtFields {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

impl Extend<(String, String)> for ExtFields {
    fn extend<I: IntoIterator<Item = (String, String)>>(&mut self, iter: I) {
        for (k, v) in iter {
            self.set(&k, &v);
        }
    }
}

impl<'a> Extend<(&'a str, &'a str)> for ExtFields {
    fn extend<I: IntoIterator<Item = (&'a str, &'a str)>>(&mut self, iter: I) {
        for (k, v) in iter {
            self.set(k, v);
        }
    }
}

impl FromIterator<(String, String)> for ExtFields {
    fn from_iter<I: IntoIterator<Item = (String, String)>>(iter: I) -> ExtFields {
        let mut m = ExtFields::new();
        m.extend(iter);
        m
    }
}

impl<'a> FromIterator<(&'a str, &'a str)> for ExtFields {
    fn from_iter<I: IntoIterator<Item = (&'a str, &'a str)>>(iter: I) -> ExtFields {
        let mut m = ExtFields::new();
        m.extend(iter);
        m
    }
}

impl From<BTreeMap<String, String>> for ExtFields {
    fn from(map: BTreeMap<String, String>) -> ExtFields {
        let bytes = map.iter().map(|(k, v)| k.len() + v.len()).sum();
        let mut m = ExtFields::with_capacity(map.len(), bytes);
        for (k, v) in &map {
            m.set(k, v);
        }
        m
    }
}

impl From<&ExtFields> for BTreeMap<String, String> {
    fn from(m: &ExtFields) -> BTreeMap<String, String> {
        m.to_btree_map()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Deterministic pseudo-random source (xorshift); the seed is printed and can be given
    /// with `EXT_FIELDS_SEED`.
    fn rng() -> impl FnMut() -> u64 {
        let seed = std::env::var("EXT_FIELDS_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(0x9E37_79B9_7F4A_7C15u64);
        eprintln!("EXT_FIELDS_SEED={seed}");
        let mut x = seed.max(1);
        move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        }
    }

    #[test]
    fn behaves_like_a_btree_map_under_random_operations() {
        let mut next = rng();
        let keys = [
            "a", "b", "bb", "c", "é", "", "zz", "topic", "queueId", "b\u{0}",
        ];
        let mut model = BTreeMap::new();
        let mut map = ExtFields::new();
        for step in 0..20_000 {
            let key = keys[(next() % keys.len() as u64) as usize];
            let mut value = "v".repeat((next() % 40) as usize) + &step.to_string();
            if next().is_multiple_of(4) {
                value.push_str("\"\n");
            }
            match next() % 5 {
                0 | 1 => assert_eq!(
                    map.insert(key.to_owned(), value.clone()),
                    model.insert(key.to_owned(), value)
                ),
                2 => assert_eq!(map.remove(key), model.remove(key)),
                3 => {
                    map.set(key, &value);
                    model.insert(key.to_owned(), value);
                }
                _ => {
                    map.retain(|k, _| k != key);
                    model.remove(key);
                }
            }
            assert_eq!(map.get(key), model.get(key).map(String::as_str));
            assert_eq!(map.contains_key(key), model.contains_key(key));
            assert_eq!(map.len(), model.len());
            if step % 97 == 0 {
                assert!(map
                    .iter()
                    .eq(model.iter().map(|(k, v)| (k.as_str(), v.as_str()))));
                assert_eq!(ExtFields::from(model.clone()), map);
                assert_eq!(map.to_btree_map(), model);
            }
            // Garbage never outgrows the live text by much.
            let live: usize = map.iter().map(|(k, v)| k.len() + v.len()).sum();
            assert_eq!(map.text_len(), live);
            assert!(map.inner().text.len() <= 2 * live + 2 * COMPACT_MIN_GARBAGE + 64);
            let escaped: usize = map
                .iter_bytes_with_escape()
                .filter(|(_, _, escape)| *escape)
                .map(|(k, v, _)| k.len() + v.len())
                .sum();
            assert_eq!(map.escape_text_len(), escaped);
            for (k, v, escape) in map.iter_bytes_with_escape() {
                assert_eq!(
                    escape,
                    k.iter()
                        .chain(v)
                        .any(|&b| b < 0x20 || b == b'"' || b == b'\\')
                );
            }
        }
    }

    #[test]
    fn order_is_sorted_and_duplicates_last_wins() {
        let m: ExtFields = [("b", "1"), ("a", "2"), ("b", "3"), ("c", "")]
            .into_iter()
            .collect();
        let items: Vec<_> = m.iter().collect();
        assert_eq!(items, [("a", "2"), ("b", "3"), ("c", "")]);
        assert_eq!(format!("{m:?}"), r#"{"a": "2", "b": "3", "c": ""}"#);
        let owned: Vec<(String, String)> = m.clone().into_iter().collect();
        assert_eq!(owned[1], ("b".to_owned(), "3".to_owned()));
        assert_eq!(m.keys().rev().collect::<Vec<_>>(), ["c", "b", "a"]);
        assert_eq!(m.values().collect::<Vec<_>>(), ["2", "3", ""]);
    }

    #[test]
    fn equality_ignores_how_the_map_was_built() {
        let mut a = ExtFields::new();
        a.insert("k".into(), "old".into());
        a.insert("k".into(), "new".into());
        a.insert("x".into(), "1".into());
        let b: ExtFields = [("x", "1"), ("k", "new")].into_iter().collect();
        assert_eq!(a, b);
        a.remove("x");
        assert_ne!(a, b);
        a.clear();
        assert!(a.is_empty());
        assert_eq!(a, ExtFields::new());
    }

    #[test]
    fn sorted_pairs_build_the_same_map_as_set_in_any_key_order() {
        let entries = [
            ("MSG_REGION", "DefaultRegion"),
            ("TRACE_ON", "true"),
            ("msgId", "7F00"),
            ("queueId", "3"),
            ("quote\"d", "a\u{1}b"),
        ];
        let mut expected = ExtFields::new();
        for (k, v) in entries {
            expected.set(k, v);
        }
        let built = ExtFields::from_sorted_pairs(&entries);
        assert_eq!(built, expected);
        assert_eq!(built.escape_text_len(), expected.escape_text_len());
        assert_eq!(built.text_len(), expected.text_len());
        // Out of order and repeated keys: placed by search, the last value wins.
        let built = ExtFields::from_sorted_pairs(&[("b", "1"), ("a", "2"), ("b", "3")]);
        assert_eq!(
            built.iter().collect::<Vec<_>>(),
            vec![("a", "2"), ("b", "3")]
        );
        assert!(ExtFields::from_sorted_pairs(&[]).is_empty());
    }

    #[test]
    fn a_clone_shares_the_map_until_one_side_changes() {
        let a: ExtFields = [("k", "v"), ("x", "1")].into_iter().collect();
        let mut b = a.clone();
        assert!(std::ptr::eq(a.inner(), b.inner()));
        b.set("k", "w");
        assert_eq!(a.get("k"), Some("v"));
        assert_eq!(b.get("k"), Some("w"));
        let mut c = a.clone();
        c.clear();
        assert!(c.is_empty());
        assert_eq!(a.len(), 2);
    }
}
