//! Aggregates held natively from the fold to the store: the native fold's groups, the sums that
//! `monitor.fold.place_groups` plans over them, and the windows and totals it places them into —
//! so that a batch's groups (a replay batch has ~22,000) never become Python dicts.
//!
//! Exactness: each operation is Python's on `monitor.aggregate.Aggregate`, to the bit and to the
//! order. A copy keeps every field and bucket in its order; adding `other` in is
//! `add_counts(dst, src)` (`dst[k] = dst.get(k, 0) + v` for each of `src`'s fields, then of its
//! buckets, in `src`'s order: a new key goes last) and `zero_count += other.zero_count`. A field is
//! Python's `int` (held as `i128`) or `float`; an integer sum past `i128`, or an `int` added to a
//! `float`, is refused (`ValueError`), and the caller places the batch in Python. A sum is its
//! first part copied, then the others added in the plan's order; a window or total is its first
//! placed sum copied, then the others added in placement order — the additions `place_groups`
//! makes in Python (whether Python copies a sum or stores it as it is changes no value).
//!
//! `Placed.packed` writes a window's packed text exactly as `monitor.store.redis.packed.pack_python`
//! does, or `None` for a window it is not sure of (a name JSON would escape, an `int` in a float
//! field or a `float` in another, a number past `i64`): the caller packs that one in Python.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyFloat, PyInt, PyList, PyString, PyTuple};
use rustc_hash::FxHashMap;
use std::sync::Arc;

use crate::group::Group;

/// A field's value: Python's `int` or `float`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Num {
    Int(i128),
    Float(f64),
}

/// One aggregate: its fields (name id, value) and its sketch's buckets (index, count) in the order
/// Python's dicts would hold them, and its zero bucket.
#[derive(Clone, Default, Debug)]
pub struct Agg {
    pub fields: Vec<(u32, Num)>,
    pub buckets: Vec<(i64, i64)>,
    pub zero: i64,
}

/// Field names → small ids, in order of first sight.
#[derive(Default, Clone)]
pub struct Names {
    pub list: Vec<String>,
    ids: FxHashMap<String, u32>,
}

impl Names {
    pub fn id(&mut self, name: &str) -> u32 {
        if let Some(&id) = self.ids.get(name) {
            return id;
        }
        let id = self.list.len() as u32;
        self.list.push(name.to_owned());
        self.ids.insert(name.to_owned(), id);
        id
    }
}

/// Why a sum cannot be made as Python would make it (the batch is then placed in Python).
#[derive(Debug)]
pub struct Refused(pub String);

const NONE: u32 = u32::MAX;
/// Bucket indices in [-DENSE, DENSE) are looked up in an array (a latency sketch's are within ±700).
const DENSE: i64 = 4096;

/// Where each field and bucket of the aggregate being summed sits, while others are added into it.
struct Index {
    fields: Vec<u32>,
    dense: Vec<u32>,
    sparse: FxHashMap<i64, u32>,
}

impl Index {
    fn new(names: usize) -> Self {
        Index { fields: vec![NONE; names], dense: vec![NONE; 2 * DENSE as usize], sparse: FxHashMap::default() }
    }

    fn bucket(&mut self, key: i64) -> &mut u32 {
        let at = key.wrapping_add(DENSE);
        if (0..2 * DENSE).contains(&at) {
            &mut self.dense[at as usize]
        } else {
            self.sparse.entry(key).or_insert(NONE)
        }
    }

    fn open(&mut self, agg: &Agg) {
        for (i, &(name, _)) in agg.fields.iter().enumerate() {
            if name as usize >= self.fields.len() {
                self.fields.resize(name as usize + 1, NONE);
            }
            self.fields[name as usize] = i as u32;
        }
        for (i, &(key, _)) in agg.buckets.iter().enumerate() {
            *self.bucket(key) = i as u32;
        }
    }

