//! The SQL face of [`crate::cron`]: `jq.cron_next`, `jq.cron_fires` and the internal helpers
//! `jq.cron_tick` uses (`jq._cron_check`, `jq._cron_latest`, `jq._cron_count`).
//!
//! Every problem with the input is reported with `ereport!` and SQLSTATE 22023
//! (invalid_parameter_value), never a panic: an invalid cron expression, an unknown time zone,
//! an infinite timestamp, a negative maximum; a start instant before 0001-01-02 00:00:00+00
//! ([`cron::EARLIEST`]) is 22008 (datetime_field_overflow).

use crate::cron::{self, CronExpr};
use chrono::{DateTime, TimeZone, Utc};
use chrono_tz::Tz;
use pgrx::prelude::*;

/// Microseconds from the Unix epoch to PostgreSQL's (2000-01-01 00:00:00 UTC).
const PG_EPOCH_UNIX_MICROS: i64 = 946_684_800_000_000;

fn invalid(message: String) -> ! {
    ereport!(ERROR, PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE, message);
}

fn expr_and_zone(expr: &str, zone: &str) -> (CronExpr, Tz) {
    let e = cron::parse(expr).unwrap_or_else(|e| invalid(e.to_string()));
    let tz = cron::parse_zone(zone).unwrap_or_else(|e| invalid(e.to_string()));
    (e, tz)
}

/// A finite PostgreSQL instant as chrono's. PostgreSQL reaches 294276 AD, chrono 262143 AD:
/// later instants become chrono's last one, which changes no answer (there are no fire times
/// after year 4999).
fn to_chrono(what: &str, t: TimestampWithTimeZone) -> DateTime<Utc> {
    if !t.is_finite() {
        invalid(format!("{what} must be a finite timestamp"));
    }
    let micros = pg_sys::TimestampTz::from(t);
    match micros.checked_add(PG_EPOCH_UNIX_MICROS).and_then(|m| Utc.timestamp_micros(m).single()) {
        Some(d) => d,
        None if micros > 0 => DateTime::<Utc>::MAX_UTC,
        None => invalid(format!("{what} is out of range")),
    }
}

/// [`to_chrono`] for an instant fire times are computed from: also refuses one before
/// [`cron::EARLIEST`] (22008).
fn start_instant(what: &str, t: TimestampWithTimeZone) -> DateTime<Utc> {
    let t = to_chrono(what, t);
    if let Err(e) = cron::check_instant(what, t) {
        ereport!(ERROR, PgSqlErrorCode::ERRCODE_DATETIME_FIELD_OVERFLOW, e.to_string());
    }
    t
}

fn from_chrono(t: DateTime<Utc>) -> Option<TimestampWithTimeZone> {
    let micros = t.timestamp_micros().checked_sub(PG_EPOCH_UNIX_MICROS)?;
    TimestampWithTimeZone::try_from(micros).ok()
}

/// SQL: `jq.cron_next(cron text, after timestamptz, timezone text DEFAULT 'UTC') RETURNS
/// timestamptz`: the first fire time of `cron` strictly after `after`, evaluated in the IANA
/// zone `timezone`; NULL when there is none before year 5000 (as an instant in UTC and as a wall
/// time in the zone). Errors: 22023 invalid expression, unknown zone or infinite `after`; 22008
/// `after` before 0001-01-02 00:00:00+00.
#[pg_extern(create_or_replace, immutable, strict, parallel_safe)]
fn cron_next(
    cron: &str,
    after: TimestampWithTimeZone,
    timezone: default!(&str, "'UTC'"),
) -> Option<TimestampWithTimeZone> {
    let (e, tz) = expr_and_zone(cron, timezone);
    e.next_after(start_instant("after", after), tz).and_then(from_chrono)
}

/// SQL: `jq.cron_fires(cron text, after timestamptz, until timestamptz, timezone text DEFAULT
/// 'UTC', max integer DEFAULT 1000) RETURNS SETOF timestamptz`: the fire times in
/// (`after`, `until`], in order, at most `max` (0 to 1,000,000). Errors: 22023, 22008 as
/// `cron_next`.
#[pg_extern(create_or_replace, immutable, strict, parallel_safe)]
fn cron_fires(
    cron: &str,
    after: TimestampWithTimeZone,
    until: TimestampWithTimeZone,
    timezone: default!(&str, "'UTC'"),
    max: default!(i32, 1000),
) -> SetOfIterator<'static, TimestampWithTimeZone> {
    if !(0..=1_000_000).contains(&max) {
        invalid(format!("max must be between 0 and 1000000, got {max}"));
    }
    let (e, tz) = expr_and_zone(cron, timezone);
    let fires = e.fires(start_instant("after", after), to_chrono("until", until), tz, max as usize);
    SetOfIterator::new(fires.into_iter().filter_map(from_chrono))
}

/// SQL: `jq._cron_check(cron text, timezone text) RETURNS void`: raises 22023 with a message
/// naming the problem when `cron` is not a valid expression or `timezone` not an IANA zone;
/// 22004 when either is NULL.
#[pg_extern(create_or_replace, immutable, parallel_safe)]
fn _cron_check(cron: Option<&str>, timezone: Option<&str>) {
    let (Some(cron), Some(timezone)) = (cron, timezone) else {
        ereport!(
            ERROR,
            PgSqlErrorCode::ERRCODE_NULL_VALUE_NOT_ALLOWED,
            "cron expression and time zone must not be NULL"
        );
    };
    expr_and_zone(cron, timezone);
}

/// SQL: `jq._cron_latest(cron text, timezone text, since timestamptz, until timestamptz, keep
/// integer) RETURNS SETOF timestamptz`: the latest `keep` fire times in [`since`, `until`], in
/// order. Its cost does not grow with how long ago `since` was. Errors: 22023, 22008 `since`
/// before 0001-01-02 00:00:00+00.
#[pg_extern(create_or_replace, immutable, strict, parallel_safe)]
fn _cron_latest(
    cron: &str,
    timezone: &str,
    since: TimestampWithTimeZone,
    until: TimestampWithTimeZone,
    keep: i32,
) -> SetOfIterator<'static, TimestampWithTimeZone> {
    if !(0..=100_000).contains(&keep) {
        invalid(format!("keep must be between 0 and 100000, got {keep}"));
    }
    let (e, tz) = expr_and_zone(cron, timezone);
    let fires = e.latest(start_instant("since", since), to_chrono("until", until), tz, keep as usize);
    SetOfIterator::new(fires.into_iter().filter_map(from_chrono))
}

/// SQL: `jq._cron_count(cron text, timezone text, since timestamptz, until timestamptz, cap
/// bigint) RETURNS bigint`: how many fire times lie in [`since`, `until`], counting at most
/// `cap` (about 1-2 µs each). Errors: 22023, 22008 `since` before 0001-01-02 00:00:00+00.
#[pg_extern(create_or_replace, immutable, strict, parallel_safe)]
fn _cron_count(
    cron: &str,
    timezone: &str,
    since: TimestampWithTimeZone,
    until: TimestampWithTimeZone,
    cap: i64,
) -> i64 {
    if cap < 0 {
        invalid(format!("cap must not be negative, got {cap}"));
    }
    let (e, tz) = expr_and_zone(cron, timezone);
    e.count(start_instant("since", since), to_chrono("until", until), tz, cap as u64) as i64
}
