//! A hand-written reader of the records the fast path takes, in front of the serde one (`record.rs`).
//!
//! Nearly every record on a busy topic is one flat JSON object of unescaped strings, small unsigned
//! integers and plain decimals. [`scan`] reads exactly those into the same [`Raw`] the serde reader
//! builds, without its per-value dispatch: keys are found in a small open-addressed table keyed by
//! their length and three of their bytes ([`Keys`], built once per batch) and compared inline, values
//! are borrowed from the input. Whatever it is not sure of — an escape or a control character in a
//! string, a negative number, an integer past `u64`, a float that is not finite, a literal it does not
//! know, anything malformed — it answers [`Scan::Serde`], and the serde reader decides the record as
//! before. It answers [`Scan::Slow`] only where the serde reader's answer is also "slow, Python decides"
//! whatever the rest of the record holds (a duplicate key, an alias, a nested value — every nested
//! value outside `tags` is either refused by `check` or makes the record slow —, a `tags` that is
//! neither an object nor null): then it stops reading. So it can change no decision, and
//! `Folder.reader_disagreements` checks that, record for record, on random input.

use crate::record::{label_ok, tag_value_ok, Dim, Raw, Scalar, Spec, KNOWN_FIELDS};
use std::borrow::Cow;

/// What [`scan`] made of a record.
pub enum Scan {
    /// The object's fields are in the [`Raw`] passed in, exactly as the serde reader would have read them.
    Raw,
    /// The record is Python's, whatever the serde reader would say of the rest of it.
    Slow,
    /// Not sure: let the serde reader decide.
    Serde,
}

/// What a key names.
#[derive(Clone, Copy, PartialEq, Debug)]
enum Kind {
    /// One of `KNOWN_FIELDS` (its index).
    Known(usize),
    /// One of `Spec::slow_keys`.
    SlowKey,
    /// The tag dimension at this index of `Spec::dims`.
    Tag(usize),
}

const SLOTS: usize = 256;

/// The names the reader looks for — the known fields, the slow keys, the tag dimensions — in an
/// open-addressed table (linear probing, at most ~20% full).
pub struct Keys {
    slots: Vec<Option<(Box<[u8]>, Kind)>>,
    /// Some tag dimension has the name of a known field or a slow key (so the table cannot name it).
    shadowed: bool,
}

#[inline(always)]
fn slot_of(key: &[u8]) -> usize {
    let n = key.len();
    if n == 0 {
        return 0;
    }
    let h = (n as u32).wrapping_mul(0x9E37_79B1)
        ^ (key[0] as u32).wrapping_mul(0x85EB_CA77)
        ^ (key[n - 1] as u32).wrapping_mul(0xC2B2_AE3D)
        ^ (key[n / 2] as u32).wrapping_mul(0x27D4_EB2F);
    (h ^ (h >> 15)) as usize % SLOTS
}

/// Byte equality without a call to `memcmp` for the short strings records are made of.
#[inline(always)]
pub fn same(a: &[u8], b: &[u8]) -> bool {
    let n = a.len();
    if n != b.len() {
        return false;
    }
    if n >= 8 {
        if n > 16 {
            return a == b;
        }
        let word = |s: &[u8], at: usize| u64::from_le_bytes(s[at..at + 8].try_into().unwrap());
        return word(a, 0) == word(b, 0) && word(a, n - 8) == word(b, n - 8);
    }
    if n >= 4 {
        let word = |s: &[u8], at: usize| u32::from_le_bytes(s[at..at + 4].try_into().unwrap());
        return word(a, 0) == word(b, 0) && word(a, n - 4) == word(b, n - 4);
    }
    a.iter().zip(b).all(|(x, y)| x == y)
}

impl Keys {
    pub fn new(slow_keys: &[String], dims: &[Dim]) -> Self {
        let mut keys = Keys { slots: vec![None; SLOTS], shadowed: false };
        // first come first kept: the serde reader tries the known fields, then the slow keys, then tags
        for (i, name) in KNOWN_FIELDS.iter().enumerate() {
            keys.insert(name.as_bytes(), Kind::Known(i));
        }
        for name in slow_keys {
            keys.insert(name.as_bytes(), Kind::SlowKey);
        }
        for (i, dim) in dims.iter().enumerate() {
            if let Dim::Tag(name) = dim {
                keys.shadowed |= matches!(keys.find(name.as_bytes()), Some(Kind::Known(_) | Kind::SlowKey));
                keys.insert(name.as_bytes(), Kind::Tag(i));
            }
        }
        keys
    }

    fn insert(&mut self, name: &[u8], kind: Kind) {
        if self.find(name).is_some() {
            return;
        }
        let mut at = slot_of(name);
        while self.slots[at].is_some() {
            at = (at + 1) % SLOTS;
        }
        self.slots[at] = Some((name.into(), kind));
    }

