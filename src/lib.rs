//! jq: a durable job queue inside PostgreSQL with a SQL-native API.
//!
//! The public API is hand-written SQL in `sql/` (schema, queue administration, enqueue, the
//! worker calls, maintenance), included here in dependency order. Rust holds what is better in
//! Rust: the retry backoff arithmetic ([`backoff`]). The background worker, cron and wakeups
//! arrive with their own issue.
//!
//! See `docs/semantics.md` for the job model and `docs/sql-api.md` for the reference.

use pgrx::prelude::*;

pub mod backoff;
pub mod cron;
mod cron_sql;

::pgrx::pg_module_magic!(name, version);

extension_sql_file!("../sql/schema.sql", name = "schema", bootstrap);
extension_sql_file!("../sql/queues.sql", name = "queues", requires = ["schema"]);
extension_sql_file!("../sql/enqueue.sql", name = "enqueue", requires = ["queues"]);
extension_sql_file!("../sql/work.sql", name = "work", requires = ["enqueue", backoff::backoff_seconds]);
extension_sql_file!("../sql/cron.sql", name = "cron", requires = ["work", cron_sql::cron_next, cron_sql::cron_fires, cron_sql::_cron_check, cron_sql::_cron_latest, cron_sql::_cron_count]);
extension_sql_file!("../sql/maintenance.sql", name = "maintenance", requires = ["work"], finalize);

#[cfg(any(test, feature = "pg_test"))]
mod pg_tests;

/// Required by `cargo pgrx test`.
#[cfg(test)]
pub mod pg_test {
    pub fn setup(_options: Vec<&str>) {}

    pub fn postgresql_conf_options() -> Vec<&'static str> {
        vec![]
    }
}
