//! Retry backoff: the delay before a failed job's next attempt.
//!
//! Pure arithmetic, no I/O and no random source of its own: the caller passes a uniform sample
//! in `[0, 1)` (SQL passes `random()`), so the distribution is testable deterministically.
//!
//! Policies (the delay before jitter, for the attempt that just failed, counted from 1):
//! - `fixed`: `base`
//! - `linear`: `base * attempt`
//! - `exponential`: `base * 2^(attempt - 1)`
//!
//! Each is capped at `max`. Jitter `full` then draws the delay uniformly from `[0, capped)`
//! ("full jitter", Marc Brooker, *Exponential Backoff And Jitter*, AWS Architecture Blog, 2015):
//! jobs that failed together, say in one downstream outage, do not retry together.

use pgrx::prelude::*;

/// How the delay grows with the attempt number.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Policy {
    Fixed,
    Linear,
    Exponential,
}

/// Whether the computed delay is used as is or drawn uniformly below it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Jitter {
    None,
    Full,
}

impl Policy {
    /// Parses `fixed`, `linear` or `exponential` (the SQL enum `jq.backoff_policy`).
    pub fn parse(s: &str) -> Option<Policy> {
        match s {
            "fixed" => Some(Policy::Fixed),
            "linear" => Some(Policy::Linear),
            "exponential" => Some(Policy::Exponential),
            _ => None,
        }
    }
}

impl Jitter {
    /// Parses `none` or `full` (the SQL enum `jq.jitter_mode`).
    pub fn parse(s: &str) -> Option<Jitter> {
        match s {
            "none" => Some(Jitter::None),
            "full" => Some(Jitter::Full),
            _ => None,
        }
    }
}

/// The delay in seconds before the retry of `attempt` (1 = the first attempt failed).
///
/// `base` and `max` are seconds (negative values count as 0); `sample` is uniform in `[0, 1)`
/// and only used with [`Jitter::Full`] (values outside are clamped). The result is always in
/// `[0, min(computed, max)]` and finite.
pub fn delay_seconds(policy: Policy, base: f64, max: f64, attempt: i32, jitter: Jitter, sample: f64) -> f64 {
    let base = if base.is_finite() { base.max(0.0) } else { 0.0 };
    let max = if max.is_finite() { max.max(0.0) } else { 0.0 };
    let attempt = attempt.max(1);
    let computed = match policy {
        Policy::Fixed => base,
        Policy::Linear => base * f64::from(attempt),
        // 2^1023 is the largest finite power; beyond, the cap applies anyway.
        Policy::Exponential => base * 2f64.powi((attempt - 1).min(1023)),
    };
    let capped = if computed.is_finite() { computed.min(max) } else { max };
    match jitter {
        Jitter::None => capped,
        Jitter::Full => {
            let u = if sample.is_finite() { sample.clamp(0.0, 1.0) } else { 0.0 };
            capped * u
        }
    }
}

/// SQL: `jq.backoff_seconds(policy text, base_seconds float8, max_seconds float8, attempt int,
/// jitter text, sample float8) RETURNS float8`.
///
/// The retry delay in seconds for `attempt` (1-based) under `policy` (`fixed` | `linear` |
/// `exponential`), capped at `max_seconds`, with `jitter` `none` or `full` using `sample` in
/// `[0, 1)`. Errors: SQLSTATE 22023 for an unknown policy or jitter mode.
#[pg_extern(create_or_replace, immutable, parallel_safe)]
fn backoff_seconds(policy: &str, base_seconds: f64, max_seconds: f64, attempt: i32, jitter: &str, sample: f64) -> f64 {
    let Some(p) = Policy::parse(policy) else {
        ereport!(
            ERROR,
            PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
            format!("unknown backoff policy {policy:?}: expected fixed, linear or exponential")
        );
    };
    let Some(j) = Jitter::parse(jitter) else {
        ereport!(
            ERROR,
            PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
            format!("unknown jitter mode {jitter:?}: expected none or full")
        );
    };
    delay_seconds(p, base_seconds, max_seconds, attempt, j, sample)
}

#[cfg(test)]
mod unit {
    use super::*;

    #[test]
    fn policies_without_jitter() {
        assert_eq!(delay_seconds(Policy::Fixed, 2.0, 100.0, 5, Jitter::None, 0.5), 2.0);
        assert_eq!(delay_seconds(Policy::Linear, 2.0, 100.0, 5, Jitter::None, 0.5), 10.0);
        assert_eq!(delay_seconds(Policy::Exponential, 2.0, 100.0, 1, Jitter::None, 0.5), 2.0);
        assert_eq!(delay_seconds(Policy::Exponential, 2.0, 100.0, 4, Jitter::None, 0.5), 16.0);
    }

    #[test]
    fn capped_at_max_even_for_huge_attempts() {
        assert_eq!(delay_seconds(Policy::Exponential, 1.0, 3600.0, 40, Jitter::None, 0.0), 3600.0);
        assert_eq!(delay_seconds(Policy::Exponential, 1.0, 3600.0, i32::MAX, Jitter::None, 0.0), 3600.0);
        assert_eq!(delay_seconds(Policy::Linear, 1e300, 60.0, i32::MAX, Jitter::None, 0.0), 60.0);
    }

    #[test]
    fn full_jitter_stays_within_zero_and_computed() {
        for policy in [Policy::Fixed, Policy::Linear, Policy::Exponential] {
            for attempt in 1..30 {
                let ceiling = delay_seconds(policy, 0.5, 600.0, attempt, Jitter::None, 0.0);
                for k in 0..100 {
                    let u = f64::from(k) / 100.0;
                    let d = delay_seconds(policy, 0.5, 600.0, attempt, Jitter::Full, u);
                    assert!((0.0..=ceiling).contains(&d), "{policy:?} attempt {attempt} u {u}: {d}");
                    assert!(d <= 600.0);
                }
            }
        }
    }

    #[test]
    fn full_jitter_is_uniform_over_the_interval() {
        // The delay is the sample scaled: equal buckets of samples give equal buckets of delays.
        let d = |u| delay_seconds(Policy::Fixed, 10.0, 100.0, 1, Jitter::Full, u);
        assert_eq!(d(0.0), 0.0);
        assert!((d(0.25) - 2.5).abs() < 1e-9);
        assert!((d(0.999) - 9.99).abs() < 1e-9);
    }

    #[test]
    fn bad_numbers_are_clamped_not_propagated() {
        assert_eq!(delay_seconds(Policy::Fixed, -5.0, 10.0, 1, Jitter::None, 0.0), 0.0);
        assert_eq!(delay_seconds(Policy::Fixed, f64::NAN, 10.0, 1, Jitter::None, 0.0), 0.0);
        assert_eq!(delay_seconds(Policy::Fixed, 5.0, 10.0, 1, Jitter::Full, f64::NAN), 0.0);
        assert_eq!(delay_seconds(Policy::Fixed, 5.0, 10.0, 1, Jitter::Full, 7.0), 5.0);
        assert_eq!(delay_seconds(Policy::Linear, 5.0, 100.0, -3, Jitter::None, 0.0), 5.0);
    }

    #[test]
    fn parse_names() {
        assert_eq!(Policy::parse("linear"), Some(Policy::Linear));
        assert_eq!(Policy::parse("Linear"), None);
        assert_eq!(Jitter::parse("full"), Some(Jitter::Full));
        assert_eq!(Jitter::parse(""), None);
    }
}
