//! The exporter's reading of packed window hashes (`monitor/store/redis/packed.py`'s format).
//!
//! A hash as the read scripts send it is the JSON array of its plain fields (names and values,
//! all strings), a newline, then `index count ...` of its sketch buckets. `WindowCodec.decode`
//! turns one into the parts of an `Aggregate` (what `monitor.store.redis.wire.decode_hash` builds
//! in Python); `WindowCodec.sums` adds a slice's windows up per span (what
//! `monitor.store.redis.span_sums.fresh_sums` does in Python). Both give exactly the Python
//! result or `None`: anything this reader is not sure of (a value that is not a plain decimal, a
//! bucket listed twice, a negative count, a sketch field among the plain ones, a sum past i64)
//! goes back to the Python reader, which decides and reports it as before. Field names are
//! interned Python strings, as the exporter's caches keep them.

use pyo3::buffer::PyBuffer;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyString, PyTuple};
use rustc_hash::{FxHashMap, FxHashSet};
use std::borrow::Cow;
use std::sync::Mutex;

/// The names the codec treats apart (from Python, so the two cannot drift apart).
#[pyclass(frozen)]
struct WindowCodec {
    /// The float fields, in the order of the reader's flat float arrays.
    floats: Vec<String>,
    /// The sketch's zero bucket as a plain field (`latency:zero`).
    zero_field: String,
    /// The prefix of sketch fields (`latency:`).
    latency_prefix: String,
    /// Field names already interned (a few dozen: the fields and the models' token fields), so a
    /// window's names are looked up here instead of built and interned again; at most [`NAMES_CACHED`].
    names: Mutex<FxHashMap<String, Py<PyString>>>,
    /// Per first byte, whether a name that starts with it may be one of the names above (the others
    /// are integer fields, told apart without comparing them); all true when one of those is empty.
    special_first: [bool; 256],
}

/// Field names the codec keeps interned (past that, names are interned call by call as before).
const NAMES_CACHED: usize = 4096;

/// A plain field's value as Python reads it.
#[derive(Clone, Copy)]
enum Value {
    Int(i64),
    Float(f64),
}

/// A plain decimal integer (`-?[0-9]+`) that fits in i64 (Python's `int(text)` then agrees).
fn int_of(text: &str) -> Option<i64> {
    int_of_bytes(text.as_bytes())
}

/// A plain decimal number (`-?digits[.digits][e[+-]digits]`, finite): Rust and Python both round
/// it correctly, so `float(text)` in Python is this very value.
fn float_of(text: &str) -> Option<f64> {
    let b = text.as_bytes();
    let mut i = usize::from(b.first() == Some(&b'-'));
    let start = i;
    while i < b.len() && b[i].is_ascii_digit() {
        i += 1;
    }
    let mut mantissa = i - start;
    if i < b.len() && b[i] == b'.' {
        i += 1;
        let frac = i;
        while i < b.len() && b[i].is_ascii_digit() {
            i += 1;
        }
        mantissa += i - frac;
    }
    if mantissa == 0 {
        return None;
    }
    if i < b.len() && (b[i] == b'e' || b[i] == b'E') {
        i += 1;
        if i < b.len() && (b[i] == b'+' || b[i] == b'-') {
            i += 1;
        }
        let exp = i;
        while i < b.len() && b[i].is_ascii_digit() {
            i += 1;
        }
        if i == exp {
            return None;
        }
    }
    if i != b.len() {
        return None;
    }
    text.parse::<f64>().ok().filter(|v| v.is_finite())
}

/// Python's `int(text)`, else `int(float(text))` (truncation), for the texts both readers agree on.
fn integer_of(text: &str) -> Option<i64> {
    int_of(text).or_else(|| {
        let v = float_of(text)?.trunc();
        (v.abs() < 9.2e18).then_some(v as i64)
    })
}

/// The JSON array of strings before the newline (cjson writes an empty one as `{}`). Strings
/// without escapes are borrowed; a head with any escape is read by serde.
fn plain_fields(head: &[u8]) -> Option<Vec<Cow<'_, str>>> {
    let head = head.trim_ascii();
    if head == b"{}" {
        return Some(Vec::new());
    }
    let text = std::str::from_utf8(head).ok()?;
    let b = text.as_bytes();
    let mut out = Vec::with_capacity(head.len() / 8); // a string takes its length + 3: no growing past 5 a string
    let mut i = 1;
    if b.first() != Some(&b'[') {
        return None;
    }
    let skip = |i: &mut usize| {
        while *i < b.len() && b[*i].is_ascii_whitespace() {
            *i += 1;
        }
    };
    skip(&mut i);
    if i < b.len() && b[i] == b']' {
        return (i + 1 == b.len()).then_some(out);
    }
    loop {
        if i >= b.len() || b[i] != b'"' {
            return None;
        }
        let start = i + 1;
        let end = string_stop(b, start)?;
        if b[end] != b'"' {
            return escaped_fields(head);
        }
        out.push(Cow::Borrowed(&text[start..end]));
        i = end + 1;
        skip(&mut i);
        match b.get(i) {
            Some(b',') => {
                i += 1;
                skip(&mut i);
            }
            Some(b']') if i + 1 == b.len() => return Some(out),
            _ => return None,
        }
    }
}

