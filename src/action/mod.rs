//! Actions: what a run does once its gates said go — a model-free shell command or an LLM agent
//! call — plus the retry backoff between attempts.
//!
//! Owns: executing one attempt and describing its outcome, and the one retry loop
//! ([`retry_with_hook`]; [`retry_with_backoff`] is it without a hook). Must not touch: the store,
//! history, budgets (the run pipeline in `engine` decides whether to call — its budget
//! reservation is the before-attempt hook — and records what happened).

pub mod agent;
pub mod command;
pub mod http;
pub mod llm;
pub mod tools;

use std::future::Future;
use std::time::Duration;

/// The retry backoff, so a failing server or command is not hammered: `min(max(floor,
/// base^attempt), cap) × uniform(1 − jitter, 1 + jitter)` seconds, attempt 0-based. Production uses
/// [`BackoffConfig::default`] (30 / 2 / 300 / 0.1); tests shrink `floor`/`cap` so a retry takes
/// milliseconds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BackoffConfig {
    /// Lower bound of the un-jittered delay, seconds (30).
    pub floor_secs: f64,
    /// Base of the exponential, `base^attempt` seconds (2).
    pub base: f64,
    /// Upper bound of the un-jittered delay, seconds (300).
    pub cap_secs: f64,
    /// Relative jitter: the delay is scaled by a uniform factor in `[1 − jitter, 1 + jitter]`
    /// (0.1).
    pub jitter: f64,
}

impl Default for BackoffConfig {
    fn default() -> Self {
        BackoffConfig {
            floor_secs: 30.0,
            base: 2.0,
            cap_secs: 300.0,
            jitter: 0.1,
        }
    }
}

impl BackoffConfig {
    /// The delay before retry number `attempt + 1`, given `unit` uniform in `[0, 1)` (use
    /// [`jitter_unit`]). Pure, so tests pin the jitter.
    pub fn delay(&self, attempt: u32, unit: f64) -> Duration {
        let exp = self.base.powi(attempt.min(1024) as i32);
        let raw = exp.max(self.floor_secs).min(self.cap_secs);
        let unit = if unit.is_finite() {
            unit.clamp(0.0, 1.0)
        } else {
            0.5
        };
        let factor = 1.0 - self.jitter + 2.0 * self.jitter * unit;
        let secs = raw * factor;
        if secs.is_finite() && secs > 0.0 {
            Duration::from_secs_f64(secs.min(1e9))
        } else {
            Duration::ZERO
        }
    }
}

/// A uniform number in `[0, 1)` for backoff jitter and wake-up spread (`fastrand`'s per-thread
/// generator: no lock, no syscall; nothing here needs a reproducible or cryptographic stream —
/// tests that pin the jitter pass their own unit to [`BackoffConfig::delay`]).
pub fn jitter_unit() -> f64 {
    fastrand::f64()
}

/// How a retried action ended.
#[derive(Debug)]
#[cfg(any(test, feature = "testkit"))]
pub struct Retried<T, E> {
    pub result: Result<T, E>,
    /// Attempts made (≥ 1).
    pub attempts: u32,
    /// The waits slept between attempts, in order (`attempts − 1` of them on a final failure).
    pub waits: Vec<Duration>,
}

/// How a hooked retry loop ended.
#[derive(Debug)]
pub enum Ended<T, E, S> {
    /// The last attempt's result.
    Done(Result<T, E>),
    /// The before-attempt hook stopped the loop; `last` is the previous attempt's error, if any.
    Stopped { stop: S, last: Option<E> },
}

/// A hooked retry loop's outcome.
#[derive(Debug)]
pub struct Hooked<T, E, S> {
    pub ended: Ended<T, E, S>,
    /// Attempts made (0 when the hook stopped the first one).
    pub attempts: u32,
    /// The waits slept between attempts, in order (what [`retry_with_backoff`] reports).
    #[cfg(any(test, feature = "testkit"))]
    pub waits: Vec<Duration>,
}

