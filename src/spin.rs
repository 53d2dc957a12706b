//! A tiny spin lock for records of several fields in shared memory.

use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicBool, Ordering};

/// Busy-wait rounds before a waiting [`acquire`] yields its CPU.
const SPINS_BEFORE_YIELD: u32 = 100;

/// Takes a spin lock (`flag` false -> true; release by storing false). A waiter spins briefly,
/// then yields its CPU between tries, as PostgreSQL's own s_lock sleeps after its spins
/// (src/backend/storage/lmgr/s_lock.c): with more backends than CPUs the holder may have been
/// preempted inside its few instructions, and a waiter that only spins burns its whole time
/// slice before the holder runs again.
pub fn acquire(flag: &AtomicBool) {
    let mut spins = 0u32;
    while flag.compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed).is_err() {
        spins = spins.saturating_add(1);
        if spins < SPINS_BEFORE_YIELD {
            std::hint::spin_loop();
        } else {
            std::thread::yield_now();
        }
    }
}

/// Releases a lock taken with [`acquire`].
pub fn release(flag: &AtomicBool) {
    flag.store(false, Ordering::Release);
}

/// A value behind a spin lock. Never held across a call into PostgreSQL.
#[repr(C)]
pub struct SpinCell<T> {
    lock: AtomicBool,
    value: UnsafeCell<T>,
}

// SAFETY: the value is only reached under the lock (`with`).
unsafe impl<T: Send> Sync for SpinCell<T> {}

// SAFETY: a zero lock is unlocked; the value must itself be zeroable.
unsafe impl<T: crate::shmem::Zeroable> crate::shmem::Zeroable for SpinCell<T> {}

impl<T> SpinCell<T> {
    /// Runs `f` on the value under the spin lock ([`acquire`]). `f` must not call into
    /// PostgreSQL.
    pub fn with<R>(&self, f: impl FnOnce(&mut T) -> R) -> R {
        acquire(&self.lock);
        // SAFETY: the spin lock gives exclusive access to the cell.
        let r = f(unsafe { &mut *self.value.get() });
        release(&self.lock);
        r
    }
}
