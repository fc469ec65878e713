//! The worker's packing of a window aggregate into its hash field (`monitor/store/redis/packed.py`'s
//! `pack`, the format `window.rs` reads back).
//!
//! `WindowPacker.pack(counts, buckets, zero_count)` gives exactly the text the Python `pack` gives,
//! or `None`: anything it is not sure to write as Python would (a field name JSON would escape, a
//! count that is not a plain int within i64, a bucket index or count that is not) goes back to the
//! Python `pack`. Float fields are written by Python's own `repr(float(value))`.

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyFloat, PyInt};
use std::fmt::Write;

/// The names the packer treats apart (from Python, so the two cannot drift apart).
#[pyclass(frozen)]
struct WindowPacker {
    /// The fields written as floats (`repr(float(value))`); every other one as an integer.
    floats: Vec<String>,
    /// The sketch's zero bucket as a plain field (`latency:zero`).
    zero_field: String,
}

/// A name orjson writes as it is between quotes: no control character, quote, backslash or DEL.
fn plain_name(name: &str) -> bool {
    name.bytes().all(|b| b >= 0x20 && b != b'"' && b != b'\\' && b != 0x7f)
}

/// An exact Python int within i64 (not a bool, not a subclass), else None.
fn exact_int(value: &Bound<'_, PyAny>) -> Option<i64> {
    if value.is_exact_instance_of::<PyInt>() {
        value.extract::<i64>().ok()
    } else {
        None
    }
}

/// Appends `"name","value"` (with a comma before it unless it is the first pair); also held.rs's.
pub(crate) fn push_pair(out: &mut String, name: &str, value: &str) {
    if out.len() > 1 {
        out.push(',');
    }
    out.push('"');
    out.push_str(name);
    out.push_str("\",\"");
    out.push_str(value);
    out.push('"');
}

#[pymethods]
impl WindowPacker {
    #[new]
    fn new(floats: Vec<String>, zero_field: String) -> Self {
        WindowPacker { floats, zero_field }
    }

    /// The packed text of an aggregate's ``counts`` and its sketch's ``buckets`` and
    /// ``zero_count`` (see the module docstring), or None to leave it to Python.
    fn pack(&self, counts: &Bound<'_, PyDict>, buckets: &Bound<'_, PyDict>,
            zero_count: &Bound<'_, PyAny>) -> PyResult<Option<String>> {
        let mut out = String::with_capacity(64 + 16 * counts.len() + 12 * buckets.len());
        out.push('[');
        let mut number = String::new();
        for (key, value) in counts.iter() {
            if !value.is_truthy()? {
                continue;
            }
            let Ok(name) = key.cast::<pyo3::types::PyString>() else { return Ok(None) };
            let name = name.to_str()?;
            if !plain_name(name) {
                return Ok(None);
            }
            number.clear();
            if self.floats.iter().any(|f| f == name) {
                let Ok(v) = value.extract::<f64>() else { return Ok(None) };
                let text = PyFloat::new(counts.py(), v).repr()?;
                number.push_str(text.to_str()?);
            } else {
                let Some(n) = exact_int(&value) else { return Ok(None) };
                write!(number, "{n}").expect("writing to a String");
            }
            push_pair(&mut out, name, &number);
        }
        if zero_count.is_truthy()? {
            let Some(n) = exact_int(zero_count) else { return Ok(None) };
            if !plain_name(&self.zero_field) {
                return Ok(None);
            }
            number.clear();
            write!(number, "{n}").expect("writing to a String");
            push_pair(&mut out, &self.zero_field, &number);
        }
        out.push_str("]\n");
        let mut first = true;
        for (index, n) in buckets.iter() {
            let (Some(index), Some(n)) = (exact_int(&index), exact_int(&n)) else { return Ok(None) };
            if !first {
                out.push(' ');
            }
            first = false;
            write!(out, "{index} {n}").expect("writing to a String");
        }
        Ok(Some(out))
    }
}

/// Adds the packer to the module (one line in `lib.rs`), and the held aggregates, whose windows
/// are packed the same way (`held.rs`).
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<WindowPacker>()?;
    crate::held::register(m)
}
