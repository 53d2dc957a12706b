//! Parsing and validating cron expressions and time zone names (the syntax is in the
//! documentation of [`crate::cron`]).

use chrono::{DateTime, NaiveDate, TimeZone, Utc};
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
    pub(super) cron: Cron,
    /// An *interval* expression (a `*` or step in the seconds, minute or hour field).
    pub(super) interval: bool,
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

/// Parses and validates a cron expression (see the documentation of [`crate::cron`] for the
/// syntax).
///
/// Errors ([`Error::Expression`]) name the problem: an unknown alias, the wrong number of
/// fields, or the first field that is invalid, with the reason `croner` gives.
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
    let mut fields = six_fields(expr, expand_alias(text)?)?;
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
    check_lists(&fields, &field_error)?;
    fields[3] = rewrite_last_range(&fields[3]);
    // Fixed or interval, for the DST policy: a `*` or a step in the seconds, minute or hour field.
    let interval = fields[..3].iter().any(|f| f.contains('*') || f.contains('/'));
    match parser().parse(&fields.join(" ")) {
        Ok(cron) => refuse_never_firing(expr, CronExpr { cron, interval }),
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

/// The 5-field expression an alias (`@daily`, ...) stands for; other text as it is.
fn expand_alias(text: &str) -> Result<&str, Error> {
    if !text.starts_with('@') {
        return Ok(text);
    }
    match ALIASES.iter().find(|(a, _)| a.eq_ignore_ascii_case(text)) {
        Some((_, e)) => Ok(e),
        None => Err(Error::Expression(format!(
            "unknown cron alias {}: known aliases are @yearly, @annually, @monthly, @weekly, @daily, @midnight, @hourly",
            quoted(text)
        ))),
    }
}

/// The six fields of `text` (seconds first; `0` seconds added to a 5-field expression).
fn six_fields(expr: &str, text: &str) -> Result<Vec<String>, Error> {
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
    Ok(fields)
}

/// Refuses list forms croner would misread: an empty list element, a lone `+` before the
/// day-of-week list, a bare `L` as a day of the week.
fn check_lists(fields: &[String], field_error: &impl Fn(usize, &str) -> Error) -> Result<(), Error> {
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
    Ok(())
}

/// An expression that matches no date at all (`0 0 30 2 *`) is refused rather than stored as a
/// schedule that never fires.
fn refuse_never_firing(expr: &str, e: CronExpr) -> Result<CronExpr, Error> {
    let probe = Utc.with_ymd_and_hms(2000, 1, 1, 0, 0, 0).unwrap();
    if e.next_naive(probe.naive_utc(), true).is_none() {
        return Err(Error::Expression(format!(
            "cron expression {} never fires (no date matches its day-of-month, month and day-of-week fields)",
            quoted(expr.trim())
        )));
    }
    Ok(e)
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
