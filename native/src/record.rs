//! One record's bytes → a [`Fast`] trace, or "slow" (hand it to Python).
//!
//! The fast path accepts exactly the records that `monitor.schema.validate`
//! would accept *and* that are in the plain full form, and reads them into the
//! values the fold needs. Everything else — not JSON, not an object, the
//! compact trial form, OTel aliases, a duplicate key, a number where a string
//! is allowed, any invalid value (a bound of `monitor.limits` exceeded, a nested
//! or non-label tag), a timestamp too far ahead — is *slow*: the
//! Python validator decides it and writes the reasons. So the native path
//! never has to produce an error message, and it can only ever be wrong by
//! being slower. The differential tests (`tests/unit/streams/test_native.py`) check
//! that both paths agree on every record they both see.

use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use crate::scan::{same, scan, Keys, Scan};
use std::borrow::Cow;
use std::fmt;

/// The full-form field names the fast path reads (`monitor.schema.KNOWN_FIELDS`;
/// a unit test checks the two lists are the same set).
pub const KNOWN_FIELDS: [&str; 33] = [
    "trace_id", "ts", "model_id", "outcome", "arm", "tags", "trial", "fees_usd", "latency_ms",
    "user_signal", "scaffold_hash", "prompt_hash", "release", "pair_id", "task_type", "tenant",
    "locale", "task_id", "steps", "tool_calls", "tool_errors", "tokens_in", "tokens_out",
    "tokens_cached_in", "side_effects", "harmful_action", "refused", "prompt_injection", "ok",
    "benign", "recontact_24h", "tool_schema_hash", "config_hash",
];

const F_TRACE_ID: usize = 0;
const F_TS: usize = 1;
const F_MODEL_ID: usize = 2;
const F_OUTCOME: usize = 3;
const F_ARM: usize = 4;
pub(crate) const F_TAGS: usize = 5;
const F_TRIAL: usize = 6;
const F_FEES: usize = 7;
const F_LATENCY_MS: usize = 8;
const F_USER_SIGNAL: usize = 9;
/// `scaffold_hash` .. `task_id`: optional strings.
const F_STRINGS: std::ops::Range<usize> = 10..18;
const F_PAIR_ID: usize = 13;
/// `steps` .. `side_effects`: counts (integers >= 0).
const F_COUNTS: std::ops::Range<usize> = 18..25;
/// `harmful_action`, `refused`, `prompt_injection`: flags, false when absent.
const F_FLAGS: std::ops::Range<usize> = 25..28;
const F_OK: usize = 28;
const F_BENIGN: usize = 29;
const F_RECONTACT: usize = 30;
/// `tool_schema_hash`, `config_hash`: optional strings (the rest of a release's version tuple).
const F_EXTRA_STRINGS: std::ops::Range<usize> = 31..33;
const F_RELEASE: usize = 12;
const F_SCAFFOLD_HASH: usize = 10;
const F_PROMPT_HASH: usize = 11;


/// The string fields that can be slice dimensions (`monitor.schema._DIMENSION_FIELDS`).
pub fn dimension_field(name: &str) -> Option<usize> {
    match name {
        "release" => Some(12),
        "arm" => Some(F_ARM),
        "model_id" => Some(F_MODEL_ID),
        "task_type" => Some(14),
        "tenant" => Some(15),
        "locale" => Some(16),
        "scaffold_hash" => Some(10),
        "prompt_hash" => Some(11),
        "task_id" => Some(17),
        "tool_schema_hash" => Some(31),
        "config_hash" => Some(32),
        _ => None,
    }
}