/// The one retry loop of a run's action: before each attempt `before(attempt)` runs (e.g. the
/// budget reservation) and either hands the attempt a ticket or stops the loop; then
/// `attempt_fn(attempt, ticket)` runs, up to `max_attempts` times (at least one try), sleeping
/// [`BackoffConfig::delay`] (tokio time) between attempts while `retryable(&err)` says the error
/// may go away. A wait never runs past `until` (a bound over the whole action, such as a tool
/// loop's `timeout_seconds`): it is cut there, and the hook, which knows the bound, stops the
/// loop. The caller renews its lease concurrently; this helper only owns the schedule.
pub async fn retry_with_hook<T, E, S, P, H, HFut, F, Fut>(
    cfg: &BackoffConfig,
    max_attempts: u32,
    until: Option<tokio::time::Instant>,
    mut before: H,
    mut attempt_fn: F,
    mut retryable: impl FnMut(&E) -> bool,
) -> Hooked<T, E, S>
where
    H: FnMut(u32) -> HFut,
    HFut: Future<Output = Result<P, S>>,
    F: FnMut(u32, P) -> Fut,
    Fut: Future<Output = Result<T, E>>,
{
    let max_attempts = max_attempts.max(1);
    #[cfg(any(test, feature = "testkit"))]
    let mut waits = Vec::new();
    let mut attempt = 0u32;
    let mut last = None;
    loop {
        let ticket = match before(attempt).await {
            Ok(t) => t,
            Err(stop) => {
                return Hooked {
                    ended: Ended::Stopped { stop, last },
                    attempts: attempt,
                    #[cfg(any(test, feature = "testkit"))]
                    waits,
                };
            }
        };
        let result = attempt_fn(attempt, ticket).await;
        let done = match &result {
            Ok(_) => true,
            Err(e) => attempt + 1 >= max_attempts || !retryable(e),
        };
        if done {
            return Hooked {
                ended: Ended::Done(result),
                attempts: attempt + 1,
                #[cfg(any(test, feature = "testkit"))]
                waits,
            };
        }
        last = result.err();
        let mut wait = cfg.delay(attempt, jitter_unit());
        if let Some(u) = until {
            wait = wait.min(u.saturating_duration_since(tokio::time::Instant::now()));
        }
        #[cfg(any(test, feature = "testkit"))]
        waits.push(wait);
        tokio::time::sleep(wait).await;
        attempt += 1;
    }
}

/// [`retry_with_hook`] without a hook: run `attempt_fn(attempt)` up to `max_attempts` times.
#[cfg(any(test, feature = "testkit"))]
pub async fn retry_with_backoff<T, E, F, Fut>(
    cfg: &BackoffConfig,
    max_attempts: u32,
    mut attempt_fn: F,
    retryable: impl FnMut(&E) -> bool,
) -> Retried<T, E>
where
    F: FnMut(u32) -> Fut,
    Fut: Future<Output = Result<T, E>>,
{
    let h = retry_with_hook(
        cfg,
        max_attempts,
        None,
        |_| std::future::ready(Ok::<(), std::convert::Infallible>(())),
        |a, ()| attempt_fn(a),
        retryable,
    )
    .await;
    let result = match h.ended {
        Ended::Done(r) => r,
        Ended::Stopped { stop, .. } => match stop {},
    };
    Retried {
        result,
        attempts: h.attempts,
        waits: h.waits,
    }
}

#[cfg(test)]
mod backoff_tests {
    use super::*;

    #[test]
    fn default_schedule_matches_the_spec() {
        let c = BackoffConfig::default();
        // Jitter pinned at the midpoint (factor 1.0).
        let secs: Vec<f64> = (0..10).map(|a| c.delay(a, 0.5).as_secs_f64()).collect();
        assert_eq!(
            secs,
            vec![
                30.0, 30.0, 30.0, 30.0, 30.0, 32.0, 64.0, 128.0, 256.0, 300.0
            ]
        );
        assert_eq!(c.delay(u32::MAX, 0.5), Duration::from_secs(300));
    }

    #[test]
    fn jitter_stays_within_ten_percent() {
        let c = BackoffConfig::default();
        assert_eq!(c.delay(0, 0.0), Duration::from_secs_f64(27.0));
        assert_eq!(c.delay(0, 1.0), Duration::from_secs_f64(33.0));
        for _ in 0..1000 {
            let u = jitter_unit();
            assert!((0.0..1.0).contains(&u), "{u}");
            let d = c.delay(8, u).as_secs_f64();
            assert!((230.4..=281.6).contains(&d), "{d}");
        }
        // Garbage jitter input cannot escape the bounds either.
        assert_eq!(c.delay(0, f64::NAN), Duration::from_secs(30));
        assert_eq!(c.delay(0, 7.0), Duration::from_secs_f64(33.0));
    }

    #[test]
    fn jitter_units_are_spread_out() {
        let v: Vec<f64> = (0..200).map(|_| jitter_unit()).collect();
        assert!(v.iter().any(|&u| u < 0.25));
        assert!(v.iter().any(|&u| u > 0.75));
    }

    fn tiny() -> BackoffConfig {
        BackoffConfig {
            floor_secs: 0.030,
            base: 2.0,
            cap_secs: 0.300,
            jitter: 0.1,
        }
    }

