//! Progress a handler reports ([`crate::Job::set_progress`]): the latest value waits here until
//! the heartbeat task sends it with the job's next `jq.heartbeat` (src/worker/heartbeat.rs),
//! at once when asked ([`crate::Job::set_progress_now`]). Only the latest value is kept: a
//! newer one replaces one not yet sent.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use serde_json::Value;
use tokio::sync::Notify;

/// One job's progress on its way to the server, shared by its [`crate::Job`] and the
/// worker's record of the job.
pub(crate) struct ProgressSlot {
    pending: Mutex<Option<Value>>,
    urgent: AtomicBool,
    /// Wakes the heartbeat task for an urgent report.
    wake: Arc<Notify>,
}

impl ProgressSlot {
    /// An empty slot whose urgent reports wake `wake`.
    pub(crate) fn new(wake: Arc<Notify>) -> ProgressSlot {
        ProgressSlot { pending: Mutex::new(None), urgent: AtomicBool::new(false), wake }
    }

    /// Keeps `value` for the next heartbeat (`now`: make that heartbeat due at once).
    pub(crate) fn set(&self, value: Value, now: bool) {
        *self.pending.lock().unwrap() = Some(value);
        if now {
            self.urgent.store(true, Ordering::SeqCst);
            self.wake.notify_one();
        }
    }

    /// Whether a report waits to be sent at once.
    pub(crate) fn urgent(&self) -> bool {
        self.urgent.load(Ordering::SeqCst)
    }

    /// The value to send now, if any (the slot is then empty).
    pub(crate) fn take(&self) -> Option<Value> {
        self.urgent.store(false, Ordering::SeqCst);
        self.pending.lock().unwrap().take()
    }

    /// Puts back a value whose heartbeat failed, unless a newer one arrived meanwhile.
    pub(crate) fn restore(&self, value: Value) {
        let mut p = self.pending.lock().unwrap();
        if p.is_none() {
            *p = Some(value);
        }
    }
}

impl std::fmt::Debug for ProgressSlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProgressSlot").field("pending", &self.pending.lock().unwrap()).field("urgent", &self.urgent()).finish()
    }
}
