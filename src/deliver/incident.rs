//! Incidents, "alert once" (one alert when a job starts failing, one note when it recovers, so
//! a broken job does not page on every run): error-text normalisation and signatures, and a pure
//! decision over the job's [`IncidentState`] and a run's outcome.
//!
//! Owns: [`normalise`], [`signature`], [`decide`]. Must not touch: delivery, the store — the
//! caller delivers the alert, then commits [`Decision::on_delivered`] (or
//! [`Decision::on_undelivered`] when delivery failed, so the alert is retried on the next
//! failure instead of being lost).
//!
//! Decisions:
//! - Normalisation: lowercase; split into words on whitespace; a word that contains a digit is
//!   an id/number and is removed when it is a digit run of 4 or more, or any other digit-bearing
//!   word of 6+ chars (hex hashes, uuids, request ids, dates, times, `ip:port`); short ones
//!   (`exit 1`, `http 500`, `v1`) are kept because they tell failures apart. Then whitespace is
//!   collapsed and whole words kept while they fit in 200 chars (a word is cut only when it alone
//!   is longer), so normalising a normalised text changes nothing: a cut inside a word could
//!   leave a digit run that the next pass drops. The signature is the hex SHA-256 of that.
//! - `failed` and `abandoned` count as failures; `succeeded` as success; `skipped`, `no_change`
//!   and `missed` leave the state untouched.
//! - With `alert_after_failures: N`, the N-th consecutive failure alerts with *its* signature;
//!   later failures alert again only when their signature differs from the alerted one.
//! - A success resets the count; it sends one recovery note if an alert had been delivered.

use sha2::{Digest, Sha256};

use crate::model::{IncidentState, Status};

/// Characters of normalised text that go into the signature.
pub const SIGNATURE_CHARS: usize = 200;

/// The normalised form of an error text (see the module doc).
pub fn normalise(error: &str) -> String {
    let lower = error.to_lowercase();
    let mut out = String::new();
    let mut chars = 0;
    for word in lower.split_whitespace().filter(|w| !is_volatile(w)) {
        let sep = usize::from(chars > 0);
        let len = word.chars().count();
        if chars + sep + len > SIGNATURE_CHARS {
            if chars == 0 {
                // A kept word this long has no digit (any digit-bearing word of 6+ chars is
                // volatile), so its prefix stays a kept word.
                out.extend(word.chars().take(SIGNATURE_CHARS));
            }
            break;
        }
        if sep == 1 {
            out.push(' ');
        }
        out.push_str(word);
        chars += sep + len;
    }
    out
}

fn is_volatile(word: &str) -> bool {
    // Judge the word without surrounding punctuation: "(id=abc123def)," → "id=abc123def".
    let core = word.trim_matches(|c: char| !c.is_alphanumeric());
    let digits = core.chars().filter(char::is_ascii_digit).count();
    if digits == 0 {
        return false;
    }
    let len = core.chars().count();
    if digits == len { len >= 4 } else { len >= 6 }
}

/// Hex SHA-256 of the normalised error text.
pub fn signature(error: &str) -> String {
    let digest = Sha256::digest(normalise(error).as_bytes());
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

/// What to send for this run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IncidentAction {
    Nothing,
    /// Deliver one alert (this failure opened an incident with a new signature).
    Alert {
        signature: String,
        consecutive_failures: u32,
    },
    /// Deliver one recovery note (success after an alerted incident).
    Recovery,
}

/// The decision plus the state to commit, depending on whether the delivery succeeded.
#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    pub action: IncidentAction,
    /// Commit this after the alert/recovery note was delivered (or when there is nothing to send).
    pub on_delivered: IncidentState,
    /// Commit this when the delivery failed: the count moves on, the alert stays owed.
    pub on_undelivered: IncidentState,
}