    fn close(&mut self, agg: &Agg) {
        for &(name, _) in &agg.fields {
            self.fields[name as usize] = NONE;
        }
        for &(key, _) in &agg.buckets {
            *self.bucket(key) = NONE;
        }
        self.sparse.clear();
    }

    /// `into.merge(other)`, `into` opened.
    fn add(&mut self, into: &mut Agg, other: &Agg) -> Result<(), Refused> {
        for &(name, value) in &other.fields {
            if name as usize >= self.fields.len() {
                self.fields.resize(name as usize + 1, NONE);
            }
            let at = self.fields[name as usize];
            if at == NONE {
                self.fields[name as usize] = into.fields.len() as u32;
                // Python: `dst.get(k, 0) + v`, the int 0 plus v (0 + -0.0 is 0.0)
                let value = match value {
                    Num::Int(n) => Num::Int(n),
                    Num::Float(x) => Num::Float(0.0 + x),
                };
                into.fields.push((name, value));
            } else {
                let slot = &mut into.fields[at as usize].1;
                *slot = match (*slot, value) {
                    (Num::Int(a), Num::Int(b)) => Num::Int(a.checked_add(b).ok_or_else(|| {
                        Refused(format!("field {name}: {a} + {b} overflows"))
                    })?),
                    (Num::Float(a), Num::Float(b)) => Num::Float(a + b),
                    (a, b) => return Err(Refused(format!("field {name}: cannot add {b:?} to {a:?} as Python does"))),
                };
            }
        }
        for &(key, n) in &other.buckets {
            let len = into.buckets.len() as u32;
            let at = self.bucket(key);
            if *at == NONE {
                *at = len;
                into.buckets.push((key, n));
            } else {
                let slot = &mut into.buckets[*at as usize].1;
                *slot = slot.checked_add(n).ok_or_else(|| Refused(format!("bucket {key} overflows")))?;
            }
        }
        into.zero = into.zero.checked_add(other.zero).ok_or_else(|| Refused("zero bucket overflows".into()))?;
        Ok(())
    }

    /// The first part copied, the others added in order.
    fn sum<'a>(&mut self, mut parts: impl Iterator<Item = &'a Agg>) -> Result<Agg, Refused> {
        let Some(first) = parts.next() else { return Err(Refused("a sum of no parts".into())) };
        let mut out = first.clone();
        self.open(&out);
        let mut done = Ok(());
        for part in parts {
            done = self.add(&mut out, part);
            if done.is_err() {
                break;
            }
        }
        self.close(&out);
        done.map(|_| out)
    }
}

/// The names a group's fields go by (`outcome:<name>` per outcome, then `outcome:none`; the others).
pub struct GroupNames {
    outcomes: Vec<u32>,
    fixed: [u32; 16],
    tokens: FxHashMap<String, [u32; 3]>,
}

const FIXED: [&str; 16] = [
    "traces", "successes", "steps_solved", "tokens_solved", "steps", "tool_calls", "tool_errors", "side_effects",
    "side_effect_traces", "harmful_action", "refused", "benign", "refused_benign", "prompt_injection", "fees_usd",
    "latency_count",
];
const LATENCY_SUM: &str = "latency_sum_seconds";

impl GroupNames {
    pub fn new(names: &mut Names, outcomes: &[String]) -> Self {
        let outcomes = outcomes.iter().map(String::as_str).chain(["none"])
            .map(|o| names.id(&format!("outcome:{o}"))).collect();
        let fixed = FIXED.map(|n| names.id(n));
        names.id(LATENCY_SUM);
        GroupNames { outcomes, fixed, tokens: FxHashMap::default() }
    }
}