pub fn field_index(key: &str) -> Option<usize> {
    // a `match` on the text compiles to a length switch, then one comparison
    Some(match key {
        "trace_id" => 0,
        "ts" => 1,
        "model_id" => 2,
        "outcome" => 3,
        "arm" => 4,
        "tags" => 5,
        "trial" => 6,
        "fees_usd" => 7,
        "latency_ms" => 8,
        "user_signal" => 9,
        "scaffold_hash" => 10,
        "prompt_hash" => 11,
        "release" => 12,
        "pair_id" => 13,
        "task_type" => 14,
        "tenant" => 15,
        "locale" => 16,
        "task_id" => 17,
        "steps" => 18,
        "tool_calls" => 19,
        "tool_errors" => 20,
        "tokens_in" => 21,
        "tokens_out" => 22,
        "tokens_cached_in" => 23,
        "side_effects" => 24,
        "harmful_action" => 25,
        "refused" => 26,
        "prompt_injection" => 27,
        "ok" => 28,
        "benign" => 29,
        "recontact_24h" => 30,
        "tool_schema_hash" => 31,
        "config_hash" => 32,
        _ => return None,
    })
}

/// What the fast path needs to know of the schema; built once per call from Python's constants.
pub struct Spec {
    pub outcomes: Vec<String>,
    pub arms: Vec<String>,
    pub user_signals: Vec<String>,
    /// Keys that send a record to Python (OTel aliases, the compact form's internals).
    pub slow_keys: Vec<String>,
    /// Slice dimensions: a field index, or a tag name.
    pub dims: Vec<Dim>,
    pub now: f64,
    pub max_future_seconds: f64,
    /// Records with a `pair_id` go to Python (the old way; the worker now takes their halves, `halves.rs`).
    pub pair_id_slow: bool,
    pub max_record_bytes: usize,
    /// The bounds of `monitor.limits`: larger values are Python's to reject.
    pub max_tokens: u64,
    pub max_count: u64,
    pub max_latency_ms: f64,
    pub max_fees_usd: f64,
    pub max_ts: f64,
    pub max_label_chars: usize,
    /// The names `scan.rs` looks up (built from `slow_keys` and `dims`).
    pub keys: Keys,
}

/// `monitor.limits.label_problem` is None for an identifier: at most `max` code points.
fn id_ok(text: &str, max: usize) -> bool {
    text.len() <= max || text.chars().nth(max).is_none()   // never more code points than bytes
}

/// `monitor.limits.label_problem` is None: at most `max` code points, no control or bidi characters.
pub fn label_ok(text: &str, max: usize) -> bool {
    // printable ASCII (the usual label) is one code point a byte, none of them refused
    if text.len() <= max && text.bytes().all(|b| (0x20..0x7f).contains(&b)) {
        return true;
    }
    let mut n = 0;
    for c in text.chars() {
        n += 1;
        let u = c as u32;
        if n > max || u <= 0x1f || (0x7f..=0x9f).contains(&u) || (0x202a..=0x202e).contains(&u)
            || (0x2066..=0x2069).contains(&u) {
            return false;
        }
    }
    true
}

/// A tag value Python would accept: a scalar, label-safe when it is text.
pub(crate) fn tag_value_ok(value: &Scalar, spec: &Spec) -> bool {
    match value {
        Scalar::Str(s) => label_ok(s, spec.max_label_chars),
        Scalar::Map | Scalar::Seq => false,
        _ => true,
    }
}

pub enum Dim {
    Field(usize),
    Tag(String),
}

/// A JSON value as far as validation needs it.
#[derive(Debug, Clone)]
pub enum Scalar<'a> {
    Null,
    Bool(bool),
    U64(u64),
    /// a negative integer (serde_json's i64), never taken by the fast path
    Negative,
    F64(f64),
    Str(Cow<'a, str>),
    Map,
    Seq,
}

struct ScalarVisitor;

