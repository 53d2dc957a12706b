//! Command-line arguments: positional values, and the latency driver's CONSUMERS (N or client:W:C).

pub(crate) fn arg<T: std::str::FromStr>(args: &[String], i: usize, what: &str) -> T {
    args.get(i)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("argument {i} ({what}) missing or invalid; see bench/driver/src/main.rs"))
}

/// Who claims in the latency driver: SQL loops on their own connections, or jq's Rust client.
#[derive(Clone, Copy)]
pub(crate) enum Consumers {
    /// This many connections looping `jq.claim(…, wait => '1 second')` + `jq.complete_many`;
    /// a job's pickup ends when the claim returns it.
    Sql(usize),
    /// `workers` × `worker_client::Worker` (long-poll claims) with `concurrency` handlers each;
    /// a job's pickup ends when its handler starts (the handler's first statement).
    Client { workers: usize, concurrency: usize },
}

impl std::str::FromStr for Consumers {
    type Err = String;
    /// `N` (SQL loops) or `client:W:C` (W workers of C handlers).
    fn from_str(s: &str) -> Result<Self, String> {
        let bad = || format!("consumers: {s:?}: expected N or client:WORKERS:CONCURRENCY");
        match s.strip_prefix("client:") {
            None => s.parse().map(Consumers::Sql).map_err(|_| bad()),
            Some(rest) => {
                let (w, c) = rest.split_once(':').ok_or_else(bad)?;
                Ok(Consumers::Client { workers: w.parse().map_err(|_| bad())?, concurrency: c.parse().map_err(|_| bad())? })
            }
        }
    }
}
