//! `NOTIFY jq_ready, '<queue>'`: at most one per queue per maintenance pass, for the queues that
//! got claimable jobs. Committing transactions mark the queues' bits in their database's ready
//! filter ([`mark_ready`], from src/wakeup.rs at commit); the maintenance worker takes the bits
//! and notifies the queues whose bit is set ([`notify_ready_queues`]). Two queues that share a
//! bit are both notified (a spurious NOTIFY, never a missed one).

use super::slots::{self, READY_BITS};
use super::worker::{in_transaction, Duty};
use crate::queue_hash::QueueHash;
use crate::{backend, gucs};
use pgrx::prelude::*;
use std::sync::atomic::Ordering;

/// The bit of queue `hash` in the ready filter (what `jq._queue_bit` returns).
pub fn queue_bit(hash: QueueHash) -> i32 {
    hash.bit(READY_BITS) as i32
}

/// Marks the queues `hashes` in the ready filter of this database (no-op when the database has
/// no slot or jq is not preloaded).
pub fn mark_ready(hashes: impl Iterator<Item = QueueHash>) {
    let Some(slot) = slots::get().and_then(|sh| sh.slot_of_cached(backend::my_database())) else {
        return;
    };
    for h in hashes {
        let bit = h.bit(READY_BITS);
        slot.ready[bit / 64].fetch_or(1 << (bit % 64), Ordering::Relaxed);
    }
}

/// Takes (and clears) the ready filter of this database: the bit numbers of queues that got
/// claimable jobs since the last call.
fn take_ready_bits() -> Vec<i32> {
    let Some(slot) = slots::get().and_then(|sh| sh.slot_of(backend::my_database())) else {
        return Vec::new();
    };
    let mut bits = Vec::new();
    for (i, word) in slot.ready.iter().enumerate() {
        let mut v = word.swap(0, Ordering::Relaxed);
        while v != 0 {
            let b = v.trailing_zeros() as usize;
            bits.push((i * 64 + b) as i32);
            v &= v - 1;
        }
    }
    bits
}

/// Sends one `NOTIFY jq_ready` per queue whose bit was set since the last call (unless
/// `jq.notify` is off), in its own transaction; `done` counts the notifications.
pub fn notify_ready_queues() -> Duty {
    let bits = take_ready_bits();
    if bits.is_empty() || !gucs::NOTIFY.get() {
        return Duty { done: 0, error: None };
    }
    let r = in_transaction(|| {
        Spi::get_one_with_args::<i64>(
            "SELECT count(pg_catalog.pg_notify('jq_ready', q.name))::bigint FROM jq.queues q \
             WHERE jq._queue_bit(q.name) = ANY ($1)",
            &[bits.into()],
        )
    });
    match r {
        Ok(Ok(n)) => Duty { done: n.unwrap_or(0), error: None },
        Ok(Err(e)) => Duty { done: 0, error: Some(e.to_string()) },
        Err(msg) => Duty { done: 0, error: Some(msg) },
    }
}