    #[inline(always)]
    fn find(&self, key: &[u8]) -> Option<Kind> {
        let mut at = slot_of(key);
        loop {
            match &self.slots[at] {
                None => return None,
                Some((name, kind)) if same(name, key) => return Some(*kind),
                Some(_) => at = (at + 1) % SLOTS,
            }
        }
    }
}

struct Cursor<'a> {
    b: &'a [u8],
    i: usize,
}

/// `None` below means "not sure" (serde decides); the `Slow` outcome is returned through `Stop`.
enum Stop {
    Serde,
    Slow,
}

type Step<T> = Result<T, Stop>;

impl<'a> Cursor<'a> {
    #[inline(always)]
    fn ws(&mut self) {
        while let Some(&c) = self.b.get(self.i) {
            if !matches!(c, b' ' | b'\n' | b'\r' | b'\t') {
                break;
            }
            self.i += 1;
        }
    }

    #[inline(always)]
    fn peek(&self) -> Step<u8> {
        self.b.get(self.i).copied().ok_or(Stop::Serde)
    }

    #[inline(always)]
    fn expect(&mut self, c: u8) -> Step<()> {
        if self.peek()? != c {
            return Err(Stop::Serde);
        }
        self.i += 1;
        Ok(())
    }

    /// A string without escapes or control characters, at its opening quote. The input is not known
    /// to be UTF-8: a string with a non-ASCII byte is checked here (invalid UTF-8 anywhere makes the
    /// record Python's), and outside strings only ASCII is read.
    #[inline(always)]
    fn string(&mut self) -> Step<&'a str> {
        self.expect(b'"')?;
        let start = self.i;
        let mut high = 0u8;
        loop {
            match self.b.get(self.i) {
                Some(b'"') => break,
                Some(&c) if c == b'\\' || c < 0x20 => return Err(Stop::Serde),
                Some(&c) => {
                    high |= c;
                    self.i += 1;
                }
                None => return Err(Stop::Serde),
            }
        }
        let bytes = &self.b[start..self.i];
        self.i += 1;
        if high < 0x80 {
            // SAFETY: every byte is ASCII, so the bytes are UTF-8
            Ok(unsafe { std::str::from_utf8_unchecked(bytes) })
        } else {
            std::str::from_utf8(bytes).map_err(|_| Stop::Slow)
        }
    }

    fn literal(&mut self, word: &[u8], value: Scalar<'a>) -> Step<Scalar<'a>> {
        if self.b.len() - self.i >= word.len() && &self.b[self.i..self.i + word.len()] == word {
            self.i += word.len();
            Ok(value)
        } else {
            Err(Stop::Serde)
        }
    }

    /// An unsigned JSON number: `u64` when it is an integer that fits, else a finite `f64`.
    fn number(&mut self) -> Step<Scalar<'a>> {
        let start = self.i;
        let b = self.b;
        let mut n: u64 = 0;
        let mut overflow = false;
        while let Some(&c) = b.get(self.i) {
            if !c.is_ascii_digit() {
                break;
            }
            match n.checked_mul(10).and_then(|m| m.checked_add((c - b'0') as u64)) {
                Some(m) => n = m,
                None => overflow = true,
            }
            self.i += 1;
        }
        let digits = self.i - start;
        if digits == 0 || (digits > 1 && b[start] == b'0') {
            return Err(Stop::Serde); // not a number, or a leading zero (invalid JSON)
        }
        let mut float = false;
        if b.get(self.i) == Some(&b'.') {
            self.i += 1;
            self.digits()?;
            float = true;
        }
        if matches!(b.get(self.i), Some(b'e' | b'E')) {
            self.i += 1;
            if matches!(b.get(self.i), Some(b'+' | b'-')) {
                self.i += 1;
            }
            self.digits()?;
            float = true;
        }
        if !float {
            return if overflow { Err(Stop::Serde) } else { Ok(Scalar::U64(n)) };
        }
        // SAFETY: digits, '.', 'e', 'E', '+' and '-' only, all ASCII
        let text = unsafe { std::str::from_utf8_unchecked(&b[start..self.i]) };
        // Rust's parse is correctly rounded, as is serde_json's with `float_roundtrip`
        match text.parse::<f64>() {
            Ok(x) if x.is_finite() => Ok(Scalar::F64(x)),
            _ => Err(Stop::Serde),
        }
    }

    fn digits(&mut self) -> Step<()> {
        let start = self.i;
        while self.b.get(self.i).is_some_and(u8::is_ascii_digit) {
            self.i += 1;
        }
        if self.i == start { Err(Stop::Serde) } else { Ok(()) }
    }

    /// A scalar value; a nested one is `Slow` (see the module's note), a negative number `Serde`.
    #[inline(always)]
    fn scalar(&mut self) -> Step<Scalar<'a>> {
        match self.peek()? {
            b'"' => Ok(Scalar::Str(Cow::Borrowed(self.string()?))),
            b'0'..=b'9' => self.number(),
            b't' => self.literal(b"true", Scalar::Bool(true)),
            b'f' => self.literal(b"false", Scalar::Bool(false)),
            b'n' => self.literal(b"null", Scalar::Null),
            b'{' | b'[' => Err(Stop::Slow),
            _ => Err(Stop::Serde),
        }
    }

    /// After a member: true when another follows (`,`), false at the closing brace.
    #[inline(always)]
    fn next_member(&mut self) -> Step<bool> {
        self.ws();
        match self.peek()? {
            b',' => {
                self.i += 1;
                self.ws();
                Ok(true)
            }
            b'}' => {
                self.i += 1;
                Ok(false)
            }
            _ => Err(Stop::Serde),
        }
    }

    /// `"key"` then `:`, at the key's quote.
    #[inline(always)]
    fn key(&mut self) -> Step<&'a str> {
        let key = self.string()?;
        self.ws();
        self.expect(b':')?;
        self.ws();
        Ok(key)
    }

    /// The `tags` object, at its `{` (as `TagsSeed::visit_map`).
    fn tags(&mut self, spec: &Spec, keys: &Keys, raw: &mut Raw<'a>) -> Step<()> {
        self.i += 1;
        self.ws();
        if self.peek()? == b'}' {
            self.i += 1;
            return Ok(());
        }
        let mut seen: Vec<&'a str> = Vec::new();
        loop {
            let key = self.key()?;
            let value = self.scalar()?;
            if !label_ok(key, spec.max_label_chars) || !tag_value_ok(&value, spec)
                || seen.iter().any(|s| same(s.as_bytes(), key.as_bytes())) {
                return Err(Stop::Slow);
            }
            if let Some(Kind::Tag(i)) = keys.find(key.as_bytes()) {
                raw.tag_in_tags[i] = Some(value);
            } else if let Some(i) = keys.shadowed.then(|| tag_index(spec, key)).flatten() {
                raw.tag_in_tags[i] = Some(value); // a tag dimension shadowed by a known or slow name
            }
            seen.push(key);
            if !self.next_member()? {
                return Ok(());
            }
        }
    }
}

