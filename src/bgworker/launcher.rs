//! The launcher: one static background worker per cluster, connected to no database. It lists
//! `pg_database` every second (and when woken) and keeps one maintenance worker
//! ([`super::worker`]) running per database that has jq, as far as a slot is free
//! (`jq.max_databases`). Whether a database has jq it learns from probes and from the commits
//! that create or drop jq ([`super::presence`]), and remembers ([`super::census`]): a database
//! without jq takes no slot and no process.
//!
//! It exits non-zero, so the postmaster restarts it after a second unless the server is
//! shutting down: terminating it (`pg_terminate_backend`) pauses maintenance for about a second
//! (`terminated_workers_and_launcher_come_back_within_seconds` in pg_test/tests/bgworker/launcher.rs).

use super::census::Census;
use super::presence::{self, Presence, ProbeState, PROBES};
use super::process::{die_on_sigterm, now_ts, process_alive, reload_config_if_asked, terminate, WorkerHandle,
                     USECS_PER_SEC};
use super::slots::{self, Databases, DbSlot, SlotState, SlotStatus};
use super::{probe, RECHECK_SECS};
use crate::{backend, gucs};
use pgrx::bgworkers::{BackgroundWorker, BackgroundWorkerBuilder, BgWorkerStartTime, SignalWakeFlags};
use pgrx::pg_sys;
use pgrx::prelude::*;
use std::collections::{HashMap, HashSet};
use std::sync::atomic::Ordering;
use std::time::Duration;

/// Registers the launcher. Called from `_PG_init` while preloading.
pub fn register() {
    BackgroundWorkerBuilder::new("jq launcher")
        .set_type("jq launcher")
        .set_library("jq")
        .set_function("jq_launcher_main")
        .enable_shmem_access(None)
        .enable_spi_access()
        .set_start_time(BgWorkerStartTime::RecoveryFinished)
        .set_restart_time(Some(Duration::from_secs(1)))
        .load();
}

struct DbEntry {
    oid: u32,
    name: String,
}

/// Databases that allow connections and are not templates, filtered by `jq.databases`.
fn list_databases() -> Vec<DbEntry> {
    let mut out = Vec::new();
    // SAFETY: the autovacuum launcher's get_database_list(): a catalog heap scan of the shared
    // pg_database in a short transaction; names are copied out before it ends.
    unsafe {
        pg_sys::StartTransactionCommand();
        let _ = pg_sys::GetTransactionSnapshot();
        let rel = pg_sys::table_open(pg_sys::DatabaseRelationId, pg_sys::AccessShareLock as i32);
        let scan = pg_sys::table_beginscan_catalog(rel, 0, std::ptr::null_mut());
        loop {
            let tup = pg_sys::heap_getnext(scan, pg_sys::ScanDirection::ForwardScanDirection);
            if tup.is_null() {
                break;
            }
            let db = &*pg_sys::heap_tuple_get_struct::<pg_sys::FormData_pg_database>(tup);
            if !db.datallowconn || db.datistemplate {
                continue;
            }
            let name = std::ffi::CStr::from_ptr(db.datname.data.as_ptr()).to_string_lossy().into_owned();
            if gucs::database_listed(&name) {
                out.push(DbEntry { oid: db.oid.to_u32(), name });
            }
        }
        pg_sys::table_endscan(scan);
        pg_sys::table_close(rel, pg_sys::AccessShareLock as i32);
        pg_sys::CommitTransactionCommand();
    }
    out
}

/// Entry point of the launcher.
#[pg_guard]
#[unsafe(no_mangle)]
pub extern "C-unwind" fn jq_launcher_main(_arg: pg_sys::Datum) {
    BackgroundWorker::attach_signal_handlers(SignalWakeFlags::SIGHUP | SignalWakeFlags::SIGTERM);
    die_on_sigterm();
    BackgroundWorker::connect_worker_to_spi(None, None);
    let (Some(sh), Some(presence)) = (slots::get(), presence::get()) else {
        log!("jq launcher: shared memory missing, exiting");
        return;
    };
    sh.launcher_pid.store(backend::my_pid(), Ordering::Release);
    sh.launcher_procno.store(backend::my_procno() + 1, Ordering::Release);
    let mut launcher = Launcher::default();
    loop {
        reload_config_if_asked();
        launcher.pass(sh, presence);
        if !BackgroundWorker::wait_latch(Some(Duration::from_secs(1))) {
            break;
        }
    }
    sh.launcher_procno.store(0, Ordering::Release);
    sh.launcher_pid.store(0, Ordering::Release);
    // Non-zero: the postmaster restarts the launcher after 1 s unless it is shutting down.
    // SAFETY: plain exit.
    unsafe { pg_sys::proc_exit(1) };
}

