//! Cron expressions: parse, validate, and compute fire times in an IANA time zone.
//!
//! Pure Rust, no PostgreSQL: the SQL functions are in `cron_sql.rs`. Field parsing and calendar
//! matching come from the `croner` crate (POSIX/Vixie fields, `L`, names, day-of-month OR
//! day-of-week); time zones from `chrono-tz` (the IANA database compiled in, backward links such
//! as `US/Central` included). This module adds what jq defines itself:
//!
//! - **Syntax.** 5 fields (`minute hour day-of-month month day-of-week`), or 6 with the seconds
//!   field **first** (`second minute hour day-of-month month day-of-week`, as Quartz, Cronos, the
//!   `cron` and `croner` crates); croniter's seconds-last form is not accepted as such. Aliases
//!   `@yearly @annually @monthly @weekly @daily @midnight @hourly`. `L` (last day of the month) also
//!   as a range end in the day-of-month field (`29-L`). When day-of-month and day-of-week are both
//!   restricted (neither is exactly `*`), a day matching either fires (Vixie/POSIX OR).
//! - **Daylight saving time.** Candidate fire times are wall-clock times in the zone; each is
//!   mapped to real instants by our own policy ([`CronExpr::next_after`]):
//!   - a wall time that does not exist (spring forward gap): a *fixed* expression fires once at
//!     the first instant after the gap (`30 2 * * *` on 2024-03-10 in America/New_York fires at
//!     03:00 EDT = 07:00Z); an *interval* expression has no occurrence there;
//!   - a wall time that occurs twice (fall back): a *fixed* expression fires once, at the first
//!     occurrence; an *interval* expression fires at both.
//!
//!   An expression is an *interval* expression when its seconds, minute or hour field contains
//!   `*` or a step `/` (`30 * * * *`, `*/5 * * * *`, `0 */2 * * *`, `* 1 * * *`); otherwise it
//!   is *fixed* (`30 1 * * *`, `0 9,17 * * 1-5`, `15 1-3 * * *`). This is Vixie cron's rule (a
//!   job is a wildcard job when its minute or hour field starts with `*`) extended to steps.
//!
//! All instants are whole seconds; fire times are strictly after the instant they are computed
//! from.
//!
//! **Range.** Fire times are searched from [`EARLIEST`] (0001-01-02 00:00:00 UTC: from there on,
//! every zone's wall clock is in year 1 AD or later, which `croner` needs) up to the end of year
//! [`LAST_YEAR`] (4999): a fire time whose instant (in UTC) or whose wall time (in the zone) is in
//! year 5000 or later does not exist. Callers check their lower bounds with [`check_instant`].

use chrono::{DateTime, Datelike, Duration, LocalResult, NaiveDate, NaiveDateTime, Offset, TimeZone, Timelike, Utc};
use chrono_tz::Tz;
use croner::parser::{CronParser, Seconds, Year};
use croner::Cron;
use std::fmt;

/// Why an expression or a zone was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Error {
    /// The cron expression is malformed; the text says which field and why.
    Expression(String),
    /// The time zone is not an IANA zone name.
    Zone(String),
    /// An instant before [`EARLIEST`].
    Range(String),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Expression(m) | Error::Zone(m) | Error::Range(m) => f.write_str(m),
        }
    }
}

impl std::error::Error for Error {}

/// A parsed, validated cron expression.
#[derive(Debug, Clone)]
pub struct CronExpr {
    cron: Cron,
    interval: bool,
}

/// The aliases and the 5-field expressions they stand for.
pub const ALIASES: [(&str, &str); 7] = [
    ("@yearly", "0 0 1 1 *"),
    ("@annually", "0 0 1 1 *"),
    ("@monthly", "0 0 1 * *"),
    ("@weekly", "0 0 * * 0"),
    ("@daily", "0 0 * * *"),
    ("@midnight", "0 0 * * *"),
    ("@hourly", "0 * * * *"),
];

/// Names of the six fields of the seconds form, in order.
const FIELD_NAMES: [&str; 6] = ["second", "minute", "hour", "day-of-month", "month", "day-of-week"];

/// The last year that has fire times, in UTC and in the zone's wall clock.
pub const LAST_YEAR: i32 = 4999;

/// The earliest instant fire times are computed from: 0001-01-02 00:00:00 UTC (UTC offsets are
/// less than a day, so every zone's wall clock is in year 1 AD or later from there on).
pub const EARLIEST: DateTime<Utc> = match NaiveDate::from_ymd_opt(1, 1, 2) {
    Some(d) => match d.and_hms_opt(0, 0, 0) {
        Some(n) => n.and_utc(),
        None => DateTime::<Utc>::MIN_UTC,
    },
    None => DateTime::<Utc>::MIN_UTC,
};

/// The last instant a fire time can have: 4999-12-31 23:59:59 UTC.
pub const LAST_INSTANT: DateTime<Utc> = match NaiveDate::from_ymd_opt(LAST_YEAR, 12, 31) {
    Some(d) => match d.and_hms_opt(23, 59, 59) {
        Some(n) => n.and_utc(),
        None => DateTime::<Utc>::MAX_UTC,
    },
    None => DateTime::<Utc>::MAX_UTC,
};

