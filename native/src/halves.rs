//! The shadow-pair halves of a batch: what `monitor.pairing.Pairer` needs of
//! a fast trace that carries a `pair_id`, so that paired traffic stays on the
//! native path.
//!
//! These rows are what Python joins when it pairs a part itself (`Folder.fold`
//! without `join_arms`, or a part `join.rs` refuses); the worker's own path
//! keeps the halves native and joins them there (`join.rs`). Either way the
//! waiting halves, their JSON text in the store and the evidence are the same
//! to the last bit (`tests/unit/streams/test_native_pairs.py`).

use crate::record::{Fast, C_TOKENS_CACHED_IN, C_TOKENS_IN, C_TOKENS_OUT};
use pyo3::prelude::*;
use pyo3::types::{PyList, PyString, PyTuple};
use rustc_hash::FxHashMap;
use std::borrow::Cow;

/// One half, borrowed from the batch's bytes (like the groups).
pub struct Half<'a> {
    position: usize,
    pair_id: Cow<'a, str>,
    arm: usize,
    release: Cow<'a, str>,
    model_id: Cow<'a, str>,
    /// The slice dimensions' raw values (None: missing, read as `unknown`), before the guard.
    dims: Vec<Option<Cow<'a, str>>>,
    success: bool,
    harmful: bool,
    benign: bool,
    refused: bool,
    tokens: [u64; 3],
    fees_usd: f64,
    latency_seconds: Option<f64>,
    ts: f64,
}

impl<'a> Half<'a> {
    /// The half of `t` at `position`, or None when `t` has no `pair_id`.
    pub fn of(position: usize, t: &Fast<'a>) -> Option<Self> {
        let pair_id = t.pair_id.clone()?;
        Some(Half {
            position,
            pair_id,
            arm: t.arm,
            release: t.release.clone(),
            model_id: t.model_id.clone(),
            dims: t.dims.clone(),
            success: t.success,
            harmful: t.flags[0],
            benign: t.benign,
            refused: t.flags[1],
            tokens: [t.counts[C_TOKENS_IN], t.counts[C_TOKENS_CACHED_IN], t.counts[C_TOKENS_OUT]],
            fees_usd: t.fees_usd,
            latency_seconds: t.latency_seconds,
            ts: t.ts,
        })
    }
}

/// The halves as Python rows, in position order: ``(position, pair_id, arm, release, dimension values
/// (missing ones as ``unknown``), (success, harmful_action, benign, refused), model_id, (tokens_in,
/// tokens_cached_in, tokens_out), fees_usd, latency_seconds or None, ts)``. Repeated texts and dimension
/// tuples are one Python object each (fewer allocations, and the pairer's per-tuple cache hits by identity).
pub fn to_python<'py, 'h>(py: Python<'py>, halves: &'h [Half], arms: &[String], unknown: &str)
                          -> PyResult<Bound<'py, PyList>> {
    let rows = PyList::empty(py);
    let arm_texts: Vec<Bound<'py, PyString>> = arms.iter().map(|a| PyString::new(py, a)).collect();
    let empty = PyString::new(py, "");
    let mut texts: FxHashMap<&'h str, Bound<'py, PyString>> = FxHashMap::default();
    let mut tuples: FxHashMap<&'h [Option<Cow<'h, str>>], Bound<'py, PyTuple>> = FxHashMap::default();
    for h in halves {
        let dims = match tuples.get(h.dims.as_slice()) {
            Some(t) => t.clone(),
            None => {
                let values: Vec<&str> = h.dims.iter().map(|d| d.as_deref().unwrap_or(unknown)).collect();
                let t = PyTuple::new(py, values)?;
                tuples.insert(h.dims.as_slice(), t.clone());
                t
            }
        };
        let arm = arm_texts.get(h.arm).unwrap_or(&empty).clone();
        let release = shared(py, &mut texts, &h.release);
        let model_id = shared(py, &mut texts, &h.model_id);
        let row = (h.position, h.pair_id.as_ref(), arm, release, dims,
                   (h.success, h.harmful, h.benign, h.refused), model_id,
                   (h.tokens[0], h.tokens[1], h.tokens[2]), h.fees_usd, h.latency_seconds, h.ts);
        rows.append(row)?;
    }
    Ok(rows)
}

fn shared<'py, 'h>(py: Python<'py>, cache: &mut FxHashMap<&'h str, Bound<'py, PyString>>, value: &'h str)
                   -> Bound<'py, PyString> {
    cache.entry(value).or_insert_with(|| PyString::new(py, value)).clone()
}
