//! `fleetmon_native`: the streaming worker's hot path in one call per batch.
//!
//! `Folder.fold(values, now)` takes the raw Kafka values of one partition's
//! batch and returns the groups of the records it could decode, validate and
//! fold itself, plus the positions of the records it leaves to Python (see
//! `record.rs` for which). Python owns every decision that is not plain
//! arithmetic: the cardinality guard, windows' retention, pairing, the DLQ and
//! the store. Shadow halves it read are joined natively against the Python
//! pairer's waiting halves (`join.rs`, with `fold(..., join_arms=...)`) or
//! handed back as rows for Python to join (`halves.rs`); `PairEvidence` sums
//! the evidence of the pairs either joins (`evidence.rs`). The GIL is released
//! while the batch is parsed and folded.

mod evidence;
mod group;
mod halves;
mod join;
mod record;

use group::{Bucketing, Grouper};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyTuple};
use record::{dimension_field, Dim, Spec};

#[pyclass(frozen)]
struct Folder {
    dims: Vec<String>,
    sizes: Vec<i64>,
    outcomes: Vec<String>,
    arms: Vec<String>,
    user_signals: Vec<String>,
    slow_keys: Vec<String>,
    unknown: String,
    max_future_seconds: f64,
    max_record_bytes: usize,
    pair_id_slow: bool,
    relative_accuracy: f64,
    min_value: f64,
    limits: Limits,
}

/// The value bounds of `monitor.limits` (tokens, other counts, latency ms, fees, ts, label chars).
#[derive(Clone, Copy)]
struct Limits(u64, u64, f64, f64, f64, usize);

