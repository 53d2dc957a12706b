//! The launcher's own memory of which databases have jq (how it learns: [`super::presence`]),
//! and its one warning when databases with jq are left without a slot.
//!
//! Kept in the launcher's process memory, for any number of databases: a restarted launcher
//! starts empty and probes every database once again.

use super::presence::{changed_bit, Presence, CHANGED_BITS};
use super::process::USECS_PER_SEC;
use super::RECHECK_SECS;
use pgrx::prelude::*;
use std::collections::HashMap;

/// Seconds after which an answer is checked again by a new probe (the backstop for a change
/// that no commit reported).
pub const BACKSTOP_SECS: i64 = 600;
/// While probes are still finding databases, a changed count of unserved databases is logged
/// once it has stayed unlogged this long (seconds); once every listed database is known, at once.
const UNSETTLED_WARN_SECS: i64 = 60;

/// What the launcher knows about one database.
#[derive(Clone, Copy, Debug)]
enum Known {
    /// jq is installed (looked at `at`).
    HasJq { at: i64 },
    /// jq is not installed (looked at `at`).
    NoJq { at: i64 },
    /// The probe could not answer (no connection); try again at `retry_at`.
    Unreachable { retry_at: i64 },
}

/// The launcher's memory of the databases and of its last warning.
#[derive(Default)]
pub struct Census {
    known: HashMap<u32, Known>,
    /// The unserved count last logged.
    warned: usize,
    /// Since when the unserved count differs from `warned` (None: it does not).
    differs_since: Option<i64>,
}

impl Census {
    /// Records a look at `dboid` (by a probe or by its worker) made at `generation`: kept only
    /// if no commit may have changed jq's presence since (else the database is probed again).
    pub fn record(&mut self, presence: &Presence, dboid: u32, has_jq: bool, generation: u64, now: i64) {
        if generation != presence.generation() {
            self.known.remove(&dboid);
        } else if has_jq {
            self.known.insert(dboid, Known::HasJq { at: now });
        } else {
            self.known.insert(dboid, Known::NoJq { at: now });
        }
    }

    /// A probe of `dboid` ended without an answer.
    pub fn unreachable(&mut self, dboid: u32, now: i64) {
        self.known.insert(dboid, Known::Unreachable { retry_at: now + RECHECK_SECS * USECS_PER_SEC });
    }

    /// Forgets the databases whose bit is set in `changed` (taken from the change filter).
    pub fn forget_changed(&mut self, changed: &[u64; CHANGED_BITS / 64]) {
        if changed.iter().all(|w| *w == 0) {
            return;
        }
        self.known.retain(|oid, _| {
            let bit = changed_bit(*oid);
            changed[bit / 64] & (1 << (bit % 64)) == 0
        });
    }

    /// Forgets the databases for which `listed` is false (dropped, or out of `jq.databases`).
    pub fn retain(&mut self, listed: impl Fn(u32) -> bool) {
        self.known.retain(|oid, _| listed(*oid));
    }

    /// Whether anything is known about `dboid` (possibly that a probe could not reach it).
    pub fn known(&self, dboid: u32) -> bool {
        self.known.contains_key(&dboid)
    }

    /// Whether `dboid` is known to have jq.
    pub fn has_jq(&self, dboid: u32) -> bool {
        matches!(self.known.get(&dboid), Some(Known::HasJq { .. }))
    }

    /// Whether `dboid` needs a probe: unknown, unreachable until now, or looked at longer than
    /// [`BACKSTOP_SECS`] ago.
    pub fn probe_due(&self, dboid: u32, now: i64) -> bool {
        match self.known.get(&dboid) {
            None => true,
            Some(Known::Unreachable { retry_at }) => now >= *retry_at,
            Some(Known::HasJq { at } | Known::NoJq { at }) => now - at >= BACKSTOP_SECS * USECS_PER_SEC,
        }
    }

    /// Logs the number of databases with jq left without a slot when it changed: once per
    /// change, not once per pass. While probes are still finding databases (`settled` false, e.g.
    /// right after a server start) the count may climb one by one; it is logged when everything
    /// is known, or once it has differed for [`UNSETTLED_WARN_SECS`] s.
    pub fn warn_unserved(&mut self, unserved: usize, slots: usize, settled: bool, now: i64) {
        if unserved == self.warned {
            self.differs_since = None;
            return;
        }
        let since = *self.differs_since.get_or_insert(now);
        if !settled && now - since < UNSETTLED_WARN_SECS * USECS_PER_SEC {
            return;
        }
        if unserved > 0 {
            let n = if unserved == 1 { "1 database with jq is".to_string() } else { format!("{unserved} databases with jq are") };
            warning!(
                "jq launcher: {n} not served (no maintenance worker): all {slots} slots of \
                 jq.max_databases are taken; raise jq.max_databases (takes a server restart) or list \
                 fewer databases in jq.databases; jq.status() names them"
            );
        } else {
            log!("jq launcher: every database with jq has a maintenance worker again");
        }
        self.warned = unserved;
        self.differs_since = None;
    }
}

#[cfg(test)]
mod unit {
    use super::*;

    fn presence() -> Box<Presence> {
        // SAFETY: Presence is Zeroable (what a new shared-memory area holds).
        Box::new(unsafe { std::mem::zeroed() })
    }

    const S: i64 = USECS_PER_SEC;

    #[test]
    fn an_answer_made_stale_by_a_commit_is_dropped() {
        let p = presence();
        let mut c = Census::default();
        let before = p.generation();
        p.mark_changed(7); // CREATE EXTENSION jq committed in database 7 during the look
        c.record(&p, 7, false, before, 100 * S);
        assert!(!c.known(7) && c.probe_due(7, 100 * S));
        c.record(&p, 7, true, p.generation(), 100 * S);
        assert!(c.has_jq(7) && !c.probe_due(7, 101 * S));
    }

    #[test]
    fn a_change_after_the_answer_forgets_it_and_only_it() {
        let p = presence();
        let mut c = Census::default();
        for oid in [7, 8, 7 + CHANGED_BITS as u32] {
            c.record(&p, oid, false, p.generation(), 0);
        }
        p.mark_changed(7);
        c.forget_changed(&p.take_changed());
        // 7 and the database sharing its bit are probed again; 8 is not.
        assert!(!c.known(7) && !c.known(7 + CHANGED_BITS as u32) && c.known(8));
        assert!(p.take_changed().iter().all(|w| *w == 0));
    }

    #[test]
    fn answers_are_rechecked_after_the_backstop_and_unreachable_ones_sooner() {
        let p = presence();
        let mut c = Census::default();
        c.record(&p, 7, false, p.generation(), 0);
        c.unreachable(8, 0);
        assert!(!c.probe_due(7, (BACKSTOP_SECS - 1) * S) && c.probe_due(7, BACKSTOP_SECS * S));
        assert!(!c.probe_due(8, (RECHECK_SECS - 1) * S) && c.probe_due(8, RECHECK_SECS * S));
        c.retain(|oid| oid == 8);
        assert!(!c.known(7) && c.known(8));
    }
}
