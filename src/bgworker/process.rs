//! Process plumbing shared by the launcher, the maintenance workers and the probes: signals,
//! liveness, worker handles, configuration reloads, the clock.

use pgrx::bgworkers::{BackgroundWorker, BackgroundWorkerBuilder};
use pgrx::{pg_sys, PgMemoryContexts};

/// µs per second (PostgreSQL timestamps are µs).
pub const USECS_PER_SEC: i64 = 1_000_000;

/// The current time, µs since 2000-01-01.
pub fn now_ts() -> i64 {
    crate::backend::now_us()
}

/// Whether a process with this pid exists.
pub fn process_alive(pid: i32) -> bool {
    // SAFETY: kill with signal 0 only checks for existence.
    pid > 0 && unsafe { libc_kill(pid, 0) } == 0
}

/// Sends SIGTERM to `pid` (one of jq's own maintenance workers) if it is alive.
pub fn terminate(pid: i32) {
    if process_alive(pid) {
        // SAFETY: SIGTERM to our own maintenance worker.
        unsafe { libc_kill(pid, 15) };
    }
}

unsafe extern "C" {
    #[link_name = "kill"]
    fn libc_kill(pid: i32, sig: i32) -> i32;
}

/// SIGTERM as in any backend (PostgreSQL's `die`): it also interrupts a wait for a lock, where
/// pgrx's flag-only handler would leave the worker (and a fast shutdown) hanging. The worker
/// then exits through FATAL; the postmaster (launcher) or the launcher (workers) restarts it
/// unless the server is shutting down.
pub fn die_on_sigterm() {
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

/// Rereads postgresql.conf after a SIGHUP.
pub fn reload_config_if_asked() {
    if BackgroundWorker::sighup_received() {
        // SAFETY: called from a worker's main loop, outside any transaction.
        unsafe { pg_sys::ProcessConfigFile(pg_sys::GucContext::PGC_SIGHUP) };
    }
}

/// A dynamic background worker this process registered (its `bgw_notify_pid`): whether it has
/// stopped. Unlike pgrx's handle, the PostgreSQL handle is freed on drop, so a launcher that
/// starts a probe every few seconds for months does not grow.
pub struct WorkerHandle(*mut pg_sys::BackgroundWorkerHandle);

impl WorkerHandle {
    /// Registers the worker `builder` describes; None when no background worker slot is free
    /// (`max_worker_processes`).
    pub fn register(builder: &BackgroundWorkerBuilder) -> Option<WorkerHandle> {
        let mut bgw: pg_sys::BackgroundWorker = builder.into();
        let mut handle: *mut pg_sys::BackgroundWorkerHandle = std::ptr::null_mut();
        // SAFETY: registers a filled-in worker; the handle is allocated in TopMemoryContext so
        // that it lives until dropped, whatever context is current.
        let ok = unsafe {
            PgMemoryContexts::TopMemoryContext
                .switch_to(|_| pg_sys::RegisterDynamicBackgroundWorker(&mut bgw, &mut handle))
        };
        // Built only on success: a handle around NULL would be freed on drop.
        (ok && !handle.is_null()).then(|| WorkerHandle(handle))
    }

    /// Whether the worker has exited (or was never started and never will be).
    pub fn stopped(&self) -> bool {
        let mut pid: pg_sys::pid_t = 0;
        // SAFETY: a handle returned by RegisterDynamicBackgroundWorker, not yet freed.
        let status = unsafe { pg_sys::GetBackgroundWorkerPid(self.0, &mut pid) };
        status == pg_sys::BgwHandleStatus::BGWH_STOPPED
    }
}

impl Drop for WorkerHandle {
    fn drop(&mut self) {
        // SAFETY: the handle is a palloc'd chunk owned by this value.
        unsafe { pg_sys::pfree(self.0.cast()) };
    }
}
