//! The shadow-pair join of a batch, natively: `monitor.pairing.Pairer.offer_half` for every half the
//! fast path read, in position order, with the same outcome — which halves pair, which are duplicates,
//! which wait at the end of the batch — and the pairs' evidence summed as `evidence.rs` sums it.
//!
//! The waiting halves stay the Python pairer's: `join` reads its `pending` dict (a half from an earlier
//! batch that a half of this one completes or duplicates) and changes nothing; it returns the halves
//! still waiting at the end of the batch and the pair ids that stop waiting, and Python applies them
//! (so the stored text of a waiting half is still `Half.to_json`, made only for the halves that wait).
//! Python also resolves what is not arithmetic: the guarded slices of each dimension tuple
//! (`Halves.dims`) and the price in force for each model over the batch's event times
//! (`Halves.models`). Whatever `join` cannot decide exactly as Python would (a model whose price
//! changes within the batch, a pending half of unexpected types, a non-finite increment) raises
//! ValueError before anything is returned, and Python pairs that part itself.

use crate::evidence::{PairEvidence, Side};
use crate::group::Ids;
use crate::record::{Fast, C_TOKENS_CACHED_IN, C_TOKENS_IN, C_TOKENS_OUT};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyFloat, PyList, PyString, PyTuple};
use rustc_hash::{FxHashMap, FxHashSet, FxHasher};
use std::hash::{Hash, Hasher};

/// One half, owned (the batch's bytes are gone once the fold returns).
struct Owned {
    position: usize,
    pair_id: String,
    arm: usize,
    release: usize,
    model: usize,
    dims: usize,
    success: bool,
    harmful: bool,
    benign: bool,
    refused: bool,
    tokens: [u64; 3],
    fees_usd: f64,
    latency_seconds: Option<f64>,
    ts: f64,
}

/// Collects a batch's halves while it is folded (no GIL).
pub struct Collector<'s> {
    unknown: &'s str,
    paired: Vec<bool>,
    halves: Vec<Owned>,
    parts: Vec<usize>,
    dims: Vec<Vec<String>>,
    dims_index: FxHashMap<u64, Vec<usize>>,
    dims_paired: Vec<bool>,
    models: Vec<String>,
    models_index: FxHashMap<String, usize>,
    model_span: Vec<Option<(f64, f64)>>,
    releases: Vec<String>,
    releases_index: FxHashMap<String, usize>,
    /// The same tables' indices by the grouper's ids (`group::Ids`), so that a tuple, model or
    /// release seen before is found without hashing its text again.
    dims_by_ids: FxHashMap<Box<[u64]>, usize>,
    model_by_id: Vec<Option<usize>>,
    release_by_id: Vec<Option<usize>>,
}

/// `table[id]`, filled by `find` the first time.
fn cached(table: &mut Vec<Option<usize>>, id: u32, find: impl FnOnce() -> usize) -> usize {
    let id = id as usize;
    if table.len() <= id {
        table.resize(id + 1, None);
    }
    *table[id].get_or_insert_with(find)
}

/// The index of `value` in `texts`, added when new.
fn intern(texts: &mut Vec<String>, index: &mut FxHashMap<String, usize>, value: &str) -> usize {
    if let Some(&i) = index.get(value) {
        return i;
    }
    texts.push(value.to_owned());
    index.insert(value.to_owned(), texts.len() - 1);
    texts.len() - 1
}

impl<'s> Collector<'s> {
    /// ``paired``: per arm index, whether it is an arm of a shadow pair (its halves are joined).
    pub fn new(unknown: &'s str, paired: Vec<bool>) -> Self {
        Collector { unknown, paired, halves: Vec::new(), parts: Vec::new(), dims: Vec::new(),
                    dims_index: FxHashMap::default(), dims_paired: Vec::new(), models: Vec::new(),
                    models_index: FxHashMap::default(), model_span: Vec::new(), releases: Vec::new(),
                    releases_index: FxHashMap::default(), dims_by_ids: FxHashMap::default(),
                    model_by_id: Vec::new(), release_by_id: Vec::new() }
    }