/// A group as the aggregate Python's conversion of it made (the same fields in the same order:
/// `traces`; each outcome seen; each model's nonzero token sums; `successes`, `steps_solved`,
/// `tokens_solved` when there are successes; the other counts when nonzero; `fees_usd` when a trace
/// had fees; `latency_count` and `latency_sum_seconds` when one had a latency), its buckets in the
/// group's own order.
pub fn of_group(g: &Group<'_>, names: &mut Names, ids: &mut GroupNames) -> Agg {
    let f = &ids.fixed;
    let mut fields: Vec<(u32, Num)> = Vec::with_capacity(24);
    let int = |n: u64| Num::Int(n as i128);
    fields.push((f[0], int(g.traces)));
    for (i, &n) in g.outcomes.iter().enumerate() {
        if n > 0 {
            fields.push((ids.outcomes[i], int(n)));
        }
    }
    for (model, sums) in &g.tokens {
        let token_ids = match ids.tokens.get(model.as_ref()) {
            Some(t) => *t,
            None => {
                let made = ["tokens_in:", "tokens_cached_in:", "tokens_out:"].map(|k| names.id(&format!("{k}{model}")));
                ids.tokens.insert(model.to_string(), made);
                made
            }
        };
        for (id, &n) in token_ids.iter().zip(sums) {
            if n > 0 {
                fields.push((*id, int(n)));
            }
        }
    }
    if g.successes > 0 {
        fields.push((f[1], int(g.successes)));
        fields.push((f[2], int(g.steps_solved)));
        fields.push((f[3], int(g.tokens_solved)));
    }
    for (k, n) in [g.steps, g.tool_calls, g.tool_errors, g.side_effects, g.side_effect_traces, g.harmful_action,
                   g.refused, g.benign, g.refused_benign, g.prompt_injection].into_iter().enumerate() {
        if n > 0 {
            fields.push((f[4 + k], int(n)));
        }
    }
    if g.has_fees {
        fields.push((f[14], Num::Float(g.fees_usd)));
    }
    if g.latency_count > 0 {
        fields.push((f[15], int(g.latency_count)));
        fields.push((names.id(LATENCY_SUM), Num::Float(g.latency_sum_seconds)));
    }
    let buckets = g.buckets.iter().map(|(&k, &n)| (k, n as i64)).collect();
    Agg { fields, buckets, zero: g.zero as i64 }
}

fn to_python<'py>(py: Python<'py>, agg: &Agg, names: &[Bound<'py, PyString>]) -> PyResult<Bound<'py, PyTuple>> {
    let counts = PyDict::new(py);
    for &(name, value) in &agg.fields {
        let name = &names[name as usize];
        match value {
            Num::Int(n) => counts.set_item(name, n)?,
            Num::Float(x) => counts.set_item(name, x)?,
        }
    }
    let buckets = PyDict::new(py);
    for &(k, n) in &agg.buckets {
        buckets.set_item(k, n)?;
    }
    (counts, buckets, agg.zero).into_pyobject(py)
}

fn python_names<'py>(py: Python<'py>, names: &Names) -> Vec<Bound<'py, PyString>> {
    names.list.iter().map(|n| PyString::new(py, n)).collect()
}

/// An exact Python int (not a bool) within `i128`, else None.
fn exact_int(value: &Bound<'_, PyAny>) -> Option<i128> {
    if value.is_exact_instance_of::<PyInt>() {
        value.extract::<i128>().ok()
    } else {
        None
    }
}

/// An exact Python int (not a bool) within `i64`, else None.
fn exact_i64(value: &Bound<'_, PyAny>) -> Option<i64> {
    exact_int(value).and_then(|n| i64::try_from(n).ok())
}

/// The aggregates of one batch: its native groups (ids from 0, in the fold's order) and the Python
/// aggregates added after them (`add`). Thread-safe; `place` changes nothing held.
#[pyclass(module = "fleetmon_native")]
pub struct HeldAggregates {
    names: Names,
    aggs: Vec<Agg>,
}

impl HeldAggregates {
    pub fn new(names: Names, aggs: Vec<Agg>) -> Self {
        HeldAggregates { names, aggs }
    }
}

fn refused(e: Refused) -> PyErr {
    PyValueError::new_err(format!("cannot sum natively as Python would: {}", e.0))
}

