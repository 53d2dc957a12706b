//! Process plumbing shared by the launcher and the maintenance workers: signals, liveness,
//! configuration reloads, the clock.

use pgrx::bgworkers::BackgroundWorker;
use pgrx::pg_sys;

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
