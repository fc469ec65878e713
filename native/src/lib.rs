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
mod held; // the batch's aggregates held natively from the fold to the store
mod sums; // their arithmetic
mod join;
mod pack; // the worker's packing of window aggregates into their hash field
mod record;
mod render; // the exporter's sample lines
mod scan;
mod signed; // the exporter's __other__ rows moved by their members' changes
mod window; // the exporter's reader of packed window hashes

use group::{Bucketing, Grouper};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList, PyTuple};
use rustc_hash::FxHashMap;
use record::{dimension_field, Dim, Spec};
use scan::Keys;

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
    /// Threads that read a batch's records (the grouping stays on one).
    threads: usize,
}

/// The value bounds of `monitor.limits` (tokens, other counts, latency ms, fees, ts, label chars).
#[derive(Clone, Copy)]
struct Limits(u64, u64, f64, f64, f64, usize);

impl Folder {
    /// The fast path's view of the schema for a batch read at ``now``.
    fn spec(&self, now: f64) -> Spec {
        let dims: Vec<Dim> = self.dims.iter().map(|d| match dimension_field(d) {
            Some(i) => Dim::Field(i),
            None => Dim::Tag(d.clone()),
        }).collect();
        let keys = Keys::new(&self.slow_keys, &dims);
        Spec {
            outcomes: self.outcomes.clone(),
            arms: self.arms.clone(),
            user_signals: self.user_signals.clone(),
            slow_keys: self.slow_keys.clone(),
            dims,
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
            keys,
        }
    }
}