/// The first tag dimension named `key` (what the serde reader matches, whatever else the name is).
fn tag_index(spec: &Spec, key: &str) -> Option<usize> {
    spec.dims.iter().position(|d| matches!(d, Dim::Tag(name) if name == key))
}

/// Read one record into `raw` (a [`Raw::new`] or [`Raw::clear`]ed one) as the serde reader would
/// (after its UTF-8 check), or say it cannot be sure (`raw` then holds part of the record).
pub fn scan<'a>(bytes: &'a [u8], spec: &Spec, keys: &Keys, raw: &mut Raw<'a>) -> Scan {
    match scan_object(bytes, spec, keys, raw) {
        Ok(()) => Scan::Raw,
        Err(Stop::Slow) => Scan::Slow,
        Err(Stop::Serde) => Scan::Serde,
    }
}

fn scan_object<'a>(bytes: &'a [u8], spec: &Spec, keys: &Keys, raw: &mut Raw<'a>) -> Step<()> {
    let mut c = Cursor { b: bytes, i: 0 };
    c.ws();
    c.expect(b'{')?;
    c.ws();
    if c.peek()? == b'}' {
        c.i += 1;
    } else {
        let mut seen: Vec<&'a str> = Vec::new(); // the unknown keys so far
        loop {
            let key = c.key()?;
            match keys.find(key.as_bytes()) {
                Some(Kind::Known(i)) => {
                    if raw.fields[i].is_some() {
                        return Err(Stop::Slow); // a duplicate key
                    }
                    let value = if i == crate::record::F_TAGS {
                        match c.peek()? {
                            b'{' => {
                                c.tags(spec, keys, raw)?;
                                raw.tags_is_map = true;
                                Scalar::Map
                            }
                            b'n' => c.literal(b"null", Scalar::Null)?,
                            _ => return Err(Stop::Slow), // the serde reader fails on it: None either way
                        }
                    } else {
                        c.scalar()?
                    };
                    raw.fields[i] = Some(value);
                }
                Some(Kind::SlowKey) => return Err(Stop::Slow),
                found => {
                    // an unknown field becomes a tag (unless null), as in `RecordSeed::visit_map`
                    let value = c.scalar()?;
                    if seen.iter().any(|s| same(s.as_bytes(), key.as_bytes()))
                        || !(matches!(value, Scalar::Null)
                             || (label_ok(key, spec.max_label_chars) && tag_value_ok(&value, spec))) {
                        return Err(Stop::Slow);
                    }
                    if let Some(Kind::Tag(i)) = found {
                        raw.tag_top[i] = Some(value);
                    }
                    seen.push(key);
                }
            }
            if !c.next_member()? {
                break;
            }
        }
    }
    c.ws();
    if c.i != c.b.len() {
        return Err(Stop::Serde);
    }
    Ok(())
}
