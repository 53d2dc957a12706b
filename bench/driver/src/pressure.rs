//! `jq-bench pressure`: pickup latency of every job at a fixed offered load that follows a
//! schedule of segments (clean, pressure, recovery: bench/pressure/run.py applies the pressure
//! from outside and cuts the CSV into phases by time).

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::latency::{collect_claims, sql_consumer};
use super::system::System;
use super::{connect, pct, Res};

/// Jobs per enqueue call (`jq.enqueue_many`, `pgmq.send_batch`, the floor's `INSERT … SELECT`):
/// at 800 jobs/s one call every 12.5 ms over all producers.
const CHUNK: usize = 10;

/// How long after the schedule's end a job may still be picked up; later it counts as missing.
const GRACE: Duration = Duration::from_secs(10);

/// The offered load: `(seconds, jobs per second)` segments, in order.
pub(crate) fn parse_schedule(s: &str) -> Res<Vec<(f64, f64)>> {
    s.split(',')
        .map(|seg| {
            let bad = || format!("schedule segment {seg:?}: expected SECS:RATE");
            let (secs, rate) = seg.split_once(':').ok_or_else(bad)?;
            let (secs, rate): (f64, f64) = (secs.trim().parse().map_err(|_| bad())?, rate.trim().parse().map_err(|_| bad())?);
            if !(secs > 0.0 && rate >= 0.0 && secs.is_finite() && rate.is_finite()) {
                return Err(bad().into());
            }
            Ok((secs, rate))
        })
        .collect()
}

/// When each enqueue call is due, as an offset from the start: evenly spaced at each
/// segment's rate (CHUNK jobs per call), the segments back to back.
fn call_offsets(schedule: &[(f64, f64)]) -> Vec<f64> {
    let mut due = Vec::new();
    let mut seg_start = 0.0;
    for &(secs, rate) in schedule {
        if rate > 0.0 {
            let every = CHUNK as f64 / rate;
            let mut t = seg_start;
            while t < seg_start + secs - 1e-9 {
                due.push(t);
                t += every;
            }
        }
        seg_start += secs;
    }
    due
}

/// What one producer sent: each job's id with the instant the call's commit answer reached the
/// producer, and each call's duration in ms (send to answer).
type Sent = (Vec<(i64, Instant)>, Vec<f64>);

/// One producer: its share of the calls (every `producers`-th), open loop: each call is sent at
/// its due time or, when the producer is behind, at once.
async fn producer(url: &str, system: System, queue: &str, start: Instant, offsets: Vec<f64>) -> Res<tokio::task::JoinHandle<Res<Sent>>> {
    let client = connect(url).await?;
    let queue = queue.to_string();
    Ok(tokio::spawn(async move {
        let enq = client.prepare(system.enqueue_sql()).await?;
        let mut sent = Vec::with_capacity(offsets.len() * CHUNK);
        let mut calls = Vec::with_capacity(offsets.len());
        for off in offsets {
            tokio::time::sleep_until((start + Duration::from_secs_f64(off)).into()).await;
            let at = Instant::now();
            let rows = client.query(&enq, &[&queue, &(CHUNK as i32)]).await?;
            let committed = Instant::now();
            calls.push((committed - at).as_secs_f64() * 1000.0);
            sent.extend(rows.iter().map(|r| (r.get::<_, i64>(0), committed)));
        }
        Res::Ok((sent, calls))
    }))
}

pub(crate) async fn pressure(url: String, queue: String, schedule: String, consumers: usize, out: String, system: System) -> Res<()> {
    let t0 = Instant::now();
    let schedule = parse_schedule(&schedule)?;
    let max_rate = schedule.iter().map(|s| s.1).fold(0.0, f64::max);
    // At most ~50 calls/s per producer connection (a call takes a few ms on a loaded 2-core
    // machine), at least 2 so that one slow commit does not stall the arrivals.
    let producers = ((max_rate / (50.0 * CHUNK as f64)).ceil() as usize).clamp(2, 16);
    let (stop, claimed_n, completed_n) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let mut cons = Vec::with_capacity(consumers);
    for c in 0..consumers {
        cons.push(sql_consumer(&url, system, &queue, format!("pressure{c}"), &stop, &claimed_n, Some(completed_n.clone())).await?);
    }
    let offsets = call_offsets(&schedule);
    let start = Instant::now() + Duration::from_millis(300);
    let end = start + Duration::from_secs_f64(schedule.iter().map(|s| s.0).sum());
    let mut prods = Vec::with_capacity(producers);
    for p in 0..producers {
        let mine: Vec<f64> = offsets.iter().skip(p).step_by(producers).copied().collect();
        prods.push(producer(&url, system, &queue, start, mine).await?);
    }
    let (mut sent, mut calls) = (Vec::new(), Vec::new());
    for p in prods {
        let (s, c) = p.await??;
        sent.extend(s);
        calls.extend(c);
    }
    let deadline = end + GRACE;
    let claimed = collect_claims(cons, &stop, &claimed_n, sent.len(), deadline).await?;
    // One line per job in enqueue order; a claim can return before the producer has read its
    // answer: that is 0 ms.
    let secs = |t: Instant| t.saturating_duration_since(t0).as_secs_f64();
    let mut lines = String::with_capacity(sent.len() * 16);
    let mut missing = 0usize;
    let mut zero = 0usize;
    for (id, committed) in &sent {
        match claimed.get(id).filter(|t| **t <= deadline) {
            Some(t) => {
                zero += usize::from(*t <= *committed);
                lines.push_str(&format!("{:.3},{:.3}\n", secs(*t), t.saturating_duration_since(*committed).as_secs_f64() * 1000.0))
            }
            None => {
                missing += 1;
                lines.push_str(&format!("{:.3},missing\n", secs(*committed)));
            }
        }
    }
    std::fs::write(out, lines)?;
    // The resolution of "from the commit": the commit falls inside the call, and a job whose
    // claim returned before its producer read the answer is written as 0 ms.
    calls.sort_by(|a, b| a.partial_cmp(b).unwrap());
    eprintln!(
        "pressure: {system}, {producers} producers, {CHUNK} jobs per enqueue call (call p50 {:.3} ms, p99 {:.3} ms), {consumers} consumers; {zero} jobs claimed before their producer read the commit's answer (0 ms)",
        pct(&calls, 50.0),
        pct(&calls, 99.0)
    );
    println!(
        "{{\"enqueued\":{},\"completed\":{},\"missing\":{missing}}}",
        sent.len(),
        completed_n.load(Ordering::Relaxed)
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schedule_parses_and_spaces_calls_per_segment() {
        let s = parse_schedule("2:100,1:0,1:200").unwrap();
        assert_eq!(s, vec![(2.0, 100.0), (1.0, 0.0), (1.0, 200.0)]);
        let due = call_offsets(&s);
        // 100 jobs/s for 2 s: 20 calls every 0.1 s; nothing for 1 s; 20 calls every 0.05 s.
        assert_eq!(due.len(), 40);
        assert!((due[19] - 1.9).abs() < 1e-9 && (due[20] - 3.0).abs() < 1e-9 && (due[39] - 3.95).abs() < 1e-9);
        assert!(parse_schedule("10").is_err() && parse_schedule("0:5").is_err() && parse_schedule("5:-1").is_err());
    }
}