impl<'de> Visitor<'de> for ScalarVisitor {
    type Value = Scalar<'de>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON value")
    }
    fn visit_bool<E>(self, v: bool) -> Result<Self::Value, E> {
        Ok(Scalar::Bool(v))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Self::Value, E> {
        Ok(Scalar::U64(v))
    }
    fn visit_i64<E>(self, _v: i64) -> Result<Self::Value, E> {
        Ok(Scalar::Negative)
    }
    fn visit_f64<E>(self, v: f64) -> Result<Self::Value, E> {
        Ok(Scalar::F64(v))
    }
    fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Self::Value, E> {
        Ok(Scalar::Str(Cow::Borrowed(v)))
    }
    fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> {
        Ok(Scalar::Str(Cow::Owned(v.to_owned())))
    }
    fn visit_string<E>(self, v: String) -> Result<Self::Value, E> {
        Ok(Scalar::Str(Cow::Owned(v)))
    }
    fn visit_unit<E>(self) -> Result<Self::Value, E> {
        Ok(Scalar::Null)
    }
    fn visit_none<E>(self) -> Result<Self::Value, E> {
        Ok(Scalar::Null)
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(Scalar::Map)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(Scalar::Seq)
    }
}

impl<'de> de::Deserialize<'de> for Scalar<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(ScalarVisitor)
    }
}

/// A map key, borrowed from the input when it has no escapes.
struct Key<'a>(Cow<'a, str>);

struct KeyVisitor;

impl<'de> Visitor<'de> for KeyVisitor {
    type Value = Key<'de>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a string key")
    }
    fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Self::Value, E> {
        Ok(Key(Cow::Borrowed(v)))
    }
    fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> {
        Ok(Key(Cow::Owned(v.to_owned())))
    }
    fn visit_string<E>(self, v: String) -> Result<Self::Value, E> {
        Ok(Key(Cow::Owned(v)))
    }
}

impl<'de> de::Deserialize<'de> for Key<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_str(KeyVisitor)
    }
}

/// The raw field values of one JSON object, before the rules are applied.
pub struct Raw<'a> {
    pub(crate) fields: [Option<Scalar<'a>>; KNOWN_FIELDS.len()],
    /// Per dimension (allocated only when some are tags): the value in `tags`, and the value of an
    /// unknown top-level field (set only for tag dimensions).
    pub(crate) tag_in_tags: Vec<Option<Scalar<'a>>>,
    pub(crate) tag_top: Vec<Option<Scalar<'a>>>,
    pub(crate) tags_is_map: bool,
    pub(crate) slow: bool,
}

impl<'a> Raw<'a> {
    pub fn new(spec: &Spec) -> Self {
        let n = if spec.dims.iter().any(|d| matches!(d, Dim::Tag(_))) { spec.dims.len() } else { 0 };
        Raw { fields: std::array::from_fn(|_| None), tag_in_tags: vec![None; n], tag_top: vec![None; n],
              tags_is_map: false, slow: false }
    }

    /// Empty again, for the next record (no allocation).
    pub fn clear(&mut self) {
        for slot in self.fields.iter_mut().chain(&mut self.tag_in_tags).chain(&mut self.tag_top) {
            *slot = None;
        }
        self.tags_is_map = false;
        self.slow = false;
    }
}

/// Reads the `tags` object, keeping only the values of tag dimensions.
struct TagsSeed<'s, 'a> {
    spec: &'s Spec,
    out: &'s mut Vec<Option<Scalar<'a>>>,
    slow: &'s mut bool,
}

impl<'de, 's> DeserializeSeed<'de> for TagsSeed<'s, 'de> {
    type Value = Scalar<'de>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de, 's> Visitor<'de> for TagsSeed<'s, 'de> {
    type Value = Scalar<'de>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("tags")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut seen: Vec<Cow<'de, str>> = Vec::new();
        while let Some(key) = map.next_key::<Key<'de>>()? {
            let value: Scalar<'de> = map.next_value()?;
            if !label_ok(&key.0, self.spec.max_label_chars) || !tag_value_ok(&value, self.spec)
                || seen.contains(&key.0) {
                *self.slow = true; // a bad tag or a duplicate key: Python rejects it with the reason
            }
            let hit = self.spec.dims.iter().enumerate().find_map(|(i, d)| match d {
                Dim::Tag(name) if *name == key.0 => Some(i),
                _ => None,
            });
            if let Some(i) = hit {
                self.out[i] = Some(value);
            }
            seen.push(key.0);
        }
        Ok(Scalar::Map)
    }
    fn visit_unit<E>(self) -> Result<Self::Value, E> {
        Ok(Scalar::Null)
    }
    // anything but an object or null is a parse error: the record goes to Python, which decides it
}

