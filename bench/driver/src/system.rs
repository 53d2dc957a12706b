//! The queue systems a load driver can run against: jq, pgmq (SQL only) and the raw-SQL floor
//! (bench/pgbench/floor.sql). Each gives its batch enqueue, its claim of up to 10 jobs and its
//! completion of what it claimed; the drivers' producer and consumer loops are the same for all.

use std::time::Duration;

use tokio_postgres::types::ToSql;
use tokio_postgres::{Client, Row, Statement};

use super::Res;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum System {
    Jq,
    Pgmq,
    Floor,
}

impl std::str::FromStr for System {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "jq" => Ok(System::Jq),
            "pgmq" => Ok(System::Pgmq),
            "floor" => Ok(System::Floor),
            _ => Err(format!("system {s:?}: expected jq, pgmq or floor")),
        }
    }
}

impl std::fmt::Display for System {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            System::Jq => "jq",
            System::Pgmq => "pgmq",
            System::Floor => "floor",
        })
    }
}

impl System {
    /// Enqueues `$2` jobs (`{"n":1}`) on queue `$1` in one statement; one row per job, its id.
    pub(crate) fn enqueue_sql(self) -> &'static str {
        match self {
            System::Jq => "SELECT id FROM jq.enqueue_many($1, (SELECT jsonb_agg('{\"n\":1}'::jsonb) FROM generate_series(1, $2::int))) AS id",
            System::Pgmq => "SELECT id FROM pgmq.send_batch($1::text, (SELECT array_agg('{\"n\":1}'::jsonb) FROM generate_series(1, $2::int))) AS id",
            System::Floor => "INSERT INTO floor_jobs (queue, state, payload) SELECT $1::text, 'ready', '{\"n\":1}' FROM generate_series(1, $2::int) RETURNING id",
        }
    }

    /// Claims up to 10 jobs; one row per job: its id, then (jq, floor) the lease token the
    /// completion is fenced on. jq long-polls (`wait => 1 second`, returns as soon as a job is
    /// claimable), pgmq polls inside `read_with_poll` (every 10 ms for at most 1 s; the visibility
    /// timeout, 30 s, is its lease), the floor does not wait (the consumer sleeps `idle()`).
    fn claim_sql(self) -> &'static str {
        match self {
            System::Jq => "SELECT id, lease_token FROM jq.claim($1, $2, 10, NULL, interval '1 second')",
            System::Pgmq => "SELECT msg_id FROM pgmq.read_with_poll($1::text, 30, 10, max_poll_seconds => 1, poll_interval_ms => 10)",
            // bench/pgbench/floor_claim_complete_b10.pgbench's claim: one transaction.
            System::Floor => {
                "WITH c AS (SELECT id FROM floor_jobs WHERE queue = $1 AND state = 'ready' \
                 ORDER BY priority DESC, run_at, id LIMIT 10 FOR UPDATE SKIP LOCKED) \
                 UPDATE floor_jobs j SET state = 'running', attempt = j.attempt + 1, worker = $2, \
                 lease_token = gen_random_uuid(), lease_expires_at = now() + interval '5 minutes' \
                 FROM c WHERE j.id = c.id RETURNING j.id, j.lease_token"
            }
        }
    }

    /// Completes the claimed jobs in a second transaction; one row: how many it completed.
    /// jq and the floor act only on jobs still running under the token the claim returned;
    /// pgmq deletes by message id (its contract has no token).
    fn complete_sql(self) -> &'static str {
        match self {
            System::Jq => "SELECT count(*) FROM jq.complete_many($1, $2)",
            System::Pgmq => "SELECT count(*) FROM pgmq.delete($1::text, $2::bigint[])",
            System::Floor => {
                "WITH d AS (UPDATE floor_jobs f SET state = 'completed' FROM unnest($1::bigint[], $2::uuid[]) AS t(id, token) \
                 WHERE f.id = t.id AND f.lease_token = t.token AND f.state = 'running' RETURNING f.id) SELECT count(*) FROM d"
            }
        }
    }

    /// The pause after a claim that returned nothing: the floor has no long-poll.
    pub(crate) fn idle(self) -> Option<Duration> {
        (self == System::Floor).then(|| Duration::from_millis(10))
    }
}

/// One consumer connection's prepared claim and completion.
pub(crate) struct Claimer {
    system: System,
    queue: String,
    name: String,
    claim: Statement,
    complete: Statement,
}

impl Claimer {
    pub(crate) async fn prepare(client: &Client, system: System, queue: &str, name: String) -> Res<Claimer> {
        let claim = client.prepare(system.claim_sql()).await?;
        let complete = client.prepare(system.complete_sql()).await?;
        Ok(Claimer { system, queue: queue.to_string(), name, claim, complete })
    }

    /// One claim: the jobs' rows (id first).
    pub(crate) async fn claim(&self, client: &Client) -> Res<Vec<Row>> {
        let params: &[&(dyn ToSql + Sync)] = match self.system {
            System::Pgmq => &[&self.queue],
            System::Jq | System::Floor => &[&self.queue, &self.name],
        };
        Ok(client.query(&self.claim, params).await?)
    }

    /// Completes the jobs of one claim's rows; returns how many the system reports completed.
    pub(crate) async fn complete(&self, client: &Client, rows: &[Row]) -> Res<i64> {
        let ids: Vec<i64> = rows.iter().map(|r| r.get(0)).collect();
        let n = match self.system {
            System::Pgmq => client.query_one(&self.complete, &[&self.queue, &ids]).await?,
            System::Jq | System::Floor => {
                let toks: Vec<uuid::Uuid> = rows.iter().map(|r| r.get(1)).collect();
                client.query_one(&self.complete, &[&ids, &toks]).await?
            }
        };
        Ok(n.get(0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn systems_parse_by_name_and_only_the_floor_pauses() {
        for s in [System::Jq, System::Pgmq, System::Floor] {
            assert_eq!(s.to_string().parse::<System>().unwrap(), s);
        }
        assert!("awa".parse::<System>().is_err());
        assert_eq!(System::Floor.idle(), Some(Duration::from_millis(10)));
        assert_eq!((System::Jq.idle(), System::Pgmq.idle()), (None, None));
    }
}