    pub fn add(&mut self, part: usize, position: usize, t: &Fast<'_>, ids: &Ids<'_>) {
        let Some(pair_id) = t.pair_id.as_deref() else { return };
        let paired = self.paired.get(t.arm).copied().unwrap_or(false);
        let dims = match self.dims_by_ids.get(ids.dims) {
            Some(&i) => i,
            None => {
                let i = self.dims_of(t);
                self.dims_by_ids.insert(ids.dims.into(), i);
                i
            }
        };
        let model = cached(&mut self.model_by_id, ids.model,
                           || intern(&mut self.models, &mut self.models_index, &t.model_id));
        let release = cached(&mut self.release_by_id, ids.release,
                             || intern(&mut self.releases, &mut self.releases_index, &t.release));
        if self.model_span.len() < self.models.len() {
            self.model_span.push(None);
        }
        if paired {
            self.dims_paired[dims] = true;
            let span = &mut self.model_span[model];
            *span = Some(match *span {
                None => (t.ts, t.ts),
                Some((lo, hi)) => (lo.min(t.ts), hi.max(t.ts)),
            });
        }
        while self.parts.len() <= part {
            self.parts.push(self.halves.len());
        }
        self.halves.push(Owned {
            position, pair_id: pair_id.to_owned(), arm: t.arm, release, model, dims,
            success: t.success, harmful: t.flags[0], benign: t.benign, refused: t.flags[1],
            tokens: [t.counts[C_TOKENS_IN], t.counts[C_TOKENS_CACHED_IN], t.counts[C_TOKENS_OUT]],
            fees_usd: t.fees_usd, latency_seconds: t.latency_seconds, ts: t.ts,
        });
    }

    /// The index of `t`'s dimension values (missing ones as `unknown`) in `dims`, added when new.
    fn dims_of(&mut self, t: &Fast<'_>) -> usize {
        let unknown = self.unknown;
        let values = || t.dims.iter().map(|d| d.as_deref().unwrap_or(unknown));
        let mut hasher = FxHasher::default();
        for v in values() {
            v.hash(&mut hasher);
        }
        let candidates = self.dims_index.entry(hasher.finish()).or_default();
        match candidates.iter().find(|&&i| self.dims[i].iter().map(String::as_str).eq(values())) {
            Some(&i) => i,
            None => {
                self.dims.push(values().map(str::to_owned).collect());
                self.dims_paired.push(false);
                candidates.push(self.dims.len() - 1);
                self.dims.len() - 1
            }
        }
    }

    pub fn finish(mut self, parts: usize, arms: Vec<String>) -> Halves {
        while self.parts.len() < parts {
            self.parts.push(self.halves.len());
        }
        self.parts.push(self.halves.len());
        Halves { halves: self.halves, parts: self.parts, dims: self.dims, dims_paired: self.dims_paired,
                 models: self.models, model_span: self.model_span, releases: self.releases, arms }
    }
}

/// A batch's shadow halves, held natively, per part (``Folder.fold(..., join=True)``).
#[pyclass(frozen)]
pub struct Halves {
    halves: Vec<Owned>,
    /// part p's halves are `halves[parts[p]..parts[p + 1]]`
    parts: Vec<usize>,
    dims: Vec<Vec<String>>,
    dims_paired: Vec<bool>,
    models: Vec<String>,
    model_span: Vec<Option<(f64, f64)>>,
    releases: Vec<String>,
    arms: Vec<String>,
}

/// A half being joined: one of this batch, or one the pairer held before it (fields read from the `Half`).
#[derive(Clone)]
enum Other<'py> {
    Native(usize),
    Python { arm: String, release: String, side: Side, slices: Vec<String>, _half: Bound<'py, PyAny> },
}

/// What the batch did to a pair id's waiting half (the last of `start_waiting` / `stop_waiting`).
#[derive(Clone, Copy, PartialEq)]
enum Last {
    Untouched,
    Started(usize),
    Stopped,
}