/// The sums of `plan` over `held` (ids past `held` are the plan's own sums, in order), then the
/// windows and totals: `(slot, id)` pairs in placement order.
fn place(held: &[Agg], names: usize, plan: &[usize], windows: &[usize], n_windows: usize, totals: &[usize],
         n_totals: usize) -> Result<(Vec<Agg>, Vec<Agg>), Refused> {
    let mut index = Index::new(names);
    let mut sums: Vec<Agg> = Vec::new();
    let get = |sums: &[Agg], id: usize| -> Result<usize, Refused> {
        if id < held.len() + sums.len() { Ok(id) } else { Err(Refused(format!("id {id} is not built yet"))) }
    };
    let mut at = 0;
    while at < plan.len() {
        let n = plan[at];
        let parts = plan.get(at + 1..at + 1 + n).ok_or_else(|| Refused("the plan ends within a sum".into()))?;
        for &p in parts {
            get(&sums, p)?;
        }
        let sum = index.sum(parts.iter().map(|&p| if p < held.len() { &held[p] } else { &sums[p - held.len()] }))?;
        sums.push(sum);
        at += 1 + n;
    }
    let mut slots = |pairs: &[usize], n: usize| -> Result<Vec<Agg>, Refused> {
        if pairs.len() % 2 != 0 {
            return Err(Refused("placements come in (slot, id) pairs".into()));
        }
        let mut parts: Vec<Vec<usize>> = vec![Vec::new(); n];
        for pair in pairs.chunks_exact(2) {
            let id = get(&sums, pair[1])?;
            parts.get_mut(pair[0]).ok_or_else(|| Refused(format!("slot {} of {n}", pair[0])))?.push(id);
        }
        parts.iter().map(|ids| index.sum(ids.iter().map(|&p| if p < held.len() { &held[p] } else { &sums[p - held.len()] })))
            .collect()
    };
    let w = slots(windows, n_windows)?;
    let t = slots(totals, n_totals)?;
    Ok((w, t))
}

#[pymethods]
impl HeldAggregates {
    /// Nothing held yet (aggregates come with `add`).
    #[new]
    fn empty() -> Self {
        HeldAggregates { names: Names::default(), aggs: Vec::new() }
    }

    fn __len__(&self) -> usize {
        self.aggs.len()
    }

    /// Aggregate ``index`` as Python's parts: ``(counts, buckets, zero_count)``.
    fn aggregate<'py>(&self, py: Python<'py>, index: usize) -> PyResult<Bound<'py, PyTuple>> {
        let agg = self.aggs.get(index).ok_or_else(|| PyValueError::new_err(format!(
            "aggregate {index} of {}", self.aggs.len())))?;
        let names: Vec<Bound<'py, PyString>> = python_names(py, &self.names);
        to_python(py, agg, &names)
    }

    /// Hold a Python aggregate's ``counts``, ``buckets`` and ``zero_count``; its id, or None when a
    /// value is not an exact ``int`` / ``float`` (a name not a ``str``, a bucket or count past ``i64``).
    fn add(&mut self, counts: &Bound<'_, PyDict>, buckets: &Bound<'_, PyDict>, zero_count: &Bound<'_, PyAny>)
           -> PyResult<Option<usize>> {
        let Some(zero) = exact_i64(zero_count) else { return Ok(None) };
        let mut agg = Agg { fields: Vec::with_capacity(counts.len()), buckets: Vec::with_capacity(buckets.len()), zero };
        for (key, value) in counts.iter() {
            if !key.is_exact_instance_of::<PyString>() {
                return Ok(None);
            }
            let name = self.names.id(key.cast::<PyString>()?.to_str()?);
            let value = if value.is_exact_instance_of::<PyFloat>() {
                Num::Float(value.extract::<f64>()?)
            } else {
                match exact_int(&value) {
                    Some(n) => Num::Int(n),
                    None => return Ok(None),
                }
            };
            agg.fields.push((name, value));
        }
        for (key, value) in buckets.iter() {
            let (Some(k), Some(n)) = (exact_i64(&key), exact_i64(&value)) else { return Ok(None) };
            agg.buckets.push((k, n));
        }
        self.aggs.push(agg);
        Ok(Some(self.aggs.len() - 1))
    }

    /// Execute a placement (see the module docstring), the GIL released. ``plan``: per sum, its
    /// number of parts then their ids (a sum's id follows the held aggregates' and the sums' before
    /// it); ``windows`` and ``totals``: ``slot, id`` pairs in placement order, into ``n_windows`` and
    /// ``n_totals`` slots. ValueError when it cannot be done as Python would do it.
    fn place(&self, py: Python<'_>, plan: Vec<usize>, windows: Vec<usize>, n_windows: usize, totals: Vec<usize>,
             n_totals: usize) -> PyResult<Placed> {
        let names = self.names.list.len();
        let held = &self.aggs;
        let (w, t) = py.detach(|| place(held, names, &plan, &windows, n_windows, &totals, n_totals))
            .map_err(refused)?;
        Ok(Placed { names: Arc::new(self.names.clone()), windows: w, totals: t })
    }
}

