//! The arithmetic of the held aggregates (`held.rs`): Python's `Aggregate.copy` and `merge` on
//! aggregates held natively, and the sums, windows and totals of a placement. See `held.rs` for
//! what is guaranteed (Python's additions in Python's order, refusals).

use rustc_hash::FxHashMap;

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
    pub fn get(&self, name: &str) -> Option<u32> {
        self.ids.get(name).copied()
    }

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

/// The sums of `plan` over `held` (ids past `held` are the plan's own sums, in order), then the
/// windows and totals: `(slot, id)` pairs in placement order.
pub fn place(held: &[Agg], names: usize, plan: &[usize], windows: &[usize], n_windows: usize, totals: &[usize],
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
    fn an_int_added_to_a_float_is_refused() {
        let a = agg(&[(0, Num::Float(1.0))], &[], 0);
        let b = agg(&[(0, Num::Int(1))], &[], 0);
        assert!(Index::new(1).sum([&a, &b].into_iter()).is_err());
    }
}
