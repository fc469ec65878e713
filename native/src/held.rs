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
use std::sync::Arc;

use crate::pack::push_pair;
use crate::sums::{place, Agg, Names, Num, Refused};

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
        let traces = self.names.get("traces");
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

    #[test]
    fn integers_are_written_as_python_writes_them() {
        for n in [0, 7, -7, 10, 1234567890, i64::MAX, i64::MIN, -1] {
            let mut out = String::new();
            push_int(&mut out, n);
            assert_eq!(out, n.to_string());
        }
    }
}
