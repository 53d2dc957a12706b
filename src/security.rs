//! Who is calling: caller tickets.
//!
//! jq's API functions are `SECURITY DEFINER` (docs/security.md): they run as the extension's
//! owner, so jq's tables need no grants and stay unwritable except through them. Inside such a
//! function `current_user` is the owner, and PostgreSQL keeps no record of the role that called
//! it. The per-queue checks need that role, so the functions that check a queue take a last
//! parameter `caller_ticket bigint DEFAULT jq._ticket()`. PostgreSQL evaluates a parameter's
//! default in the calling query, before the call, where `current_user` is still the caller (the
//! session's role, or the owner of the caller's own `SECURITY DEFINER` function or view). The
//! function then redeems the ticket with [`_redeem`] and checks that role's grants.
//!
//! A ticket is 64 random bits bound to the role that was current when it was issued, kept in
//! this backend's memory until it is redeemed (once). The bits come from `pg_strong_random`
//! (OpenSSL's CSPRNG), drawn in batches (src/random.rs). A caller can only obtain tickets for
//! itself, so passing one explicitly gains nothing; a made-up or reused ticket is refused
//! (42501). At most [`MAX_OUTSTANDING`] unredeemed tickets are kept (the oldest are dropped):
//! a ticket issued for a call that then failed before redeeming it cannot pile up.

use pgrx::prelude::*;
use std::cell::RefCell;

/// Unredeemed tickets kept per backend; normally 0 or 1 (a ticket lives from the evaluation of
/// the call's arguments to the first statement of the function).
pub const MAX_OUTSTANDING: usize = 64;

thread_local! {
    static TICKETS: RefCell<Vec<(i64, pg_sys::Oid)>> = const { RefCell::new(Vec::new()) };
}

/// `jq._ticket() RETURNS bigint`: a new caller ticket for the current role (`current_user`).
/// Only meant as the default of `caller_ticket` parameters; see the module documentation.
#[pg_extern(create_or_replace, volatile, parallel_unsafe)]
fn _ticket() -> i64 {
    // SAFETY: reads the backend's current user id; always valid in a transaction.
    let role = unsafe { pg_sys::GetUserId() };
    let ticket = crate::random::random_u64("caller ticket") as i64;
    TICKETS.with_borrow_mut(|t| {
        if t.len() >= MAX_OUTSTANDING {
            t.remove(0);
        }
        t.push((ticket, role));
    });
    ticket
}

/// `jq._redeem(ticket bigint) RETURNS oid`: the role a ticket was issued to; the ticket is used
/// up. Errors: 42501 when the ticket was not issued in this session or was already redeemed
/// (including NULL).
#[pg_extern(create_or_replace, volatile, parallel_unsafe)]
fn _redeem(ticket: Option<i64>) -> pg_sys::Oid {
    let found = ticket.and_then(|ticket| {
        TICKETS.with_borrow_mut(|t| {
            t.iter().position(|(k, _)| *k == ticket).map(|i| t.swap_remove(i).1)
        })
    });
    match found {
        Some(role) => role,
        None => {
            ereport!(
                ERROR,
                PgSqlErrorCode::ERRCODE_INSUFFICIENT_PRIVILEGE,
                "jq: caller_ticket is not a ticket this session was issued",
                "Omit the caller_ticket argument: PostgreSQL fills it in with jq._ticket()."
            );
        }
    }
}

/// Whether `role` may do everything on every queue: a superuser, or a role with the privileges
/// of `jq_admin`. Syscache lookups only.
fn is_jq_admin(role: pg_sys::Oid) -> bool {
    // SAFETY: catalog lookups by OID and name, valid inside a transaction.
    unsafe {
        if pg_sys::superuser_arg(role) {
            return true;
        }
        let admin = pg_sys::get_role_oid(c"jq_admin".as_ptr(), true);
        admin != pg_sys::InvalidOid && pg_sys::has_privs_of_role(role, admin)
    }
}