/// What the launcher keeps between passes.
#[derive(Default)]
struct Launcher {
    /// The maintenance workers it started, by database oid.
    workers: HashMap<u32, WorkerHandle>,
    /// The probe it started in each mailbox.
    probes: [Option<WorkerHandle>; PROBES],
    census: Census,
    /// The last probe could not be registered (no free background worker); logged once.
    probes_blocked: bool,
}

impl Launcher {
    /// One look at the databases: take what probes and workers found out, stop serving those
    /// gone or no longer listed, start a worker where one is due, probe where nothing is known.
    fn pass(&mut self, sh: &Databases, presence: &Presence) {
        let dbs = list_databases();
        let now = now_ts();
        // Answers first, then the change filter (src/bgworker/presence.rs: no stale answer).
        self.take_answers(presence, now);
        self.take_dropped(sh, presence, now);
        self.census.forget_changed(&presence.take_changed());
        let listed: HashSet<u32> = dbs.iter().map(|d| d.oid).collect();
        self.stop_unlisted(sh, &listed);
        self.census.retain(|oid| listed.contains(&oid));
        let held = sh.held();
        let mut unserved = Vec::new();
        let mut settled = true;
        for db in &dbs {
            if let Some(slot) = held.get(&db.oid) {
                self.keep_running(slot, db, now);
            } else if cfg!(feature = "break-slot-per-database") {
                self.slot_for_every_database(sh, db, now);
            } else {
                settled &= self.census.known(db.oid);
                self.serve_or_probe(sh, presence, db, now, &mut unserved);
            }
        }
        presence.publish_unserved(unserved.len(), &unserved);
        self.census.warn_unserved(unserved.len(), sh.dbs().len(), settled, now);
    }

    /// A listed database without a slot: a slot and a worker when it has jq (else it is
    /// counted in `unserved`); a probe when nothing (or nothing recent) is known about it.
    fn serve_or_probe(&mut self, sh: &Databases, presence: &Presence, db: &DbEntry, now: i64, unserved: &mut Vec<u32>) {
        if self.census.has_jq(db.oid) {
            match sh.slot_for(db.oid) {
                Some(slot) => return self.keep_running(slot, db, now),
                None => unserved.push(db.oid),
            }
        }
        if self.census.probe_due(db.oid, now) && !presence.probing(db.oid) {
            self.launch_probe(presence, db, now);
        }
    }

    /// Negative control only (cargo feature `break-slot-per-database`): the launcher before
    /// databases without jq were left without a slot: every listed database takes one, and
    /// each one past the table is logged at every pass.
    fn slot_for_every_database(&mut self, sh: &Databases, db: &DbEntry, now: i64) {
        match sh.slot_for(db.oid) {
            Some(slot) => self.keep_running(slot, db, now),
            None => warning!("jq launcher: more than {} databases; {} is not served", sh.dbs().len(), db.name),
        }
    }

    /// Takes the probes' answers; a probe that exited without one leaves its database
    /// unreachable for a while.
    fn take_answers(&mut self, presence: &Presence, now: i64) {
        for i in 0..PROBES {
            // Whether it exited, read before its mailbox: an answer is written before the exit.
            let stopped = self.probes[i].as_ref().map(WorkerHandle::stopped);
            let p = presence.probe(i);
            let done = match p.state {
                ProbeState::Free => true,
                ProbeState::Answered => {
                    self.census.record(presence, p.dboid, p.has_jq, p.generation, now);
                    true
                }
                ProbeState::Launched => {
                    // Started by an earlier launcher (no handle): given RECHECK_SECS to answer.
                    let gone = stopped.unwrap_or(now - p.launched_at > RECHECK_SECS * USECS_PER_SEC);
                    if gone {
                        self.census.unreachable(p.dboid, now);
                    }
                    gone
                }
            };
            if done {
                if p.state != ProbeState::Free {
                    presence.free(i);
                }
                self.probes[i] = None;
            }
        }
    }

