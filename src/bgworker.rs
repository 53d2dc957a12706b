//! The background workers: one launcher per cluster and one maintenance worker per database.
//!
//! * The **launcher** (a static worker, started after recovery, restarted 1 s after it dies)
//!   connects to no database. It lists `pg_database` (every database that allows connections,
//!   or those named in `jq.databases`) and keeps one maintenance worker running per database
//!   whose worker has not reported "no jq here". It wakes when a worker exits (it is each
//!   worker's `bgw_notify_pid`), when `CREATE EXTENSION jq` runs (`jq._launcher_wake()`), and
//!   every second; databases without jq are rechecked every [`RECHECK_SECS`] s.
//! * A **maintenance worker** runs one pass right away (the recovery pass) and then one every
//!   `jq.tick_interval`: promote, reap, cron, prune — each duty in its own transaction, through
//!   `jq._maintain_guarded`, which turns an error into a value, so a broken row never stops the
//!   worker — then at most one NOTIFY per queue that got claimable jobs. It records each pass in
//!   shared memory for `jq.status()`. It exits on SIGTERM (the launcher starts a new one within
//!   a second unless the server is shutting down: field case Q18), when jq is dropped from its
//!   database, or when the database is being dropped or renamed ([`utility_hook`]).
//!
//! Modelled on pg_cron's scheduler (start after recovery, short restart time, latch waits,
//! SIGHUP reload, one transaction per duty) and PostgreSQL's autovacuum launcher (a
//! database-less launcher that scans pg_database), minus pg_cron's one-database limit.

use crate::{gucs, shmem, shmem::slot_state, wakeup};
use pgrx::bgworkers::{BackgroundWorker, BackgroundWorkerBuilder, BgWorkerStartTime, SignalWakeFlags};
use pgrx::pg_sys;
use pgrx::prelude::*;
use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::time::Duration;

/// Seconds before a database without jq (or whose worker could not start) is checked again.
pub const RECHECK_SECS: i64 = 10;
/// Seconds a database stays unserved after `DROP DATABASE` / rename / use as a template starts.
pub const SUSPEND_SECS: i64 = 10;

const USECS_PER_SEC: i64 = 1_000_000;

fn now_ts() -> i64 {
    // SAFETY: plain PostgreSQL call.
    unsafe { pg_sys::GetCurrentTimestamp() }
}