    #[tokio::test(start_paused = true)]
    async fn retries_until_success_with_the_configured_waits() {
        let start = tokio::time::Instant::now();
        let r: Retried<&str, String> = retry_with_backoff(
            &tiny(),
            3,
            |a| async move {
                if a < 2 {
                    Err(format!("boom {a}"))
                } else {
                    Ok("done")
                }
            },
            |_| true,
        )
        .await;
        assert_eq!(r.result.unwrap(), "done");
        assert_eq!(r.attempts, 3);
        assert_eq!(r.waits.len(), 2);
        for w in &r.waits {
            // min(max(0.03, 2^a), 0.3) = 0.3 for a = 0, 1 (2^0 = 1 s is over the tiny cap).
            assert!((0.27..=0.33).contains(&w.as_secs_f64()), "{w:?}");
        }
        // Tokio timers round up to whole milliseconds.
        let slept: Duration = r.waits.iter().sum();
        let el = start.elapsed();
        assert!(
            el >= slept && el <= slept + Duration::from_millis(2),
            "{el:?} vs {slept:?}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn stops_at_max_attempts_and_on_permanent_errors() {
        let r: Retried<(), u32> =
            retry_with_backoff(&tiny(), 3, |a| async move { Err(a) }, |_| true).await;
        assert_eq!(r.result.unwrap_err(), 2);
        assert_eq!(r.attempts, 3);
        assert_eq!(r.waits.len(), 2);

        let r: Retried<(), u32> =
            retry_with_backoff(&tiny(), 5, |a| async move { Err(a) }, |_| false).await;
        assert_eq!(r.attempts, 1);
        assert!(r.waits.is_empty());

        // max_attempts 0 still tries once.
        let r: Retried<(), u32> =
            retry_with_backoff(&tiny(), 0, |a| async move { Err(a) }, |_| true).await;
        assert_eq!(r.attempts, 1);
    }

    #[tokio::test(start_paused = true)]
    async fn the_hook_runs_before_every_attempt_and_can_stop_the_loop() {
        // The hook allows two attempts, then stops: the stop carries the last error.
        let mut seen = Vec::new();
        let h: Hooked<(), String, &str> = retry_with_hook(
            &tiny(),
            5,
            None,
            |a| {
                seen.push(a);
                std::future::ready(if a < 2 { Ok(a * 10) } else { Err("budget") })
            },
            |a, ticket| async move {
                assert_eq!(ticket, a * 10, "each attempt gets its own ticket");
                Err(format!("boom {a}"))
            },
            |_| true,
        )
        .await;
        assert_eq!(seen, vec![0, 1, 2]);
        assert_eq!(h.attempts, 2);
        assert_eq!(h.waits.len(), 2);
        match h.ended {
            Ended::Stopped { stop, last } => {
                assert_eq!(stop, "budget");
                assert_eq!(last.as_deref(), Some("boom 1"));
            }
            Ended::Done(r) => panic!("not stopped: {r:?}"),
        }
        // Stopped before the first attempt: nothing ran.
        let h: Hooked<(), String, &str> = retry_with_hook(
            &tiny(),
            5,
            None,
            |_| std::future::ready(Err::<(), _>("no")),
            |_, ()| async { Ok(()) },
            |_| true,
        )
        .await;
        assert_eq!(h.attempts, 0);
        assert!(matches!(h.ended, Ended::Stopped { last: None, .. }));
    }

    /// A wait between attempts never runs past `until`: a 30 s backoff 5 s before the bound
    /// sleeps 5 s, then the hook (which knows the bound) stops the loop.
    #[tokio::test(start_paused = true)]
    async fn a_wait_is_cut_at_the_bound_and_the_hook_stops_the_retry() {
        let start = tokio::time::Instant::now();
        let until = start + Duration::from_secs(5);
        let h: Hooked<(), String, &str> = retry_with_hook(
            &BackoffConfig {
                jitter: 0.0,
                ..BackoffConfig::default()
            },
            3,
            Some(until),
            |a| {
                std::future::ready(if a > 0 && tokio::time::Instant::now() >= until {
                    Err("timed out")
                } else {
                    Ok(())
                })
            },
            |_, ()| async { Err("boom".to_string()) },
            |_| true,
        )
        .await;
        assert_eq!(h.attempts, 1, "no second attempt past the bound");
        assert_eq!(h.waits, vec![Duration::from_secs(5)]);
        assert_eq!(start.elapsed(), Duration::from_secs(5));
        assert!(matches!(
            h.ended,
            Ended::Stopped {
                stop: "timed out",
                ..
            }
        ));
    }
}
