//! The launcher: one static background worker per cluster, connected to no database. It lists
//! `pg_database` every second (and when woken) and keeps one maintenance worker
//! ([`super::worker`]) running per served database.
//!
//! It exits non-zero, so the postmaster restarts it after a second unless the server is
//! shutting down: terminating it (`pg_terminate_backend`) pauses maintenance for about a second
//! (`terminated_workers_and_launcher_come_back_within_seconds` in pg_test/tests/bgworker/launcher.rs).

use super::process::{die_on_sigterm, now_ts, process_alive, reload_config_if_asked, terminate, USECS_PER_SEC};
use super::slots::{self, Databases, DbSlot, SlotState, SlotStatus, MAX_DATABASES};
use super::RECHECK_SECS;
use crate::{backend, gucs};
use pgrx::bgworkers::{BackgroundWorker, BackgroundWorkerBuilder, BackgroundWorkerStatus, BgWorkerStartTime,
                      DynamicBackgroundWorker, SignalWakeFlags};
use pgrx::pg_sys;
use pgrx::prelude::*;
use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::time::Duration;

/// The dynamic workers this launcher started, by database oid.
type Handles = HashMap<u32, DynamicBackgroundWorker>;

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
    let wanted = gucs::databases();
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
            if wanted.is_empty() || wanted.iter().any(|w| database_matches(w, &name)) {
                out.push(DbEntry { oid: db.oid.to_u32(), name });
            }
        }
        pg_sys::table_endscan(scan);
        pg_sys::table_close(rel, pg_sys::AccessShareLock as i32);
        pg_sys::CommitTransactionCommand();
    }
    out
}

/// `jq.databases` entry `pattern` names `name`: equal, or a prefix followed by `*`.
fn database_matches(pattern: &str, name: &str) -> bool {
    match pattern.strip_suffix('*') {
        Some(prefix) => name.starts_with(prefix),
        None => pattern == name,
    }
}

/// Entry point of the launcher.
#[pg_guard]
#[unsafe(no_mangle)]
pub extern "C-unwind" fn jq_launcher_main(_arg: pg_sys::Datum) {
    BackgroundWorker::attach_signal_handlers(SignalWakeFlags::SIGHUP | SignalWakeFlags::SIGTERM);
    die_on_sigterm();
    BackgroundWorker::connect_worker_to_spi(None, None);
    let Some(sh) = slots::get() else {
        log!("jq launcher: shared memory missing, exiting");
        return;
    };
    sh.launcher_pid.store(backend::my_pid(), Ordering::Release);
    sh.launcher_procno.store(backend::my_procno() + 1, Ordering::Release);
    let mut handles = Handles::new();
    loop {
        reload_config_if_asked();
        launcher_pass(sh, &mut handles);
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

/// One look at the databases: stop serving those gone or no longer listed, start a worker
/// where one is due.
fn launcher_pass(sh: &Databases, handles: &mut Handles) {
    let dbs = list_databases();
    let now = now_ts();
    stop_unlisted(sh, handles, &dbs);
    for db in &dbs {
        let Some(slot) = sh.slot_for(db.oid) else {
            warning!("jq launcher: more than {MAX_DATABASES} databases; {} is not served", db.name);
            continue;
        };
        if start_due(slot, handles.get(&db.oid), now) {
            start_worker(slot, db, handles, now);
        }
    }
}

/// Frees the slots of databases not in `dbs` and stops their workers.
fn stop_unlisted(sh: &Databases, handles: &mut Handles, dbs: &[DbEntry]) {
    for st in sh.statuses() {
        if dbs.iter().any(|d| d.oid == st.dboid) {
            continue;
        }
        if let Some(slot) = sh.slot_of(st.dboid) {
            let pid = slot.with(|s| std::mem::replace(s, SlotStatus::new(0, SlotState::Free)).pid);
            terminate(pid);
        }
        handles.remove(&st.dboid);
    }
}

/// Whether the launcher must start a worker for this slot now.
fn start_due(slot: &DbSlot, handle: Option<&DynamicBackgroundWorker>, now: i64) -> bool {
    let stopped = |h: &DynamicBackgroundWorker| matches!(h.pid(), Err(BackgroundWorkerStatus::Stopped));
    let (state, pid, started_at, recheck_at) = slot.with(|s| (s.state, s.pid, s.started_at, s.recheck_at));
    match state {
        SlotState::Running => match handle {
            Some(h) => stopped(h) && !process_alive(pid),
            None => !process_alive(pid),
        },
        SlotState::Starting => match handle {
            Some(h) => stopped(h),
            // Registered by an earlier launcher: give it time to report.
            None => now - started_at > RECHECK_SECS * USECS_PER_SEC,
        },
        SlotState::NoExtension | SlotState::Suspended | SlotState::NoSlot | SlotState::Exited => now >= recheck_at,
        SlotState::Free => true,
    }
}

/// Registers a maintenance worker for `db`; without a free worker slot, records that and
/// retries after a second.
fn start_worker(slot: &DbSlot, db: &DbEntry, handles: &mut Handles, now: i64) {
    // Before the worker can start and report Running.
    slot.with(|s| {
        s.state = SlotState::Starting;
        s.pid = 0;
        s.started_at = now;
    });
    let name = format!("jq maintenance {}", db.name);
    let result = BackgroundWorkerBuilder::new(&name[..name.len().min(90)])
        .set_type("jq maintenance")
        .set_library("jq")
        .set_function("jq_db_worker_main")
        .set_argument(Some(pg_sys::Datum::from(db.oid)))
        .enable_shmem_access(None)
        .enable_spi_access()
        .set_start_time(BgWorkerStartTime::RecoveryFinished)
        .set_restart_time(None)
        .set_notify_pid(backend::my_pid())
        .load_dynamic();
    match result {
        Ok(h) => {
            handles.insert(db.oid, h);
        }
        Err(_) => slot.with(|s| {
            if s.state != SlotState::NoSlot {
                s.set_error("no free background worker slot: raise max_worker_processes", now);
            }
            s.state = SlotState::NoSlot;
            s.recheck_at = now + USECS_PER_SEC;
        }),
    }
}
