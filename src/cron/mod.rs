//! Cron expressions: parse, validate, and compute fire times in an IANA time zone.
//!
//! Pure Rust, no PostgreSQL, except [`sql`], the SQL functions. [`expr`] parses expressions and
//! zones, [`schedule`] computes fire times. Field parsing and calendar
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

pub mod expr;
pub mod schedule;
pub mod sql;
#[cfg(test)]
mod tests;

pub use expr::{check_instant, parse, parse_zone, CronExpr, Error, ALIASES, EARLIEST, LAST_INSTANT, LAST_YEAR,
               MAX_EXPRESSION_LEN};