const ONES: u64 = 0x0101_0101_0101_0101;
const HIGHS: u64 = 0x8080_8080_8080_8080;

/// Where the JSON string running from `at` stops: its first '"', '\\' or control byte (below 0x20),
/// None when there is none. Eight bytes a step: a byte's high bit in `(w - ONES) & !w` marks a
/// zero byte exactly up to the first one (past it a borrow may mark others), and so for the
/// masks here, so the lowest mark of the three is the first stop.
fn string_stop(b: &[u8], mut at: usize) -> Option<usize> {
    while let Some(eight) = b.get(at..at + 8) {
        let w = u64::from_le_bytes(eight.try_into().ok()?);
        let zero = |v: u64| v.wrapping_sub(ONES) & !v & HIGHS;
        let stops = zero(w ^ (u64::from(b'"') * ONES)) | zero(w ^ (u64::from(b'\\') * ONES))
            | (w.wrapping_sub(0x20 * ONES) & !w & HIGHS);
        if stops != 0 {
            return Some(at + (stops.trailing_zeros() / 8) as usize);
        }
        at += 8;
    }
    b[at..].iter().position(|&c| c == b'"' || c == b'\\' || c < 0x20).map(|k| at + k)
}

/// [`plain_fields`] of a head with escapes, by serde.
fn escaped_fields(head: &[u8]) -> Option<Vec<Cow<'_, str>>> {
    let values: Vec<serde_json::Value> = serde_json::from_slice(head).ok()?;
    values.into_iter().map(|v| match v {
        serde_json::Value::String(s) => Some(Cow::Owned(s)),
        _ => None,
    }).collect()
}

/// A plain decimal integer (`-?[0-9]+`) of bytes that fits in i64.
fn int_of_bytes(b: &[u8]) -> Option<i64> {
    let (negative, digits) = match b.first() {
        Some(b'-') => (true, &b[1..]),
        _ => (false, b),
    };
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    if digits.len() > 18 {
        return std::str::from_utf8(b).ok()?.parse().ok(); // long: let the checked parse decide
    }
    let v = digits.iter().fold(0i64, |v, &d| v * 10 + i64::from(d - b'0'));
    Some(if negative { -v } else { v })
}

/// The `index count` pairs of a bucket text appended to `out`; None when odd, not plain integers,
/// or a count < 0. One pass over the bytes, the tokens split where `split(u8::is_ascii_whitespace)`
/// splits them (a tail holding another separator, such as the \x0b that Python's `split` also
/// splits on, makes a token that is not a plain integer: Python decides).
fn bucket_pairs(tail: &[u8], out: &mut Vec<(i64, i64)>) -> Option<()> {
    out.reserve(tail.len() / 4 + 1); // a pair takes 4 bytes at least ("1 2 "): no growing below
    let mut i = 0;
    loop {
        while i < tail.len() && tail[i].is_ascii_whitespace() {
            i += 1;
        }
        if i == tail.len() {
            return Some(());
        }
        let index = token(tail, &mut i)?;
        while i < tail.len() && tail[i].is_ascii_whitespace() {
            i += 1;
        }
        let count = if i < tail.len() { token(tail, &mut i)? } else { return None }; // odd
        if count < 0 {
            return None;
        }
        out.push((index, count));
    }
}

/// The token at `tail[*at..]` (not whitespace) as a plain decimal integer (`-?[0-9]+`, ended by
/// ASCII whitespace or the text's end) within i64, `*at` moved past it; None when it is not one.
/// A token of more than 18 digits goes through [`int_of_bytes`]'s checked parse.
#[inline(always)]
fn token(tail: &[u8], at: &mut usize) -> Option<i64> {
    let start = *at;
    let negative = tail[start] == b'-';
    let digits = start + usize::from(negative);
    let mut i = digits;
    let mut v = 0i64;
    while i < tail.len() && tail[i].is_ascii_digit() {
        v = v.wrapping_mul(10).wrapping_add(i64::from(tail[i] - b'0')); // exact up to 18 digits
        i += 1;
    }
    if i < tail.len() && !tail[i].is_ascii_whitespace() {
        return None; // a byte other than a digit in the token
    }
    *at = i;
    match i - digits {
        0 => None,
        1..=18 => Some(if negative { -v } else { v }),
        _ => int_of_bytes(&tail[start..i]),
    }
}

/// `pairs` (counts >= 0) in index order without their zero counts, in place; None when an index is
/// listed twice (Python's dict keeps one of them: left to Python), `pairs` then left in any order.
/// The text lists a sketch's buckets in insertion order, not sorted: they are placed in a dense
/// table when their indices span few slots, as a sketch's do, else sorted.
fn sorted_unique(pairs: &mut Vec<(i64, i64)>) -> Option<()> {
    let Some((lo, hi)) = bounds(pairs) else { return Some(()) };
    match dense_width(lo, hi, pairs.len()) {
        Some(width) => {
            let mut slots = vec![0u64; width]; // count + 1 (at most 2^63): 0 is a slot no pair took
            for &(index, count) in pairs.iter() {
                let slot = &mut slots[(index - lo) as usize];
                if *slot != 0 {
                    return None;
                }
                *slot = count as u64 + 1;
            }
            pairs.clear();
            pairs.extend(slots.iter().enumerate().filter(|(_, &s)| s > 1).map(|(at, &s)| (lo + at as i64, (s - 1) as i64)));
        }
        None => {
            pairs.sort_unstable();
            if pairs.windows(2).any(|w| w[0].0 == w[1].0) {
                return None;
            }
            pairs.retain(|p| p.1 != 0);
        }
    }
    Some(())
}