#[pymethods]
impl Folder {
    #[new]
    #[pyo3(signature = (*, dimensions, window_sizes, outcomes, arms, user_signals, slow_keys, unknown,
                        max_future_seconds, max_record_bytes, pair_id_slow, relative_accuracy, min_value,
                        max_tokens, max_count, max_latency_ms, max_fees_usd, max_ts, max_label_chars))]
    #[allow(clippy::too_many_arguments)]
    fn new(dimensions: Vec<String>, window_sizes: Vec<i64>, outcomes: Vec<String>, arms: Vec<String>,
           user_signals: Vec<String>, slow_keys: Vec<String>, unknown: String, max_future_seconds: f64,
           max_record_bytes: usize, pair_id_slow: bool, relative_accuracy: f64, min_value: f64,
           max_tokens: u64, max_count: u64, max_latency_ms: f64, max_fees_usd: f64, max_ts: f64,
           max_label_chars: usize) -> PyResult<Self> {
        if window_sizes.iter().any(|&s| s <= 0) {
            return Err(pyo3::exceptions::PyValueError::new_err(format!(
                "window_sizes must be > 0 seconds, got {window_sizes:?}")));
        }
        if arms.is_empty() {
            return Err(pyo3::exceptions::PyValueError::new_err("arms must not be empty (the first is the default)"));
        }
        Ok(Folder { dims: dimensions, sizes: window_sizes, outcomes, arms, user_signals, slow_keys, unknown,
                    max_future_seconds, max_record_bytes, pair_id_slow, relative_accuracy, min_value,
                    limits: Limits(max_tokens, max_count, max_latency_ms, max_fees_usd, max_ts, max_label_chars) })
    }

    /// Fold what the fast path takes of ``values`` (bytes or None each).
    ///
    /// ``part_lengths`` splits ``values`` into consecutive parts (partitions;
    /// default one part). Returns ``(groups, slow, parts)``: ``groups`` a list
    /// of ``(dimension values, window starts, counts, buckets, zero_count,
    /// latest_ts, first_position)`` in order of first position; ``slow`` the
    /// positions left to Python; ``parts`` per part ``(traces folded, their
    /// latest event time or None)``; ``identities`` the version tuples seen,
    /// ``((release, model_id, scaffold_hash, prompt_hash, tool_schema_hash,
    /// config_hash), latest_ts, first_position)`` in order of first position;
    /// ``halves`` the folded traces that carry a ``pair_id``, in position
    /// order (the row is described in `halves::to_python`). With ``join_arms`` (the arms of a shadow
    /// pair), ``halves`` is instead a `join::Halves` holding them natively, to be joined there.
    #[pyo3(signature = (values, now, part_lengths=None, join_arms=None))]
    fn fold<'py>(&self, py: Python<'py>, values: &Bound<'py, PyList>, now: f64,
                 part_lengths: Option<Vec<usize>>, join_arms: Option<Vec<String>>) -> PyResult<Bound<'py, PyTuple>> {
        let part_lengths = part_lengths.unwrap_or_else(|| vec![values.len()]);
        if part_lengths.iter().sum::<usize>() != values.len() {
            return Err(pyo3::exceptions::PyValueError::new_err(format!(
                "part_lengths must add up to the {} values, got {part_lengths:?}", values.len())));
        }
        let items: Vec<Bound<'py, PyAny>> = values.iter().collect();
        let mut slices: Vec<Option<&[u8]>> = Vec::with_capacity(items.len());
        for item in &items {
            slices.push(item.cast::<PyBytes>().ok().map(|b| b.as_bytes()));
        }
        let spec = Spec {
            outcomes: self.outcomes.clone(),
            arms: self.arms.clone(),
            user_signals: self.user_signals.clone(),
            slow_keys: self.slow_keys.clone(),
            dims: self.dims.iter().map(|d| match dimension_field(d) {
                Some(i) => Dim::Field(i),
                None => Dim::Tag(d.clone()),
            }).collect(),
            now,
            max_future_seconds: self.max_future_seconds,
            pair_id_slow: self.pair_id_slow,
            max_record_bytes: self.max_record_bytes,
            max_tokens: self.limits.0,
            max_count: self.limits.1,
            max_latency_ms: self.limits.2,
            max_fees_usd: self.limits.3,
            max_ts: self.limits.4,
            max_label_chars: self.limits.5,
        };
        let sizes = self.sizes.clone();
        let bucketing = Bucketing::new(self.relative_accuracy, self.min_value);
        let n_outcomes = self.outcomes.len();
        let ndims = self.dims.len();
        let slices_ref = &slices;
        let spec_ref = &spec;
        let lengths_ref = &part_lengths;
        let mut collector = join_arms.as_ref().map(|names| {
            join::Collector::new(&self.unknown, self.arms.iter().map(|a| names.contains(a)).collect())
        });
        let collector_ref = &mut collector;
        let (grouper, slow, halves) = py.detach(move || {
            let mut grouper = Grouper::new(ndims, sizes, n_outcomes, bucketing, lengths_ref.len());
            let mut slow: Vec<usize> = Vec::new();
            let mut halves: Vec<halves::Half> = Vec::new();
            let mut position = 0;
            for (part, &length) in lengths_ref.iter().enumerate() {
                for value in &slices_ref[position..position + length] {
                    match value.and_then(|bytes| record::read(bytes, spec_ref)) {
                        Some(fast) => {
                            match collector_ref {
                                Some(c) => c.add(part, position, &fast),
                                None => {
                                    if let Some(half) = halves::Half::of(position, &fast) {
                                        halves.push(half);
                                    }
                                }
                            }
                            grouper.add(part, position, fast)
                        }
                        None => slow.push(position),
                    }
                    position += 1;
                }
            }
            (grouper, slow, halves)
        });
        let groups = PyList::empty(py);
        for g in &grouper.groups {
            let dims: Vec<&str> = g.dims.iter().map(|d| d.as_deref().unwrap_or(&self.unknown)).collect();
            let counts = PyDict::new(py);
            counts.set_item("traces", g.traces)?;
            for (i, n) in g.outcomes.iter().enumerate() {
                if *n > 0 {
                    let name = self.outcomes.get(i).map(String::as_str).unwrap_or("none");
                    counts.set_item(format!("outcome:{name}"), *n)?;
                }
            }
            for (model, sums) in &g.tokens {
                for (kind, n) in ["tokens_in:", "tokens_cached_in:", "tokens_out:"].iter().zip(sums) {
                    if *n > 0 {
                        counts.set_item(format!("{kind}{model}"), *n)?;
                    }
                }
            }
            if g.successes > 0 {
                counts.set_item("successes", g.successes)?;
                counts.set_item("steps_solved", g.steps_solved)?;
                counts.set_item("tokens_solved", g.tokens_solved)?;
            }
            for (name, n) in [("steps", g.steps), ("tool_calls", g.tool_calls), ("tool_errors", g.tool_errors),
                              ("side_effects", g.side_effects), ("side_effect_traces", g.side_effect_traces),
                              ("harmful_action", g.harmful_action), ("refused", g.refused), ("benign", g.benign),
                              ("refused_benign", g.refused_benign), ("prompt_injection", g.prompt_injection)] {
                if n > 0 {
                    counts.set_item(name, n)?;
                }
            }
            if g.has_fees {
                counts.set_item("fees_usd", g.fees_usd)?;
            }
            if g.latency_count > 0 {
                counts.set_item("latency_count", g.latency_count)?;
                counts.set_item("latency_sum_seconds", g.latency_sum_seconds)?;
            }
            let buckets = PyDict::new(py);
            for (k, n) in &g.buckets {
                buckets.set_item(*k, *n)?;
            }
            let row = (PyTuple::new(py, dims)?, PyTuple::new(py, &g.starts)?, counts, buckets, g.zero, g.latest, g.first);
            groups.append(row)?;
        }
        let identities = PyList::empty(py);
        for (identity, latest, first) in &grouper.identities {
            let parts: Vec<&str> = identity.iter().map(|c| c.as_ref()).collect();
            identities.append((PyTuple::new(py, parts)?, *latest, *first))?;
        }
        let halves = match collector {
            Some(c) => Bound::new(py, c.finish(part_lengths.len(), self.arms.clone()))?.into_any(),
            None => halves::to_python(py, &halves, &self.arms, &self.unknown)?.into_any(),
        };
        (groups, PyList::new(py, slow)?, PyList::new(py, &grouper.parts)?, identities, halves).into_pyobject(py)
    }
}

/// The full-form field names the fast path knows (checked against `monitor.schema.KNOWN_FIELDS`):
/// only those its key matcher reads into their own slot, so the two lists cannot drift apart unseen.
#[pyfunction]
fn known_fields() -> Vec<&'static str> {
    record::KNOWN_FIELDS.iter().enumerate()
        .filter(|(i, name)| record::field_index(name) == Some(*i))
        .map(|(_, name)| *name)
        .collect()
}

#[pymodule]
fn fleetmon_native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Folder>()?;
    m.add_class::<evidence::PairEvidence>()?;
    m.add_class::<join::Halves>()?;
    m.add_function(wrap_pyfunction!(known_fields, m)?)?;
    Ok(())
}