/// Decide for one run. `error` is the row's error (or reason) text.
pub fn decide(
    state: &IncidentState,
    status: Status,
    error: Option<&str>,
    alert_after_failures: u32,
) -> Decision {
    let unchanged = || Decision {
        action: IncidentAction::Nothing,
        on_delivered: state.clone(),
        on_undelivered: state.clone(),
    };
    match status {
        Status::Skipped | Status::NoChange | Status::Missed => unchanged(),
        Status::Succeeded => {
            let reset = IncidentState::default();
            if state.alerted_signature.is_some() {
                Decision {
                    action: IncidentAction::Recovery,
                    on_delivered: reset,
                    // Keep the alerted signature so the next success tries the note again.
                    on_undelivered: IncidentState {
                        consecutive_failures: 0,
                        alerted_signature: state.alerted_signature.clone(),
                    },
                }
            } else {
                Decision {
                    action: IncidentAction::Nothing,
                    on_delivered: reset.clone(),
                    on_undelivered: reset,
                }
            }
        }
        Status::Failed | Status::Abandoned => {
            let count = state.consecutive_failures.saturating_add(1);
            let sig = signature(error.unwrap_or(""));
            let counted = IncidentState {
                consecutive_failures: count,
                alerted_signature: state.alerted_signature.clone(),
            };
            let due = count >= alert_after_failures.max(1);
            if due && state.alerted_signature.as_deref() != Some(sig.as_str()) {
                Decision {
                    action: IncidentAction::Alert {
                        signature: sig.clone(),
                        consecutive_failures: count,
                    },
                    on_delivered: IncidentState {
                        consecutive_failures: count,
                        alerted_signature: Some(sig),
                    },
                    on_undelivered: counted,
                }
            } else {
                Decision {
                    action: IncidentAction::Nothing,
                    on_delivered: counted.clone(),
                    on_undelivered: counted,
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalisation_drops_ids_hex_and_long_numbers() {
        assert_eq!(
            normalise("Request  req_8f3a9c2e1b FAILED\tat 2026-11-29T12:00:01Z (pid 48213)"),
            "request failed at (pid"
        );
        assert_eq!(
            normalise("HTTP 500 from http://127.0.0.1:8080/v1: upstream 7f3a9c2e1b4d"),
            "http 500 from upstream"
        );
        assert_eq!(normalise("[exit 1] boom"), "[exit 1] boom");
        assert_eq!(
            normalise("job 550e8400-e29b-41d4-a716-446655440000 crashed"),
            "job crashed"
        );
        // Whole words only: 100 words of one char and 99 spaces fill 199 of the 200.
        assert_eq!(normalise(&"x ".repeat(500)).chars().count(), 199);
        assert_eq!(normalise(&"y".repeat(500)).chars().count(), SIGNATURE_CHARS);
        // A cut inside "1234a" would leave "1234", which a second pass drops.
        let text = format!("{} 1234a", "w".repeat(SIGNATURE_CHARS - 5));
        assert_eq!(normalise(&normalise(&text)), normalise(&text));
    }

    #[test]
    fn same_failure_with_different_ids_has_one_signature() {
        let a = signature("timeout talking to db-7f3a9c after 30s, request id 123456789");
        let b = signature("Timeout talking to db-00ffee after 30s,   request id 987654321");
        assert_eq!(a, b);
        assert_eq!(a.len(), 64);
        assert_ne!(a, signature("connection refused"));
        assert_ne!(signature("[exit 1] x"), signature("[exit 2] x"));
    }

    fn run(
        st: &mut IncidentState,
        status: Status,
        err: Option<&str>,
        n: u32,
        delivered: bool,
    ) -> IncidentAction {
        let d = decide(st, status, err, n);
        *st = if delivered {
            d.on_delivered
        } else {
            d.on_undelivered
        };
        d.action
    }

    fn is_alert(a: &IncidentAction) -> bool {
        matches!(a, IncidentAction::Alert { .. })
    }

    #[test]
    fn alert_once_repeats_silent_recovery_once() {
        let mut st = IncidentState::default();
        assert!(is_alert(&run(
            &mut st,
            Status::Failed,
            Some("boom id abc123456"),
            1,
            true
        )));
        assert_eq!(
            run(&mut st, Status::Failed, Some("boom id def987654"), 1, true),
            IncidentAction::Nothing
        );
        assert_eq!(
            run(&mut st, Status::Skipped, None, 1, true),
            IncidentAction::Nothing
        );
        assert_eq!(
            run(&mut st, Status::NoChange, None, 1, true),
            IncidentAction::Nothing
        );
        assert_eq!(st.consecutive_failures, 2, "skipped/no_change do not reset");
        // A different failure is a new incident.
        assert!(is_alert(&run(
            &mut st,
            Status::Failed,
            Some("disk full"),
            1,
            true
        )));
        assert_eq!(
            run(&mut st, Status::Succeeded, None, 1, true),
            IncidentAction::Recovery
        );
        assert_eq!(st, IncidentState::default());
        assert_eq!(
            run(&mut st, Status::Succeeded, None, 1, true),
            IncidentAction::Nothing
        );
    }

    #[test]
    fn alert_after_three_failures() {
        let mut st = IncidentState::default();
        assert_eq!(
            run(&mut st, Status::Failed, Some("e"), 3, true),
            IncidentAction::Nothing
        );
        assert_eq!(
            run(&mut st, Status::Failed, Some("e"), 3, true),
            IncidentAction::Nothing
        );
        assert_eq!(
            run(&mut st, Status::Failed, Some("e"), 3, true),
            IncidentAction::Alert {
                signature: signature("e"),
                consecutive_failures: 3
            }
        );
        assert_eq!(
            run(&mut st, Status::Failed, Some("e"), 3, true),
            IncidentAction::Nothing
        );
        // Success before the threshold: no alert was sent, so no recovery note either.
        let mut st = IncidentState::default();
        run(&mut st, Status::Failed, Some("e"), 3, true);
        run(&mut st, Status::Failed, Some("e"), 3, true);
        assert_eq!(
            run(&mut st, Status::Succeeded, None, 3, true),
            IncidentAction::Nothing
        );
        assert_eq!(
            run(&mut st, Status::Failed, Some("e"), 3, true),
            IncidentAction::Nothing
        );
    }

    #[test]
    fn undelivered_alerts_and_notes_are_retried() {
        let mut st = IncidentState::default();
        assert!(is_alert(&run(&mut st, Status::Failed, Some("e"), 1, false)));
        assert!(is_alert(&run(&mut st, Status::Failed, Some("e"), 1, true)));
        assert_eq!(st.consecutive_failures, 2);
        assert_eq!(
            run(&mut st, Status::Succeeded, None, 1, false),
            IncidentAction::Recovery
        );
        assert_eq!(
            run(&mut st, Status::Succeeded, None, 1, true),
            IncidentAction::Recovery
        );
        assert_eq!(
            run(&mut st, Status::Succeeded, None, 1, true),
            IncidentAction::Nothing
        );
    }

    #[test]
    fn abandoned_counts_as_failure_missed_is_ignored() {
        let mut st = IncidentState::default();
        assert_eq!(
            run(&mut st, Status::Missed, None, 1, true),
            IncidentAction::Nothing
        );
        assert_eq!(st.consecutive_failures, 0);
        assert!(is_alert(&run(
            &mut st,
            Status::Abandoned,
            Some("lease expired"),
            1,
            true
        )));
    }

    proptest::proptest! {
        #[test]
        fn normalise_is_bounded_and_stable(text in "\\PC{0,400}") {
            let n = normalise(&text);
            proptest::prop_assert!(n.chars().count() <= SIGNATURE_CHARS);
            proptest::prop_assert_eq!(normalise(&n), n.clone());
            proptest::prop_assert_eq!(signature(&text).len(), 64);
        }
    }
}
