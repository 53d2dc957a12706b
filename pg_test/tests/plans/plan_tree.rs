//! Plan trees: EXPLAIN's JSON, the checks made on it (index, order, rows read) and the collector of failures.

use serde_json::Value;

/// Rows an ordered pick may read beyond its LIMIT. No other session holds locks in these tests,
/// so the index scan returns exactly n rows; the slack only absorbs harmless planner variation.
const SLACK: i64 = 2;

/// One plan: what produced it (a label, or the statement text for traced plans) and its root
/// node as EXPLAIN's JSON.
#[derive(Clone)]
pub(crate) struct Explained {
    pub(crate) label: String,
    pub(crate) root: Value,
}

fn walk<'a>(node: &'a Value, out: &mut Vec<&'a Value>) {
    out.push(node);
    if let Some(Value::Array(children)) = node.get("Plans") {
        for child in children {
            walk(child, out);
        }
    }
}

pub(crate) fn node_type(node: &Value) -> &str {
    node.get("Node Type").and_then(Value::as_str).unwrap_or("?")
}

fn index_name(node: &Value) -> Option<&str> {
    node.get("Index Name").and_then(Value::as_str)
}

/// Rows the node returned in all its loops (EXPLAIN ANALYZE reports a per-loop average).
pub(crate) fn actual_rows(node: &Value) -> Option<i64> {
    let rows = node.get("Actual Rows")?.as_f64()?;
    let loops = node.get("Actual Loops").and_then(Value::as_f64).unwrap_or(1.0);
    Some((rows * loops).round() as i64)
}

