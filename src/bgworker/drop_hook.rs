//! The `ProcessUtility` hook that keeps jq from blocking `DROP DATABASE`,
//! `ALTER DATABASE … RENAME` and `CREATE DATABASE … TEMPLATE x`: each refuses to run while
//! another session is connected to that database, so jq's maintenance worker there is stopped
//! first and not restarted for [`super::SUSPEND_SECS`] s
//! (`drop_database_and_template_use_are_not_blocked_by_the_worker` in pg_test/tests/bgworker/launcher.rs).
//!
//! It also tells the launcher, at commit, of the statements after which a database may have
//! lost or gained jq without `jq._launcher_wake()` running: `DROP EXTENSION jq` and
//! `COMMIT PREPARED` (src/bgworker/presence.rs).

use super::process::{now_ts, terminate, USECS_PER_SEC};
use super::slots::{self, SlotState};
use crate::gucs;
use super::SUSPEND_SECS;
use pgrx::pg_sys;
use pgrx::prelude::*;

static mut PREV_UTILITY: pg_sys::ProcessUtility_hook_type = None;

/// Installs [`utility_hook`]. Called from `_PG_init` while preloading.
pub fn init() {
    // SAFETY: _PG_init runs single-threaded; the previous hook is chained.
    unsafe {
        PREV_UTILITY = pg_sys::ProcessUtility_hook;
        pg_sys::ProcessUtility_hook = Some(utility_hook);
    }
}

/// Stops the maintenance worker of `dbname` (if any) for [`SUSPEND_SECS`] s — only for a
/// superuser or the database's owner, who alone may drop, rename or copy it, so that no other
/// role can pause maintenance with a statement that is then refused
/// (`a_refused_drop_database_does_not_suspend_maintenance`).
fn suspend_database(dbname: *const std::ffi::c_char) {
    if dbname.is_null() {
        return;
    }
    let Some(sh) = slots::get() else { return };
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
    let until = now_ts() + SUSPEND_SECS * USECS_PER_SEC;
    // A listed database without a slot (no jq known yet, or all slots taken) gets one in state
    // Suspended, so that the launcher does not start a worker there while the statement waits
    // (a probe that connects meanwhile leaves within milliseconds, well inside that wait).
    // SAFETY: dbname is a valid C string (checked non-null above).
    let listed = || gucs::database_listed(&unsafe { std::ffi::CStr::from_ptr(dbname) }.to_string_lossy());
    let slot = sh.slot_of(oid.to_u32()).or_else(|| {
        listed().then(|| sh.slot_for_in(oid.to_u32(), SlotState::Suspended, until)).flatten()
    });
    if let Some(slot) = slot {
        let pid = slot.with(|s| {
            let pid = s.pid;
            s.state = SlotState::Suspended;
            s.pid = 0;
            s.recheck_at = until;
            pid
        });
        // DROP DATABASE then waits (up to 5 s, PostgreSQL's own loop) for the worker to leave.
        terminate(pid);
    }
}

/// Whether `stmt` drops the extension jq.
///
/// # Safety
/// `stmt` is a valid `DropStmt`.
unsafe fn drops_jq(stmt: *mut pg_sys::DropStmt) -> bool {
    // SAFETY: for OBJECT_EXTENSION the objects are String nodes (the grammar's name_list).
    unsafe {
        (*stmt).removeType == pg_sys::ObjectType::OBJECT_EXTENSION
            && pgrx::PgList::<pg_sys::String>::from_pg((*stmt).objects).iter_ptr().any(|n| {
                !n.is_null() && !(*n).sval.is_null() && std::ffi::CStr::from_ptr((*n).sval).to_bytes() == b"jq"
            })
    }
}

/// Suspends the database a utility statement is about to drop, rename or copy, and notes a
/// statement that may drop or create jq here (see the module documentation).
///
/// # Safety
/// `node` is a valid utility statement node.
unsafe fn suspend_for(node: *mut pg_sys::Node) {
    // SAFETY: node tags identify the struct types; the caller passes a valid node.
    unsafe {
        // DROP/CREATE DATABASE refuse to run in a transaction block; don't suspend for them.
        let in_block = pg_sys::IsTransactionBlock();
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
            pg_sys::NodeTag::T_DropStmt if drops_jq(node as *mut pg_sys::DropStmt) => {
                super::note_presence_change();
            }
            pg_sys::NodeTag::T_TransactionStmt => {
                let t = node as *mut pg_sys::TransactionStmt;
                if (*t).kind == pg_sys::TransactionStmtKind::TRANS_STMT_COMMIT_PREPARED {
                    super::note_presence_change();
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
}

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
    // SAFETY: pstmt is a valid planned utility statement (the hook's contract).
    unsafe {
        let node = (*pstmt).utilityStmt;
        if !node.is_null() {
            suspend_for(node);
        }
        match PREV_UTILITY {
            Some(prev) => prev(pstmt, query_string, read_only_tree, context, params, query_env, dest, qc),
            None => pg_sys::standard_ProcessUtility(
                pstmt, query_string, read_only_tree, context, params, query_env, dest, qc,
            ),
        }
    }
}