#[pymethods]
impl Folder {
    #[new]
    #[pyo3(signature = (*, dimensions, window_sizes, outcomes, arms, user_signals, slow_keys, unknown,
                        max_future_seconds, max_record_bytes, pair_id_slow, relative_accuracy, min_value,
                        max_tokens, max_count, max_latency_ms, max_fees_usd, max_ts, max_label_chars, threads=1))]
    #[allow(clippy::too_many_arguments)]
    fn new(dimensions: Vec<String>, window_sizes: Vec<i64>, outcomes: Vec<String>, arms: Vec<String>,
           user_signals: Vec<String>, slow_keys: Vec<String>, unknown: String, max_future_seconds: f64,
           max_record_bytes: usize, pair_id_slow: bool, relative_accuracy: f64, min_value: f64,
           max_tokens: u64, max_count: u64, max_latency_ms: f64, max_fees_usd: f64, max_ts: f64,
           max_label_chars: usize, threads: usize) -> PyResult<Self> {
        if window_sizes.iter().any(|&s| s <= 0) {
            return Err(pyo3::exceptions::PyValueError::new_err(format!(
                "window_sizes must be > 0 seconds, got {window_sizes:?}")));
        }
        if arms.is_empty() {
            return Err(pyo3::exceptions::PyValueError::new_err("arms must not be empty (the first is the default)"));
        }
        Ok(Folder { dims: dimensions, sizes: window_sizes, outcomes, arms, user_signals, slow_keys, unknown,
                    max_future_seconds, max_record_bytes, pair_id_slow, relative_accuracy, min_value,
                    limits: Limits(max_tokens, max_count, max_latency_ms, max_fees_usd, max_ts, max_label_chars),
                    threads: threads.max(1) })
    }

    /// Fold what the fast path takes of ``values`` (bytes or None each).
    ///
    /// ``part_lengths`` splits ``values`` into consecutive parts (partitions;
    /// default one part). Returns ``(groups, slow, parts, identities, halves,
    /// held)``: ``groups`` a list of ``(dimension values, window starts, traces,
    /// latest_ts, first_position)`` in order of first position, whose sums
    /// ``held`` holds (a `held::HeldAggregates`, ids in that order); ``slow`` the
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
        let spec = self.spec(now);
        let sizes = self.sizes.clone();
        let bucketing = Bucketing::new(self.relative_accuracy, self.min_value);
        let n_outcomes = self.outcomes.len();
        let ndims = self.dims.len();
        let slices_ref = &slices;
        let spec_ref = &spec;
        let lengths_ref = &part_lengths;
        let threads = self.threads;
        let mut collector = join_arms.as_ref().map(|names| {
            join::Collector::new(&self.unknown, self.arms.iter().map(|a| names.contains(a)).collect())
        });
        let collector_ref = &mut collector;
        let outcome_list = &self.outcomes;
        let (grouper, slow, halves, held) = py.detach(move || {
            let mut grouper = Grouper::new(ndims, sizes, n_outcomes, bucketing, lengths_ref.len());
            let mut slow: Vec<usize> = Vec::new();
            let mut halves: Vec<halves::Half> = Vec::new();
            let ends: Vec<usize> = lengths_ref.iter().scan(0, |end, &n| {
                *end += n;
                Some(*end)
            }).collect();
            let mut part = 0;
            let mut take = |position: usize, fast: Option<_>| {
                while ends[part] <= position {
                    part += 1;
                }
                match fast {
                    Some(fast) => {
                        let ids = grouper.add(part, position, &fast);
                        match collector_ref {
                            Some(c) => c.add(part, position, &fast, &ids),
                            None => {
                                if let Some(half) = halves::Half::of(position, &fast) {
                                    halves.push(half);
                                }
                            }
                        }
                    }
                    None => slow.push(position),
                }
            };
            if threads <= 1 {
                let mut scratch = record::Raw::new(spec_ref);
                for (position, value) in slices_ref.iter().enumerate() {
                    take(position, value.and_then(|bytes| record::read(bytes, spec_ref, &mut scratch)));
                }
            } else {
                let mut start = 0;
                while start < slices_ref.len() {
                    let end = (start + CHUNK).min(slices_ref.len());
                    for (offset, fast) in read_chunk(&slices_ref[start..end], spec_ref, threads).into_iter().enumerate() {
                        take(start + offset, fast);
                    }
                    start = end;
                }
            }
            let mut names = sums::Names::default();
            let mut ids = sums::GroupNames::new(&mut names, outcome_list);
            let aggs = grouper.groups.iter().map(|g| sums::of_group(g, &mut names, &mut ids)).collect();
            (grouper, slow, halves, held::HeldAggregates::new(names, aggs))
        });
        let groups = PyList::empty(py);
        // Dimension tuples and window starts are built once per batch and shared by the groups that
        // have them (a replay batch has ~25x more groups than distinct slices); the groups' sums stay
        // native (`held`).
        let mut dims_of: FxHashMap<&[Option<std::borrow::Cow<'_, str>>], Bound<'py, PyTuple>> = FxHashMap::default();
        let mut starts_of: FxHashMap<&[i64], Bound<'py, PyTuple>> = FxHashMap::default();
        for g in &grouper.groups {
            let dims = match dims_of.get(g.dims.as_slice()) {
                Some(t) => t.clone(),
                None => {
                    let names: Vec<&str> = g.dims.iter().map(|d| d.as_deref().unwrap_or(&self.unknown)).collect();
                    let t = PyTuple::new(py, names)?;
                    dims_of.insert(g.dims.as_slice(), t.clone());
                    t
                }
            };
            let starts = match starts_of.get(g.starts.as_slice()) {
                Some(t) => t.clone(),
                None => {
                    let t = PyTuple::new(py, &g.starts)?;
                    starts_of.insert(g.starts.as_slice(), t.clone());
                    t
                }
            };
            groups.append((dims, starts, g.traces, g.latest, g.first))?;
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
        (groups, PyList::new(py, slow)?, PyList::new(py, &grouper.parts)?, identities, halves, Bound::new(py, held)?)
            .into_pyobject(py)
    }

    /// For the differential tests: the positions of ``values`` where the hand-written reader
    /// (`scan.rs`) and the serde reader differ in what they make of a record read at ``now``
    /// (taken or left to Python, and every value the fold reads of a taken one).
    fn reader_disagreements(&self, values: Vec<Option<Vec<u8>>>, now: f64) -> Vec<usize> {
        let spec = self.spec(now);
        let mut scratch = record::Raw::new(&spec);
        values.iter().enumerate().filter_map(|(i, value)| {
            let bytes = value.as_deref()?;
            let scanned = record::read(bytes, &spec, &mut scratch);
            let text = (bytes.len() <= spec.max_record_bytes).then(|| std::str::from_utf8(bytes).ok()).flatten();
            let parsed = text.and_then(|t| record::read_serde(t, &spec));
            (format!("{scanned:?}") != format!("{parsed:?}")).then_some(i)
        }).collect()
    }
}

/// Records read per round: a round's records are read (on `threads` threads), then grouped in order.
const CHUNK: usize = 8192;

/// Read `values` in order; with `threads` > 1 the chunk is split between that many threads.
fn read_chunk<'a>(values: &[Option<&'a [u8]>], spec: &'a Spec, threads: usize) -> Vec<Option<record::Fast<'a>>> {
    let read = |piece: &[Option<&'a [u8]>]| {
        let mut scratch = record::Raw::new(spec);
        piece.iter().map(|value| value.and_then(|bytes| record::read(bytes, spec, &mut scratch))).collect::<Vec<_>>()
    };
    if threads <= 1 || values.len() < 256 * threads {
        return read(values);
    }
    let size = values.len().div_ceil(threads);
    std::thread::scope(|s| {
        let mut pieces = values.chunks(size);
        let first = pieces.next().unwrap_or(&[]);
        let others: Vec<_> = pieces.map(|piece| s.spawn(move || read(piece))).collect();
        let mut out = read(first);
        for other in others {
            out.extend(other.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic)));
        }
        out
    })
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
    window::register(m)?;
    pack::register(m)?;
    render::register(m)?;
    signed::register(m)?;
    Ok(())
}