/// A pair id's state while the part is joined: the half waiting now, the last change, and whether the
/// pairer held a half of it before the batch.
type State<'py> = (Option<Other<'py>>, Last, bool);

/// `urllib.parse.quote(text, safe='')`.
fn quote(text: &str, out: &mut String) {
    for &b in text.as_bytes() {
        if b.is_ascii_alphanumeric() || b"_.-~".contains(&b) {
            out.push(b as char);
        } else {
            out.push('%');
            out.push(char::from_digit((b >> 4) as u32, 16).unwrap().to_ascii_uppercase());
            out.push(char::from_digit((b & 15) as u32, 16).unwrap().to_ascii_uppercase());
        }
    }
}

fn pair_keys(base_release: &str, cand_release: &str, slices: &[String]) -> Vec<String> {
    let mut prefix = String::from("pair:");
    quote(base_release, &mut prefix);
    prefix.push(':');
    quote(cand_release, &mut prefix);
    prefix.push(':');
    slices.iter().map(|sid| format!("{prefix}{sid}")).collect()
}

fn exact_bool(v: &Bound<'_, PyAny>, name: &str) -> PyResult<bool> {
    if v.is_exact_instance_of::<PyBool>() {
        v.extract()
    } else {
        Err(PyValueError::new_err(format!("a waiting half's {name} is not a bool")))
    }
}

fn exact_float(v: &Bound<'_, PyAny>, name: &str) -> PyResult<f64> {
    if v.is_exact_instance_of::<PyFloat>() {
        v.extract()
    } else {
        Err(PyValueError::new_err(format!("a waiting half's {name} is not a float")))
    }
}

fn python_half<'py>(half: Bound<'py, PyAny>) -> PyResult<Other<'py>> {
    let latency = half.getattr("latency_seconds")?;
    let latency = if latency.is_none() { None } else { Some(exact_float(&latency, "latency_seconds")?) };
    let side = (exact_bool(&half.getattr("success")?, "success")?, exact_bool(&half.getattr("harmful")?, "harmful")?,
                exact_float(&half.getattr("cost_usd")?, "cost_usd")?, latency,
                exact_bool(&half.getattr("benign")?, "benign")?,
                exact_bool(&half.getattr("over_refusal")?, "over_refusal")?);
    let arm = half.getattr("arm")?.cast::<PyString>()?.to_str()?.to_owned();
    let release = half.getattr("release")?.cast::<PyString>()?.to_str()?.to_owned();
    let slices = half.getattr("slices")?.cast::<PyTuple>()?.iter()
        .map(|s| Ok(s.cast::<PyString>()?.to_str()?.to_owned())).collect::<PyResult<Vec<String>>>()?;
    Ok(Other::Python { arm, release, side, slices, _half: half })
}

/// `Price.cost_usd(tokens) + fees_usd` with rates (input, cached input, output) in USD per million tokens.
fn cost_usd(rates: (f64, f64, f64), tokens: [u64; 3], fees_usd: f64) -> f64 {
    let (input, cached, output) = rates;
    let uncached = tokens[0] as i64 - tokens[1] as i64;   // Python subtracts the ints exactly (both <= 1e12)
    (uncached as f64 * input + tokens[1] as f64 * cached + tokens[2] as f64 * output) / 1_000_000.0 + fees_usd
}