/// The windows and totals of one placement (see `HeldAggregates.place`).
#[pyclass(module = "fleetmon_native", frozen)]
pub struct Placed {
    names: Arc<Names>,
    windows: Vec<Agg>,
    totals: Vec<Agg>,
}

/// A name orjson writes as it is between quotes: no control character, quote, backslash or DEL.
fn plain_name(name: &str) -> bool {
    name.bytes().all(|b| b >= 0x20 && b != b'"' && b != b'\\' && b != 0x7f)
}

/// Appends `n` in decimal (Python's `str(int)`), without the formatting machinery (a window has
/// ~100 numbers: most of the packing's time when written with `write!`).
fn push_int(out: &mut String, n: i64) {
    let mut digits = [0u8; 20];
    let mut at = digits.len();
    let mut left = n.unsigned_abs();
    loop {
        at -= 1;
        digits[at] = b'0' + (left % 10) as u8;
        left /= 10;
        if left == 0 {
            break;
        }
    }
    if n < 0 {
        out.push('-');
    }
    for &digit in &digits[at..] {
        out.push(digit as char);   // ASCII: one byte each
    }
}

fn push_pair(out: &mut String, name: &str, value: &str) {
    if out.len() > 1 {
        out.push(',');
    }
    out.push('"');
    out.push_str(name);
    out.push_str("\",\"");
    out.push_str(value);
    out.push('"');
}

impl Placed {
    /// `pack_python`'s text into `out` (cleared first), or false (see the module docstring).
    /// `floats[name]`: a float field.
    fn pack(py: Python<'_>, agg: &Agg, names: &Names, floats: &[bool], zero_field: &str, out: &mut String)
            -> PyResult<bool> {
        out.clear();
        out.push('[');
        let mut number = String::new();
        for &(name, value) in &agg.fields {
            let truthy = match value {
                Num::Int(n) => n != 0,
                Num::Float(x) => x != 0.0 || x.is_nan(),
            };
            if !truthy {
                continue;
            }
            let text = &names.list[name as usize];
            if !plain_name(text) {
                return Ok(false);
            }
            number.clear();
            match (value, floats[name as usize]) {
                (Num::Float(x), true) => number.push_str(PyFloat::new(py, x).repr()?.to_str()?),
                (Num::Int(n), false) => match i64::try_from(n) {
                    Ok(n) => push_int(&mut number, n),
                    Err(_) => return Ok(false),
                },
                _ => return Ok(false),
            }
            push_pair(out, text, &number);
        }
        if agg.zero != 0 {
            if !plain_name(zero_field) {
                return Ok(false);
            }
            number.clear();
            push_int(&mut number, agg.zero);
            push_pair(out, zero_field, &number);
        }
        out.push_str("]\n");
        for (i, &(k, n)) in agg.buckets.iter().enumerate() {
            if i > 0 {
                out.push(' ');
            }
            push_int(out, k);
            out.push(' ');
            push_int(out, n);
        }
        Ok(true)
    }
}

#[pymethods]
impl Placed {
    fn window_count(&self) -> usize {
        self.windows.len()
    }