/// The least and the greatest index of `pairs`; None when there is none.
fn bounds(pairs: &[(i64, i64)]) -> Option<(i64, i64)> {
    let first = pairs.first()?.0;
    Some(pairs.iter().fold((first, first), |(lo, hi), p| (lo.min(p.0), hi.max(p.0))))
}

/// The slots of a dense table over the indices `lo ..= hi` when it is worth it for `pairs` pairs
/// (at most about 4 slots a pair); None when a sort does better (or the span passes i64).
fn dense_width(lo: i64, hi: i64, pairs: usize) -> Option<usize> {
    let width = hi.checked_sub(lo)?;
    (width < 4 * pairs as i64 + 64).then_some(width as usize + 1)
}

/// The pairs of `runs` (counts >= 0) summed by index, in index order, the zero sums left out;
/// None past i64. `lo ..= hi` bounds their indices and `count` is how many they are: a dense
/// tally when the indices are few, as a sketch's are; else a sort.
fn summed_pairs(runs: &[&[(i64, i64)]], lo: i64, hi: i64, count: usize) -> Option<Vec<(i64, i64)>> {
    if count == 0 {
        return Some(Vec::new());
    }
    if let Some(width) = dense_width(lo, hi, count) {
        let mut tally = vec![0i64; width];
        for &(index, n) in runs.iter().copied().flatten() {
            let slot = &mut tally[(index - lo) as usize];
            *slot = slot.checked_add(n)?;
        }
        return Some(tally.iter().enumerate().filter(|(_, &n)| n != 0).map(|(at, &n)| (lo + at as i64, n)).collect());
    }
    let mut pairs: Vec<(i64, i64)> = runs.concat();
    pairs.sort_unstable_by_key(|p| p.0);
    let mut summed: Vec<(i64, i64)> = Vec::with_capacity(pairs.len());
    for (index, n) in pairs {
        match summed.last_mut() {
            Some(last) if last.0 == index => last.1 = last.1.checked_add(n)?,
            _ => summed.push((index, n)),
        }
    }
    summed.retain(|p| p.1 != 0);
    Some(summed)
}

/// A present window of a slice's sums.
struct Present {
    /// Its position in the slice's range.
    at: usize,
    /// Its integer fields, `(name id, value)` in its order.
    ints: Vec<(usize, i64)>,
    /// Its zero bucket.
    zero: i64,
    /// Where its bucket pairs are among the slice's.
    pairs: std::ops::Range<usize>,
    /// The least and the greatest index of its bucket pairs (None: it has none).
    bounds: Option<(i64, i64)>,
}

/// One window's parts: plain fields in order (name, value), floats by their codec position (nan
/// where absent, a repeated name's last value), zero bucket.
struct Window<'a> {
    fields: Vec<(Cow<'a, str>, Value)>,
    floats: Vec<f64>,
    zero: i64,
}

impl WindowCodec {
    /// `names` as interned Python strings (the ones the codec handed out before, when cached), the
    /// cache locked once for them all.
    fn interned<'py, 'n>(&self, py: Python<'py>, names: impl IntoIterator<Item = &'n str>) -> Vec<Bound<'py, PyString>> {
        let Ok(mut cache) = self.names.lock() else {
            return names.into_iter().map(|name| PyString::intern(py, name)).collect();
        };
        names.into_iter().map(|name| {
            if let Some(held) = cache.get(name) {
                return held.bind(py).clone();
            }
            let interned = PyString::intern(py, name);
            if cache.len() < NAMES_CACHED {
                cache.insert(name.to_owned(), interned.clone().unbind());
            }
            interned
        }).collect()
    }

    fn float_index(&self, name: &str) -> Option<usize> {
        self.floats.iter().position(|f| f == name)
    }

    /// The plain part as `decode_hash` reads it (a duplicate name keeps its last value).
    fn head<'a>(&self, head: &'a [u8], zero_assign: bool) -> Option<Window<'a>> {
        let flat = plain_fields(head)?;
        let mut fields = Vec::with_capacity(flat.len() / 2);
        let mut floats = vec![f64::NAN; self.floats.len()];
        let mut zero = 0i64;
        let mut it = flat.into_iter();
        while let Some(name) = it.next() {
            let text = it.next()?; // an odd list: Python's zip drops the last name; leave it to Python
            if name.as_bytes().first().is_some_and(|&b| !self.special_first[usize::from(b)]) {
                fields.push((name, Value::Int(integer_of(&text)?)));
            } else if name == self.zero_field.as_str() {
                let n = int_of(&text)?; // Python reads the zero bucket with int() alone
                zero = if zero_assign { n } else { zero.checked_add(n)? };
            } else if name.starts_with(&self.latency_prefix) {
                return None; // a bucket held as a plain field: the Python readers differ on it
            } else if let Some(j) = self.float_index(&name) {
                floats[j] = float_of(&text)?;
                fields.push((name, Value::Float(floats[j])));
            } else {
                fields.push((name, Value::Int(integer_of(&text)?)));
            }
        }
        Some(Window { fields, floats, zero })
    }
}

