//! Fire times of a [`CronExpr`] in a time zone, under jq's daylight-saving-time policy (see
//! the documentation of [`crate::cron`]).

use super::expr::{CronExpr, LAST_INSTANT, LAST_YEAR};
use chrono::{DateTime, Datelike, Duration, LocalResult, NaiveDateTime, Offset, TimeZone, Timelike, Utc};
use chrono_tz::Tz;

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
    pub(super) fn next_naive(&self, n: NaiveDateTime, inclusive: bool) -> Option<NaiveDateTime> {
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
