//! Random bits for caller tickets and lease tokens, from PostgreSQL's CSPRNG in batches.
//!
//! `pg_strong_random` (OpenSSL's `RAND_bytes` here) takes OpenSSL's locks and checks for a fork
//! on every call, whatever the number of bytes: drawn once per caller ticket and once per lease
//! token (`gen_random_uuid`), a measurable part of a one-job claim (docs/BENCHMARKS.md). So
//! this module draws [`BATCH`] 64-bit words at a time into
//! backend-local memory, which SQL cannot read, hands each out once (zeroing it), and draws
//! again in a process that is not the one that drew them (a forked child never reuses its
//! parent's bits). Same generator, same bits, fewer calls.

use pgrx::prelude::*;
use std::cell::RefCell;

/// 64-bit words drawn from `pg_strong_random` at once (1 KiB).
pub const BATCH: usize = 128;

/// Words not handed out yet, and the process that drew them.
struct Pool {
    pid: i32,
    left: usize,
    words: [u64; BATCH],
}

thread_local! {
    static POOL: RefCell<Pool> = const { RefCell::new(Pool { pid: 0, left: 0, words: [0; BATCH] }) };
}

/// 64 bits from `pg_strong_random`, taken from a pool refilled [`BATCH`] words at a time.
/// Errors: XX000 if the CSPRNG fails (`what` names what the bits were for).
pub fn random_u64(what: &str) -> u64 {
    // SAFETY: this backend's process id, set at its start.
    let pid = unsafe { pg_sys::MyProcPid };
    POOL.with_borrow_mut(|pool| {
        if pool.left == 0 || pool.pid != pid {
            pool.left = 0;  // a failed draw leaves nothing to hand out
            // SAFETY: writes exactly size_of_val(&pool.words) bytes into the words themselves
            // (no copy elsewhere); any bit pattern is a valid u64.
            let ok = unsafe {
                pg_sys::pg_strong_random(pool.words.as_mut_ptr().cast(), std::mem::size_of_val(&pool.words))
            };
            if !ok {
                ereport!(
                    ERROR,
                    PgSqlErrorCode::ERRCODE_INTERNAL_ERROR,
                    format!("jq: could not generate random bits for a {what}")
                );
            }
            pool.pid = pid;
            pool.left = BATCH;
        }
        pool.left -= 1;
        let bits = pool.words[pool.left];
        pool.words[pool.left] = 0;  // handed out once
        bits
    })
}

/// `jq._lease_token() RETURNS uuid`: a new lease token, a random (version 4) UUID as
/// `gen_random_uuid` makes it (RFC 9562, section 5.4: 122 random bits, version and variant
/// bits set), from the pooled bits of [`random_u64`]. Called by the claim statements once per
/// job claimed. Errors: XX000 if the CSPRNG fails.
#[pg_extern(create_or_replace, volatile, parallel_safe)]
fn _lease_token() -> pgrx::Uuid {
    let mut b = [0u8; 16];
    b[..8].copy_from_slice(&random_u64("lease token").to_ne_bytes());
    b[8..].copy_from_slice(&random_u64("lease token").to_ne_bytes());
    b[6] = (b[6] & 0x0f) | 0x40;  // version 4
    b[8] = (b[8] & 0x3f) | 0x80;  // variant 10
    pgrx::Uuid::from_bytes(b)
}