fn split(raw: &[u8]) -> (&[u8], &[u8]) {
    match memchr::memchr(b'\n', raw) {
        Some(at) => (&raw[..at], &raw[at + 1..]),
        None => (raw, &[]),
    }
}

fn set_value(dict: &Bound<'_, PyDict>, key: &Bound<'_, PyString>, value: Value) -> PyResult<()> {
    match value {
        Value::Int(n) => dict.set_item(key, n),
        Value::Float(v) => dict.set_item(key, v),
    }
}

/// `{index: count}` in index order, zero counts left out, and their total; None past i64.
fn buckets_dict<'py>(py: Python<'py>, sorted: &[(i64, i64)]) -> PyResult<Option<(Bound<'py, PyDict>, i64)>> {
    let out = PyDict::new(py);
    let mut total = 0i64;
    for &(index, count) in sorted {
        if count != 0 {
            out.set_item(index, count)?;
            total = match total.checked_add(count) {
                Some(t) => t,
                None => return Ok(None),
            };
        }
    }
    Ok(Some((out, total)))
}

/// One hash read without Python objects: its fields as listed ([`deduped`] merges a repeated name
/// as `decode` does: first place, last value), the float fields in codec order (nan where absent,
/// a repeated name's last value), zero bucket, bucket pairs as the text lists them (an index may be
/// listed twice: see [`bucket_steps`]).
struct Parsed<'a> {
    fields: Vec<(Cow<'a, str>, Value)>,
    floats: Vec<f64>,
    zero: i64,
    buckets: Vec<(i64, i64)>,
}

impl WindowCodec {
    /// `raw` read (None: see the module doc), its fields as listed: [`deduped`] makes them `decode`'s.
    fn parse<'a>(&self, raw: &'a [u8]) -> Option<Parsed<'a>> {
        let (head, tail) = split(raw);
        let window = self.head(head, false)?;
        if window.zero < 0 {
            return None;
        }
        let mut pairs = Vec::new();
        bucket_pairs(tail, &mut pairs)?;
        Some(Parsed { fields: window.fields, floats: window.floats, zero: window.zero, buckets: pairs })
    }
}