struct RecordSeed<'s> {
    spec: &'s Spec,
}

impl<'de, 's> DeserializeSeed<'de> for RecordSeed<'s> {
    type Value = Raw<'de>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de, 's> Visitor<'de> for RecordSeed<'s> {
    type Value = Raw<'de>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON object")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let spec = self.spec;
        let mut raw = Raw::new(spec);
        let mut seen: Vec<Cow<'de, str>> = Vec::new(); // the unknown keys so far
        while let Some(key) = map.next_key::<Key<'de>>()? {
            let key = key.0;
            if let Some(i) = field_index(&key) {
                let value = if i == F_TAGS {
                    let mut slow = false;
                    let value = map.next_value_seed(TagsSeed { spec, out: &mut raw.tag_in_tags, slow: &mut slow })?;
                    raw.slow |= slow;
                    raw.tags_is_map = matches!(value, Scalar::Map);
                    value
                } else {
                    map.next_value::<Scalar<'de>>()?
                };
                if raw.fields[i].is_some() {
                    raw.slow = true; // duplicate key
                }
                raw.fields[i] = Some(value);
                continue;
            }
            if spec.slow_keys.iter().any(|k| *k == key) {
                raw.slow = true;
                map.next_value::<IgnoredAny>()?;
                continue;
            }
            // an unknown field becomes a tag (unless null): Python rejects a bad one, and a duplicate key
            let value: Scalar<'de> = map.next_value()?;
            if seen.contains(&key) || !(matches!(value, Scalar::Null)
                                        || (label_ok(&key, spec.max_label_chars) && tag_value_ok(&value, spec))) {
                raw.slow = true;
            }
            if let Some(i) = spec.dims.iter().position(|d| matches!(d, Dim::Tag(name) if *name == key)) {
                raw.tag_top[i] = Some(value);
            }
            seen.push(key);
        }
        Ok(raw)
    }
    fn visit_bool<E: de::Error>(self, _v: bool) -> Result<Self::Value, E> {
        Err(E::custom("not an object"))
    }
    fn visit_u64<E: de::Error>(self, _v: u64) -> Result<Self::Value, E> {
        Err(E::custom("not an object"))
    }
    fn visit_i64<E: de::Error>(self, _v: i64) -> Result<Self::Value, E> {
        Err(E::custom("not an object"))
    }
    fn visit_f64<E: de::Error>(self, _v: f64) -> Result<Self::Value, E> {
        Err(E::custom("not an object"))
    }
    fn visit_str<E: de::Error>(self, _v: &str) -> Result<Self::Value, E> {
        Err(E::custom("not an object"))
    }
    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Err(E::custom("not an object"))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, _seq: A) -> Result<Self::Value, A::Error> {
        Err(de::Error::custom("not an object"))
    }
}