/// Refuses an instant before [`EARLIEST`] ([`Error::Range`]); `what` names it in the message.
pub fn check_instant(what: &str, t: DateTime<Utc>) -> Result<(), Error> {
    if t < EARLIEST {
        return Err(Error::Range(format!(
            "{what} is before 0001-01-02 00:00:00+00, the earliest instant cron fire times are computed from"
        )));
    }
    Ok(())
}

/// Longest expression accepted, in bytes.
pub const MAX_EXPRESSION_LEN: usize = 1000;

fn quoted(s: &str) -> String {
    let mut t: String = s.chars().take(100).collect();
    if t.len() < s.len() {
        t.push('…');
    }
    format!("\"{}\"", t.escape_debug())
}

fn parser() -> CronParser {
    CronParser::builder().seconds(Seconds::Optional).year(Year::Disallowed).build()
}

/// Rewrites `N-L` (and `N-L/S`) in the day-of-month field to `N-31`: days after the end of a
/// month do not exist, so "from N to the last day" is "from N to 31".
fn rewrite_last_range(dom: &str) -> String {
    dom.split(',')
        .map(|part| {
            let (range, step) = match part.split_once('/') {
                Some((r, s)) => (r, Some(s)),
                None => (part, None),
            };
            match range.split_once('-') {
                Some((start, end)) if end.eq_ignore_ascii_case("l") && !start.is_empty() => {
                    let mut s = format!("{start}-31");
                    if let Some(step) = step {
                        s.push('/');
                        s.push_str(step);
                    }
                    s
                }
                _ => part.to_string(),
            }
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// Parses and validates a cron expression (see the module documentation for the syntax).
///
/// Errors name the problem: an unknown alias, the wrong number of fields, or the first field
/// that is invalid, with the reason `croner` gives.
pub fn parse(expr: &str) -> Result<CronExpr, Error> {
    let text = expr.trim();
    if text.is_empty() {
        return Err(Error::Expression("cron expression is empty".into()));
    }
    if text.len() > MAX_EXPRESSION_LEN {
        return Err(Error::Expression(format!(
            "cron expression is longer than {MAX_EXPRESSION_LEN} bytes"
        )));
    }
    let text = if text.starts_with('@') {
        match ALIASES.iter().find(|(a, _)| a.eq_ignore_ascii_case(text)) {
            Some((_, e)) => *e,
            None => {
                return Err(Error::Expression(format!(
                    "unknown cron alias {}: known aliases are @yearly, @annually, @monthly, @weekly, @daily, @midnight, @hourly",
                    quoted(text)
                )))
            }
        }
    } else {
        text
    };
    let mut fields: Vec<String> = text.split_whitespace().map(str::to_string).collect();
    match fields.len() {
        5 => fields.insert(0, "0".into()),
        6 => {}
        n => {
            return Err(Error::Expression(format!(
                "cron expression {} has {n} field{}: expected 5 (minute hour day-of-month month day-of-week) \
                 or 6 with seconds first (second minute hour day-of-month month day-of-week)",
                quoted(expr.trim()),
                if n == 1 { "" } else { "s" }
            )))
        }
    }
    // The fields as written, for messages (the day-of-month field is rewritten below).
    let original = fields.clone();
    let field_error = |i: usize, why: &str| {
        Error::Expression(format!(
            "invalid {} field {} in cron expression {}: {why}",
            FIELD_NAMES[i],
            quoted(&original[i]),
            quoted(expr.trim())
        ))
    };
    for (i, f) in fields.iter().enumerate() {
        // `+` before the day-of-week list asks for day of month AND day of week; croner reads a
        // lone `+` as an empty list (a day of week that never matches) and ignores empty list
        // elements (`1,,2`, `5,`): both are refused here as malformed.
        let list = if i == 5 { f.strip_prefix('+').unwrap_or(f) } else { f.as_str() };
        if list.is_empty() {
            return Err(field_error(i, "+ (day of month AND day of week) must be followed by days of the week, as in +5"));
        }
        if list.split(',').any(str::is_empty) {
            return Err(field_error(i, "a list has an empty element"));
        }
    }
    // A bare L in the day-of-week field means Saturday in Quartz and nothing useful in croner.
    let dow = fields[5].strip_prefix('+').unwrap_or(&fields[5]);
    if dow.split(',').any(|p| p.eq_ignore_ascii_case("l")) {
        return Err(field_error(
            5,
            "a bare L is not accepted (use 6 for Saturday, or 5L for the last Friday of the month)",
        ));
    }
    fields[3] = rewrite_last_range(&fields[3]);
    // Fixed or interval, for the DST policy: a `*` or a step in the seconds, minute or hour field.
    let interval = fields[..3].iter().any(|f| f.contains('*') || f.contains('/'));
    let joined = fields.join(" ");
    match parser().parse(&joined) {
        Ok(cron) => {
            let e = CronExpr { cron, interval };
            // An expression that matches no date at all (`0 0 30 2 *`) is refused here rather
            // than stored as a schedule that never fires.
            let probe = Utc.with_ymd_and_hms(2000, 1, 1, 0, 0, 0).unwrap();
            if e.next_naive(probe.naive_utc(), true).is_none() {
                return Err(Error::Expression(format!(
                    "cron expression {} never fires (no date matches its day-of-month, month and day-of-week fields)",
                    quoted(expr.trim())
                )));
            }
            Ok(e)
        }
        Err(err) => {
            // Name the first field that fails on its own (the others replaced by `*`).
            for i in 0..6 {
                let mut probe: Vec<&str> = vec!["*"; 6];
                probe[i] = &fields[i];
                if let Err(e) = parser().parse(&probe.join(" ")) {
                    return Err(field_error(i, &e.to_string()));
                }
            }
            Err(Error::Expression(format!("invalid cron expression {}: {err}", quoted(expr.trim()))))
        }
    }
}

/// Looks up an IANA time zone name (`Europe/Paris`, `UTC`, backward links such as
/// `US/Central`), exactly or else ignoring ASCII case, as PostgreSQL does.
pub fn parse_zone(name: &str) -> Result<Tz, Error> {
    if let Ok(tz) = name.parse::<Tz>() {
        return Ok(tz);
    }
    chrono_tz::TZ_VARIANTS
        .iter()
        .find(|tz| tz.name().eq_ignore_ascii_case(name))
        .copied()
        .ok_or_else(|| {
            Error::Zone(format!(
                "unknown time zone {}: expected an IANA time zone name such as \"UTC\" or \"Europe/Paris\"",
                quoted(name)
            ))
        })
}

/// `t` cut to the whole second (towards the past).
fn floor_second(t: DateTime<Utc>) -> DateTime<Utc> {
    t.with_nanosecond(0).unwrap_or(t)
}

/// The UTC offset of `tz` at instant `t`, in seconds.
fn offset_at(tz: Tz, t: DateTime<Utc>) -> i64 {
    i64::from(tz.offset_from_utc_datetime(&t.naive_utc()).fix().local_minus_utc())
}

/// The first instant after the gap that contains the nonexistent wall time `n`: the instant of
/// the first valid wall time after `n`.
fn gap_end(tz: Tz, n: NaiveDateTime) -> Option<DateTime<Utc>> {
    // Minutes first (gaps are at most a day: Samoa skipped 2011-12-30), then the second.
    let mut m = n.with_second(0)? + Duration::minutes(1);
    let limit = n + Duration::hours(49);
    while matches!(tz.from_local_datetime(&m), LocalResult::None) {
        m += Duration::minutes(1);
        if m > limit {
            return None;
        }
    }
    let mut first = m;
    let mut s = m - Duration::seconds(1);
    while s > n && !matches!(tz.from_local_datetime(&s), LocalResult::None) {
        first = s;
        s -= Duration::seconds(1);
    }
    tz.from_local_datetime(&first).earliest().map(|d| d.with_timezone(&Utc))
}

impl CronExpr {
    /// True for an *interval* expression (a `*` or step in the seconds, minute or hour field),
    /// false for a *fixed* one; see the module documentation for what it changes at DST.
    pub fn is_interval(&self) -> bool {
        self.interval
    }

    /// The first matching wall time at or after (`inclusive`) or after `n`, or `None` past year
    /// [`LAST_YEAR`] or when nothing matches.
    fn next_naive(&self, n: NaiveDateTime, inclusive: bool) -> Option<NaiveDateTime> {
        let carrier = Utc.from_utc_datetime(&n);
        self.cron
            .find_next_occurrence(&carrier, inclusive)
            .ok()
            .map(|d| d.naive_utc())
            .filter(|d| d.year() <= LAST_YEAR)
    }

    /// The real instants of the wall time `n` under the DST policy (0, 1 or 2 of them).
    fn instants(&self, tz: Tz, n: NaiveDateTime, out: &mut Vec<DateTime<Utc>>) {
        match tz.from_local_datetime(&n) {
            LocalResult::Single(d) => out.push(d.with_timezone(&Utc)),
            LocalResult::Ambiguous(a, b) => {
                let (a, b) = (a.with_timezone(&Utc), b.with_timezone(&Utc));
                let (first, second) = if a <= b { (a, b) } else { (b, a) };
                out.push(first);
                if self.interval {
                    out.push(second);
                }
            }
            LocalResult::None => {
                if !self.interval {
                    if let Some(d) = gap_end(tz, n) {
                        out.push(d);
                    }
                }
            }
        }
    }

    /// The first fire time strictly after `after`, in zone `tz`; `None` when there is none
    /// before year 5000 (neither the instant in UTC nor the wall time in the zone may be in year
    /// 5000 or later), and `None` when the zone's wall clock at `after` is still before year 1
    /// (never from [`EARLIEST`] on: check `after` with [`check_instant`]).
    ///
    /// Wall-clock candidates are taken in order and mapped to instants; around a fall-back
    /// transition a later wall time can map to an earlier instant, so the search goes on past the
    /// first hit until no later candidate can beat it.
    pub fn next_after(&self, after: DateTime<Utc>, tz: Tz) -> Option<DateTime<Utc>> {
        let t = floor_second(after);
        let day = Duration::days(1);
        // Wall times from here on may map to instants after t (an offset that drops within the
        // next day repeats wall times that are before t's own).
        let min_off = offset_at(tz, t).min(offset_at(tz, t.checked_add_signed(day)?));
        let start = t.naive_utc().checked_add_signed(Duration::seconds(min_off))?;
        if start.year() < 1 {
            // croner would start the search at 0001-01-01 00:00 and skip the wall times of 1 BC.
            return None;
        }
        let mut cand = self.next_naive(start, true)?;
        let mut best: Option<DateTime<Utc>> = None;
        let mut horizon: Option<NaiveDateTime> = None;
        let mut found = Vec::with_capacity(2);
        loop {
            if let Some(h) = horizon {
                if cand > h {
                    return best;
                }
            }
            found.clear();
            self.instants(tz, cand, &mut found);
            for &i in &found {
                if i > t && i.year() <= LAST_YEAR && best.is_none_or(|b| i < b) {
                    best = Some(i);
                    horizon = Some(self.horizon(tz, t, i));
                }
            }
            cand = match self.next_naive(cand, false) {
                Some(c) => c,
                None => return best,
            };
        }
    }

    /// The latest wall time that can still map to an instant in (t, best): the wall time of
    /// `best` plus the largest offset rise seen over the preceding 26 hours (sampled every 15
    /// minutes, plus 15 minutes of slack); wall times beyond it map after `best`.
    fn horizon(&self, tz: Tz, t: DateTime<Utc>, best: DateTime<Utc>) -> NaiveDateTime {
        let best_off = offset_at(tz, best);
        let mut rise = 0i64;
        let step = Duration::minutes(15);
        let mut s = best - step;
        let stop = (best - Duration::hours(26)).max(t);
        while s > stop {
            rise = rise.max(offset_at(tz, s) - best_off);
            s -= step;
        }
        let slack = if rise > 0 { rise + 900 } else { 0 };
        best.naive_utc() + Duration::seconds(best_off + slack)
    }

    /// The fire times in (`after`, `until`], in order, at most `max` of them.
    pub fn fires(&self, after: DateTime<Utc>, until: DateTime<Utc>, tz: Tz, max: usize) -> Vec<DateTime<Utc>> {
        let mut out = Vec::new();
        let mut t = after;
        while out.len() < max {
            match self.next_after(t, tz) {
                Some(f) if f <= until => {
                    out.push(f);
                    t = f;
                }
                _ => break,
            }
        }
        out
    }

    /// How many fire times lie in [`from`, `until`], counting at most `cap`.
    pub fn count(&self, from: DateTime<Utc>, until: DateTime<Utc>, tz: Tz, cap: u64) -> u64 {
        let mut n = 0;
        let mut t = from - Duration::seconds(1);
        while n < cap {
            match self.next_after(t, tz) {
                Some(f) if f <= until => {
                    n += 1;
                    t = f;
                }
                _ => break,
            }
        }
        n
    }

    /// The latest `keep` fire times in [`from`, `until`], in order (fewer if there are fewer).
    /// Searches backwards from `until` in growing windows, so its cost does not depend on how
    /// long ago `from` was.
    pub fn latest(&self, from: DateTime<Utc>, until: DateTime<Utc>, tz: Tz, keep: usize) -> Vec<DateTime<Utc>> {
        // No fire time is in year 5000 or later: windows there would all be empty and grow until
        // they reach back to `from`, walking every fire time on the way.
        let until = until.min(LAST_INSTANT);
        if keep == 0 || until < from {
            return Vec::new();
        }
        let lower = floor_second(from) - Duration::seconds(1); // fires > lower, i.e. >= from
        let mut window = Duration::hours(1);
        loop {
            let start = until.checked_sub_signed(window).map_or(lower, |s| s.max(lower));
            // Enumerate the window, keeping only the last `keep`.
            let mut ring: std::collections::VecDeque<DateTime<Utc>> = std::collections::VecDeque::new();
            let mut t = start;
            while let Some(f) = self.next_after(t, tz) {
                if f > until {
                    break;
                }
                if ring.len() == keep {
                    ring.pop_front();
                }
                ring.push_back(f);
                t = f;
            }
            if ring.len() == keep || start == lower {
                return ring.into_iter().collect();
            }
            window = window * 8;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::NaiveDate;

    fn utc(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
    }

    fn next_n(expr: &str, zone: &str, from: &str, n: usize) -> Vec<String> {
        let e = parse(expr).unwrap();
        let tz = parse_zone(zone).unwrap();
        let far = utc("4000-01-01T00:00:00Z");
        e.fires(utc(from), far, tz, n)
            .into_iter()
            .map(|d| d.with_timezone(&tz).to_rfc3339())
            .collect()
    }

    fn next_utc(expr: &str, zone: &str, from: &str, n: usize) -> Vec<String> {
        let e = parse(expr).unwrap();
        let tz = parse_zone(zone).unwrap();
        let far = utc("4000-01-01T00:00:00Z");
        e.fires(utc(from), far, tz, n)
            .into_iter()
            .map(|d| d.format("%Y-%m-%d %H:%M:%SZ").to_string())
            .collect()
    }

    #[test]
    fn c01_leap_day() {
        assert_eq!(next_utc("0 0 29 2 *", "UTC", "2016-03-10T00:00:00Z", 1), ["2020-02-29 00:00:00Z"]);
        assert_eq!(next_utc("0 0 0 29 2 *", "UTC", "2016-03-10T00:00:00Z", 1), ["2020-02-29 00:00:00Z"]);
        assert_eq!(next_utc("0 0 29 2 *", "UTC", "2024-03-01T00:00:00Z", 1), ["2028-02-29 00:00:00Z"]);
    }

    #[test]
    fn c02_last_day_of_month() {
        let want = ["2015-09-30 00:00:00Z", "2015-10-31 00:00:00Z", "2015-11-30 00:00:00Z", "2015-12-31 00:00:00Z"];
        assert_eq!(next_utc("0 0 L * *", "UTC", "2015-09-04T00:00:00Z", 4), want);
        assert_eq!(next_utc("0 0 l * *", "UTC", "2015-09-04T00:00:00Z", 4), want);
    }

    #[test]
    fn c03_range_to_last_day() {
        assert_eq!(
            next_utc("0 0 29-L * *", "UTC", "2015-09-04T00:00:00Z", 3),
            ["2015-09-29 00:00:00Z", "2015-09-30 00:00:00Z", "2015-10-29 00:00:00Z"]
        );
        assert_eq!(
            next_utc("0 0 28-l/2 2 *", "UTC", "2016-01-01T00:00:00Z", 2),
            ["2016-02-28 00:00:00Z", "2017-02-28 00:00:00Z"]
        );
    }

    #[test]
    fn c04_last_day_of_february() {
        assert_eq!(next_utc("0 0 L * *", "UTC", "2016-02-05T00:00:00Z", 1), ["2016-02-29 00:00:00Z"]);
        assert_eq!(next_utc("0 0 L * *", "UTC", "2017-02-01T00:00:00Z", 1), ["2017-02-28 00:00:00Z"]);
    }

    #[test]
    fn c05_spring_forward_fixed_time_fires_at_end_of_gap() {
        // Cronos policy: 02:30 does not exist; fire at 03:00 EDT, once, and never skip the day.
        assert_eq!(
            next_n("30 2 * * *", "America/New_York", "2020-03-07T12:00:00-05:00", 3),
            ["2020-03-08T03:00:00-04:00", "2020-03-09T02:30:00-04:00", "2020-03-10T02:30:00-04:00"]
        );
        assert_eq!(
            next_utc("30 2 * * *", "America/New_York", "2024-03-09T12:00:00Z", 2),
            ["2024-03-10 07:00:00Z", "2024-03-11 06:30:00Z"]
        );
        assert_eq!(
            next_n("0 30 2 * * *", "America/New_York", "2016-03-13T01:59:59-05:00", 1),
            ["2016-03-13T03:00:00-04:00"]
        );
        // Several fixed times inside one gap still fire once.
        assert_eq!(
            next_utc("0,30 2 * * *", "America/New_York", "2024-03-10T06:00:00Z", 2),
            ["2024-03-10 07:00:00Z", "2024-03-11 06:00:00Z"]
        );
    }

    #[test]
    fn c06_fall_back_fixed_time_fires_once() {
        assert_eq!(
            next_n("30 1 * * *", "America/New_York", "2016-11-06T00:59:59-04:00", 2),
            ["2016-11-06T01:30:00-04:00", "2016-11-07T01:30:00-05:00"]
        );
        // Starting inside the repeated hour, after the first 01:30: not again that day.
        assert_eq!(
            next_n("30 1 * * *", "America/New_York", "2016-11-06T01:45:00-04:00", 1),
            ["2016-11-07T01:30:00-05:00"]
        );
    }

    #[test]
    fn c07_fall_back_interval_fires_at_both() {
        assert_eq!(
            next_n("30 * * * *", "America/New_York", "2016-11-06T00:59:59-04:00", 3),
            ["2016-11-06T01:30:00-04:00", "2016-11-06T01:30:00-05:00", "2016-11-06T02:30:00-05:00"]
        );
        // From between the two 01:30s.
        assert_eq!(
            next_n("30 * * * *", "America/New_York", "2016-11-06T01:40:00-04:00", 1),
            ["2016-11-06T01:30:00-05:00"]
        );
        // Interval in the spring gap: no 02:30 that day.
        assert_eq!(
            next_utc("30 * * * *", "America/New_York", "2024-03-10T06:00:00Z", 2),
            ["2024-03-10 06:30:00Z", "2024-03-10 07:30:00Z"]
        );
    }

    #[test]
    fn c08_aliases() {
        assert_eq!(
            next_utc("@daily", "UTC", "2016-12-29T14:29:36Z", 3),
            ["2016-12-30 00:00:00Z", "2016-12-31 00:00:00Z", "2017-01-01 00:00:00Z"]
        );
        assert_eq!(
            next_utc("@hourly", "UTC", "2017-02-25T22:29:36Z", 3),
            ["2017-02-25 23:00:00Z", "2017-02-26 00:00:00Z", "2017-02-26 01:00:00Z"]
        );
        assert_eq!(
            next_utc("@weekly", "UTC", "2016-12-23T14:29:36Z", 3),
            ["2016-12-25 00:00:00Z", "2017-01-01 00:00:00Z", "2017-01-08 00:00:00Z"]
        );
        assert_eq!(next_utc("@midnight", "UTC", "2016-12-29T14:29:36Z", 1), ["2016-12-30 00:00:00Z"]);
        assert_eq!(next_utc("@MONTHLY", "UTC", "2016-12-29T14:29:36Z", 1), ["2017-01-01 00:00:00Z"]);
        assert_eq!(next_utc("@yearly", "UTC", "2016-12-29T14:29:36Z", 1), ["2017-01-01 00:00:00Z"]);
        assert_eq!(next_utc("@annually", "UTC", "2016-12-29T14:29:36Z", 1), ["2017-01-01 00:00:00Z"]);
        assert!(matches!(parse("@reboot"), Err(Error::Expression(_))));
    }

    #[test]
    fn c09_seconds_field_comes_first() {
        // croniter's `* * * * * */15` (seconds last) is written `*/15 * * * * *` here.
        assert_eq!(
            next_utc("*/15 * * * * *", "UTC", "2012-04-06T13:26:36Z", 3),
            ["2012-04-06 13:26:45Z", "2012-04-06 13:27:00Z", "2012-04-06 13:27:15Z"]
        );
        assert_eq!(
            next_utc("15,25 * * * * *", "UTC", "2012-04-06T13:26:10Z", 3),
            ["2012-04-06 13:26:15Z", "2012-04-06 13:26:25Z", "2012-04-06 13:27:15Z"]
        );
        // Cronos row.
        assert_eq!(next_utc("0 * * * * *", "UTC", "2017-01-14T12:58:59Z", 1), ["2017-01-14 12:59:00Z"]);
        // croniter's seconds-last `* * * * * 15,25` is refused: 15 is no day of the week.
        assert!(parse("* * * * * 15,25").is_err());
    }

    #[test]
    fn c10_steps_restart_each_hour() {
        assert_eq!(
            next_utc("*/15 * * * *", "UTC", "2024-01-01T10:50:00Z", 3),
            ["2024-01-01 11:00:00Z", "2024-01-01 11:15:00Z", "2024-01-01 11:30:00Z"]
        );
        assert_eq!(
            next_utc("*/24 * * * *", "UTC", "2024-01-01T10:50:00Z", 4),
            ["2024-01-01 11:00:00Z", "2024-01-01 11:24:00Z", "2024-01-01 11:48:00Z", "2024-01-01 12:00:00Z"]
        );
        assert_eq!(next_utc("0 0 * * * *", "UTC", "2017-01-14T12:59:00Z", 1), ["2017-01-14 13:00:00Z"]);
    }

    #[test]
    fn c11_day_of_month_or_day_of_week() {
        assert_eq!(next_utc("5 18 13 * 5", "UTC", "2016-01-01T00:00:00Z", 2), ["2016-01-01 18:05:00Z", "2016-01-08 18:05:00Z"]);
        // With the day-of-week unrestricted, only the day of the month counts.
        assert_eq!(next_utc("5 18 13 * *", "UTC", "2016-01-01T00:00:00Z", 1), ["2016-01-13 18:05:00Z"]);
        // croner's `+` prefix asks for AND (Friday the 13th).
        assert_eq!(next_utc("5 18 13 * +5", "UTC", "2016-01-01T00:00:00Z", 1), ["2016-05-13 18:05:00Z"]);
    }

    #[test]
    fn names_ranges_lists_steps() {
        assert_eq!(
            next_utc("0 9 * jan-mar mon-fri", "UTC", "2024-03-29T10:00:00Z", 2),
            ["2025-01-01 09:00:00Z", "2025-01-02 09:00:00Z"]
        );
        assert_eq!(next_utc("0 12 * * SUN", "UTC", "2024-01-01T00:00:00Z", 1), ["2024-01-07 12:00:00Z"]);
        assert_eq!(next_utc("0 12 * * 7", "UTC", "2024-01-01T00:00:00Z", 1), ["2024-01-07 12:00:00Z"]);
        assert_eq!(
            next_utc("10-20/5,45 3 * * *", "UTC", "2024-01-01T00:00:00Z", 5),
            ["2024-01-01 03:10:00Z", "2024-01-01 03:15:00Z", "2024-01-01 03:20:00Z", "2024-01-01 03:45:00Z", "2024-01-02 03:10:00Z"]
        );
    }

    #[test]
    fn q22_time_zones() {
        // a: 07:54 US/Central (a backward link) is 13:54Z in January and 12:54Z in July.
        assert_eq!(next_utc("54 7 * * *", "US/Central", "2024-01-15T00:00:00Z", 1), ["2024-01-15 13:54:00Z"]);
        assert_eq!(next_utc("54 7 * * *", "US/Central", "2024-07-15T00:00:00Z", 1), ["2024-07-15 12:54:00Z"]);
        // b: fall back, 02:30 exists once: 02:30 EST = 07:30Z.
        assert_eq!(next_utc("30 2 * * *", "America/New_York", "2024-11-03T00:00:00Z", 1), ["2024-11-03 07:30:00Z"]);
        // c: interval, every real 01:30 and 02:30.
        assert_eq!(
            next_utc("30 * * * *", "America/New_York", "2024-11-03T04:00:00Z", 3),
            ["2024-11-03 04:30:00Z", "2024-11-03 05:30:00Z", "2024-11-03 06:30:00Z"]
        );
        assert_eq!(next_utc("30 * * * *", "America/New_York", "2024-11-03T06:30:00Z", 1), ["2024-11-03 07:30:00Z"]);
        // d: fixed 01:30 once.
        assert_eq!(
            next_utc("30 1 * * *", "America/New_York", "2024-11-03T04:00:00Z", 2),
            ["2024-11-03 05:30:00Z", "2024-11-04 06:30:00Z"]
        );
        assert!(matches!(parse_zone("Mars/Olympus"), Err(Error::Zone(_))));
        assert_eq!(parse_zone("america/new_york").unwrap().name(), "America/New_York");
        assert_eq!(parse_zone("UTC").unwrap().name(), "UTC");
    }

    #[test]
    fn fixed_and_interval_classification() {
        assert!(!parse("30 1 * * *").unwrap().is_interval());
        assert!(!parse("0 9,17 * * 1-5").unwrap().is_interval());
        assert!(!parse("15 1-3 * * *").unwrap().is_interval());
        assert!(parse("30 * * * *").unwrap().is_interval());
        assert!(parse("*/5 1 * * *").unwrap().is_interval());
        assert!(parse("0 0-23/2 * * *").unwrap().is_interval());
        assert!(parse("*/10 0 1 * * *").unwrap().is_interval());
        // A fixed list with two hours in the repeated hour fires once per wall time.
        assert_eq!(
            next_utc("30 1,2 * * *", "America/New_York", "2024-11-03T04:00:00Z", 3),
            ["2024-11-03 05:30:00Z", "2024-11-03 07:30:00Z", "2024-11-04 06:30:00Z"]
        );
    }

    #[test]
    fn bad_expressions_are_refused_with_the_field_named() {
        let msg = |e: &str| parse(e).unwrap_err().to_string();
        assert!(msg("").contains("empty"));
        assert!(msg("* * * *").contains("has 4 fields"));
        assert!(msg("* * * * * * *").contains("has 7 fields"));
        assert!(msg("60 * * * *").contains("minute field \"60\""), "{}", msg("60 * * * *"));
        assert!(msg("* 24 * * *").contains("hour field"));
        assert!(msg("* * 0 * *").contains("day-of-month field"));
        assert!(msg("* * * 13 *").contains("month field"));
        assert!(msg("* * * * 8").contains("day-of-week field"));
        assert!(msg("*/0 * * * *").contains("minute field"));
        assert!(msg("a * * * *").contains("minute field"));
        assert!(msg("61 * * * * *").contains("second field"));
        assert!(msg("0 0 30 2 *").contains("never fires"));
        assert!(msg("0 0 * * L").contains("bare L"));
        assert!(msg("@every 5m").contains("unknown cron alias"));
        assert!(msg(&"1,".repeat(600)).contains("longer than"));
    }

    #[test]
    fn malformed_fields_are_named_as_written() {
        let msg = |e: &str| parse(e).unwrap_err().to_string();
        // A lone + is a malformed day-of-week field, not an expression that never fires.
        assert!(msg("0 0 * * +").contains("invalid day-of-week field \"+\""), "{}", msg("0 0 * * +"));
        assert!(msg("0 0 1 * +,5").contains("day-of-week field \"+,5\""));
        assert!(msg("0 0 1 * +,5").ends_with(": a list has an empty element"));
        assert!(msg("0 0 * * +L").contains("bare L"));
        assert!(msg("1,,2 * * * *").contains("minute field \"1,,2\""));
        assert!(msg("5, * * * *").contains("empty element"));
        assert!(msg("0 ,3 * * *").contains("hour field"));
        // The day-of-month field is named as the user wrote it, not as rewritten (L-31).
        assert!(msg("0 0 L-L * *").contains("day-of-month field \"L-L\""), "{}", msg("0 0 L-L * *"));
        assert!(!msg("0 0 L-L * *").contains("L-31"));
        assert!(parse("0 0 13 * +5").is_ok());
        assert!(parse("0 0 13 * +*").is_ok());
    }

    #[test]
    fn the_supported_range() {
        let e = parse("* * * * *").unwrap();
        let utc_tz = parse_zone("UTC").unwrap();
        let ny = parse_zone("America/New_York").unwrap();
        let paris = parse_zone("Europe/Paris").unwrap();
        // Before year 1: no answer (the SQL functions raise 22008 before asking).
        let bc = NaiveDate::from_ymd_opt(-4712, 1, 1).unwrap().and_hms_opt(0, 0, 0).unwrap().and_utc();
        assert_eq!(e.next_after(bc, utc_tz), None);
        assert!(matches!(check_instant("after", bc), Err(Error::Range(_))));
        assert!(check_instant("after", EARLIEST - Duration::seconds(1)).is_err());
        assert!(check_instant("after", EARLIEST).is_ok());
        // From EARLIEST on, the first day's wall times in a zone west of UTC are not skipped.
        assert_eq!(e.next_after(EARLIEST, utc_tz), Some(EARLIEST + Duration::minutes(1)));
        assert_eq!(e.next_after(EARLIEST, ny), Some(EARLIEST + Duration::seconds(2))); // LMT -4:56:02
        assert_eq!(e.next_after(EARLIEST - Duration::seconds(1), ny).map(|d| d > EARLIEST - Duration::seconds(1)), Some(true));
        // The last fire times are in 4999, as instants and as wall times.
        assert_eq!(e.next_after(utc("4999-12-31T23:58:30Z"), utc_tz), Some(utc("4999-12-31T23:59:00Z")));
        assert_eq!(e.next_after(utc("4999-12-31T23:59:00Z"), utc_tz), None);
        assert_eq!(e.next_after(utc("4999-12-31T23:59:59Z"), utc_tz), None);
        // New York: 4999-12-31 19:00 EST is 5000-01-01 00:00Z.
        assert_eq!(e.next_after(utc("4999-12-31T23:58:00Z"), ny), Some(utc("4999-12-31T23:59:00Z")));
        assert_eq!(e.next_after(utc("4999-12-31T23:59:00Z"), ny), None);
        // Paris: 5000-01-01 00:00 CET is 4999-12-31 23:00Z, a wall time in 5000.
        assert_eq!(e.next_after(utc("4999-12-31T22:58:00Z"), paris), Some(utc("4999-12-31T22:59:00Z")));
        assert_eq!(e.next_after(utc("4999-12-31T22:59:00Z"), paris), None);
        assert_eq!(e.next_after(utc("9999-06-01T00:00:00Z"), utc_tz), None);
        let far = NaiveDate::from_ymd_opt(200_000, 1, 1).unwrap().and_hms_opt(0, 0, 0).unwrap().and_utc();
        assert_eq!(e.next_after(far, ny), None);
        assert_eq!(e.count(utc("4999-12-31T23:00:00Z"), far, utc_tz, 1000), 60);
        // latest with an `until` far past 4999 does not walk every minute since `from`.
        let t0 = std::time::Instant::now();
        assert_eq!(e.latest(utc("2024-01-01T00:00:00Z"), far, utc_tz, 1), [utc("4999-12-31T23:59:00Z")]);
        assert_eq!(e.latest(utc("2024-01-01T00:00:00Z"), DateTime::<Utc>::MAX_UTC, ny, 2).len(), 2);
        assert!(t0.elapsed() < std::time::Duration::from_secs(5));
    }

    #[test]
    fn sub_second_instants_and_exclusivity() {
        let e = parse("* * * * *").unwrap();
        let tz = parse_zone("UTC").unwrap();
        let t = utc("2024-01-01T10:00:00.5Z");
        assert_eq!(e.next_after(t, tz), Some(utc("2024-01-01T10:01:00Z")));
        assert_eq!(e.next_after(utc("2024-01-01T10:00:00Z"), tz), Some(utc("2024-01-01T10:01:00Z")));
        assert_eq!(e.next_after(utc("2024-01-01T09:59:59.999Z"), tz), Some(utc("2024-01-01T10:00:00Z")));
    }

    #[test]
    fn count_and_latest() {
        let e = parse("*/10 * * * *").unwrap();
        let tz = parse_zone("UTC").unwrap();
        let from = utc("2024-01-01T00:00:00Z");
        let until = utc("2024-01-02T00:00:00Z");
        assert_eq!(e.count(from, until, tz, 1_000_000), 145);
        assert_eq!(e.count(from, until, tz, 7), 7);
        assert_eq!(e.latest(from, until, tz, 2), [utc("2024-01-01T23:50:00Z"), utc("2024-01-02T00:00:00Z")]);
        assert_eq!(e.latest(from, utc("2024-01-01T00:05:00Z"), tz, 3), [from]);
        assert!(e.latest(utc("2024-01-01T00:01:00Z"), utc("2024-01-01T00:05:00Z"), tz, 3).is_empty());
        // A yearly schedule missed for years: found without walking from `from`.
        let y = parse("0 0 1 1 *").unwrap();
        assert_eq!(y.latest(utc("2000-01-01T00:00:00Z"), utc("2024-06-01T00:00:00Z"), tz, 1), [utc("2024-01-01T00:00:00Z")]);
        assert_eq!(y.count(utc("2000-01-01T00:00:00Z"), utc("2024-06-01T00:00:00Z"), tz, 1000), 25);
    }

    #[test]
    fn every_transition_of_a_year_is_consistent() {
        // For several zones and expressions, walking fire times across 2024 gives strictly
        // increasing instants, each matching the expression's wall time or a gap end.
        for zone in ["America/New_York", "Europe/Berlin", "Australia/Lord_Howe", "Pacific/Chatham", "Asia/Tokyo"] {
            let tz = parse_zone(zone).unwrap();
            for expr in ["30 2 * * *", "30 * * * *", "*/20 1-3 * * *", "0 0 * * *", "45 1 * * 0"] {
                let e = parse(expr).unwrap();
                let fires = e.fires(utc("2024-01-01T00:00:00Z"), utc("2025-01-01T00:00:00Z"), tz, 100_000);
                assert!(!fires.is_empty());
                for w in fires.windows(2) {
                    assert!(w[0] < w[1], "{zone} {expr}: {} then {}", w[0], w[1]);
                }
            }
        }
        let _ = NaiveDate::from_ymd_opt(2024, 1, 1);
    }
}
