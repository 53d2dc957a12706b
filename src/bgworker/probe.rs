//! A probe: a short-lived background worker that connects to one database, tells the launcher
//! whether jq is installed there and exits ([`super::presence`] says when and why). Its
//! argument packs the database oid and the mailbox it answers in.

use super::presence::{self, PROBES};
use super::process::die_on_sigterm;
use super::worker::extension_ready;
use crate::backend;
use pgrx::bgworkers::{BackgroundWorker, BackgroundWorkerBuilder, BgWorkerStartTime, SignalWakeFlags};
use pgrx::pg_sys;
use pgrx::prelude::*;

/// The worker that probes `dboid` (named `name`) and answers in mailbox `mailbox`.
pub fn builder(dboid: u32, name: &str, mailbox: usize) -> BackgroundWorkerBuilder {
    let title = format!("jq probe {name}");
    BackgroundWorkerBuilder::new(&title[..title.len().min(90)])
        .set_type("jq probe")
        .set_library("jq")
        .set_function("jq_probe_main")
        .set_argument(Some(pg_sys::Datum::from(((mailbox as u64) << 32) | u64::from(dboid))))
        .enable_shmem_access(None)
        .enable_spi_access()
        .set_start_time(BgWorkerStartTime::RecoveryFinished)
        .set_restart_time(None)
        .set_notify_pid(backend::my_pid())
}

/// Entry point of a probe. Exits without answering when it cannot connect (FATAL) or the look
/// fails; the launcher then retries later.
#[pg_guard]
#[unsafe(no_mangle)]
pub extern "C-unwind" fn jq_probe_main(arg: pg_sys::Datum) {
    let packed = arg.value() as u64;
    let (dboid, mailbox) = (packed as u32, (packed >> 32) as usize);
    BackgroundWorker::attach_signal_handlers(SignalWakeFlags::SIGTERM);
    die_on_sigterm();
    let Some(presence) = presence::get() else { return };
    if mailbox >= PROBES {
        return;
    }
    BackgroundWorker::connect_worker_to_spi_by_oid(Some(pg_sys::Oid::from(dboid)), None);
    // Before the look: see the module documentation of `presence`.
    let generation = presence.generation();
    if let Ok(has_jq) = extension_ready() {
        presence.answer(mailbox, dboid, has_jq, generation);
    }
}