/// A trace the fast path accepted: what the fold reads of it.
#[derive(Debug)]
pub struct Fast<'a> {
    pub ts: f64,
    pub model_id: Cow<'a, str>,
    /// Index into `Spec::outcomes`, or None (`outcome:none`).
    pub outcome: Option<usize>,
    pub success: bool,
    /// The slice dimensions' values (missing or empty: None, read as `unknown`).
    pub dims: Vec<Option<Cow<'a, str>>>,
    /// steps, tool_calls, tool_errors, tokens_in, tokens_out, tokens_cached_in, side_effects
    pub counts: [u64; 7],
    /// harmful_action, refused, prompt_injection
    pub flags: [bool; 3],
    pub benign: bool,
    pub fees_usd: f64,
    pub latency_seconds: Option<f64>,
    /// The release's version tuple (`monitor.identity.COMPONENTS`, missing = ""): release (falls back to
    /// model_id like the dimension), then scaffold_hash, prompt_hash, tool_schema_hash, config_hash.
    pub release: Cow<'a, str>,
    pub hashes: [Cow<'a, str>; 4],
    /// Index into `Spec::arms` (absent: 0, the default arm).
    pub arm: usize,
    /// The shadow pair's id, when the trace is one half of a pair.
    pub pair_id: Option<Cow<'a, str>>,
}

pub const C_STEPS: usize = 0;
pub const C_TOOL_CALLS: usize = 1;
pub const C_TOOL_ERRORS: usize = 2;
pub const C_TOKENS_IN: usize = 3;
pub const C_TOKENS_OUT: usize = 4;
pub const C_TOKENS_CACHED_IN: usize = 5;
pub const C_SIDE_EFFECTS: usize = 6;

fn is_null(v: &Option<Scalar>) -> bool {
    matches!(v, None | Some(Scalar::Null))
}

/// A required non-empty string.
fn required_text<'a>(v: &Option<Scalar<'a>>) -> Option<Cow<'a, str>> {
    match v {
        Some(Scalar::Str(s)) if !s.is_empty() => Some(s.clone()),
        _ => None,
    }
}

/// An optional string: Ok(None) when absent, Err(()) when not a string.
fn optional_text<'a>(v: &Option<Scalar<'a>>) -> Result<Option<Cow<'a, str>>, ()> {
    match v {
        None | Some(Scalar::Null) => Ok(None),
        Some(Scalar::Str(s)) => Ok(Some(s.clone())),
        _ => Err(()),
    }
}

fn count(v: &Option<Scalar>, max: u64) -> Result<u64, ()> {
    match v {
        None | Some(Scalar::Null) => Ok(0),
        Some(Scalar::U64(n)) if *n <= max => Ok(*n),
        _ => Err(()),
    }
}

/// A finite number in [0, max] (ints are converted as Python's `float(int)` does).
fn number(v: &Option<Scalar>, max: f64) -> Result<Option<f64>, ()> {
    let x = match v {
        None | Some(Scalar::Null) => return Ok(None),
        Some(Scalar::U64(n)) => *n as f64,
        Some(Scalar::F64(x)) if x.is_finite() && *x >= 0.0 => *x,
        _ => return Err(()),
    };
    if x <= max { Ok(Some(x)) } else { Err(()) }
}

/// A required non-empty string that is a valid label (`model_id`).
fn required_label<'a>(v: &Option<Scalar<'a>>, spec: &Spec) -> Result<Cow<'a, str>, ()> {
    required_text(v).filter(|s| label_ok(s, spec.max_label_chars)).ok_or(())
}

fn flag(v: &Option<Scalar>) -> Result<Option<bool>, ()> {
    match v {
        None | Some(Scalar::Null) => Ok(None),
        Some(Scalar::Bool(b)) => Ok(Some(*b)),
        Some(Scalar::U64(0)) => Ok(Some(false)),
        Some(Scalar::U64(1)) => Ok(Some(true)),
        _ => Err(()),
    }
}

fn choice(v: &Option<Scalar>, allowed: &[String]) -> Result<Option<usize>, ()> {
    match v {
        None | Some(Scalar::Null) => Ok(None),
        Some(Scalar::Str(s)) => allowed.iter().position(|a| same(a.as_bytes(), s.as_bytes())).map(Some).ok_or(()),
        _ => Err(()),
    }
}

