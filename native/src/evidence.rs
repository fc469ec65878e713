//! The paired evidence of completed shadow pairs, summed per pair key:
//! `monitor.pairing.record_pair` (`PairedCounts.of_pair(base, cand,
//! caps).hash_fields()` added field by field into every pair key of the pair)
//! with the same IEEE-754 operations in the same order, so the sums are
//! bit-identical to Python's (checked by `tests/unit/streams/test_native_pairs.py`).
//!
//! `join.rs` adds the pairs it joins here; `PairEvidence.add` serves the pairs
//! Python joins (a part the native join refuses).

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyTuple};
use rustc_hash::FxHashMap;

/// The `PairedCounts` fields, in its order (a unit test checks the set against the dataclass).
pub const NAMES: [&str; 36] = [
    "n_pairs", "b", "c", "harm_b", "harm_c", "cost_n", "cost_delta_sum", "cost_delta_sumsq", "latency_n",
    "latency_delta_sum", "latency_delta_sumsq", "candidate_harmful", "baseline_harmful", "candidate_benign",
    "candidate_over_refusals", "baseline_cost_sum", "baseline_latency_sum", "benign_pairs", "refusal_b",
    "refusal_c", "capped_cost_n", "capped_cost_cap", "capped_cost_b", "capped_cost_c", "capped_cost_bb",
    "capped_cost_cc", "capped_cost_bc", "cost_over_cap", "capped_latency_n", "capped_latency_cap",
    "capped_latency_b", "capped_latency_c", "capped_latency_bb", "capped_latency_cc", "capped_latency_bc",
    "latency_over_cap",
];

/// Which fields are float sums (the others are integer counts).
const SUMS: u64 = (1 << 6) | (1 << 7) | (1 << 9) | (1 << 10) | (1 << 15) | (1 << 16) | (0b11_1111 << 21)
    | (0b11_1111 << 29);

/// One pair's increments: a field is present when `PairedCounts.hash_fields` writes it.
struct Increments {
    counts: [u64; 36],
    sums: [f64; 36],
    present: u64,
}

impl Increments {
    fn count(&mut self, i: usize, n: bool) {
        if n {
            self.counts[i] = 1;
            self.present |= 1 << i;
        }
    }
    fn sum(&mut self, i: usize, x: f64) {
        self.sums[i] = x;
        self.present |= 1 << i;
    }
    /// `_capped`: fields `first..first + 6` and the over-cap count at `first + 7` (the count `n` at `first - 1`).
    fn capped(&mut self, n: usize, base: f64, cand: f64, cap: f64) {
        let (b, c) = (base.min(cap), cand.min(cap));   // caps are > 0: no signed-zero ambiguity
        self.count(n, true);
        for (k, x) in [cap, b, c, b * b, c * c, b * c].into_iter().enumerate() {
            self.sum(n + 1 + k, x);
        }
        self.count(n + 7, base > cap || cand > cap);
    }
}

/// A half as `record_pair` reads it: success, harmful, cost_usd, latency_seconds, benign, over_refusal.
pub(crate) type Side = (bool, bool, f64, Option<f64>, bool, bool);

/// `x or 0.0` in Python: a zero (either sign) is +0.0.
fn or_zero(x: f64) -> f64 {
    if x == 0.0 { 0.0 } else { x }
}

fn increments(base: &Side, cand: &Side, cost_cap: f64, latency_cap: f64) -> Increments {
    let (bs, bh, bc, bl, bb, bo) = *base;
    let (cs, ch, cc, cl, cb, co) = *cand;
    let mut inc = Increments { counts: [0; 36], sums: [0.0; 36], present: 0 };
    let cost_delta = cc - bc;
    let latency = bl.is_some() && cl.is_some();
    let (bl, cl) = (or_zero(bl.unwrap_or(0.0)), or_zero(cl.unwrap_or(0.0)));
    let benign = bb && cb;
    inc.count(0, true);
    inc.count(1, bs && !cs);
    inc.count(2, cs && !bs);
    inc.count(3, bh && !ch);
    inc.count(4, ch && !bh);
    inc.count(5, true);
    inc.sum(6, cost_delta);
    inc.sum(7, cost_delta * cost_delta);
    if latency {
        let lat_delta = cl - bl;
        inc.count(8, true);
        inc.sum(9, lat_delta);
        inc.sum(10, lat_delta * lat_delta);
        inc.sum(16, bl);
    }
    inc.count(11, ch);
    inc.count(12, bh);
    inc.count(13, cb);
    inc.count(14, co);
    inc.sum(15, bc);
    inc.count(17, benign);
    inc.count(18, benign && bo && !co);
    inc.count(19, benign && co && !bo);
    inc.capped(20, bc, cc, cost_cap);
    if latency {
        inc.capped(28, bl, cl, latency_cap);
    }
    inc
}