/// `fields` with a repeated name merged into its first place with its last value (as a dict takes them).
fn deduped(fields: Vec<(Cow<'_, str>, Value)>) -> Vec<(Cow<'_, str>, Value)> {
    let mut names: FxHashSet<&str> = FxHashSet::with_capacity_and_hasher(fields.len(), Default::default());
    if fields.iter().all(|(name, _)| names.insert(name.as_ref())) {
        return fields;
    }
    let mut out: Vec<(Cow<'_, str>, Value)> = Vec::with_capacity(fields.len());
    for (name, value) in fields {
        match out.iter_mut().find(|(k, _)| *k == name) {
            Some(slot) => slot.1 = value,
            None => out.push((name, value)),
        }
    }
    out
}

/// What `new` gained over `old` (see `WindowCodec.delta`): Err(()) when the native reader cannot
/// tell (Python decides), Ok(None) when something went down.
#[allow(clippy::type_complexity)]
fn gained<'b>(new: &'b Parsed<'_>, old: &Parsed<'_>)
              -> Result<Option<(Vec<(&'b str, Value)>, Vec<(i64, i64)>, i64, i64)>, ()> {
    let mut counts = Vec::with_capacity(new.fields.len());
    let mut down = false;
    // the same window's two texts list their fields in the same order: look there first
    let find = |at: usize, name: &str| -> Option<Value> {
        match old.fields.get(at) {
            Some((k, v)) if k == name => Some(*v),
            _ => old.fields.iter().find(|(k, _)| k == name).map(|(_, v)| *v),
        }
    };
    let mut found = 0;
    for (at, (name, value)) in new.fields.iter().enumerate() {
        let before = find(at, name);
        found += usize::from(before.is_some());
        let d = match (*value, before) {
            (Value::Int(a), None) => Value::Int(a),
            (Value::Float(a), None) => Value::Float(a - 0.0),
            (Value::Int(a), Some(Value::Int(b))) => Value::Int(a.checked_sub(b).ok_or(())?),
            (Value::Float(a), Some(Value::Float(b))) => Value::Float(a - b),
            _ => return Err(()),
        };
        match d {
            Value::Int(n) => {
                down |= n < 0;
                if n != 0 {
                    counts.push((name.as_ref(), d));
                }
            }
            Value::Float(v) => {
                if v.is_nan() {
                    return Err(());
                }
                down |= v < 0.0;
                if v != 0.0 {
                    counts.push((name.as_ref(), d));
                }
            }
        }
    }
    if found != old.fields.len() {
        down = true; // a field of old that new lacks (names are unique in both)
    }
    let steps = bucket_steps(&new.buckets, &old.buckets).ok_or(())?;
    let zero = new.zero - old.zero;
    if down || steps.down || zero < 0 {
        return Ok(None);
    }
    let total = |zero: i64, buckets: Option<i64>| buckets.and_then(|b| b.checked_add(zero)).ok_or(());
    let count = total(new.zero, steps.totals.0)? - total(old.zero, steps.totals.1)?;
    Ok(Some((counts, steps.gained, zero, count)))
}

/// What a window's buckets gained: `new`'s counts less `old`'s (0 where absent) in index order,
/// the zero differences left out.
struct BucketSteps {
    gained: Vec<(i64, i64)>,
    /// Whether a bucket went down (or one of `old` is not in `new`).
    down: bool,
    /// The sums of `new`'s and of `old`'s counts (None past i64).
    totals: (Option<i64>, Option<i64>),
}

/// [`BucketSteps`] of two texts' `index count` pairs (counts >= 0, in the texts' order); None
/// when an index is listed twice in either (left to Python, as [`sorted_unique`] leaves it).
/// One dense table over both when their indices span few slots, else both sorted and walked.
fn bucket_steps(new: &[(i64, i64)], old: &[(i64, i64)]) -> Option<BucketSteps> {
    let sum = |pairs: &[(i64, i64)]| pairs.iter().try_fold(0i64, |acc, p| acc.checked_add(p.1));
    let totals = (sum(new), sum(old));
    let span = match (bounds(new), bounds(old)) {
        (Some((a, b)), Some((c, d))) => Some((a.min(c), b.max(d))),
        (one, other) => one.or(other),
    };
    let mut gained = Vec::with_capacity(new.len());
    let mut down = false;
    let Some((lo, hi)) = span else { return Some(BucketSteps { gained, down, totals }) };
    if let Some(width) = dense_width(lo, hi, new.len() + old.len()) {
        let mut slots = vec![[0u64; 2]; width]; // count + 1 in new, in old (0: not listed)
        for (side, pairs) in [new, old].into_iter().enumerate() {
            for &(index, count) in pairs {
                let slot = &mut slots[(index - lo) as usize][side];
                if *slot != 0 {
                    return None;
                }
                *slot = count as u64 + 1;
            }
        }
        for (at, &[n, o]) in slots.iter().enumerate() {
            let (n, o) = (n.saturating_sub(1) as i64, o.saturating_sub(1) as i64);
            if n > 0 {
                let d = n - o;
                down |= d < 0;
                if d != 0 {
                    gained.push((lo + at as i64, d));
                }
            } else {
                down |= o > 0; // a bucket of old that new lacks
            }
        }
        return Some(BucketSteps { gained, down, totals });
    }
    let (mut new, mut old) = (new.to_vec(), old.to_vec());
    sorted_unique(&mut new)?;
    sorted_unique(&mut old)?;
    let mut j = 0;
    for &(index, n) in &new {
        while j < old.len() && old[j].0 < index {
            down = true; // a bucket of old that new lacks
            j += 1;
        }
        let before = if j < old.len() && old[j].0 == index {
            j += 1;
            old[j - 1].1
        } else {
            0
        };
        let d = n - before;
        down |= d < 0;
        if d != 0 {
            gained.push((index, d));
        }
    }
    down |= j < old.len();
    Some(BucketSteps { gained, down, totals })
}

#[pymethods]
impl WindowCodec {
    #[new]
    fn new(floats: Vec<String>, zero_field: String, latency_prefix: String) -> Self {
        let mut special_first = [false; 256];
        for name in floats.iter().chain([&zero_field, &latency_prefix]) {
            match name.as_bytes().first() {
                Some(&b) => special_first[usize::from(b)] = true,
                None => special_first = [true; 256],
            }
        }
        WindowCodec { floats, zero_field, latency_prefix, names: Mutex::new(FxHashMap::default()), special_first }
    }

    /// `(counts, buckets, zero, bucket total)` of one encoded hash, or None (see the module doc).
    ///
    /// `counts` holds the plain fields in their order (the float fields as floats), the names
    /// interned; `buckets` the sketch's `{index: count}` in index order without zero counts.
    fn decode<'py>(&self, py: Python<'py>, raw: &[u8]) -> PyResult<Option<Bound<'py, PyTuple>>> {
        let (head, tail) = split(raw);
        let Some(window) = self.head(head, false) else { return Ok(None) };
        if window.zero < 0 {
            return Ok(None);
        }
        let mut pairs = Vec::new();
        if bucket_pairs(tail, &mut pairs).is_none() || sorted_unique(&mut pairs).is_none() {
            return Ok(None); // an index listed twice: Python keeps one of them; leave it to Python
        }
        let Some((buckets, total)) = buckets_dict(py, &pairs)? else { return Ok(None) };
        let counts = PyDict::new(py);
        let names = self.interned(py, window.fields.iter().map(|(name, _)| name.as_ref()));
        for (name, (_, value)) in names.iter().zip(&window.fields) {
            set_value(&counts, name, *value)?;
        }
        Ok(Some(PyTuple::new(py, [counts.into_any(), buckets.into_any(), window.zero.into_pyobject(py)?.into_any(),
                                  total.into_pyobject(py)?.into_any()])?))
    }

    /// Window `new` against the `old` content of the same window, both as the scripts send them:
    /// `(traces, floats, gained)` of `new`, `gained` being `(counts, buckets, zero, count)` of what
    /// it gained (`monitor.store.redis.spans.delta` of the two decoded hashes: the zero differences
    /// left out) or None when something went down (a rebuild). None when either text is one the
    /// native reader hands back.
    fn delta<'py>(&self, py: Python<'py>, new: &[u8], old: &[u8]) -> PyResult<Option<Bound<'py, PyTuple>>> {
        let (Some(mut a), Some(mut b)) = (self.parse(new), self.parse(old)) else { return Ok(None) };
        a.fields = deduped(a.fields);
        // the same window's two texts list their fields in the same order: old's names are then new's
        // first ones, which deduped found distinct
        let prefix = b.fields.len() <= a.fields.len() && b.fields.iter().zip(&a.fields).all(|(x, y)| x.0 == y.0);
        if !prefix {
            b.fields = deduped(b.fields);
        }
        let traces = match a.fields.iter().find(|(k, _)| k == "traces") {
            Some((_, Value::Int(n))) => *n,
            None => 0,
            _ => return Ok(None),
        };
        let Ok(step) = gained(&a, &b) else { return Ok(None) };
        let floats = PyList::new(py, &a.floats)?.into_any();
        let step = match step {
            None => py.None().into_bound(py),
            Some((counts, buckets, zero, count)) => {
                let c = PyDict::new(py);
                let names = self.interned(py, counts.iter().map(|(name, _)| *name));
                for (name, (_, value)) in names.iter().zip(counts) {
                    set_value(&c, name, value)?;
                }
                let bk = PyDict::new(py);
                for (index, n) in buckets {
                    bk.set_item(index, n)?;
                }
                PyTuple::new(py, [c.into_any(), bk.into_any(), zero.into_pyobject(py)?.into_any(),
                                  count.into_pyobject(py)?.into_any()])?.into_any()
            }
        };
        Ok(Some(PyTuple::new(py, [traces.into_pyobject(py)?.into_any(), floats, step])?))
    }

    /// A slice's windows (one per start of its range, None where absent) added up per span.
    ///
    /// Returns `(counts, floats, spans)` or None: per window its `traces` (0: absent or emptied)
    /// and its float fields in codec order (nan where absent), and per span (the last
    /// `suffixes[k]` windows) `(integer fields, zero bucket, buckets, bucket total)`: the integer
    /// fields summed in first-seen order, the buckets summed in index order without zero sums.
    /// A window whose `traces` is 0 counts as absent (its floats are still listed, as in Python).
    fn sums<'py>(&self, py: Python<'py>, raws: &Bound<'py, PyList>, suffixes: Vec<usize>)
                 -> PyResult<Option<Bound<'py, PyTuple>>> {
        let n = raws.len();
        let nf = self.floats.len();
        let mut counts = vec![0i64; n];
        let mut floats = vec![f64::NAN; n * nf];
        let items: Vec<Bound<'py, PyAny>> = raws.iter().collect();
        // the integer fields' names by id, in first-seen order over the windows
        let mut names: Vec<Cow<'_, str>> = Vec::new();
        let mut ids: FxHashMap<Cow<'_, str>, usize> = FxHashMap::default();
        let mut seen_in: Vec<usize> = Vec::new(); // per name id, the last window (+1) that held it
        let traces = {
            ids.insert(Cow::Borrowed("traces"), 0);
            names.push(Cow::Borrowed("traces"));
            seen_in.push(0);
            0
        };
        let mut present: Vec<Present> = Vec::new();
        let mut pairs: Vec<(i64, i64)> = Vec::new();
        let mut previous: Vec<usize> = Vec::new(); // the last window's integer fields' ids, in its order
        for (i, item) in items.iter().enumerate() {
            if item.is_none() {
                continue;
            }
            let bytes = item.cast::<PyBytes>()?;
            let (head, tail) = split(bytes.as_bytes());
            let Some(window) = self.head(head, true) else { return Ok(None) };
            floats[i * nf..(i + 1) * nf].copy_from_slice(&window.floats);
            let mut ints = Vec::with_capacity(window.fields.len());
            for (name, value) in window.fields {
                let Value::Int(v) = value else { continue }; // a float field: placed above
                // the windows of a slice mostly list their fields in the same order: look there first
                let id = match previous.get(ints.len()) {
                    Some(&id) if names[id] == name => id,
                    _ => match ids.get(name.as_ref()) {
                        Some(&id) => id,
                        None => {
                            ids.insert(name.clone(), names.len());
                            names.push(name);
                            seen_in.push(0);
                            names.len() - 1
                        }
                    },
                };
                if seen_in[id] == i + 1 {
                    return Ok(None); // a name listed twice: Python keeps the last; leave it to Python
                }
                seen_in[id] = i + 1;
                ints.push((id, v));
            }
            previous.clear();
            previous.extend(ints.iter().map(|&(id, _)| id));
            counts[i] = ints.iter().find(|(id, _)| *id == traces).map_or(0, |(_, v)| *v);
            if counts[i] == 0 {
                continue;
            }
            let first = pairs.len();
            if bucket_pairs(tail, &mut pairs).is_none() {
                return Ok(None);
            }
            let bounds = bounds(&pairs[first..]);
            present.push(Present { at: i, ints, zero: window.zero, pairs: first..pairs.len(), bounds });
        }
        let spans = PyList::empty(py);
        let interned = self.interned(py, names.iter().map(Cow::as_ref));
        for &length in &suffixes {
            let first = n.saturating_sub(length);
            let mut sums = vec![0i64; names.len()];
            let mut order: Vec<usize> = Vec::with_capacity(names.len());
            let mut held = vec![false; names.len()];
            let mut zero = 0i64;
            let mut runs: Vec<&[(i64, i64)]> = Vec::new();
            let (mut lo, mut hi, mut count) = (i64::MAX, i64::MIN, 0);
            for window in present.iter().filter(|p| p.at >= first) {
                for &(id, v) in &window.ints {
                    if !held[id] {
                        held[id] = true;
                        order.push(id);
                    }
                    let Some(s) = sums[id].checked_add(v) else { return Ok(None) };
                    sums[id] = s;
                }
                let Some(s) = zero.checked_add(window.zero) else { return Ok(None) };
                zero = s;
                if let Some((l, h)) = window.bounds {
                    (lo, hi) = (lo.min(l), hi.max(h));
                }
                runs.push(&pairs[window.pairs.clone()]);
                count += window.pairs.len();
            }
            let Some(summed) = summed_pairs(&runs, lo, hi, count) else { return Ok(None) };
            let Some((buckets, total)) = buckets_dict(py, &summed)? else { return Ok(None) };
            let out = PyDict::new(py);
            for id in order {
                out.set_item(&interned[id], sums[id])?;
            }
            spans.append(PyTuple::new(py, [out.into_any(), zero.into_pyobject(py)?.into_any(), buckets.into_any(),
                                           total.into_pyobject(py)?.into_any()])?)?;
        }
        Ok(Some(PyTuple::new(py, [counts.into_pyobject(py)?.into_any(), floats.into_pyobject(py)?.into_any(),
                                  spans.into_any()])?))
    }
}

