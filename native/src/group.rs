//! Fast traces → groups: one additive aggregate per (slice dimension values,
//! window start per resolution), the same grouping and the same arithmetic as
//! `monitor.fold.group_traces` + `monitor.aggregate.Aggregate.update` (float
//! sums are added in trace order, so they are bit-identical too).

use crate::record::{Fast, C_SIDE_EFFECTS, C_STEPS, C_TOKENS_CACHED_IN, C_TOKENS_IN, C_TOKENS_OUT, C_TOOL_CALLS, C_TOOL_ERRORS};
use crate::scan::same;
use rustc_hash::FxHashMap;
use std::borrow::Cow;

/// Texts → small ids (from 1), in order of first sight: a linear scan of inline comparisons while
/// there are few (a slice dimension's values in one batch usually are), a hash map past that.
pub struct Interner<'a> {
    pub values: Vec<Cow<'a, str>>,
    map: FxHashMap<Cow<'a, str>, u32>,
}

const LINEAR: usize = 16;

impl<'a> Interner<'a> {
    pub fn new() -> Self {
        Interner { values: Vec::new(), map: FxHashMap::default() }
    }

    #[inline]
    #[allow(clippy::ptr_arg)] // a new value is kept as the Cow it is (borrowed from the batch: no copy)
    pub fn id(&mut self, value: &Cow<'a, str>) -> u32 {
        let bytes = value.as_bytes();
        if self.values.len() <= LINEAR {
            if let Some(i) = self.values.iter().position(|v| same(v.as_bytes(), bytes)) {
                return i as u32 + 1;
            }
        } else if let Some(&id) = self.map.get(value.as_ref()) {
            return id;
        }
        self.values.push(value.clone());
        let id = self.values.len() as u32;
        if self.values.len() > LINEAR {
            if self.map.is_empty() {
                for (i, v) in self.values.iter().enumerate() {
                    self.map.insert(v.clone(), i as u32 + 1);
                }
            } else {
                self.map.insert(value.clone(), id);
            }
        }
        id
    }
}

/// What [`Grouper::add`] interned of a trace, for the join's own tables (`join::Collector`).
pub struct Ids<'g> {
    /// per dimension: 0 when missing, else the value's id
    pub dims: &'g [u64],
    pub release: u32,
    pub model: u32,
}

/// The sketch's bucketing (`monitor.sketch.LogSketch.key`).
pub struct Bucketing {
    pub min_value: f64,
    pub log_gamma: f64,
}

impl Bucketing {
    pub fn new(relative_accuracy: f64, min_value: f64) -> Self {
        let gamma = (1.0 + relative_accuracy) / (1.0 - relative_accuracy);
        Bucketing { min_value, log_gamma: gamma.ln() }
    }
    /// None: the zero bucket.
    pub fn key(&self, value: f64) -> Option<i64> {
        if value < self.min_value {
            None
        } else {
            Some((value.ln() / self.log_gamma).ceil() as i64)
        }
    }
}

/// One group's additive fields; a field is "present" when Python's
/// `Aggregate.update` would have created its key.
pub struct Group<'a> {
    pub dims: Vec<Option<Cow<'a, str>>>,
    pub starts: Vec<i64>,
    pub first: usize,
    pub latest: f64,
    pub traces: u64,
    /// per `Spec::outcomes` index, then `none` last
    pub outcomes: Vec<u64>,
    pub successes: u64,
    pub steps_solved: u64,
    pub tokens_solved: u64,
    pub steps: u64,
    pub tool_calls: u64,
    pub tool_errors: u64,
    pub side_effects: u64,
    pub side_effect_traces: u64,
    pub fees_usd: f64,
    pub has_fees: bool,
    pub harmful_action: u64,
    pub refused: u64,
    pub benign: u64,
    pub refused_benign: u64,
    pub prompt_injection: u64,
    pub latency_count: u64,
    pub latency_sum_seconds: f64,
    /// model → tokens_in, tokens_cached_in, tokens_out (a model appears once it has a nonzero one)
    pub tokens: Vec<(Cow<'a, str>, [u64; 3])>,
    pub buckets: FxHashMap<i64, u64>,
    pub zero: u64,
}

impl<'a> Group<'a> {
    fn new(dims: Vec<Option<Cow<'a, str>>>, starts: Vec<i64>, first: usize, ts: f64, n_outcomes: usize) -> Self {
        Group {
            dims,
            starts,
            first,
            latest: ts,
            traces: 0,
            outcomes: vec![0; n_outcomes + 1],
            successes: 0,
            steps_solved: 0,
            tokens_solved: 0,
            steps: 0,
            tool_calls: 0,
            tool_errors: 0,
            side_effects: 0,
            side_effect_traces: 0,
            fees_usd: 0.0,
            has_fees: false,
            harmful_action: 0,
            refused: 0,
            benign: 0,
            refused_benign: 0,
            prompt_injection: 0,
            latency_count: 0,
            latency_sum_seconds: 0.0,
            tokens: Vec::new(),
            buckets: FxHashMap::default(),
            zero: 0,
        }
    }

