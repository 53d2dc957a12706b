//! Plans of `jq.jobs` (and its history tables) made while it is small stay index paths after it grows.
//!
//! A job table swings from a few rows to millions and back within minutes, and a plan is kept
//! far longer: plpgsql caches each statement's plan for the life of the connection (until
//! ANALYZE or VACUUM of the table invalidates it), and the background worker keeps one
//! connection for days. A plan made on a table of a page or two finds a job by id with a
//! sequential scan, which costs less there than an index lookup; after a burst of jobs every
//! call of that connection then scans the whole table until autovacuum analyzes it
//! (docs/BENCHMARKS.md; pg_test/tests/plans/growth.rs checks the plans). Pinning
//! `SET enable_seqscan = off` on the functions that act on jobs is no answer: a function with
//! any `SET` clause makes every call save and restore the settings (PostgreSQL 15 walks all of
//! them when it returns), a cost the hot path measurably pays (docs/BENCHMARKS.md).
//!
//! Instead, jq's `get_relation_info_hook` tells the planner that `jq.jobs` has at least
//! [`crate::gucs::PLAN_MIN_PAGES`] pages (and as many rows as that many pages hold at the
//! table's density, or 50 per page when it has none): the cost model of a table of that size
//! prefers an index lookup by id or by a partial index over reading the table, whatever the
//! table's size when the plan was made. Only planning pays (two or three syscache lookups per
//! relation planned); executing a cached plan costs nothing. Plans of a table that really is larger are
//! unchanged. The default, 1,000 pages (8 MB), stays below `min_parallel_table_scan_size`, so a
//! small table is never given a parallel scan. `jq.plan_min_pages = 0` turns it off.
//!
//! The hook is installed when the library is loaded: at server start with
//! `shared_preload_libraries = 'jq'` (every backend, the background worker included), else at a
//! backend's first call of one of jq's C functions, after which plans are made with it.

use pgrx::pg_sys;
use pgrx::prelude::*;

static mut PREV_GET_RELATION_INFO: pg_sys::get_relation_info_hook_type = None;

/// Rows per page assumed when the table has no rows to measure its density by (a jq.jobs row
/// with a small payload is 150–200 bytes).
const ROWS_PER_PAGE: f64 = 50.0;

/// Installs the hook, chaining the previous one. Called once from `_PG_init`.
pub fn init() {
    // SAFETY: _PG_init runs single-threaded; the previous hook is kept and called first.
    unsafe {
        PREV_GET_RELATION_INFO = pg_sys::get_relation_info_hook;
        pg_sys::get_relation_info_hook = Some(get_relation_info);
    }
}

/// Whether `relid` is `jq.jobs` or one of its history tables (`jq.jobs_done_N`,
/// `jq.jobs_dead_N`, sql/schema.sql), which swing from empty to millions of rows as well:
/// syscache lookups by OID and name, no catalog scan.
fn is_jobs(relid: pg_sys::Oid) -> bool {
    // SAFETY: catalog lookups inside the planner's transaction; missing_ok.
    unsafe {
        let nsp = pg_sys::get_rel_namespace(relid);
        if nsp == pg_sys::InvalidOid || nsp != pg_sys::get_namespace_oid(c"jq".as_ptr(), true) {
            return false;
        }
        let name = pg_sys::get_rel_name(relid);
        if name.is_null() {
            return false;
        }
        let bytes = std::ffi::CStr::from_ptr(name).to_bytes();
        let jobs = bytes == b"jobs" || bytes.starts_with(b"jobs_done_") || bytes.starts_with(b"jobs_dead_");
        pg_sys::pfree(name.cast());
        jobs
    }
}

/// The pages and rows the planner is told for a table of `pages` pages and `tuples` rows when it
/// must assume at least `min_pages` pages: unchanged if the table is at least that large, else
/// `min_pages` at the table's density (or [`ROWS_PER_PAGE`]).
fn floor_size(pages: u32, tuples: f64, min_pages: u32) -> (u32, f64) {
    if pages >= min_pages {
        return (pages, tuples);
    }
    let density = if pages > 0 && tuples > 0.0 { tuples / f64::from(pages) } else { ROWS_PER_PAGE };
    (min_pages, (f64::from(min_pages) * density).max(tuples))
}

#[pg_guard]
unsafe extern "C-unwind" fn get_relation_info(
    root: *mut pg_sys::PlannerInfo,
    relid: pg_sys::Oid,
    inhparent: bool,
    rel: *mut pg_sys::RelOptInfo,
) {
    // SAFETY: PostgreSQL's hook contract: valid pointers for the duration of the call.
    unsafe {
        if let Some(prev) = PREV_GET_RELATION_INFO {
            prev(root, relid, inhparent, rel);
        }
        let min_pages = crate::gucs::PLAN_MIN_PAGES.get();
        if min_pages <= 0 || rel.is_null() || !is_jobs(relid) {
            return;
        }
        let (pages, tuples) = floor_size((*rel).pages, (*rel).tuples, min_pages as u32);
        (*rel).pages = pages;
        (*rel).tuples = tuples;
    }
}

#[cfg(test)]
mod tests {
    use super::floor_size;

    #[test]
    fn a_small_table_is_planned_at_the_minimum_at_its_density() {
        assert_eq!(floor_size(2, 40.0, 1000), (1000, 20_000.0));
        assert_eq!(floor_size(0, 0.0, 1000), (1000, 50_000.0)); // empty: 50 rows per page
        assert_eq!(floor_size(10, 0.0, 1000), (1000, 50_000.0));
    }

    #[test]
    fn a_large_table_is_planned_as_it_is() {
        assert_eq!(floor_size(1000, 7.0, 1000), (1000, 7.0));
        assert_eq!(floor_size(50_000, 2e6, 1000), (50_000, 2e6));
    }
}
