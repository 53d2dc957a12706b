//! Least privilege (docs/security.md, sql/grants.sql): the three roles, per-queue grants,
//! SECURITY DEFINER functions with a pinned search_path, and the low-privilege trigger attack (see below).
//!
//! The matrix tests take every function, table, view and sequence of schema jq from the catalog,
//! not from a list kept here: a new function fails them until it is classified below, and a new
//! function that takes a `caller_ticket` (names a queue) fails until it has a call in
//! [`queue_call`] that proves its per-queue check.
//!
//! Negative controls (each seen failing; run with `JQ_TEST_BREAK=<name>`):
//! - `no_queue_check`: jq.pause without its per-queue check; the behaviour matrix fails.
//! - `invoker_complete`: jq.complete SECURITY INVOKER; the catalog matrix fails.
//! - `public_execute`: EXECUTE on jq.enqueue granted to PUBLIC; the catalog matrix fails.
//! - `unpinned_search_path`: jq.enqueue without its search_path; the trigger attack runs as the owner.
//! - `leaky_view`: jq.queue_stats without security_barrier; a reader's function sees every queue.
//! - `unqualified_operator`, `unqualified_type`, `unqualified_may`, `unqualified_complete`,
//!   `unpinned_callees` (the last: two callees without their own search_path):
//!   jq.claim, jq._may (which jq.claim reaches through jq._authorize_queue) or jq.complete with one
//!   operator or one variable's type left to the caller's search_path; the hostile
//!   search_path test fails.

mod catalog;
mod grant_changes;
mod queue_grants;
mod search_path;

use jq_pg_test::Client;

/// Cluster-wide roles made for one test, dropped after its database.
struct Roles {
    names: Vec<String>,
}

impl Roles {
    fn new(c: &mut Client, tag: &str, specs: &[(&str, &str)]) -> Roles {
        let mut names = Vec::new();
        for (name, options) in specs {
            let full = format!("jqt_{tag}_{}_{name}", std::process::id());
            c.batch_execute(&format!("DROP ROLE IF EXISTS {full}")).unwrap();
            c.batch_execute(&format!("CREATE ROLE {full} {options}")).unwrap();
            names.push(full);
        }
        Roles { names }
    }

    fn get(&self, short: &str) -> &str {
        self.names.iter().find(|n| n.ends_with(&format!("_{short}"))).expect("role")
    }
}

impl Drop for Roles {
    fn drop(&mut self) {
        let mut a = jq_pg_test::admin();
        for n in &self.names {
            let _ = a.batch_execute(&format!("DROP ROLE IF EXISTS {n}"));
        }
    }
}
