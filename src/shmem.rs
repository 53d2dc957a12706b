//! Shared memory, the registration point: each subsystem owns one [`Area`] (a `static`) and
//! attaches it from its own `init` with pgrx's `pg_shmem_init!`, which chains the request and
//! startup hooks per area ([`ArrayArea`] when its length is a server setting). The areas are
//! the database slots and what the launcher knows about databases (src/bgworker/slots.rs,
//! src/bgworker/presence.rs), the long-poll waiters (src/wakeup.rs) and the claim-start hints
//! (src/claim_hint.rs).
//!
//! Areas exist only when jq is in `shared_preload_libraries` ([`Area::get`] is `None`
//! otherwise). They are zero-filled when the server (or a crash restart) creates them and are
//! made of atomics and spin-locked records ([`crate::spin::SpinCell`]), so no PostgreSQL lock
//! is taken on them.

use pgrx::pg_sys;
use pgrx::{PGRXSharedMemory, PgSharedMemoryInitialization};
use std::cell::UnsafeCell;
use std::ffi::CStr;

/// A type whose all-zero bytes are a valid value (atomics, integers, `false`, an enum whose
/// zero is a variant): what a newly created [`Area`] holds.
///
/// # Safety
/// Every field, recursively, must accept all-zero bytes as a valid value.
pub unsafe trait Zeroable {}

/// One named, fixed-size struct `T` in shared memory.
pub struct Area<T> {
    name: &'static CStr,
    ptr: UnsafeCell<*const T>,
}

// SAFETY: the pointer is written once, by the startup hook in the postmaster before any backend
// forks (and in a crash restart before new backends start); T is only shared through atomics or
// spin locks.
unsafe impl<T: Sync> Sync for Area<T> {}
// SAFETY: as above; pgrx requires the marker for `pg_shmem_init!`.
unsafe impl<T: Sync> PGRXSharedMemory for Area<T> {}

impl<T: Zeroable + Sync> Area<T> {
    /// An area named `name` (unique among PostgreSQL's shared-memory structs).
    pub const fn new(name: &'static CStr) -> Area<T> {
        Area { name, ptr: UnsafeCell::new(std::ptr::null()) }
    }

    /// The area, or `None` when jq was not preloaded.
    pub fn get(&self) -> Option<&'static T> {
        // SAFETY: see the `Sync` impl; the pointee lives as long as the server's shared memory.
        unsafe { (*self.ptr.get()).as_ref() }
    }
}

impl<T: Zeroable + Sync> PgSharedMemoryInitialization for Area<T> {
    type Value = ();

    unsafe fn on_shmem_request(&'static self) {
        // SAFETY: called by the postmaster in the shared-memory request phase.
        unsafe { pg_sys::RequestAddinShmemSpace(std::mem::size_of::<T>()) };
    }

    unsafe fn on_shmem_startup(&'static self, _value: ()) {
        // SAFETY: called by the postmaster (and after a crash restart) while shared memory is set
        // up; AddinShmemInitLock (MainLWLockArray[21]) serialises ShmemInitStruct as PostgreSQL
        // requires. All-zero bytes are a valid T (`Zeroable`).
        unsafe {
            let lock = &raw mut (*pg_sys::MainLWLockArray.add(21)).lock;
            pg_sys::LWLockAcquire(lock, pg_sys::LWLockMode::LW_EXCLUSIVE);
            let mut found = false;
            let p = pg_sys::ShmemInitStruct(self.name.as_ptr(), std::mem::size_of::<T>(), &mut found);
            if !found {
                std::ptr::write_bytes(p.cast::<u8>(), 0, std::mem::size_of::<T>());
            }
            *self.ptr.get() = p.cast::<T>();
            pg_sys::LWLockRelease(lock);
        }
    }
}

/// A named array of `E` in shared memory whose length is chosen when the server starts (by a
/// `postmaster` setting read in the request phase), e.g. the database slots sized by
/// `jq.max_databases`.
pub struct ArrayArea<E> {
    name: &'static CStr,
    /// The length to allocate; called in the postmaster only, while shared memory is set up.
    len: fn() -> usize,
    ptr: UnsafeCell<*const E>,
    n: UnsafeCell<usize>,
}

// SAFETY: as for `Area`: written once by the postmaster before any backend forks.
unsafe impl<E: Sync> Sync for ArrayArea<E> {}
// SAFETY: as above; pgrx requires the marker for `pg_shmem_init!`.
unsafe impl<E: Sync> PGRXSharedMemory for ArrayArea<E> {}

impl<E: Zeroable + Sync> ArrayArea<E> {
    /// An array named `name` of `len()` elements.
    pub const fn new(name: &'static CStr, len: fn() -> usize) -> ArrayArea<E> {
        ArrayArea { name, len, ptr: UnsafeCell::new(std::ptr::null()), n: UnsafeCell::new(0) }
    }

    /// The array, or `None` when jq was not preloaded.
    pub fn get(&self) -> Option<&'static [E]> {
        // SAFETY: see the `Sync` impl; ptr and n are set together before any reader exists and
        // the elements live as long as the server's shared memory.
        unsafe {
            let p = *self.ptr.get();
            (!p.is_null()).then(|| std::slice::from_raw_parts(p, *self.n.get()))
        }
    }

    fn bytes(&self) -> usize {
        std::mem::size_of::<E>() * (self.len)().max(1)
    }
}

impl<E: Zeroable + Sync> PgSharedMemoryInitialization for ArrayArea<E> {
    type Value = ();

    unsafe fn on_shmem_request(&'static self) {
        // SAFETY: called by the postmaster in the shared-memory request phase.
        unsafe { pg_sys::RequestAddinShmemSpace(self.bytes()) };
    }

    unsafe fn on_shmem_startup(&'static self, _value: ()) {
        // SAFETY: as `Area::on_shmem_startup`; the length comes from a postmaster setting, the
        // same in the request phase and after a crash restart.
        unsafe {
            let lock = &raw mut (*pg_sys::MainLWLockArray.add(21)).lock;
            pg_sys::LWLockAcquire(lock, pg_sys::LWLockMode::LW_EXCLUSIVE);
            let mut found = false;
            let p = pg_sys::ShmemInitStruct(self.name.as_ptr(), self.bytes(), &mut found);
            if !found {
                std::ptr::write_bytes(p.cast::<u8>(), 0, self.bytes());
            }
            *self.n.get() = (self.len)().max(1);
            *self.ptr.get() = p.cast::<E>();
            pg_sys::LWLockRelease(lock);
        }
    }
}

macro_rules! zeroable {
    ($($t:ty),*) => { $(
        // SAFETY: zero is a valid value of this type.
        unsafe impl Zeroable for $t {}
    )* };
}
zeroable!(bool, u8, u32, i32, u64, i64, f64);
zeroable!(std::sync::atomic::AtomicBool, std::sync::atomic::AtomicU32, std::sync::atomic::AtomicI32,
          std::sync::atomic::AtomicU64);
// SAFETY: an array of zeroable elements is zeroable.
unsafe impl<T: Zeroable, const N: usize> Zeroable for [T; N] {}
