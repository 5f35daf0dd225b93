//! When the screen next reads differently with nothing else happening: the console redraws on
//! every change (snapshot, event, key) and otherwise only when one of the durations it shows
//! would turn over. A duration under an hour shows seconds (`4m10s`), so it changes every
//! second; under a day it shows minutes (`2h05m`), beyond that hours (`3d04h`) — an idle
//! console whose countdowns are all that coarse draws once a minute, not once a second.
//!
//! Owns: the arithmetic of "when does this text change", kept beside [`crate::when::span_secs`]
//! whose thresholds it follows. Must not touch: state, drawing.
//!
//! Decisions: everything the main screen can show is counted whether it is scrolled into view
//! or not (uptime; each job's LEFT and PASSED; each lease's expiry and renewal), which only
//! redraws more often, never later; any other screen than the main one, and a pending
//! optimistic operation (it times out), tick every second; the longest wait is a minute, which
//! keeps the clock times (`HH:MM:SS` within a day, a date beyond) and the budget period's turn
//! within a minute of true.

use std::time::Duration;

use chrono::{DateTime, Utc};

use crate::tui::state::{App, Mode};

/// The longest an idle console goes without a redraw.
const LONGEST: i64 = 60;

/// Whole seconds until the text of a duration of `secs` seconds changes: counting down (LEFT,
/// a lease's expiry) or up (PASSED, uptime).
pub(crate) fn secs_until_text_changes(secs: i64, counting_down: bool) -> i64 {
    let s = secs.max(0);
    let step = if s < 3600 {
        1
    } else if s < 86_400 {
        60
    } else {
        3600
    };
    if step == 1 {
        1
    } else if counting_down {
        s % step + 1
    } else {
        step - s % step
    }
}

/// How long the console may sleep before the next redraw when nothing happens (1 s to
/// [`LONGEST`]); the caller aligns it to the clock's whole seconds, when countdowns step.
pub(crate) fn next_change(app: &App) -> Duration {
    if app.mode != Mode::Main || !app.ops.pending.is_empty() || !app.snap.pending.is_empty() {
        return Duration::from_secs(1);
    }
    let now = app.now;
    let up = |t: DateTime<Utc>| secs_until_text_changes((now - t).num_seconds(), false);
    let down = |t: DateTime<Utc>| {
        let s = (t - now).num_seconds();
        if s > 0 {
            secs_until_text_changes(s, true)
        } else {
            // Passed: a fire time reads "due" (no change), an expiry "EXPIRED … ago".
            secs_until_text_changes(-s, false)
        }
    };
    let mut wait = up(app.snap.started_at).min(LONGEST);
    // The instants within an hour of now show seconds (a wait of 1): looked at first, so a
    // console with one such instant answers without walking the rest.
    let d = &app.derived;
    for (instants, turn) in [
        (&d.down, &down as &dyn Fn(DateTime<Utc>) -> i64),
        (&d.up, &up),
    ] {
        let near = instants.partition_point(|t| *t < now - chrono::Duration::hours(1));
        let (before, after) = instants.split_at(near);
        for &t in after.iter().chain(before) {
            if wait == 1 {
                break;
            }
            wait = wait.min(turn(t));
        }
    }
    Duration::from_secs(wait.clamp(1, LONGEST) as u64)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::tui::testdata;

    #[test]
    fn a_duration_turns_over_when_its_last_shown_digit_does() {
        // Seconds shown: every second, both ways.
        assert_eq!(secs_until_text_changes(59, false), 1);
        assert_eq!(secs_until_text_changes(3599, true), 1);
        // "2h05m" counting up: at the next whole minute.
        assert_eq!(secs_until_text_changes(7500, false), 60);
        assert_eq!(secs_until_text_changes(7559, false), 1);
        // "2h05m" counting down: once it drops below 2h05m00s.
        assert_eq!(secs_until_text_changes(7500, true), 1);
        assert_eq!(secs_until_text_changes(7559, true), 60);
        // "1h00m" → "59m59s", "23h59m" → "1d00h", "1d00h" → "23h59m".
        assert_eq!(secs_until_text_changes(3600, true), 1);
        assert_eq!(secs_until_text_changes(86_399, false), 1);
        assert_eq!(secs_until_text_changes(86_400, true), 1);
        // Days shown: at the next whole hour.
        assert_eq!(secs_until_text_changes(90_000, false), 3600);
        assert_eq!(secs_until_text_changes(-5, false), 1);
    }

    /// A console whose durations all show minutes or more waits for the first to turn over;
    /// one showing seconds anywhere (here a job due in ten minutes) redraws every second.
    #[test]
    fn an_idle_console_waits_for_its_first_duration_to_turn_over() {
        let (mut snap, now) = testdata::fixed();
        let idle = |snap: &crate::snapshot::Snapshot| {
            let mut s = snap.clone();
            s.started_at = now - chrono::Duration::seconds(2 * 3600 + 30);
            s.pending.clear();
            for j in &mut s.jobs {
                j.rt.lease = None;
                j.rt.last_run_at =
                    j.rt.last_run_at
                        .map(|_| now - chrono::Duration::minutes(2890));
                j.rt.next_slot =
                    j.rt.next_slot
                        .map(|_| now + chrono::Duration::minutes(4340));
                j.def.jitter_seconds = 0.0;
            }
            s
        };
        let quiet = idle(&snap);
        // Uptime 2h00m30s turns into 2h01m in 30 s; every other duration shows days and turns
        // over later (PASSED 2d00h in 50 min, LEFT 3d00h in 20 min).
        assert_eq!(
            next_change(&App::new(Arc::new(quiet.clone()), now)),
            Duration::from_secs(30)
        );
        let mut soon = quiet.clone();
        soon.jobs[0].rt.retired = false;
        soon.jobs[0].rt.paused = false;
        soon.jobs[0].def.enabled = true;
        soon.jobs[0].rt.next_slot = Some(now + chrono::Duration::seconds(600));
        assert_eq!(
            next_change(&App::new(Arc::new(soon), now)),
            Duration::from_secs(1)
        );
        // A paused job's slot is not shown as a countdown ("n/a").
        let mut paused = quiet;
        paused.jobs[0].rt.paused = true;
        paused.jobs[0].rt.next_slot = Some(now + chrono::Duration::seconds(600));
        assert_eq!(
            next_change(&App::new(Arc::new(paused), now)),
            Duration::from_secs(30)
        );
        // The fixed snapshot has a live lease and fresh runs: every second.
        snap.pending.clear();
        assert_eq!(
            next_change(&App::new(Arc::new(snap), now)),
            Duration::from_secs(1)
        );
    }
}