/// `jq._authorize(caller_ticket bigint, queues text[], privilege text) RETURNS oid`: redeems the
/// ticket ([`_redeem`]) and raises 42501 unless that role may exercise `privilege` (enqueue,
/// work, admin) on every queue in `queues` (`jq._denial`, sql/grants.sql). Superusers and
/// members of `jq_admin` pass without a query and without decoding `queues`, so the hot path
/// costs two syscache lookups. The error is raised here, not inside the query, so that it
/// carries no Rust backtrace. Returns the calling role. One queue: [`_authorize_queue`].
#[pg_extern(create_or_replace, volatile, parallel_unsafe)]
fn _authorize(
    caller_ticket: Option<i64>,
    queues: Option<pgrx::datum::Array<&str>>,
    privilege: Option<&str>,
    fcinfo: pg_sys::FunctionCallInfo,
) -> pg_sys::Oid {
    authorize(fcinfo, caller_ticket, privilege, || {
        queues.map(|a| a.iter().map(|q| q.map(str::to_owned)).collect()).unwrap_or_default()
    })
}

/// `jq._authorize_queue(caller_ticket bigint, queue text, privilege text) RETURNS oid`:
/// [`_authorize`] for one queue (NULL: denied unless admin; '*': every queue), without an array
/// to build and decode: the form every function naming one queue calls (jq.claim on one queue,
/// jq.enqueue, the queue administration functions). Errors: 42501.
#[pg_extern(create_or_replace, volatile, parallel_unsafe)]
fn _authorize_queue(
    caller_ticket: Option<i64>,
    queue: Option<&str>,
    privilege: Option<&str>,
    fcinfo: pg_sys::FunctionCallInfo,
) -> pg_sys::Oid {
    authorize(fcinfo, caller_ticket, privilege, || vec![queue.map(str::to_owned)])
}

/// The check behind [`_authorize`] and [`_authorize_queue`]: the caller redeemed from its
/// ticket; `queues` is only built for a caller who is not a jq admin.
fn authorize(
    fcinfo: pg_sys::FunctionCallInfo,
    caller_ticket: Option<i64>,
    privilege: Option<&str>,
    queues: impl FnOnce() -> Vec<Option<String>>,
) -> pg_sys::Oid {
    refuse_nondeterministic_collation(fcinfo);
    let caller = _redeem(caller_ticket);
    if !is_jq_admin(caller) {
        deny_unless_granted(caller, queues(), privilege);
    }
    caller
}

/// Raises 0A000 (feature_not_supported) when the call's collation is nondeterministic.
///
/// A PL/pgSQL or SQL function's text parameters take the collation of the arguments it was
/// called with, and a non-default implicit collation wins over a column's default one in a
/// comparison. So `jq.pause('acme' COLLATE some_case_insensitive_icu_collation)` would compare
/// `t.name = pause.name` case-insensitively and also pause `ACME`, another tenant's queue,
/// while the grant check (exact, via SPI) only looked at `acme`. Every function that names a
/// queue passes that name to [`_authorize`] or [`_authorize_queue`] first, so the call
/// carries the caller's collation here, where it is refused before anything is read or
/// written. Deterministic collations compare equal only byte-equal strings, so they are
/// harmless. The default collation (the common case) costs one comparison.
fn refuse_nondeterministic_collation(fcinfo: pg_sys::FunctionCallInfo) {
    // SAFETY: pgrx passes the call's own, valid FunctionCallInfo; the collation lookup is a
    // syscache read, valid in a transaction.
    let collation = unsafe { (*fcinfo).fncollation };
    if collation == pg_sys::InvalidOid || collation == pg_sys::DEFAULT_COLLATION_OID {
        return;
    }
    if !unsafe { pg_sys::get_collation_isdeterministic(collation) } {
        ereport!(
            ERROR,
            PgSqlErrorCode::ERRCODE_FEATURE_NOT_SUPPORTED,
            "jq: queue names cannot be compared under a nondeterministic collation",
            "Pass the queue name without a COLLATE clause (or with a deterministic collation)."
        );
    }
}

/// Raises 42501 with `jq._denial`'s message unless `caller` may exercise `privilege` on every
/// queue in `queues` (a NULL queue is never granted).
fn deny_unless_granted(caller: pg_sys::Oid, queues: Vec<Option<String>>, privilege: Option<&str>) {
    let denial = Spi::get_one_with_args::<String>(
        "SELECT jq._denial($1, $2, $3)",
        &[caller.into(), queues.into(), privilege.into()],
    )
    .unwrap_or_else(|e| error!("jq._authorize: {e}"));
    if let Some(message) = denial {
        ereport!(
            ERROR,
            PgSqlErrorCode::ERRCODE_INSUFFICIENT_PRIVILEGE,
            message,
            "A member of jq_admin can grant it with jq.grant(queue, role, privilege)."
        );
    }
}
