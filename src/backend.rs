//! This process as PostgreSQL sees it: its database, its `pgprocno`, and the latches of others.

use pgrx::pg_sys;

/// The connected database's oid (0 in a process without a database, as the launcher).
pub fn my_database() -> u32 {
    // SAFETY: a PostgreSQL global, set once a backend connects.
    unsafe { pg_sys::MyDatabaseId }.to_u32()
}

/// This process's pid.
pub fn my_pid() -> i32 {
    // SAFETY: a PostgreSQL global, set at process start.
    unsafe { pg_sys::MyProcPid }
}

/// This backend's `pgprocno`, or -1.
pub fn my_procno() -> i32 {
    // SAFETY: MyProc is set for every backend and background worker with shared memory access.
    unsafe { if pg_sys::MyProc.is_null() { -1 } else { (*pg_sys::MyProc).pgprocno } }
}

/// Number of PGPROC entries (bounds a scan by `pgprocno`).
pub fn proc_count() -> usize {
    // SAFETY: ProcGlobal is set up with shared memory and never freed.
    unsafe {
        let glob = pg_sys::ProcGlobal;
        if glob.is_null() { 0 } else { (*glob).allProcCount as usize }
    }
}

/// Sets the latch of the process with this `pgprocno`.
pub fn set_latch_of(procno: i32) {
    // SAFETY: ProcGlobal->allProcs has allProcCount entries for the life of the cluster;
    // setting the latch of an exited or reused process only causes a spurious wakeup.
    unsafe {
        let glob = pg_sys::ProcGlobal;
        if glob.is_null() || procno < 0 || procno as u32 >= (*glob).allProcCount {
            return;
        }
        let proc_ = (*glob).allProcs.add(procno as usize);
        pg_sys::SetLatch(&raw mut (*proc_).procLatch);
    }
}

/// The pid of the process with this `pgprocno` (0 when the entry is unused).
pub fn pid_of(procno: i32) -> i32 {
    // SAFETY: as in set_latch_of; a plain read of the entry's pid.
    unsafe {
        let glob = pg_sys::ProcGlobal;
        if glob.is_null() || procno < 0 || procno as u32 >= (*glob).allProcCount {
            return 0;
        }
        std::ptr::read_volatile(&(*(*glob).allProcs.add(procno as usize)).pid)
    }
}

/// The current subtransaction's id: ids grow within a top-level transaction, and one that
/// aborts has a subtree of ids at least its own (so a registration made at id `s` was made in
/// the aborting subtransaction `my` or below it exactly when `s >= my`).
pub fn current_subxact() -> u32 {
    // SAFETY: reads the backend's transaction state; valid inside a transaction.
    unsafe { pg_sys::GetCurrentSubTransactionId() }
}

/// The current time, µs since 2000-01-01 (PostgreSQL's epoch).
pub fn now_us() -> i64 {
    // SAFETY: reads the clock.
    unsafe { pg_sys::GetCurrentTimestamp() }
}

/// CPU time (user and system) this backend's process has used, µs (`CLOCK_PROCESS_CPUTIME_ID`).
pub fn cpu_us() -> i64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: writes the clock's reading into `ts`, which lives for the call.
    if unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut ts) } != 0 {
        return 0;
    }
    ts.tv_sec as i64 * 1_000_000 + ts.tv_nsec as i64 / 1_000
}

/// Sleeps on this backend's own latch until it is set or `deadline_us` (PostgreSQL µs) passes,
/// at most `cap_ms` when given (the polling interval when no wakeup can come), and resets it.
/// False, without sleeping, when the deadline had already passed. The long-poll claim
/// (src/wakeup.rs `_wait`) and `jq.await` (src/awaiting.rs `_await_sleep`) wait through it.
pub fn sleep_until(deadline_us: i64, cap_ms: Option<i64>) -> bool {
    let left_us = deadline_us - now_us();
    if left_us <= 0 {
        return false;
    }
    let timeout_ms = cap_ms.map_or((left_us + 999) / 1000, |cap| ((left_us + 999) / 1000).min(cap));
    // SAFETY: plain PostgreSQL calls on this backend's own latch.
    unsafe {
        pg_sys::WaitLatch(
            pg_sys::MyLatch,
            (pg_sys::WL_LATCH_SET | pg_sys::WL_TIMEOUT | pg_sys::WL_EXIT_ON_PM_DEATH) as i32,
            timeout_ms.max(1),
            pg_sys::PG_WAIT_EXTENSION,
        );
        pg_sys::ResetLatch(pg_sys::MyLatch);
    }
    true
}