/// One pair key's running sums (`BatchDelta.add_paired_evidence`: `mine.get(name, 0) + value`).
struct Slot {
    counts: [u64; 36],
    sums: [f64; 36],
    present: u64,
}

/// Paired evidence summed per pair key, in order of first use.
#[pyclass]
pub struct PairEvidence {
    cost_cap: f64,
    latency_cap: f64,
    index: FxHashMap<String, usize>,
    keys: Vec<String>,
    slots: Vec<Slot>,
}

#[pymethods]
impl PairEvidence {
    #[new]
    pub(crate) fn new(cost_cap: f64, latency_cap: f64) -> PyResult<Self> {
        if !(cost_cap > 0.0 && latency_cap > 0.0 && cost_cap.is_finite() && latency_cap.is_finite()) {
            return Err(pyo3::exceptions::PyValueError::new_err(format!(
                "pair caps must be finite and > 0, got cost {cost_cap}, latency {latency_cap}")));
        }
        Ok(PairEvidence { cost_cap, latency_cap, index: FxHashMap::default(), keys: Vec::new(), slots: Vec::new() })
    }

    /// Add one completed pair (each side ``(success, harmful, cost_usd, latency_seconds or None, benign,
    /// over_refusal)``) to every pair key in ``keys``. Raises ValueError, as ``PairedCounts`` does, when
    /// an increment is not finite (the first such field in ``PairedCounts`` order), adding nothing.
    fn add(&mut self, keys: &Bound<'_, PyTuple>, base: Side, cand: Side) -> PyResult<()> {
        let texts = keys.iter().map(|key| Ok(key.cast::<pyo3::types::PyString>()?.to_str()?.to_owned()))
            .collect::<PyResult<Vec<String>>>()?;
        self.add_keys(&texts, &base, &cand)
    }

    /// The sums so far as ``[(pair key, {field: value})]`` (counts as ints), and start again.
    pub(crate) fn drain<'py>(&mut self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let out = PyList::empty(py);
        for (key, slot) in self.keys.drain(..).zip(self.slots.drain(..)) {
            let fields = PyDict::new(py);
            for (i, name) in NAMES.iter().enumerate() {
                if slot.present & (1 << i) != 0 {
                    if SUMS & (1 << i) != 0 {
                        fields.set_item(*name, slot.sums[i])?;
                    } else {
                        fields.set_item(*name, slot.counts[i])?;
                    }
                }
            }
            out.append((key, fields))?;
        }
        self.index.clear();
        Ok(out)
    }

    /// The field names, in `PairedCounts` order.
    #[staticmethod]
    fn field_names() -> Vec<&'static str> {
        NAMES.to_vec()
    }
}

impl PairEvidence {
    /// `add` with the keys as Rust strings (`join.rs`).
    pub(crate) fn add_keys(&mut self, keys: &[String], base: &Side, cand: &Side) -> PyResult<()> {
        let inc = increments(base, cand, self.cost_cap, self.latency_cap);
        for (i, name) in NAMES.iter().enumerate() {
            let x = inc.sums[i];
            if SUMS & inc.present & (1 << i) != 0 && !x.is_finite() {
                let text = if x.is_nan() { "nan" } else if x > 0.0 { "inf" } else { "-inf" };
                return Err(pyo3::exceptions::PyValueError::new_err(format!("{name} must be finite, got {text}")));
            }
        }
        for text in keys {
            let slot = match self.index.get(text.as_str()) {
                Some(&i) => i,
                None => {
                    self.index.insert(text.clone(), self.slots.len());
                    self.keys.push(text.clone());
                    self.slots.push(Slot { counts: [0; 36], sums: [0.0; 36], present: 0 });
                    self.slots.len() - 1
                }
            };
            let slot = &mut self.slots[slot];
            slot.present |= inc.present;
            let mut bits = inc.present;
            while bits != 0 {
                let i = bits.trailing_zeros() as usize;
                bits &= bits - 1;
                if SUMS & (1 << i) != 0 {
                    slot.sums[i] += inc.sums[i];
                } else {
                    slot.counts[i] += inc.counts[i];
                }
            }
        }
        Ok(())
    }
}