/// `dst[k] = dst.get(k, 0) + v` for every `(k, v)` of `src`, in `src`'s order: the loop of
/// `Aggregate.merge` and `LogSketch.merge` over a dict, with Python's own arithmetic.
#[pyfunction]
fn add_into(dst: &Bound<'_, PyDict>, src: &Bound<'_, PyDict>) -> PyResult<()> {
    let zero = 0i64.into_pyobject(dst.py())?;
    for (key, value) in src.iter() {
        let sum = match dst.get_item(&key)? {
            Some(held) => held.add(&value)?,
            None => zero.add(&value)?,
        };
        dst.set_item(key, sum)?;
    }
    Ok(())
}

/// `{k: new[k] - old.get(k, 0)}` without the zero differences, in `new`'s order; None when the
/// least difference is below 0 (found as Python's `min` finds it) or `old` holds a key `new` lacks:
/// the difference `monitor.store.redis.spans.delta` takes of two counts dicts or bucket dicts.
#[pyfunction]
fn difference<'py>(new: &Bound<'py, PyDict>, old: &Bound<'py, PyDict>) -> PyResult<Option<Bound<'py, PyDict>>> {
    let py = new.py();
    let zero = 0i64.into_pyobject(py)?;
    let out = PyDict::new(py);
    let mut least: Option<Bound<'py, PyAny>> = None;
    for (key, value) in new.iter() {
        let d = match old.get_item(&key)? {
            Some(held) => value.sub(&held)?,
            None => value.sub(&zero)?,
        };
        let lower = match &least {
            None => true,
            Some(m) => d.lt(m)?,
        };
        if lower {
            least = Some(d.clone());
        }
        if d.is_truthy()? {
            out.set_item(key, d)?;
        }
    }
    if let Some(m) = least {
        if m.lt(&zero)? {
            return Ok(None);
        }
    }
    for key in old.keys() {
        if !new.contains(&key)? {
            return Ok(None);
        }
    }
    Ok(Some(out))
}

