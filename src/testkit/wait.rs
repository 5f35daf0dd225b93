//! Waiting for a condition in tests: poll it with a deadline instead of sleeping for a guessed
//! time, so a test is as fast as the code under test and fails with what it waited for.
//!
//! The poll starts at 2 ms and doubles up to 50 ms: a condition that is met at once costs
//! nothing, one that takes seconds costs a few checks a second.
//!
//! Owns: the one polling loop every test uses. Must not touch: what is polled.

use std::fmt::Display;
use std::time::{Duration, Instant};

const FIRST_STEP: Duration = Duration::from_millis(2);
const LONGEST_STEP: Duration = Duration::from_millis(50);

/// Poll `done` until it holds or `limit` passes (blocking); whether it held.
pub fn poll_until(limit: Duration, mut done: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    let mut step = FIRST_STEP;
    loop {
        if done() {
            return true;
        }
        if start.elapsed() >= limit {
            return false;
        }
        std::thread::sleep(step);
        step = (step * 2).min(LONGEST_STEP);
    }
}

/// Poll `found` until it yields a value or `limit` passes (blocking); the value, if any. For a
/// wait whose answer is what was found (a pid, a row), so the test does not read it twice.
pub fn poll_for<T>(limit: Duration, mut found: impl FnMut() -> Option<T>) -> Option<T> {
    let mut value = None;
    poll_until(limit, || {
        value = found();
        value.is_some()
    });
    value
}

/// [`poll_for`] on the tokio timer, for async tests.
pub async fn poll_for_async<T>(limit: Duration, mut found: impl FnMut() -> Option<T>) -> Option<T> {
    let mut value = None;
    poll_until_async(limit, || {
        value = found();
        value.is_some()
    })
    .await;
    value
}

/// [`poll_until`] on the tokio timer, for async tests (the runtime keeps running meanwhile).
pub async fn poll_until_async(limit: Duration, mut done: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    let mut step = FIRST_STEP;
    loop {
        if done() {
            return true;
        }
        if start.elapsed() >= limit {
            return false;
        }
        tokio::time::sleep(step).await;
        step = (step * 2).min(LONGEST_STEP);
    }
}

/// Wait until `done` holds (blocking); panics naming `what` after `limit`. Returns how long it
/// took.
#[track_caller]
pub fn wait_until(what: impl Display, limit: Duration, done: impl FnMut() -> bool) -> Duration {
    let start = Instant::now();
    if !poll_until(limit, done) {
        panic!("timed out after {limit:?} waiting for {what}");
    }
    start.elapsed()
}

/// [`wait_until`] on the tokio timer, for async tests.
#[track_caller]
pub fn wait_until_async(
    what: impl Display,
    limit: Duration,
    done: impl FnMut() -> bool,
) -> impl Future<Output = Duration> {
    // `#[track_caller]` does not reach into an async body: the caller's location is taken here.
    let caller = std::panic::Location::caller();
    async move {
        let start = Instant::now();
        if !poll_until_async(limit, done).await {
            panic!("timed out after {limit:?} waiting for {what} (at {caller})");
        }
        start.elapsed()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_met_condition_returns_at_once_and_an_unmet_one_at_the_limit() {
        assert!(poll_until(Duration::from_secs(10), || true));
        let start = Instant::now();
        assert!(!poll_until(Duration::from_millis(30), || false));
        assert!(start.elapsed() >= Duration::from_millis(30));
        let mut n = 0;
        assert!(poll_until(Duration::from_secs(10), || {
            n += 1;
            n == 3
        }));
    }

    #[test]
    fn poll_for_returns_the_first_value_found_and_none_at_the_limit() {
        let mut n = 0;
        assert_eq!(
            poll_for(Duration::from_secs(10), || {
                n += 1;
                (n == 3).then_some(n * 10)
            }),
            Some(30)
        );
        assert_eq!(poll_for(Duration::from_millis(10), || None::<u8>), None);
    }

    #[test]
    #[should_panic(expected = "waiting for the answer")]
    fn a_timeout_names_what_was_awaited() {
        wait_until("the answer", Duration::from_millis(10), || false);
    }
}
