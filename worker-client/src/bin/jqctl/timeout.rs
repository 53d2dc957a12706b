//! The statement timeout jqctl's servers (`metrics`, `dashboard`) put on each of their
//! transactions, so that a query waiting behind another session's lock ends instead of holding
//! the server's connection (tests/metrics.rs, tests/dashboard.rs).

/// SQL that limits every statement of the current transaction to `secs` seconds: sets
/// statement_timeout with `set_config(…, is_local => true)` (SET LOCAL: it ends with the
/// transaction, also on a server connection a transaction-mode pooler hands to its next
/// client), unless the session's own limit (the server's, the role's or the database's) is
/// already as strict or stricter, which it keeps. `secs` = 0: no limit of jqctl's own, the
/// empty string. `local` false only for the negative control `dashboard_session_timeout`.
pub fn limit_statements(secs: u32, local: bool) -> String {
    if secs == 0 {
        return String::new();
    }
    let ms = u64::from(secs) * 1000;
    format!(
        "SELECT pg_catalog.set_config('statement_timeout', '{ms}', {local}) FROM pg_catalog.pg_settings \
         WHERE name = 'statement_timeout' AND (setting::bigint = 0 OR setting::bigint > {ms})"
    )
}

#[cfg(test)]
mod tests {
    use super::limit_statements;

    #[test]
    fn zero_sets_nothing_and_others_keep_a_stricter_limit() {
        assert_eq!(limit_statements(0, true), "");
        let sql = limit_statements(10, true);
        assert!(sql.contains("'10000', true") && sql.contains("setting::bigint > 10000"), "{sql}");
    }
}
