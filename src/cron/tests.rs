//! Unit tests of cron expressions and fire times (`cargo test -p jq --lib`).

use super::*;
use chrono::{DateTime, Duration, NaiveDate, Utc};

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
fn leap_day() {
    assert_eq!(next_utc("0 0 29 2 *", "UTC", "2016-03-10T00:00:00Z", 1), ["2020-02-29 00:00:00Z"]);
    assert_eq!(next_utc("0 0 0 29 2 *", "UTC", "2016-03-10T00:00:00Z", 1), ["2020-02-29 00:00:00Z"]);
    assert_eq!(next_utc("0 0 29 2 *", "UTC", "2024-03-01T00:00:00Z", 1), ["2028-02-29 00:00:00Z"]);
}

#[test]
fn last_day_of_month() {
    let want = ["2015-09-30 00:00:00Z", "2015-10-31 00:00:00Z", "2015-11-30 00:00:00Z", "2015-12-31 00:00:00Z"];
    assert_eq!(next_utc("0 0 L * *", "UTC", "2015-09-04T00:00:00Z", 4), want);
    assert_eq!(next_utc("0 0 l * *", "UTC", "2015-09-04T00:00:00Z", 4), want);
}

#[test]
fn range_to_last_day() {
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
fn last_day_of_february() {
    assert_eq!(next_utc("0 0 L * *", "UTC", "2016-02-05T00:00:00Z", 1), ["2016-02-29 00:00:00Z"]);
    assert_eq!(next_utc("0 0 L * *", "UTC", "2017-02-01T00:00:00Z", 1), ["2017-02-28 00:00:00Z"]);
}

#[test]
fn spring_forward_fixed_time_fires_at_end_of_gap() {
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
fn fall_back_fixed_time_fires_once() {
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
fn fall_back_interval_fires_at_both() {
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
fn aliases() {
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
fn seconds_field_comes_first() {
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
fn steps_restart_each_hour() {
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
fn day_of_month_or_day_of_week() {
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
fn time_zones_and_backward_links() {
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
