//! The size of a table for `jq.table_health`, without waiting for a lock.
//!
//! `pg_total_relation_size` takes an ACCESS SHARE lock on the table, each of its indexes and its
//! TOAST table, and waits for each: behind an ACCESS EXCLUSIVE lock that another session holds
//! (an `ALTER TABLE`, a `TRUNCATE`, a `REINDEX`), or has only requested while it waits itself
//! behind a long reader (PostgreSQL grants no lock that conflicts with a queued request). A
//! monitor's scrape of `jq.table_health` then hung for as long as that reader lived.
//! [`_table_bytes`] takes each of those locks only if it is free at once, measures while it holds
//! them, and releases them before it returns; NULL when one is not free. Checked by
//! `pg_test/tests/observability.rs`, `table_health_never_waits_for_a_lock`.

use pgrx::pg_sys;
use pgrx::prelude::*;

const SHARE: pg_sys::LOCKMODE = pg_sys::AccessShareLock as pg_sys::LOCKMODE;

/// The ACCESS SHARE locks this call took, released by [`Locks::release`]. On an error the
/// transaction's abort releases them (no `Drop`: nothing may call into PostgreSQL while a Rust
/// panic unwinds).
struct Locks(Vec<pg_sys::Oid>);

impl Locks {
    /// Takes ACCESS SHARE on `oid` if no other session holds or awaits a conflicting lock.
    fn try_take(&mut self, oid: pg_sys::Oid) -> bool {
        // SAFETY: a lock-manager call with a valid mode inside a transaction; it never waits.
        let taken = unsafe { pg_sys::ConditionalLockRelationOid(oid, SHARE) };
        if taken {
            self.0.push(oid);
        }
        taken
    }

    /// Takes the locks of `oid`'s indexes (`rel` is `oid`, open and locked by this call).
    ///
    /// # Safety
    /// `rel` must be an open relation this transaction holds a lock on.
    unsafe fn try_take_indexes(&mut self, rel: pg_sys::Relation) -> bool {
        let list = unsafe { pg_sys::RelationGetIndexList(rel) };
        let n = if list.is_null() { 0 } else { unsafe { (*list).length } };
        // SAFETY: an OID list of n cells (pg_list.h); read before it is freed.
        let indexes: Vec<pg_sys::Oid> = (0..n as usize).map(|i| unsafe { (*(*list).elements.add(i)).oid_value }).collect();
        if !list.is_null() {
            unsafe { pg_sys::list_free(list) };
        }
        indexes.into_iter().all(|i| self.try_take(i))
    }

    /// Takes the locks `pg_total_relation_size(oid)` takes: the table, its indexes, its TOAST
    /// table and the TOAST table's index. False when one is not free, or `oid` is no relation.
    fn try_take_relation(&mut self, oid: pg_sys::Oid) -> bool {
        if !self.try_take(oid) {
            return false;
        }
        // SAFETY: locked above, so it cannot be dropped meanwhile; NULL if it was before.
        let rel = unsafe { pg_sys::try_relation_open(oid, pg_sys::NoLock as pg_sys::LOCKMODE) };
        if rel.is_null() {
            return false;
        }
        // SAFETY: rel is open and locked; rd_rel is its pg_class row.
        let toast = unsafe { (*(*rel).rd_rel).reltoastrelid };
        let ok = unsafe { self.try_take_indexes(rel) };
        unsafe { pg_sys::relation_close(rel, pg_sys::NoLock as pg_sys::LOCKMODE) };
        ok && (toast == pg_sys::InvalidOid || self.try_take_relation(toast))
    }

    fn release(self) {
        for oid in self.0.into_iter().rev() {
            // SAFETY: each was taken by try_take in this transaction.
            unsafe { pg_sys::UnlockRelationOid(oid, SHARE) };
        }
    }
}

/// `pg_total_relation_size(rel)` (bytes: table, indexes and TOAST), or NULL when another
/// session holds or awaits a lock that conflicts with reading the size of the table, one of
/// its indexes or its TOAST table, or when `rel` is no relation. Never waits for a lock; holds
/// none when it returns (the caller's own locks stay). Used by the view `jq.table_health`.
#[pg_extern(create_or_replace, volatile, parallel_unsafe)]
fn _table_bytes(rel: pg_sys::Oid) -> Option<i64> {
    let mut locks = Locks(Vec::new());
    let bytes = if locks.try_take_relation(rel) {
        Spi::get_one_with_args::<i64>("SELECT pg_catalog.pg_total_relation_size($1)", &[rel.into()]).ok().flatten()
    } else {
        None
    };
    locks.release();
    bytes
}