/// Per float field, the left fold of its values (`functools.reduce(operator.add, values)`) over the
/// windows `first .. first + length` of a flat float array of `nf` fields a window (nan: absent), in
/// window order: `monitor.store.redis.span_sums.resum_floats`'s additions, in its order, so the sums
/// are the very same doubles; None for a field no window holds.
#[pyfunction]
fn resum_floats(py: Python<'_>, floats: PyBuffer<f64>, first: usize, length: usize, nf: usize)
                -> PyResult<Vec<Option<f64>>> {
    let cells = floats.to_vec(py)?;
    let end = first.checked_add(length).and_then(|e| e.checked_mul(nf));
    if end.is_none_or(|e| e > cells.len()) {
        return Err(PyValueError::new_err(format!(
            "windows {first}..{first}+{length} of {nf} floats each are past the array's {} floats", cells.len())));
    }
    let mut out: Vec<Option<f64>> = vec![None; nf];
    for window in cells[first * nf..(first + length) * nf].chunks_exact(nf.max(1)) {
        for (slot, &v) in out.iter_mut().zip(window) {
            if !v.is_nan() {
                *slot = Some(match *slot {
                    None => v,
                    Some(acc) => acc + v,
                });
            }
        }
    }
    Ok(out)
}

/// The positions where two arrays of counts differ, over the shorter one's length
/// (`[i for i, (a, b) in enumerate(zip(new, old)) if a != b]`).
#[pyfunction]
fn changed_positions(py: Python<'_>, new: PyBuffer<i64>, old: PyBuffer<i64>) -> PyResult<Vec<usize>> {
    let (a, b) = (new.to_vec(py)?, old.to_vec(py)?);
    Ok(a.iter().zip(&b).enumerate().filter(|(_, (x, y))| x != y).map(|(i, _)| i).collect())
}

/// The counts script's reply for one slice (`count count ...`, plain decimal integers separated by
/// whitespace) written into `out` (an `array("q")`) when it holds exactly as many, as
/// `array("q", map(int, raw.split()))` would hold them. Returns how many counts the text holds, or
/// None when a token is not a plain decimal integer of i64 (the caller reads the text in Python,
/// which decides and reports it); `out` is left as it was unless the number matches.
#[pyfunction]
fn parse_counts(py: Python<'_>, raw: &[u8], out: PyBuffer<i64>) -> PyResult<Option<usize>> {
    let mut values = Vec::with_capacity(out.item_count());
    for token in raw.split(u8::is_ascii_whitespace).filter(|t| !t.is_empty()) {
        match int_of_bytes(token) {
            Some(v) => values.push(v),
            None => return Ok(None),
        }
    }
    if values.len() == out.item_count() && !values.is_empty() {
        if out.readonly() {
            return Err(PyValueError::new_err("parse_counts needs a writable array of counts, got a read-only buffer"));
        }
        out.copy_from_slice(py, &values)?;
    }
    Ok(Some(values.len()))
}

/// A sketch's buckets `{index: count}` as `(index, running count)` in index order, the running
/// count the sum of the counts up to that index: what `monitor.exporter.figures` bisects. None
/// (Python decides) when an index or a count is not an int within i64, a count is below 0 (the
/// running counts would not rise), an index is past 2^53 (compared with float limits) or the
/// running count passes i64.
fn running_counts(buckets: &Bound<'_, PyDict>) -> Option<Vec<(i64, i64)>> {
    let mut pairs: Vec<(i64, i64)> = Vec::with_capacity(buckets.len());
    for (key, value) in buckets.iter() {
        let (Ok(index), Ok(count)) = (key.extract::<i64>(), value.extract::<i64>()) else { return None };
        if count < 0 || index.unsigned_abs() > (1u64 << 53) {
            return None;
        }
        pairs.push((index, count));
    }
    pairs.sort_unstable_by_key(|p| p.0); // a dict's keys are distinct
    let mut total = 0i64;
    for pair in &mut pairs {
        total = total.checked_add(pair.1)?;
        pair.1 = total;
    }
    Some(pairs)
}

/// Per limit, the total count of the buckets whose index is `<= limit` (a float: an index, or
/// ±inf): `running[bisect_right(keys, limit) - 1]`, 0 when none, as `figures.histogram_counts`
/// reads it. None: see [`running_counts`].
#[pyfunction]
fn counts_up_to(buckets: &Bound<'_, PyDict>, limits: Vec<f64>) -> Option<Vec<i64>> {
    let running = running_counts(buckets)?;
    Some(limits.iter().map(|&limit| {
        let below = running.partition_point(|p| (p.0 as f64) <= limit);
        if below == 0 { 0 } else { running[below - 1].1 }
    }).collect())
}

/// Per rank (`>= 0`), the index of the bucket it falls in: `keys[min(bisect_right(running, rank),
/// len - 1)]`, as `figures.sketch_quantiles` reads it. None when there is no bucket, or see
/// [`running_counts`].
#[pyfunction]
fn bucket_at_ranks(buckets: &Bound<'_, PyDict>, ranks: Vec<i64>) -> Option<Vec<i64>> {
    let running = running_counts(buckets)?;
    let last = running.len().checked_sub(1)?;
    Some(ranks.iter().map(|&rank| running[running.partition_point(|p| p.1 <= rank).min(last)].0).collect())
}

/// Adds the codec, the dict arithmetic and the running counts to the module (one line in `lib.rs`).
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<WindowCodec>()?;
    m.add_function(wrap_pyfunction!(add_into, m)?)?;
    m.add_function(wrap_pyfunction!(difference, m)?)?;
    m.add_function(wrap_pyfunction!(resum_floats, m)?)?;
    m.add_function(wrap_pyfunction!(changed_positions, m)?)?;
    m.add_function(wrap_pyfunction!(parse_counts, m)?)?;
    m.add_function(wrap_pyfunction!(counts_up_to, m)?)?;
    m.add_function(wrap_pyfunction!(bucket_at_ranks, m)?)
}
