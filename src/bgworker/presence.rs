//! Which databases have jq: the shared-memory side of what the launcher knows, so that only
//! databases with jq take a slot ([`super::slots`]) while the launcher connects to each other
//! database once, not every few seconds.
//!
//! How the launcher learns whether a database has jq, and why it stays right:
//!
//! * **A probe, once.** A database the launcher knows nothing about (new, just listed in
//!   `jq.databases`, or every database after a server start) gets a probe: a short-lived
//!   background worker that connects, looks for jq in `pg_extension`, writes the answer into
//!   one of [`PROBES`] mailboxes and exits. At most [`PROBES`] run at once, so a cluster of
//!   thousands of databases costs that many worker processes for a few seconds, not one per
//!   database. The launcher keeps the answer in its own memory (src/bgworker/census.rs): a
//!   database without jq takes no slot and no process from then on.
//! * **Told when it changes.** Whatever makes a database gain or lose jq is a transaction that
//!   commits in that database: `CREATE EXTENSION jq` (and `ALTER EXTENSION jq UPDATE` from a version the workers cannot
//!   run) call `jq._launcher_wake()`; jq's utility hook sees `DROP EXTENSION jq` and
//!   `COMMIT PREPARED` (whose transaction may have created it). At commit the backend sets the
//!   database's bit in the change filter ([`Presence::mark_changed`]) and wakes the launcher,
//!   which forgets what it knew about the databases of the set bits and probes them again
//!   (within a second of the commit). A served database's own worker also notices a dropped jq
//!   at its next pass.
//! * **No stale answer.** A probe (or a worker that finds jq gone) reads
//!   [`Presence::generation`] before its look and reports it with its answer; a commit bumps the generation before it sets its bit; the launcher takes the probes'
//!   answers before it takes the bits. So a look that missed a `CREATE EXTENSION` committing at
//!   the same moment is either discarded (the generation moved before the launcher took it) or
//!   forgotten again by the bit the launcher takes right after it.
//! * **A backstop.** Each answer is looked at again after [`super::census::BACKSTOP_SECS`], in case
//!   a change came by a path none of the above sees (`DROP SCHEMA jq CASCADE`, say). A probe
//!   that could not answer (the database refused the connection) is retried after
//!   [`super::RECHECK_SECS`]. A restarted launcher remembers nothing and probes every database
//!   once again.
//!
//! The launcher also publishes here which databases with jq it cannot serve (all slots taken),
//! for `jq.status()` ([`Presence::unserved`]).
//!
//! Checked by `a_database_with_jq_created_last_is_served_past_many_without_jq` and
//! `databases_with_jq_past_the_slots_are_warned_once_and_named_in_status` in
//! pg_test/tests/bgworker/launcher.rs, and the stale-answer rule by the unit tests of census.rs.

use crate::shmem::{Area, Zeroable};
use crate::spin::SpinCell;
use std::sync::atomic::{AtomicU64, Ordering};

/// Probes that may run at once.
pub const PROBES: usize = 2;
/// Bits of the change filter (by database oid).
pub const CHANGED_BITS: usize = 1024;
/// Unserved databases listed by oid for `jq.status()` (the count is exact beyond that).
pub const UNSERVED_LISTED: usize = 64;

/// The state of a probe mailbox.
#[repr(u32)]
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub enum ProbeState {
    /// Unused (zero: a new area's mailboxes are free).
    #[default]
    Free = 0,
    /// The launcher started a probe of `dboid`; no answer yet.
    Launched = 1,
    /// The probe answered (`has_jq`, `generation`).
    Answered = 2,
}

// SAFETY: 0 is `ProbeState::Free`.
unsafe impl Zeroable for ProbeState {}

/// One probe mailbox.
#[derive(Clone, Copy, Default, Debug)]
pub struct Probe {
    pub dboid: u32,
    pub state: ProbeState,
    pub has_jq: bool,
    /// [`Presence::generation`] read before the probe's look.
    pub generation: u64,
    /// When the launcher started the probe (µs since 2000-01-01).
    pub launched_at: i64,
}

// SAFETY: integers, a bool and a zeroable enum.
unsafe impl Zeroable for Probe {}