    /// Frees the slots of databases whose worker found jq gone (state NoExtension) and
    /// remembers them as without jq.
    fn take_dropped(&mut self, sh: &Databases, presence: &Presence, now: i64) {
        if cfg!(feature = "break-slot-per-database") {
            return; // the old way: the slot stays, rechecked every RECHECK_SECS
        }
        for slot in sh.dbs() {
            let freed = slot.with(|s| {
                (s.state == SlotState::NoExtension)
                    .then(|| std::mem::replace(s, SlotStatus::new(0, SlotState::Free)))
            });
            if let Some(s) = freed {
                self.workers.remove(&s.dboid);
                self.census.record(presence, s.dboid, false, s.checked_gen, now);
            }
        }
    }

    /// Starts a probe of `db` in a free mailbox, if there is one.
    fn launch_probe(&mut self, presence: &Presence, db: &DbEntry, now: i64) {
        let free = (0..PROBES).find(|&i| self.probes[i].is_none() && presence.probe(i).state == ProbeState::Free);
        let Some(i) = free else { return };
        presence.launch(i, db.oid, now);
        match WorkerHandle::register(&probe::builder(db.oid, &db.name, i)) {
            Some(h) => {
                self.probes[i] = Some(h);
                self.probes_blocked = false;
            }
            None => {
                presence.free(i);
                if !self.probes_blocked {
                    warning!(
                        "jq launcher: no free background worker to look for jq in database {}: raise \
                         max_worker_processes; retrying every second",
                        db.name
                    );
                    self.probes_blocked = true;
                }
            }
        }
    }

    /// Frees the slots of databases not `listed` and stops their workers.
    fn stop_unlisted(&mut self, sh: &Databases, listed: &HashSet<u32>) {
        for st in sh.statuses() {
            if listed.contains(&st.dboid) {
                continue;
            }
            if let Some(slot) = sh.slot_of(st.dboid) {
                let pid = slot.with(|s| std::mem::replace(s, SlotStatus::new(0, SlotState::Free)).pid);
                terminate(pid);
            }
            self.workers.remove(&st.dboid);
        }
    }

    /// Starts the worker of a database with a slot when one is due.
    fn keep_running(&mut self, slot: &DbSlot, db: &DbEntry, now: i64) {
        let seen = slot.with(|s| *s);
        if start_due(&seen, self.workers.get(&db.oid), now) {
            self.start_worker(slot, db, &seen, now);
        }
    }

    /// Registers a maintenance worker for `db` — only if the slot is still as `seen` (a
    /// `DROP DATABASE` may have suspended it meanwhile: src/bgworker/drop_hook.rs). Without a
    /// free worker slot, records that and retries after a second.
    fn start_worker(&mut self, slot: &DbSlot, db: &DbEntry, seen: &SlotStatus, now: i64) {
        // Before the worker can start and report Running.
        let unchanged = slot.with(|s| {
            let same = s.dboid == seen.dboid && s.state == seen.state && s.recheck_at == seen.recheck_at;
            if same {
                s.state = SlotState::Starting;
                s.pid = 0;
                s.started_at = now;
            }
            same
        });
        if !unchanged {
            return;
        }
        let name = format!("jq maintenance {}", db.name);
        let builder = BackgroundWorkerBuilder::new(&name[..name.len().min(90)])
            .set_type("jq maintenance")
            .set_library("jq")
            .set_function("jq_db_worker_main")
            .set_argument(Some(pg_sys::Datum::from(db.oid)))
            .enable_shmem_access(None)
            .enable_spi_access()
            .set_start_time(BgWorkerStartTime::RecoveryFinished)
            .set_restart_time(None)
            .set_notify_pid(backend::my_pid());
        match WorkerHandle::register(&builder) {
            Some(h) => {
                self.workers.insert(db.oid, h);
            }
            None => slot.with(|s| {
                if seen.state != SlotState::NoSlot {
                    s.set_error("no free background worker slot: raise max_worker_processes", now);
                }
                s.state = SlotState::NoSlot;
                s.recheck_at = now + USECS_PER_SEC;
            }),
        }
    }
}

/// Whether the launcher must start a worker for a slot seen as `seen` now.
fn start_due(seen: &SlotStatus, handle: Option<&WorkerHandle>, now: i64) -> bool {
    match seen.state {
        SlotState::Running => match handle {
            Some(h) => h.stopped() && !process_alive(seen.pid),
            None => !process_alive(seen.pid),
        },
        SlotState::Starting => match handle {
            Some(h) => h.stopped(),
            // Registered by an earlier launcher: give it time to report.
            None => now - seen.started_at > RECHECK_SECS * USECS_PER_SEC,
        },
        SlotState::NoExtension | SlotState::Suspended | SlotState::NoSlot | SlotState::Exited => {
            now >= seen.recheck_at
        }
        SlotState::Free => true,
    }
}
