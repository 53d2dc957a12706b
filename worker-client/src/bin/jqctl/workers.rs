//! `jqctl workers`: the worker fleet (jq.fleet), one line per registered worker the role may
//! see, in columns that fit a 100-column terminal.

use crate::{connect, table, Cli, CliError, CliResult};

/// The listing: name, state, queues, jobs held / concurrency, resident memory, when it started,
/// and how long ago it last beat. Active workers first, then stale, then stopped.
const WORKERS_SQL: &str = "\
    SELECT name, state, array_to_string(queues, ',') AS queues, \
           in_flight || '/' || concurrency AS jobs, \
           CASE WHEN rss_bytes > 0 THEN pg_size_pretty(rss_bytes) ELSE '' END AS rss, \
           to_char(started_at, 'YYYY-MM-DD HH24:MI') AS started, \
           CASE WHEN stopped_at IS NOT NULL THEN 'stopped ' || floor(extract(epoch FROM now() - stopped_at))::bigint || 's ago' \
                ELSE floor(extract(epoch FROM now() - last_beat_at))::bigint || 's ago' END AS last_beat \
    FROM jq.fleet \
    ORDER BY CASE state WHEN 'active' THEN 0 WHEN 'stale' THEN 1 ELSE 2 END, name, started_at";

/// `jqctl workers`: prints the fleet table.
pub async fn workers(cli: &Cli) -> CliResult {
    let client = connect(cli).await?;
    let exists: bool = client.query_typed_one("SELECT to_regclass('jq.fleet') IS NOT NULL", &[]).await?.get(0);
    if !exists {
        return Err(CliError(
            "this jq has no worker registry (view jq.fleet does not exist); install a jq version with it".into(),
        ));
    }
    let (h, rows) = table::query_text(&client, WORKERS_SQL).await?;
    table::print(&h, &rows);
    Ok(())
}