/// EXPLAIN's text form, roughly: one line per node with index, relation, estimated and actual
/// rows, then the conditions that matter for these checks.
fn render(node: &Value, depth: usize, out: &mut String) {
    let pad = "  ".repeat(depth);
    let s = |k: &str| node.get(k).and_then(Value::as_str);
    out.push_str(&pad);
    out.push_str("-> ");
    if node.get("Parallel Aware").and_then(Value::as_bool) == Some(true) {
        out.push_str("Parallel ");
    }
    out.push_str(node_type(node));
    if let Some(op) = s("Operation") {
        out.push_str(&format!(" ({op})"));
    }
    if let Some(sub) = s("Subplan Name") {
        out.push_str(&format!(" [{sub}]"));
    }
    if let Some(i) = index_name(node) {
        out.push_str(&format!(" using {i}"));
    }
    if let Some(r) = s("Relation Name") {
        out.push_str(&format!(" on {r}"));
    }
    if let Some(est) = node.get("Plan Rows") {
        let cost = node.get("Total Cost").cloned().unwrap_or(Value::Null);
        out.push_str(&format!("  (cost={cost} est rows={est}"));
        if let Some(rows) = node.get("Actual Rows") {
            let loops = node.get("Actual Loops").cloned().unwrap_or(Value::from(1));
            out.push_str(&format!(", actual rows={rows} loops={loops}"));
        }
        out.push(')');
    }
    out.push('\n');
    for key in ["Index Cond", "Recheck Cond", "Filter", "Rows Removed by Filter", "Sort Key",
                "Conflict Arbiter Indexes", "Shared Hit Blocks", "Shared Read Blocks"] {
        if let Some(v) = node.get(key) {
            let v = match v {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            if key == "Rows Removed by Filter" && v == "0" {
                continue;
            }
            out.push_str(&format!("{pad}     {key}: {v}\n"));
        }
    }
    if let Some(Value::Array(children)) = node.get("Plans") {
        for child in children {
            render(child, depth + 1, out);
        }
    }
}

impl Explained {
    pub(crate) fn nodes(&self) -> Vec<&Value> {
        let mut out = Vec::new();
        walk(&self.root, &mut out);
        out
    }

    pub(crate) fn text(&self) -> String {
        let mut out = String::new();
        render(&self.root, 0, &mut out);
        out
    }

    /// A failure message: what was explained, what is wrong, and the plan.
    pub(crate) fn fail(&self, problem: impl std::fmt::Display) -> String {
        format!("{}\n  PROBLEM: {problem}\n  PLAN:\n{}", self.label, self.text())
    }

    pub(crate) fn find(&self, types: &[&str]) -> Option<&Value> {
        self.nodes().into_iter().find(|n| types.contains(&node_type(n)))
    }

    pub(crate) fn scans_of(&self, index: &str, types: &[&str]) -> Vec<&Value> {
        self.nodes()
            .into_iter()
            .filter(|n| types.contains(&node_type(n)) && index_name(n) == Some(index))
            .collect()
    }

    /// The row-locking selection inside the statement (SELECT ... FOR UPDATE SKIP LOCKED on
    /// jq.jobs): the subtree under its LockRows node, wherever the statement puts it (a CTE, an
    /// IN or ARRAY sub-select).
    pub(crate) fn pick(&self) -> Option<Explained> {
        self.nodes()
            .into_iter()
            .find(|n| {
                let mut below = Vec::new();
                walk(n, &mut below);
                node_type(n) == "LockRows" && below.iter().any(|m| reads_jobs(m))
            })
            .map(|n| Explained { label: format!("{}\n  (its FOR UPDATE SKIP LOCKED selection)", self.label),
                                 root: n.clone() })
    }
}

/// The node scans jq.jobs (directly or through one of its indexes).
pub(crate) fn reads_jobs(n: &Value) -> bool {
    n.get("Relation Name").and_then(Value::as_str) == Some("jobs")
        || index_name(n).is_some_and(|i| i.starts_with("jobs_"))
}

pub(crate) const SORTS: &[&str] = &["Sort", "Incremental Sort"];
pub(crate) const ORDERED_SCANS: &[&str] = &["Index Scan", "Index Only Scan"];
pub(crate) const ANY_INDEX_SCAN: &[&str] = &["Index Scan", "Index Only Scan", "Bitmap Index Scan"];

/// An ordered pick (claim, promotion, reaping): the rows come in ORDER BY order straight out of
/// `index` with a plain index scan: no Sort (which would read every matching row first), no
/// Seq Scan and no bitmap scan (a bitmap loses the index order). With `limit`, the scan itself
/// returns at most limit + SLACK rows: it reads about what it hands out, however deep the table.
pub(crate) fn check_ordered_pick(e: &Explained, index: &str, limit: Option<i64>) -> Result<(), String> {
    if let Some(n) = e.find(SORTS) {
        return Err(e.fail(format!("has a {} node: the rows are sorted instead of read in \
                                   order from {index}", node_type(n))));
    }
    // jq.queues is a handful of rows; the claim's gate on it may well be a Seq Scan.
    if let Some(n) = e.nodes().into_iter().find(|n| {
        ["Seq Scan", "Bitmap Heap Scan", "Bitmap Index Scan"].contains(&node_type(n))
            && n.get("Relation Name").and_then(Value::as_str) != Some("queues")
    }) {
        return Err(e.fail(format!("has a {} node; expected only an ordered Index Scan on \
                                   {index}", node_type(n))));
    }
    let scans = e.scans_of(index, ORDERED_SCANS);
    if scans.is_empty() {
        return Err(e.fail(format!("does not read {index} with an Index Scan")));
    }
    if let Some(limit) = limit {
        for scan in scans {
            match actual_rows(scan) {
                Some(rows) if rows <= limit + SLACK => {}
                Some(rows) => {
                    return Err(e.fail(format!("the scan of {index} returned {rows} rows for \
                                               LIMIT {limit} (slack {SLACK})")))
                }
                None => return Err(e.fail("no actual row counts: was it run with ANALYZE?")),
            }
        }
    }
    Ok(())
}

/// The statement reads `index` (an index or bitmap index scan) and never scans the whole of
/// `relation` sequentially.
pub(crate) fn check_uses_index(e: &Explained, index: &str, relation: &str) -> Result<(), String> {
    if let Some(n) = e.nodes().into_iter().find(|n| {
        node_type(n) == "Seq Scan" && n.get("Relation Name").and_then(Value::as_str) == Some(relation)
    }) {
        return Err(e.fail(format!("has a {} on {relation}", node_type(n))));
    }
    if e.scans_of(index, ANY_INDEX_SCAN).is_empty() {
        return Err(e.fail(format!("does not use {index}")));
    }
    Ok(())
}

/// No Seq Scan of jq.jobs anywhere (jq.queues is a handful of rows; a seq scan of it is fine),
/// and at least one index is read.
pub(crate) fn check_indexed(e: &Explained) -> Result<(), String> {
    if let Some(n) = e.nodes().into_iter().find(|n| {
        node_type(n) == "Seq Scan" && n.get("Relation Name").and_then(Value::as_str) == Some("jobs")
    }) {
        return Err(e.fail(format!("has a {} on jobs", node_type(n))));
    }
    if e.find(ANY_INDEX_SCAN).is_none() {
        return Err(e.fail("reads no index"));
    }
    Ok(())
}

/// Every scan of jq.jobs in the statement (index, bitmap or sequential) returns at most
/// `max` + SLACK rows over all its loops: the statement's work is bounded by its batch, not by
/// the backlog behind it. A join that re-reads every due/expired row to find the few it picked
/// fails this even when each scan is on the right index.
pub(crate) fn check_bounded_reads(e: &Explained, max: i64) -> Result<(), String> {
    for n in e.nodes() {
        if !reads_jobs(n) || !["Seq Scan", "Index Scan", "Index Only Scan", "Bitmap Index Scan",
                          "Bitmap Heap Scan"].contains(&node_type(n)) {
            continue;
        }
        let rows = actual_rows(n).ok_or_else(|| e.fail("no actual row counts"))?;
        if rows > max + SLACK {
            let what = index_name(n).map(|i| format!(" using {i}")).unwrap_or_default();
            return Err(e.fail(format!("its {}{what} returned {rows} rows for a batch of {max}: the \
                                       statement reads more than its batch", node_type(n))));
        }
    }
    Ok(())
}

/// Collects every failed check of a test, so that one run reports all of them.
#[derive(Default)]
pub(crate) struct Failures(pub(crate) Vec<String>);

impl Failures {
    pub(crate) fn check(&mut self, r: Result<(), String>) {
        if let Err(msg) = r {
            self.0.push(msg);
        }
    }

    pub(crate) fn expect(&mut self, cond: bool, msg: impl FnOnce() -> String) {
        if !cond {
            self.0.push(msg());
        }
    }

    pub(crate) fn finish(self) {
        if !self.0.is_empty() {
            panic!("{} plan check(s) failed:\n\n{}", self.0.len(),
                   self.0.join("\n------------------------------------------------------------\n"));
        }
    }
}

/// No traced statement may carry a disabled node's cost (PostgreSQL adds 10^10 to a plan node a
/// function's `enable_* = off` forbids but that has no alternative). Besides being a plan
/// PostgreSQL was told to avoid, such a cost is above jit_above_cost and the jit_optimize and
/// jit_inline thresholds, so the statement was JIT-compiled with inlining on every call: found
/// when jq.complete_many's one-row join of its `keyed` CTE became a disabled nested loop and each
/// call took ~200 ms (31 functions compiled).
pub(crate) fn expect_no_disabled_cost(f: &mut Failures, plans: &[Explained], context: &str) {
    for stmt in plans {
        let cost = stmt.root.get("Total Cost").and_then(Value::as_f64).unwrap_or(0.0);
        f.expect(cost < 1e9, || stmt.fail(format!("{context}: total cost {cost:e}, a disabled plan node (and a JIT compile per call)")));
    }
}