    fn update(&mut self, t: &Fast<'a>, bucketing: &Bucketing) {
        if t.ts > self.latest {
            self.latest = t.ts;
        }
        self.traces += 1;
        let none = self.outcomes.len() - 1;
        self.outcomes[t.outcome.unwrap_or(none)] += 1;
        let toks = [t.counts[C_TOKENS_IN], t.counts[C_TOKENS_CACHED_IN], t.counts[C_TOKENS_OUT]];
        if toks.iter().any(|&n| n > 0) {
            match self.tokens.iter_mut().find(|(m, _)| *m == t.model_id) {
                Some((_, sums)) => {
                    for k in 0..3 {
                        sums[k] += toks[k];
                    }
                }
                None => self.tokens.push((t.model_id.clone(), toks)),
            }
        }
        if t.success {
            self.successes += 1;
            self.steps_solved += t.counts[C_STEPS];
            self.tokens_solved += t.counts[C_TOKENS_IN] + t.counts[C_TOKENS_OUT];
        }
        self.steps += t.counts[C_STEPS];
        self.tool_calls += t.counts[C_TOOL_CALLS];
        self.tool_errors += t.counts[C_TOOL_ERRORS];
        self.side_effects += t.counts[C_SIDE_EFFECTS];
        if t.fees_usd != 0.0 {
            self.fees_usd += t.fees_usd;
            self.has_fees = true;
        }
        if t.counts[C_SIDE_EFFECTS] > 0 {
            self.side_effect_traces += 1;
        }
        if t.flags[0] {
            self.harmful_action += 1;
        }
        if t.flags[1] {
            self.refused += 1;
        }
        if t.benign {
            self.benign += 1;
            if t.flags[1] {
                self.refused_benign += 1;
            }
        }
        if t.flags[2] {
            self.prompt_injection += 1;
        }
        if let Some(lat) = t.latency_seconds {
            self.latency_count += 1;
            self.latency_sum_seconds += lat;
            match bucketing.key(lat) {
                Some(k) => *self.buckets.entry(k).or_insert(0) += 1,
                None => self.zero += 1,
            }
        }
    }
}

/// Groups in order of their first trace.
pub struct Grouper<'a> {
    sizes: Vec<i64>,
    n_outcomes: usize,
    bucketing: Bucketing,
    /// per dimension: value → small id (0 = missing); the group key is ids then starts
    interned: Vec<Interner<'a>>,
    index: FxHashMap<Vec<u64>, usize>,
    key: Vec<u64>,
    pub groups: Vec<Group<'a>>,
    /// per part: traces folded and their latest event time
    pub parts: Vec<(usize, Option<f64>)>,
    /// The version tuples seen (release, model_id, 4 hashes), in order of first position: (latest ts, first).
    pub identities: Vec<(Identity<'a>, f64, usize)>,
    /// per component of an identity: its texts' ids; an identity's key is the six ids
    components: [Interner<'a>; 6],
    identity_index: FxHashMap<[u32; 6], usize>,
}

/// release, model_id, scaffold_hash, prompt_hash, tool_schema_hash, config_hash ("" when missing).
pub type Identity<'a> = [Cow<'a, str>; 6];

impl<'a> Grouper<'a> {
    pub fn new(ndims: usize, sizes: Vec<i64>, n_outcomes: usize, bucketing: Bucketing, n_parts: usize) -> Self {
        Grouper {
            sizes,
            n_outcomes,
            bucketing,
            interned: (0..ndims).map(|_| Interner::new()).collect(),
            index: FxHashMap::default(),
            key: Vec::new(),
            groups: Vec::new(),
            parts: vec![(0, None); n_parts],
            identities: Vec::new(),
            components: std::array::from_fn(|_| Interner::new()),
            identity_index: FxHashMap::default(),
        }
    }

    /// `Resolution.start`: floor(ts / size) * size.
    fn start(ts: f64, size: i64) -> i64 {
        (ts / size as f64).floor() as i64 * size
    }

    pub fn add(&mut self, part: usize, position: usize, t: &Fast<'a>) -> Ids<'_> {
        self.key.clear();
        for (table, value) in self.interned.iter_mut().zip(&t.dims) {
            let id = match value {
                None => 0,
                Some(v) => table.id(v) as u64,
            };
            self.key.push(id);
        }
        for &size in &self.sizes {
            self.key.push(Self::start(t.ts, size) as u64);
        }
        let slot = match self.index.get(self.key.as_slice()) {
            Some(&slot) => slot,
            None => {
                let starts = self.sizes.iter().map(|&s| Self::start(t.ts, s)).collect();
                self.groups.push(Group::new(t.dims.clone(), starts, position, t.ts, self.n_outcomes));
                self.index.insert(self.key.clone(), self.groups.len() - 1);
                self.groups.len() - 1
            }
        };
        self.groups[slot].update(t, &self.bucketing);
        let [h0, h1, h2, h3] = &t.hashes;
        let texts = [&t.release, &t.model_id, h0, h1, h2, h3];
        let mut ids = [0u32; 6];
        for ((id, table), text) in ids.iter_mut().zip(&mut self.components).zip(texts) {
            *id = table.id(text);
        }
        match self.identity_index.get(&ids) {
            Some(&i) => {
                if t.ts > self.identities[i].1 {
                    self.identities[i].1 = t.ts;
                }
            }
            None => {
                self.identity_index.insert(ids, self.identities.len());
                self.identities.push((texts.map(Cow::clone), t.ts, position));
            }
        }
        let stats = &mut self.parts[part];
        stats.0 += 1;
        stats.1 = Some(match stats.1 {
            Some(m) if m >= t.ts => m,
            _ => t.ts,
        });
        Ids { dims: &self.key[..self.interned.len()], release: ids[0], model: ids[1] }
    }
}
