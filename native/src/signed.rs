//! The exporter's `__other__` rows moved by their members' changes (`monitor/exporter/folds.py`):
//! many small dicts of counts (a member's increment, a window taken out) added into or taken out of
//! one row's dict, as their net per key, with the integers added in Rust rather than one Python
//! `+` and two dict operations per entry and part.
//!
//! Exact: integer counts are added as 128-bit integers and written back only within 64 bits; the
//! row is changed only once every part has been read and every final count checked, so a refusal
//! leaves it as it was. A count whose net is 0 is not touched (the sequential merges might have
//! removed it and put it back at the dict's end: the order of a row's counts is set by the caller).

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyFloat, PyInt, PyList};
use rustc_hash::FxHashMap;

/// Add each of `parts` (dicts) into `dst` (`signs[i]`: added, else taken out), by key, in one pass.
///
/// Returns True when applied (a key whose final count is 0 removed), False when a final count
/// would be below 0 (`dst` unchanged: the caller merges the row afresh), None when a value is not
/// an exact int within 64 bits (`dst` unchanged: the caller adds in Python). A float value is
/// skipped when its key is in `skip` (fields the caller sums again afresh), else None.
#[pyfunction]
fn add_signed(dst: &Bound<'_, PyDict>, parts: &Bound<'_, PyList>, signs: Vec<bool>, skip: &Bound<'_, PyAny>)
              -> PyResult<Option<bool>> {
    if parts.len() != signs.len() {
        return Err(pyo3::exceptions::PyValueError::new_err("add_signed: one sign per part"));
    }
    // the keys in first-seen order, their net, and an index by the key's Python hash
    let mut keys: Vec<Bound<'_, PyAny>> = Vec::new();
    let mut nets: Vec<i128> = Vec::new();
    let mut index: FxHashMap<isize, Vec<usize>> = FxHashMap::default();
    for (part, &add) in parts.iter().zip(&signs) {
        let part = part.cast::<PyDict>()?;
        for (key, value) in part.iter() {
            let n: i128 = if value.is_exact_instance_of::<PyInt>() {
                match value.extract::<i64>() {
                    Ok(n) => i128::from(n),
                    Err(_) => return Ok(None),
                }
            } else if value.is_exact_instance_of::<PyFloat>() && skip.contains(&key)? {
                continue;
            } else {
                return Ok(None);
            };
            let hash = key.hash()?;
            let slots = index.entry(hash).or_default();
            let mut at = None;
            for &i in slots.iter() {
                if keys[i].is(&key) || keys[i].eq(&key)? {
                    at = Some(i);
                    break;
                }
            }
            let i = match at {
                Some(i) => i,
                None => {
                    slots.push(keys.len());
                    keys.push(key);
                    nets.push(0);
                    keys.len() - 1
                }
            };
            nets[i] += if add { n } else { -n };
        }
    }
    let mut finals: Vec<(usize, Option<i64>)> = Vec::with_capacity(keys.len());
    for (i, (key, &net)) in keys.iter().zip(&nets).enumerate() {
        if net == 0 {
            continue;
        }
        let held = match dst.get_item(key)? {
            None => 0i128,
            Some(value) if value.is_exact_instance_of::<PyInt>() => match value.extract::<i64>() {
                Ok(n) => i128::from(n),
                Err(_) => return Ok(None),
            },
            Some(_) => return Ok(None),
        };
        let total = held + net;
        if total < 0 {
            return Ok(Some(false));
        }
        match i64::try_from(total) {
            Ok(0) => finals.push((i, None)),
            Ok(n) => finals.push((i, Some(n))),
            Err(_) => return Ok(None),
        }
    }
    for (i, total) in finals {
        match total {
            Some(n) => dst.set_item(&keys[i], n)?,
            None => {
                if dst.contains(&keys[i])? {
                    dst.del_item(&keys[i])?;
                }
            }
        }
    }
    Ok(Some(true))
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(add_signed, m)?)
}