#[pymethods]
impl Halves {
    /// The distinct dimension-value tuples (missing ones as ``unknown``), indexed as the halves refer to
    /// them; None for a tuple no half of a paired arm has (its slices are never needed).
    fn dims<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let out = PyList::empty(py);
        for (values, &paired) in self.dims.iter().zip(&self.dims_paired) {
            if paired {
                out.append(PyTuple::new(py, values)?)?;
            } else {
                out.append(py.None())?;
            }
        }
        Ok(out)
    }

    /// Per model: ``(model_id, earliest ts, latest ts)`` of its paired-arm halves, or None without any.
    fn models<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let out = PyList::empty(py);
        for (model, span) in self.models.iter().zip(&self.model_span) {
            match span {
                Some((lo, hi)) => out.append((model.as_str(), *lo, *hi))?,
                None => out.append(py.None())?,
            }
        }
        Ok(out)
    }

    /// How many halves part ``part`` has.
    fn count(&self, part: usize) -> PyResult<usize> {
        let (start, end) = self.range(part)?;
        Ok(end - start)
    }

    /// Part ``part``'s halves as the rows ``Folder.fold`` returns without ``join`` (`halves::to_python`).
    fn rows<'py>(&self, py: Python<'py>, part: usize) -> PyResult<Bound<'py, PyList>> {
        let (start, end) = self.range(part)?;
        let rows = PyList::empty(py);
        for h in &self.halves[start..end] {
            let arm = self.arms.get(h.arm).map(String::as_str).unwrap_or("");
            rows.append((h.position, h.pair_id.as_str(), arm, self.releases[h.release].as_str(), PyTuple::new(py, &self.dims[h.dims])?,
                         (h.success, h.harmful, h.benign, h.refused), self.models[h.model].as_str(),
                         (h.tokens[0], h.tokens[1], h.tokens[2]), h.fees_usd, h.latency_seconds, h.ts))?;
        }
        Ok(rows)
    }

    /// Join part ``part``'s halves against ``pending`` (the pairer's ``{pair_id: Half}``, not changed).
    ///
    /// ``slices``: per entry of :meth:`dims`, the slice ids of that tuple (None where not needed);
    /// ``rates``: per entry of :meth:`models`, ``(input, cached_input, output)`` USD per million tokens
    /// in force over the whole span, or None. Returns ``(pairs, duplicate halves, the pair ids the pairer
    /// held that stop waiting, the pair ids it did not hold that wait at the end, waiting halves,
    /// evidence)``; a pair id that starts and stops waiting within the part is in neither. A waiting half is ``(pair_id, arm, release, success, harmful,
    /// cost_usd, latency_seconds, ts, dims index, benign, over_refusal)``, the evidence is
    /// ``PairEvidence.drain``'s. Raises ValueError when it cannot join the part exactly as Python would.
    #[allow(clippy::too_many_arguments)]
    fn join<'py>(&self, py: Python<'py>, part: usize, pending: &Bound<'py, PyDict>,
                 slices: Vec<Option<Vec<String>>>, rates: Vec<Option<(f64, f64, f64)>>, cost_cap: f64,
                 latency_cap: f64, baseline: &str, candidate: &str) -> PyResult<Bound<'py, PyTuple>> {
        let (start, end) = self.range(part)?;
        if slices.len() != self.dims.len() || rates.len() != self.models.len() {
            return Err(PyValueError::new_err(format!(
                "join needs {} slice tuples and {} rates, got {} and {}", self.dims.len(), self.models.len(),
                slices.len(), rates.len())));
        }
        let arm_of = |i: usize| self.arms.get(i).map(String::as_str).unwrap_or("");
        let mut sums = PairEvidence::new(cost_cap, latency_cap)?;
        let mut costs: Vec<f64> = Vec::with_capacity(end - start);
        for h in &self.halves[start..end] {
            let arm = arm_of(h.arm);
            if arm != baseline && arm != candidate {
                costs.push(0.0);
                continue;
            }
            let Some(r) = rates[h.model] else {
                return Err(PyValueError::new_err(format!("no single price for model {:?} over the batch",
                                                         self.models[h.model])));
            };
            if slices[h.dims].is_none() {
                return Err(PyValueError::new_err("join needs the slices of every paired half's dimensions"));
            }
            costs.push(cost_usd(r, h.tokens, h.fees_usd));
        }
        let side_of = |i: usize| -> Side {
            let h = &self.halves[i];
            (h.success, h.harmful, costs[i - start], h.latency_seconds, h.benign, h.benign && h.refused)
        };
        // the pair ids the pairer holds, when there are fewer of them than halves: most halves miss
        let held: Option<FxHashSet<String>> = if pending.len() < end - start {
            Some(pending.keys().iter().filter_map(|k| k.cast::<PyString>().ok()?.to_str().ok().map(str::to_owned))
                 .collect())
        } else {
            None
        };
        let mut state: FxHashMap<&str, State<'py>> = FxHashMap::default();
        let mut order: Vec<&str> = Vec::new();
        let mut keys_of: FxHashMap<(usize, usize, usize), Vec<String>> = FxHashMap::default();
        let (mut pairs, mut duplicates) = (0u64, 0u64);
        for i in start..end {
            let h = &self.halves[i];
            let arm = arm_of(h.arm);
            if arm != baseline && arm != candidate {
                continue;
            }
            let pid = h.pair_id.as_str();
            let other = match state.get(pid) {
                Some((other, _, _)) => other.clone(),
                None => {
                    order.push(pid);
                    let maybe = held.as_ref().is_none_or(|ids| ids.contains(pid));
                    let found = match if maybe { pending.get_item(pid)? } else { None } {
                        Some(half) => Some(python_half(half)?),
                        None => None,
                    };
                    state.insert(pid, (found.clone(), Last::Untouched, found.is_some()));
                    found
                }
            };
            let entry = state.get_mut(pid).expect("inserted above");
            let Some(other) = other else {
                (entry.0, entry.1) = (Some(Other::Native(i)), Last::Started(i));
                continue;
            };
            let other_arm = match &other {
                Other::Native(j) => arm_of(self.halves[*j].arm),
                Other::Python { arm, .. } => arm.as_str(),
            };
            if other_arm == arm {
                duplicates += 1;
                continue;
            }
            (entry.0, entry.1) = (None, Last::Stopped);
            let mine = side_of(i);
            match &other {
                Other::Native(j) => {
                    let o = &self.halves[*j];
                    let (base, cand) = if arm_of(o.arm) == baseline { (*j, i) } else { (i, *j) };
                    let (b, c) = (&self.halves[base], &self.halves[cand]);
                    let keys = keys_of.entry((b.release, c.release, b.dims)).or_insert_with(|| {
                        pair_keys(&self.releases[b.release], &self.releases[c.release],
                                  slices[b.dims].as_deref().unwrap_or(&[]))
                    });
                    sums.add_keys(keys, &side_of(base), &side_of(cand))?;
                }
                Other::Python { arm: other_arm, release, side, slices: other_slices, .. } => {
                    let keys = if other_arm == baseline {
                        pair_keys(release, &self.releases[h.release], other_slices)
                    } else {
                        pair_keys(&self.releases[h.release], release, slices[h.dims].as_deref().unwrap_or(&[]))
                    };
                    let (base, cand) = if other_arm == baseline { (*side, mine) } else { (mine, *side) };
                    sums.add_keys(&keys, &base, &cand)?;
                }
            }
            pairs += 1;
        }
        let (dropped, fresh, waiting) = (PyList::empty(py), PyList::empty(py), PyList::empty(py));
        for pid in order {
            let (_, last, held) = &state[pid];
            match *last {
                Last::Untouched => {}
                Last::Stopped => {
                    if *held {
                        dropped.append(pid)?;
                    }
                }
                Last::Started(i) => {
                    if !*held {
                        fresh.append(pid)?;
                    }
                    let h = &self.halves[i];
                    let ts = if h.ts == 0.0 { 0.0 } else { h.ts };   // `ts or 0.0`
                    waiting.append((pid, arm_of(h.arm), self.releases[h.release].as_str(), h.success, h.harmful, costs[i - start],
                                    h.latency_seconds, ts, h.dims, h.benign, h.benign && h.refused))?;
                }
            }
        }
        let evidence = sums.drain(py)?;
        (pairs, duplicates, dropped, fresh, waiting, evidence).into_pyobject(py)
    }
}

impl Halves {
    fn range(&self, part: usize) -> PyResult<(usize, usize)> {
        if part + 1 >= self.parts.len() {
            return Err(PyValueError::new_err(format!("part must be < {}, got {part}", self.parts.len() - 1)));
        }
        Ok((self.parts[part], self.parts[part + 1]))
    }
}