    /// Each window's ``traces`` (Python's ``int(counts.get("traces", 0))``).
    fn window_traces(&self) -> Vec<i128> {
        let traces = self.names.ids.get("traces").copied();
        self.windows.iter().map(|agg| {
            agg.fields.iter().find(|(name, _)| Some(*name) == traces).map_or(0, |&(_, v)| match v {
                Num::Int(n) => n,
                Num::Float(x) => x.trunc() as i128,
            })
        }).collect()
    }

    /// The windows (``totals``: the totals) as Python's parts, ``(counts, buckets, zero_count)`` each.
    #[pyo3(signature = (totals=false))]
    fn aggregates<'py>(&self, py: Python<'py>, totals: bool) -> PyResult<Bound<'py, PyList>> {
        let names = python_names(py, &self.names);
        let aggs = if totals { &self.totals } else { &self.windows };
        let out = PyList::empty(py);
        for agg in aggs {
            out.append(to_python(py, agg, &names)?)?;
        }
        Ok(out)
    }

    /// Each window's packed text (``pack_python``'s), or None where Python must pack it. ``floats``:
    /// the float fields (``FLOAT_FIELDS``); ``zero_field``: the zero bucket's name (``latency:z``).
    fn packed<'py>(&self, py: Python<'py>, floats: Vec<String>, zero_field: &str) -> PyResult<Bound<'py, PyList>> {
        let is_float: Vec<bool> = self.names.list.iter().map(|n| floats.contains(n)).collect();
        let out = PyList::empty(py);
        let mut text = String::with_capacity(4096);   // one buffer for every window: no allocation per window
        for agg in &self.windows {
            if Self::pack(py, agg, &self.names, &is_float, zero_field, &mut text)? {
                out.append(PyString::new(py, &text))?;
            } else {
                out.append(py.None())?;
            }
        }
        Ok(out)
    }
}

/// Adds the classes to the module.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<HeldAggregates>()?;
    m.add_class::<Placed>()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn agg(fields: &[(u32, Num)], buckets: &[(i64, i64)], zero: i64) -> Agg {
        Agg { fields: fields.to_vec(), buckets: buckets.to_vec(), zero }
    }

    #[test]
    fn a_sum_keeps_pythons_order_and_additions() {
        let a = agg(&[(0, Num::Int(2)), (3, Num::Float(0.1))], &[(5, 1), (-9000, 2)], 1);
        let b = agg(&[(1, Num::Int(1)), (3, Num::Float(0.2)), (0, Num::Int(1))], &[(7, 1), (5, 2), (-9000, 1)], 0);
        let out = Index::new(4).sum([&a, &b].into_iter()).unwrap();
        assert_eq!(out.fields, vec![(0, Num::Int(3)), (3, Num::Float(0.1 + 0.2)), (1, Num::Int(1))]);
        assert_eq!(out.buckets, vec![(5, 3), (-9000, 3), (7, 1)]);
        assert_eq!(out.zero, 1);
    }

    #[test]
    fn integers_are_written_as_python_writes_them() {
        for n in [0, 7, -7, 10, 1234567890, i64::MAX, i64::MIN, -1] {
            let mut out = String::new();
            push_int(&mut out, n);
            assert_eq!(out, n.to_string());
        }
    }

    #[test]
    fn an_int_added_to_a_float_is_refused() {
        let a = agg(&[(0, Num::Float(1.0))], &[], 0);
        let b = agg(&[(0, Num::Int(1))], &[], 0);
        assert!(Index::new(1).sum([&a, &b].into_iter()).is_err());
    }
}
