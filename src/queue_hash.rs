//! The one hash of a queue name, shared by SQL and Rust.
//!
//! [`QueueHash::of`] is `pg_catalog.hashtextextended(name, 0)`: the key of `jobs_claim_idx` and
//! of `queues_name_hash_idx`, the unique index that keeps two queues of a database from having
//! the same hash. Rust derives from it the long-poll waiter entries ([`QueueHash::low31`]), the
//! bit of the ready filter behind `NOTIFY jq_ready` ([`QueueHash::bit`]) and the claim-start
//! hint tag ([`QueueHash::in_database`]). The SQL value is the same 64 bits read as a signed
//! `bigint`; `jq._queue_bit(q) = hashtextextended(q, 0) & 1023` holds for every name
//! (checked by the in-backend test `queue_hash_is_hashtextextended`).

unsafe extern "C" {
    /// PostgreSQL's `hash_bytes_extended` (src/common/hashfn.c), which `hashtextextended` calls
    /// for text under a deterministic collation.
    fn hash_bytes_extended(k: *const u8, keylen: std::ffi::c_int, seed: u64) -> u64;
}

/// A queue name's hash (`hashtextextended(name, 0)` as an unsigned 64-bit value).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct QueueHash(pub u64);

impl QueueHash {
    /// The hash of `name`, as `hashtextextended(name, 0)` computes it under a deterministic
    /// collation (jq refuses nondeterministic ones: src/security.rs).
    pub fn of(name: &str) -> QueueHash {
        // Queue names are short (jq.create_queue limits them); a text longer than i32::MAX bytes
        // cannot exist in PostgreSQL.
        let len = name.len().min(i32::MAX as usize) as std::ffi::c_int;
        // SAFETY: reads `len` bytes of `name`; the function has no other effect.
        QueueHash(unsafe { hash_bytes_extended(name.as_ptr(), len, 0) })
    }

    /// The low 31 bits: what a waiter entry stores (its top bit marks a capped queue).
    pub fn low31(self) -> u32 {
        (self.0 as u32) & !(1 << 31)
    }

    /// The bit of a filter of `bits` bits that stands for this queue.
    pub fn bit(self, bits: usize) -> usize {
        (self.0 % bits as u64) as usize
    }

    /// The hash combined with the database `db`: distinct for the queues of one database (an
    /// injective mix of the hash for a fixed `db`), never 0.
    pub fn in_database(self, db: u32) -> u64 {
        (self.0 ^ u64::from(db).wrapping_mul(0x9e37_79b9_7f4a_7c15)).max(1)
    }
}