/// Parse and validate one record: `Some` when the fast path takes it, `None` for Python.
///
/// `scratch` is any [`Raw`] of this batch's spec (reused between records so that the scanner neither
/// allocates nor moves one per record).
pub fn read<'a>(bytes: &'a [u8], spec: &'a Spec, scratch: &mut Raw<'a>) -> Option<Fast<'a>> {
    if bytes.len() > spec.max_record_bytes {
        return None;
    }
    scratch.clear();
    match scan(bytes, spec, &spec.keys, scratch) {
        Scan::Raw => check(scratch, spec).ok(),
        Scan::Slow => None,
        // serde_json skips the strings of ignored fields without checking their
        // UTF-8 or their escapes; orjson rejects both, so check them here
        Scan::Serde => read_serde(std::str::from_utf8(bytes).ok()?, spec),
    }
}

/// [`read`] with the serde reader only (after the size and UTF-8 checks): what `scan.rs` must agree with.
pub fn read_serde<'a>(text: &'a str, spec: &'a Spec) -> Option<Fast<'a>> {
    let bytes = text.as_bytes();
    if bytes.contains(&b'\\') && has_surrogate_escape(bytes) {
        return None;
    }
    let mut de = serde_json::Deserializer::from_str(text);
    let raw = RecordSeed { spec }.deserialize(&mut de).ok()?;
    de.end().ok()?;
    check(&raw, spec).ok()
}

/// A `\uD800`..`\uDFFF` escape anywhere (a lone surrogate is invalid for orjson; a pair is rare enough).
fn has_surrogate_escape(bytes: &[u8]) -> bool {
    bytes.windows(4).any(|w| w[0] == b'\\' && w[1] == b'u' && (w[2] | 0x20) == b'd'
        && matches!(w[3] | 0x20, b'8' | b'9' | b'a'..=b'f'))
}