/// Databases with jq that have no slot, as the launcher last counted them.
#[derive(Clone, Copy)]
pub struct Unserved {
    pub count: u32,
    /// How many of `oids` are set (at most [`UNSERVED_LISTED`]).
    pub listed: u32,
    pub oids: [u32; UNSERVED_LISTED],
}

// SAFETY: integers.
unsafe impl Zeroable for Unserved {}

impl Unserved {
    /// The listed oids.
    pub fn oids(&self) -> &[u32] {
        &self.oids[..(self.listed as usize).min(UNSERVED_LISTED)]
    }
}

/// The shared part of the launcher's knowledge of which databases have jq.
#[repr(C)]
pub struct Presence {
    /// Bumped by every commit that may have created or dropped jq somewhere, before its bit.
    generation: AtomicU64,
    /// The change filter: databases (by oid bit) where such a commit happened since the launcher
    /// last took the bits.
    changed: [AtomicU64; CHANGED_BITS / 64],
    probes: [SpinCell<Probe>; PROBES],
    unserved: SpinCell<Unserved>,
}

// SAFETY: atomics and spin cells of zeroable records.
unsafe impl Zeroable for Presence {}

/// The area; attached by [`super::init`].
pub static AREA: Area<Presence> = Area::new(c"jq presence");

/// The area, or `None` when jq was not preloaded.
pub fn get() -> Option<&'static Presence> {
    AREA.get()
}

/// The bit of database `dboid` in the change filter (oids are handed out in sequence, so
/// consecutive databases get consecutive bits).
pub fn changed_bit(dboid: u32) -> usize {
    dboid as usize % CHANGED_BITS
}

impl Presence {
    /// The generation: moves whenever a commit may have created or dropped jq.
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::SeqCst)
    }

    /// Called after the commit of a transaction that may have created or dropped jq in
    /// `dboid`: bumps the generation, then sets the database's bit (this order: see the module
    /// documentation).
    pub fn mark_changed(&self, dboid: u32) {
        self.generation.fetch_add(1, Ordering::SeqCst);
        let bit = changed_bit(dboid);
        self.changed[bit / 64].fetch_or(1 << (bit % 64), Ordering::SeqCst);
    }

    /// Takes (and clears) the change filter.
    pub fn take_changed(&self) -> [u64; CHANGED_BITS / 64] {
        std::array::from_fn(|i| self.changed[i].swap(0, Ordering::SeqCst))
    }

    /// A copy of mailbox `i`.
    pub fn probe(&self, i: usize) -> Probe {
        self.probes[i].with(|p| *p)
    }

    /// Mailbox `i` (free) now waits for a probe of `dboid` started at `now`.
    pub fn launch(&self, i: usize, dboid: u32, now: i64) {
        self.probes[i].with(|p| {
            *p = Probe { dboid, state: ProbeState::Launched, has_jq: false, generation: 0, launched_at: now }
        });
    }

    /// Frees mailbox `i`.
    pub fn free(&self, i: usize) {
        self.probes[i].with(|p| *p = Probe::default());
    }

    /// The probe of `dboid` answers in mailbox `i`; ignored unless the mailbox still waits for
    /// that database (a probe of an earlier launcher whose mailbox was given to another one).
    pub fn answer(&self, i: usize, dboid: u32, has_jq: bool, generation: u64) {
        if i >= PROBES {
            return;
        }
        self.probes[i].with(|p| {
            if p.dboid == dboid && p.state == ProbeState::Launched {
                p.state = ProbeState::Answered;
                p.has_jq = has_jq;
                p.generation = generation;
            }
        });
    }

    /// Whether a probe of `dboid` is under way.
    pub fn probing(&self, dboid: u32) -> bool {
        (0..PROBES).any(|i| self.probes[i].with(|p| p.state != ProbeState::Free && p.dboid == dboid))
    }

    /// Publishes the databases with jq that have no slot (`count` of them, the first
    /// [`UNSERVED_LISTED`] in `oids`).
    pub fn publish_unserved(&self, count: usize, oids: &[u32]) {
        self.unserved.with(|u| {
            u.count = count as u32;
            u.listed = oids.len().min(UNSERVED_LISTED) as u32;
            for (slot, oid) in u.oids.iter_mut().zip(oids) {
                *slot = *oid;
            }
        });
    }

    /// The databases with jq that have no slot, as last published.
    pub fn unserved(&self) -> Unserved {
        self.unserved.with(|u| *u)
    }
}