/// Registers the launcher. Called from `_PG_init` while preloading.
pub fn register_launcher() {
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

fn process_alive(pid: i32) -> bool {
    // SAFETY: kill with signal 0 only checks for existence.
    pid > 0 && unsafe { libc_kill(pid, 0) } == 0
}

unsafe extern "C" {
    #[link_name = "kill"]
    fn libc_kill(pid: i32, sig: i32) -> i32;
}

/// SIGTERM as in any backend (PostgreSQL's `die`): it also interrupts a wait for a lock, where
/// pgrx's flag-only handler would leave the worker (and a fast shutdown) hanging. The worker
/// then exits through FATAL; the postmaster (launcher) or the launcher (workers) restarts it
/// unless the server is shutting down.
fn die_on_sigterm() {
    // SAFETY: installs PostgreSQL's standard backend SIGTERM handler.
    unsafe {
        pg_sys::pqsignal(pg_sys::SIGTERM as i32, Some(postgres_die));
    }
}

unsafe extern "C-unwind" {
    /// PostgreSQL's `die` signal handler itself (pgrx's `pg_sys::die` is a Rust wrapper).
    #[link_name = "die"]
    fn postgres_die(signal: i32);
}

fn reload_config_if_asked() {
    if BackgroundWorker::sighup_received() {
        // SAFETY: called from the worker's main loop, outside any transaction.
        unsafe { pg_sys::ProcessConfigFile(pg_sys::GucContext::PGC_SIGHUP) };
    }
}

/// Entry point of the launcher.
#[pg_guard]
#[unsafe(no_mangle)]
pub extern "C-unwind" fn jq_launcher_main(_arg: pg_sys::Datum) {
    BackgroundWorker::attach_signal_handlers(SignalWakeFlags::SIGHUP | SignalWakeFlags::SIGTERM);
    die_on_sigterm();
    BackgroundWorker::connect_worker_to_spi(None, None);
    let Some(sh) = shmem::get() else {
        log!("jq launcher: shared memory missing, exiting");
        return;
    };
    // SAFETY: MyProcPid is this process's pid.
    sh.launcher_pid.store(unsafe { pg_sys::MyProcPid }, Ordering::Release);
    sh.launcher_procno.store(shmem::my_procno() + 1, Ordering::Release);
    let mut handles: HashMap<u32, pgrx::bgworkers::DynamicBackgroundWorker> = HashMap::new();
    loop {
        reload_config_if_asked();
        launcher_pass(sh, &mut handles);
        if !BackgroundWorker::wait_latch(Some(Duration::from_secs(1))) {
            break;
        }
    }
    sh.launcher_procno.store(0, Ordering::Release);
    sh.launcher_pid.store(0, Ordering::Release);
    // Non-zero: the postmaster restarts us after 1 s unless it is shutting down, so a
    // pg_terminate_backend of the launcher does not end maintenance (field case Q18).
    // SAFETY: plain exit.
    unsafe { pg_sys::proc_exit(1) };
}

fn launcher_pass(sh: &shmem::Shared, handles: &mut HashMap<u32, pgrx::bgworkers::DynamicBackgroundWorker>) {
    let dbs = list_databases();
    let now = now_ts();
    // Stop serving databases that are gone or no longer listed.
    for st in sh.statuses() {
        if !dbs.iter().any(|d| d.oid == st.dboid) {
            if let Some(slot) = sh.slot_of(st.dboid) {
                let pid = slot.with(|s| {
                    let pid = s.pid;
                    *s = shmem::SlotStatus::default();
                    pid
                });
                if process_alive(pid) {
                    // SAFETY: SIGTERM to our own maintenance worker.
                    unsafe { libc_kill(pid, 15) };
                }
            }
            handles.remove(&st.dboid);
        }
    }
    for db in &dbs {
        let Some(slot) = sh.slot_for(db.oid) else {
            warning!("jq launcher: more than {} databases; {} is not served", shmem::MAX_DATABASES, db.name);
            continue;
        };
        let (state, pid, started_at, recheck_at) = slot.with(|s| (s.state, s.pid, s.started_at, s.recheck_at));
        let start = match state {
            slot_state::RUNNING => match handles.get(&db.oid) {
                Some(h) => matches!(h.pid(), Err(pgrx::bgworkers::BackgroundWorkerStatus::Stopped)) && !process_alive(pid),
                None => !process_alive(pid),
            },
            slot_state::STARTING => match handles.get(&db.oid) {
                Some(h) => matches!(h.pid(), Err(pgrx::bgworkers::BackgroundWorkerStatus::Stopped)),
                // Registered by an earlier launcher: give it time to report.
                None => now - started_at > RECHECK_SECS * USECS_PER_SEC,
            },
            slot_state::NO_EXTENSION | slot_state::SUSPENDED | slot_state::NO_SLOT | slot_state::EXITED => {
                now >= recheck_at
            }
            _ => true,
        };
        if !start {
            continue;
        }
        // Before the worker can start and report RUNNING.
        slot.with(|s| {
            s.state = slot_state::STARTING;
            s.pid = 0;
            s.started_at = now;
        });
        // SAFETY: MyProcPid is this process's pid.
        let me = unsafe { pg_sys::MyProcPid };
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
            .set_notify_pid(me)
            .load_dynamic();
        match result {
            Ok(h) => {
                handles.insert(db.oid, h);
            }
            Err(_) => {
                slot.with(|s| {
                    if s.state != slot_state::NO_SLOT {
                        s.set_error("no free background worker slot: raise max_worker_processes", now);
                    }
                    s.state = slot_state::NO_SLOT;
                    s.recheck_at = now + USECS_PER_SEC;
                });
            }
        }
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn worker_exit(_code: i32, arg: pg_sys::Datum) {
    let dboid = arg.value() as u32;
    if let Some(slot) = shmem::get().and_then(|sh| sh.slot_of(dboid)) {
        // SAFETY: MyProcPid is this process's pid.
        let me = unsafe { pg_sys::MyProcPid };
        slot.with(|s| {
            if s.pid == me {
                s.pid = 0;
                if s.state == slot_state::RUNNING {
                    // Let the launcher start the next worker at once.
                    s.state = slot_state::EXITED;
                    s.recheck_at = 0;
                }
            }
        });
    }
}

/// Result of one duty, as returned by `jq._maintain_guarded`.
struct Duty {
    done: i64,
    error: Option<String>,
}

/// Runs `body` in its own transaction; an error (after `jq._maintain_guarded`'s own guard,
/// only an unexpected one) is logged, the transaction aborted, and returned as text.
fn in_transaction<R>(body: impl FnOnce() -> R + std::panic::UnwindSafe) -> Result<R, String> {
    // SAFETY: the standard background-worker transaction sequence (worker_spi, pg_cron); on
    // error the transaction is aborted, which releases its locks, snapshots and SPI state.
    unsafe {
        pg_sys::SetCurrentStatementStartTimestamp();
        pg_sys::StartTransactionCommand();
        pg_sys::PushActiveSnapshot(pg_sys::GetTransactionSnapshot());
    }
    let result = PgTryBuilder::new(|| Ok(body()))
        .catch_others(|e| {
            let msg = match &e {
                pg_sys::panic::CaughtError::PostgresError(r)
                | pg_sys::panic::CaughtError::ErrorReport(r)
                | pg_sys::panic::CaughtError::RustPanic { ereport: r, .. } => r.message().to_string(),
            };
            Err(msg)
        })
        .execute();
    // SAFETY: see above.
    unsafe {
        match &result {
            Ok(_) => {
                pg_sys::PopActiveSnapshot();
                pg_sys::CommitTransactionCommand();
            }
            Err(msg) => {
                warning!("jq maintenance: {msg}");
                pg_sys::AbortCurrentTransaction();
            }
        }
    }
    result
}

fn run_duty(duty: &str) -> Duty {
    let r = in_transaction(|| {
        Spi::get_two_with_args::<i64, String>(
            "SELECT done::bigint, error FROM jq._maintain_guarded($1, pg_catalog.now())",
            &[duty.into()],
        )
    });
    match r {
        Ok(Ok((done, error))) => {
            if let Some(e) = &error {
                warning!("jq maintenance: {duty}: {e}");
            }
            Duty { done: done.unwrap_or(0), error }
        }
        Ok(Err(e)) => Duty { done: 0, error: Some(e.to_string()) },
        Err(msg) => Duty { done: 0, error: Some(msg) },
    }
}

/// Whether jq (recent enough for this library) is installed in the connected database.
fn extension_ready() -> Result<bool, String> {
    in_transaction(|| {
        Spi::get_one::<bool>(
            "SELECT EXISTS (SELECT FROM pg_catalog.pg_extension WHERE extname = 'jq') \
             AND pg_catalog.to_regprocedure('jq._maintain_guarded(text,timestamptz)') IS NOT NULL",
        )
        .ok()
        .flatten()
        .unwrap_or(false)
    })
}

fn notify_ready_queues() -> Duty {
    let bits = wakeup::take_ready_bits();
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

/// Entry point of a database's maintenance worker; the argument is the database oid.
#[pg_guard]
#[unsafe(no_mangle)]
pub extern "C-unwind" fn jq_db_worker_main(arg: pg_sys::Datum) {
    let dboid = arg.value() as u32;
    BackgroundWorker::attach_signal_handlers(SignalWakeFlags::SIGHUP | SignalWakeFlags::SIGTERM);
    die_on_sigterm();
    BackgroundWorker::connect_worker_to_spi_by_oid(Some(pg_sys::Oid::from(dboid)), None);
    // A duty that waits longer than this for a lock (a transaction holding jq.jobs in EXCLUSIVE
    // mode, e.g. an open jq.drop_queue or a prepared transaction) fails and is recorded instead
    // of stalling this database's maintenance.
    // SAFETY: sets a GUC for this session, as SET would.
    unsafe {
        pg_sys::SetConfigOption(c"lock_timeout".as_ptr(), c"5s".as_ptr(),
                                pg_sys::GucContext::PGC_SUSET, pg_sys::GucSource::PGC_S_SESSION);
    }
    let Some(sh) = shmem::get() else { return };
    let Some(slot) = sh.slot_for(dboid) else { return };
    // SAFETY: MyProcPid is this process's pid.
    let me = unsafe { pg_sys::MyProcPid };
    let now = now_ts();
    let duplicate = slot.with(|s| {
        if s.state == slot_state::RUNNING && s.pid != 0 && s.pid != me && process_alive(s.pid) {
            return true;
        }
        // DROP/RENAME/copy of this database began while we connected: the hook found no pid
        // to signal, so step aside ourselves (both sides hold the slot lock: no gap).
        if s.state == slot_state::SUSPENDED && now < s.recheck_at {
            return true;
        }
        s.state = slot_state::RUNNING;
        s.pid = me;
        s.started_at = now;
        false
    });
    if duplicate {
        return;
    }
    // SAFETY: registers the slot cleanup for any exit path (including ERROR and SIGTERM).
    unsafe {
        pg_sys::before_shmem_exit(Some(worker_exit), pg_sys::Datum::from(dboid));
        pg_sys::pgstat_report_appname(c"jq maintenance".as_ptr());
    }
    loop {
        reload_config_if_asked();
        let gen = slot.with(|s| s.ext_gen);
        match extension_ready() {
            Ok(true) => slot.with(|s| s.without_ext = false),
            Ok(false) | Err(_) => {
                slot.with(|s| {
                    s.state = slot_state::NO_EXTENSION;
                    s.without_ext = true;
                    s.pid = 0;
                    // A CREATE EXTENSION that committed during the check: look again at once.
                    s.recheck_at = if s.ext_gen != gen { 0 } else { now_ts() + RECHECK_SECS * USECS_PER_SEC };
                });
                return;
            }
        }
        let started = std::time::Instant::now();
        let mut counts = [0i64; 5];
        let mut error: Option<String> = None;
        for (i, duty) in ["promote", "reap", "cron", "prune"].iter().enumerate() {
            let d = run_duty(duty);
            counts[i] = d.done;
            if let Some(e) = d.error {
                error = Some(format!("{duty}: {e}"));
            }
            if BackgroundWorker::sigterm_received() {
                return;
            }
        }
        let n = notify_ready_queues();
        counts[4] = n.done;
        if let Some(e) = n.error {
            error = Some(format!("notify: {e}"));
        }
        // The pass's table statistics (rows its duties updated and deleted) go to the
        // cumulative statistics, which autovacuum reads to decide when jq.jobs needs a vacuum.
        // A background worker has no idle loop that sends them (PostgresMain's does before it
        // waits for a command), so until 2026-12-04 they were sent only when the worker exited:
        // autovacuum never counted the rows pruned (thousands a second at load) as dead.
        // Outside any transaction; PostgreSQL sends at most once a second (force = false).
        unsafe {
            pg_sys::pgstat_report_stat(false);
        }
        let at = now_ts();
        let ms = started.elapsed().as_secs_f64() * 1000.0;
        slot.with(|s| {
            s.last_pass_at = at;
            s.passes += 1;
            s.promoted = counts[0];
            s.reaped = counts[1];
            s.fired = counts[2];
            s.pruned = counts[3];
            s.notified = counts[4];
            s.pass_ms = ms;
            if let Some(e) = &error {
                s.set_error(e, at);
            }
        });
        let tick = Duration::from_millis(gucs::TICK_INTERVAL_MS.get().max(10) as u64);
        let wait = tick.saturating_sub(started.elapsed()).max(Duration::from_millis(1));
        if !BackgroundWorker::wait_latch(Some(wait)) {
            return;
        }
    }
}

/// `jq._launcher_wake()`: when this transaction commits, tells the launcher that jq exists in
/// this database (run by `CREATE EXTENSION jq`, so a new database is served within a second).
/// No-op when not preloaded.
#[pg_extern(volatile, parallel_unsafe)]
fn _launcher_wake() {
    if shmem::get().is_some() {
        wakeup::note_extension_created();
    }
}

/// `jq._status()`: one row per database slot in shared memory (see `jq.status()`).
#[pg_extern(volatile, parallel_safe)]
#[allow(clippy::type_complexity)]
fn _status() -> TableIterator<
    'static,
    (
        name!(dboid, pg_sys::Oid),
        name!(state, String),
        name!(pid, Option<i32>),
        name!(started_at, Option<TimestampWithTimeZone>),
        name!(last_pass_at, Option<TimestampWithTimeZone>),
        name!(passes, i64),
        name!(promoted, i64),
        name!(reaped, i64),
        name!(fired, i64),
        name!(pruned, i64),
        name!(notified, i64),
        name!(pass_ms, f64),
        name!(last_error, Option<String>),
        name!(last_error_at, Option<TimestampWithTimeZone>),
    ),
> {
    let ts = |v: i64| (v != 0).then(|| TimestampWithTimeZone::try_from(v).ok()).flatten();
    let statuses = shmem::get().map(|sh| sh.statuses()).unwrap_or_default();
    // SAFETY: MyDatabaseId is set in every backend connected to a database.
    let me = unsafe { pg_sys::MyDatabaseId };
    // This database has jq (the function exists here). Without a slot it has no maintenance
    // worker, and a row saying so is what keeps that from passing unseen (field case Q20).
    let unserved = shmem::get().is_some() && !statuses.iter().any(|s| s.dboid == me.to_u32());
    let mut rows: Vec<_> = statuses
        .into_iter()
        .map(|s| {
            let state = match s.state {
                // A recheck of a database last seen without jq: still that until the worker knows.
                slot_state::STARTING | slot_state::RUNNING | slot_state::NO_SLOT | slot_state::EXITED
                    if s.without_ext =>
                {
                    "no extension"
                }
                slot_state::STARTING => "starting",
                slot_state::RUNNING => "running",
                slot_state::NO_EXTENSION => "no extension",
                slot_state::SUSPENDED => "suspended",
                slot_state::NO_SLOT => "waiting for a worker slot",
                slot_state::EXITED => "restarting",
                _ => "unknown",
            };
            (
                pg_sys::Oid::from(s.dboid),
                state.to_string(),
                (s.pid != 0).then_some(s.pid),
                ts(s.started_at),
                ts(s.last_pass_at),
                s.passes as i64,
                s.promoted,
                s.reaped,
                s.fired,
                s.pruned,
                s.notified,
                s.pass_ms,
                s.error(),
                ts(s.error_at),
            )
        })
        .collect();
    if unserved {
        rows.push((
            me,
            "not served".to_string(),
            None,
            None,
            None,
            0,
            0,
            0,
            0,
            0,
            0,
            0.0,
            Some(format!(
                "this database has jq but no maintenance worker: add it to jq.databases if it is not listed \
                 there (templates and databases that refuse connections are never served); if it is listed, \
                 the launcher tracks {} databases already (it serves at most that many): list fewer. Right \
                 after a server start this row can show until the launcher's first pass",
                shmem::MAX_DATABASES
            )),
            None,
        ));
    }
    TableIterator::new(rows)
}

/// `jq._preloaded()`: whether jq's shared memory (and so the background workers and wakeups)
/// is present, i.e. jq is in `shared_preload_libraries`.
#[pg_extern(stable, parallel_safe)]
fn _preloaded() -> bool {
    shmem::get().is_some()
}

static mut PREV_UTILITY: pg_sys::ProcessUtility_hook_type = None;

/// Installs [`utility_hook`]. Called from `_PG_init` while preloading.
pub fn init_utility_hook() {
    // SAFETY: _PG_init runs single-threaded; the previous hook is chained.
    unsafe {
        PREV_UTILITY = pg_sys::ProcessUtility_hook;
        pg_sys::ProcessUtility_hook = Some(utility_hook);
    }
}

/// Stops the maintenance worker of `dbname` (if any) for [`SUSPEND_SECS`] s — only for a
/// superuser or the database's owner, who alone may drop, rename or copy it, so that no other
/// role can pause maintenance with a statement that is then refused.
fn suspend_database(dbname: *const std::ffi::c_char) {
    if dbname.is_null() {
        return;
    }
    let Some(sh) = shmem::get() else { return };
    // SAFETY: catalog lookup by name in the current transaction; missing_ok.
    let oid = unsafe { pg_sys::get_database_oid(dbname, true) };
    if oid.to_u32() == 0 {
        return;
    }
    // SAFETY: permission checks on the current user, as the statement itself will make.
    let allowed = unsafe { pg_sys::superuser() || pg_sys::pg_database_ownercheck(oid, pg_sys::GetUserId()) };
    if !allowed {
        return;
    }
    let oid = oid.to_u32();
    if let Some(slot) = sh.slot_of(oid) {
        let pid = slot.with(|s| {
            let pid = s.pid;
            s.state = slot_state::SUSPENDED;
            s.pid = 0;
            s.recheck_at = now_ts() + SUSPEND_SECS * USECS_PER_SEC;
            pid
        });
        if process_alive(pid) {
            // SAFETY: SIGTERM to our own maintenance worker; DROP DATABASE then waits (up to
            // 5 s, PostgreSQL's own loop) for it to leave.
            unsafe { libc_kill(pid, 15) };
        }
    }
}

/// ProcessUtility hook: before `DROP DATABASE`, `ALTER DATABASE … RENAME` or
/// `CREATE DATABASE … TEMPLATE x`, which all refuse to run while another session is connected
/// to that database, stop jq's maintenance worker there, so that jq never blocks them.
#[pg_guard]
#[allow(clippy::too_many_arguments)] // PostgreSQL's ProcessUtility_hook signature
unsafe extern "C-unwind" fn utility_hook(
    pstmt: *mut pg_sys::PlannedStmt,
    query_string: *const std::ffi::c_char,
    read_only_tree: bool,
    context: pg_sys::ProcessUtilityContext::Type,
    params: pg_sys::ParamListInfo,
    query_env: *mut pg_sys::QueryEnvironment,
    dest: *mut pg_sys::DestReceiver,
    qc: *mut pg_sys::QueryCompletion,
) {
    // SAFETY: pstmt is a valid planned utility statement; node tags identify the struct types.
    unsafe {
        let node = (*pstmt).utilityStmt;
        // DROP/CREATE DATABASE refuse to run in a transaction block; don't suspend for them.
        let in_block = pg_sys::IsTransactionBlock();
        if !node.is_null() {
            match (*node).type_ {
                pg_sys::NodeTag::T_DropdbStmt if !in_block => {
                    suspend_database((*(node as *mut pg_sys::DropdbStmt)).dbname);
                }
                pg_sys::NodeTag::T_RenameStmt => {
                    let r = node as *mut pg_sys::RenameStmt;
                    if (*r).renameType == pg_sys::ObjectType::OBJECT_DATABASE {
                        suspend_database((*r).subname);
                    }
                }
                pg_sys::NodeTag::T_CreatedbStmt if !in_block => {
                    let c = node as *mut pg_sys::CreatedbStmt;
                    let opts = pgrx::PgList::<pg_sys::DefElem>::from_pg((*c).options);
                    for d in opts.iter_ptr() {
                        let name = std::ffi::CStr::from_ptr((*d).defname);
                        if name.to_bytes() == b"template" && !(*d).arg.is_null() {
                            suspend_database(pg_sys::defGetString(d));
                        }
                    }
                }
                _ => {}
            }
        }
        match PREV_UTILITY {
            Some(prev) => prev(pstmt, query_string, read_only_tree, context, params, query_env, dest, qc),
            None => pg_sys::standard_ProcessUtility(
                pstmt, query_string, read_only_tree, context, params, query_env, dest, qc,
            ),
        }
    }
}