fn check<'a>(raw: &Raw<'a>, spec: &'a Spec) -> Result<Fast<'a>, ()> {
    if raw.slow {
        return Err(());
    }
    let f = &raw.fields;
    // the compact form has no trace_id, so it never gets past this line
    required_text(&f[F_TRACE_ID]).filter(|s| id_ok(s, spec.max_label_chars)).ok_or(())?;
    let model_id = required_label(&f[F_MODEL_ID], spec)?;
    let ts = match &f[F_TS] {
        Some(Scalar::U64(n)) => *n as f64,
        Some(Scalar::F64(x)) if x.is_finite() && *x >= 0.0 => *x,
        _ => return Err(()),
    };
    if ts > spec.now + spec.max_future_seconds || ts > spec.max_ts {
        return Err(());
    }
    let outcome = choice(&f[F_OUTCOME], &spec.outcomes)?;
    let ok = flag(&f[F_OK])?;
    if outcome.is_none() && ok.is_none() {
        return Err(());
    }
    let mut strings: [Option<Cow<'a, str>>; F_STRINGS.end - F_STRINGS.start] = Default::default();
    for (slot, i) in strings.iter_mut().zip(F_STRINGS) {
        *slot = optional_text(&f[i])?;
        let ok = if i == F_PAIR_ID { id_ok } else { label_ok };
        if slot.as_ref().is_some_and(|s| !ok(s, spec.max_label_chars)) {
            return Err(());
        }
    }
    let mut extra: [Option<Cow<'a, str>>; F_EXTRA_STRINGS.end - F_EXTRA_STRINGS.start] = Default::default();
    for (slot, i) in extra.iter_mut().zip(F_EXTRA_STRINGS) {
        *slot = optional_text(&f[i])?;
        if slot.as_ref().is_some_and(|s| !label_ok(s, spec.max_label_chars)) {
            return Err(());
        }
    }
    if spec.pair_id_slow && strings[F_PAIR_ID - F_STRINGS.start].is_some() {
        return Err(());
    }
    let mut counts = [0u64; 7];
    for (c, (slot, i)) in counts.iter_mut().zip(F_COUNTS).enumerate() {
        let max = if matches!(c, C_TOKENS_IN | C_TOKENS_OUT | C_TOKENS_CACHED_IN) { spec.max_tokens } else { spec.max_count };
        *slot = count(&f[i], max)?;
    }
    if counts[C_TOKENS_CACHED_IN] > counts[C_TOKENS_IN] {
        return Err(());
    }
    let mut flags = [false; 3];
    for (slot, i) in flags.iter_mut().zip(F_FLAGS) {
        *slot = flag(&f[i])?.unwrap_or(false);
    }
    let benign = flag(&f[F_BENIGN])?.unwrap_or(false);
    let recontact = flag(&f[F_RECONTACT])?;
    let arm = choice(&f[F_ARM], &spec.arms)?.unwrap_or(0);
    let user_signal = choice(&f[F_USER_SIGNAL], &spec.user_signals)?;
    let fees_usd = number(&f[F_FEES], spec.max_fees_usd)?.unwrap_or(0.0);
    let latency_seconds = number(&f[F_LATENCY_MS], spec.max_latency_ms)?.map(|ms| ms / 1000.0);
    if !is_null(&f[F_TRIAL]) {
        count(&f[F_TRIAL], spec.max_count)?;
    }
    if !(is_null(&f[F_TAGS]) || raw.tags_is_map) {
        return Err(());
    }
    let success = match ok {
        Some(b) => b,
        None => {
            outcome.map(|o| spec.outcomes[o] == "success").unwrap_or(false)
                && user_signal.map(|s| spec.user_signals[s] != "down").unwrap_or(true)
                && recontact != Some(true)
        }
    };
    let mut dims = Vec::with_capacity(spec.dims.len());
    for (i, dim) in spec.dims.iter().enumerate() {
        let value: Option<Cow<'a, str>> = match dim {
            Dim::Field(F_ARM) => Some(Cow::Borrowed(spec.arms[arm].as_str())),
            Dim::Field(F_MODEL_ID) => Some(model_id.clone()),
            Dim::Field(12) => match &strings[12 - F_STRINGS.start] {
                // release: missing or empty falls back to model_id
                Some(s) if !s.is_empty() => Some(s.clone()),
                _ => Some(model_id.clone()),
            },
            Dim::Field(idx) if F_EXTRA_STRINGS.contains(idx) => extra[*idx - F_EXTRA_STRINGS.start].clone(),
            Dim::Field(idx) => strings[*idx - F_STRINGS.start].clone(),
            Dim::Tag(_) => {
                // `tags` wins over an unknown top-level field of the same name
                let value = if raw.tags_is_map && raw.tag_in_tags[i].is_some() {
                    &raw.tag_in_tags[i]
                } else if !is_null(&raw.tag_top[i]) {
                    &raw.tag_top[i]
                } else {
                    &None
                };
                match value {
                    None => None,
                    Some(Scalar::Str(s)) => Some(s.clone()),
                    Some(_) => return Err(()), // Python's text form of a non-string: let it decide
                }
            }
        };
        dims.push(value.filter(|s| !s.is_empty()));
    }
    let text_of = |v: &Option<Cow<'a, str>>| v.clone().unwrap_or(Cow::Borrowed(""));
    let release = match &strings[F_RELEASE - F_STRINGS.start] {
        Some(s) if !s.is_empty() => s.clone(),
        _ => model_id.clone(),
    };
    let hashes = [text_of(&strings[F_SCAFFOLD_HASH - F_STRINGS.start]), text_of(&strings[F_PROMPT_HASH - F_STRINGS.start]),
                  text_of(&extra[0]), text_of(&extra[1])];
    let pair_id = strings[F_PAIR_ID - F_STRINGS.start].clone();
    Ok(Fast {
        ts,
        release,
        hashes,
        arm,
        pair_id,
        model_id,
        outcome,
        success,
        dims,
        counts,
        flags,
        benign,
        fees_usd,
        latency_seconds,
    })
}
