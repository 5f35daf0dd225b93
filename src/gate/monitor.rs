//! The stateful change gate of a `monitor:`: probe a source, hash it, compare with the watermark.
//!
//! Owns: the command probe's bounds, the SHA-256 watermark, the bounded preview, the unified diff
//! and turning (prior state, new output) into a [`GateOutcome`]. Must not touch: the store (the
//! caller persists the returned [`MonitorState`] only on `Go`; on `Fail` it keeps the prior one),
//! the prompt (the caller seeds `context`).
//!
//! Decisions:
//! - The diff compares the stored preview with the new output's preview (both ≤ 2048 bytes), so
//!   an unchanged tail beyond the preview never shows up as "added". When the hash changed but the
//!   previews are equal, the change lies beyond the preview and the context says so instead of
//!   showing an empty diff. When either side was longer than the preview the diff carries a note.
//! - The first run's context is the output cut to 8000 characters (marked when cut), the same
//!   bound as a diff or `pre_run` stdout.
//! - Command probe output that is not UTF-8 is hashed as raw bytes and shown lossily.
//! - Line endings are normalized before hashing and previewing ([`normalized`]: CRLF read as
//!   LF): a page that only flips CRLF/LF is not a change and calls no model, since a server that
//!   alternates line endings would otherwise pay for a model call on every poll. A
//!   lone CR is kept. A watermark stored before this rule was hashed over the raw bytes, so a
//!   CRLF source shows one change after the upgrade.

use std::time::Duration;

use sha2::{Digest, Sha256};

use super::GateOutcome;
use crate::model::MonitorState;
use crate::proc::{self, Cap, ProcSpec};

/// Bytes of the last good output kept for the next diff: enough to show what changed in a
/// typical page or status output, small enough to sit in every job's state.
pub const PREVIEW_MAX_BYTES: usize = 2048;
/// Command probe stdout cap (more → killed, failed): a probe's output is compared, and a
/// runaway probe must not fill memory.
pub const PROBE_STDOUT_CAP: usize = 64 * 1024;
/// Stderr characters shown in a probe error: enough for the reason, short enough for one row.
pub const PROBE_STDERR_CHARS: usize = 500;
/// Diff (and other gate context) bound in characters, so a big change costs a bounded prompt.
pub const CONTEXT_MAX_CHARS: usize = 8000;

/// Hex SHA-256 of the probe output.
pub fn hash_hex(output: &[u8]) -> String {
    let digest = Sha256::digest(output);
    let mut s = String::with_capacity(64);
    for b in digest.iter() {
        s.push_str(&format!("{b:02x}"));
    }
    s
}

/// The first ≤ `max` bytes of `s`, cut on a UTF-8 boundary; and whether anything was cut.
pub fn preview_of(s: &str, max: usize) -> (String, bool) {
    if s.len() <= max {
        return (s.to_string(), false);
    }
    let mut end = max;
    while end > 0 && !s.is_char_boundary(end) {
        end -= 1;
    }
    (s[..end].to_string(), true)
}

/// The output as compared: every CRLF read as LF, so a source that only flips its line endings
/// (a web server or a proxy switching between CRLF and LF) is not a change.
pub fn normalized(output: &[u8]) -> std::borrow::Cow<'_, [u8]> {
    if !output.windows(2).any(|w| w == b"\r\n") {
        return std::borrow::Cow::Borrowed(output);
    }
    let mut out = Vec::with_capacity(output.len());
    let mut i = 0;
    while i < output.len() {
        if output[i] == b'\r' && output.get(i + 1) == Some(&b'\n') {
            i += 1;
            continue;
        }
        out.push(output[i]);
        i += 1;
    }
    std::borrow::Cow::Owned(out)
}

/// The new watermark for an output (hashed and previewed with line endings normalized).
pub fn watermark(output: &[u8]) -> MonitorState {
    let output = normalized(output);
    let text = String::from_utf8_lossy(&output);
    let (preview, truncated) = preview_of(&text, PREVIEW_MAX_BYTES);
    MonitorState {
        hash: hash_hex(&output),
        preview,
        truncated,
    }
}

/// `--- previous` / `+++ current` unified diff with 3 lines of context, ≤ `max_chars` (marked).
pub fn unified_diff(previous: &str, current: &str, max_chars: usize) -> String {
    let diff = similar::TextDiff::from_lines(previous, current);
    let text = diff
        .unified_diff()
        .context_radius(3)
        .header("previous", "current")
        .to_string();
    crate::model::truncate_marked(&text, max_chars)
}

/// Compare a successful probe's output with the prior watermark (pure; no I/O).
pub fn evaluate(output: &[u8], prior: Option<&MonitorState>) -> GateOutcome {
    let new = watermark(output);
    let Some(prior) = prior else {
        let text = String::from_utf8_lossy(output);
        let body = crate::model::truncate_marked(&text, CONTEXT_MAX_CHARS);
        return GateOutcome::Go {
            context: Some(format!(
                "Monitor output (first run, no earlier output to compare with):\n{body}"
            )),
            diff: None,
            monitor: Some(new),
        };
    };
    if prior.hash == new.hash {
        return GateOutcome::NoChange;
    }
    let (diff, context) = if prior.preview == new.preview {
        let note = format!(
            "The monitored output changed beyond the first {PREVIEW_MAX_BYTES} bytes kept for \
             comparison, so no line diff is available."
        );
        let text = String::from_utf8_lossy(output);
        let body = crate::model::truncate_marked(&text, CONTEXT_MAX_CHARS);
        (
            note.clone(),
            format!("Monitor detected a change.\n{note}\nCurrent output:\n{body}"),
        )
    } else {
        let mut d = unified_diff(&prior.preview, &new.preview, CONTEXT_MAX_CHARS);
        if prior.truncated || new.truncated {
            d.push_str(&format!(
                "\n(diff covers only the first {PREVIEW_MAX_BYTES} bytes of the output; \
                 changes further down are not shown)\n"
            ));
        }
        let ctx = format!("Monitor detected a change (unified diff):\n{d}");
        (d, ctx)
    };
    GateOutcome::Go {
        context: Some(context),
        diff: Some(diff),
        monitor: Some(new),
    }
}

/// Run a monitor's command probe: own group, stdout hard-capped at 64 KiB, stderr ≤ 500 chars,
/// `timeout`, non-zero → error. Returns the raw stdout.
pub async fn probe_command(
    command: &str,
    timeout: Duration,
    env: &proc::ProcEnv,
) -> Result<Vec<u8>, String> {
    let spec = ProcSpec {
        command,
        timeout,
        stdout_cap: Cap::Hard(PROBE_STDOUT_CAP),
        stderr_cap: Cap::Soft(proc::bytes_for_chars(PROBE_STDERR_CHARS)),
    };
    let out = proc::run(&spec, env).await.map_err(|e| e.to_string())?;
    if out.timed_out {
        return Err(format!(
            "monitor command timed out after {}s (process group killed)",
            timeout.as_secs_f64()
        ));
    }
    if out.hard_cap_hit {
        return Err("monitor command output exceeded 64 KiB (process group killed)".to_string());
    }
    if out.exit_code != 0 {
        let stderr = out.stderr_lossy();
        let (s, _) = proc::cut_chars(stderr.trim(), PROBE_STDERR_CHARS);
        return Err(format!(
            "monitor command failed (exit {}: {s})",
            out.exit_code
        ));
    }
    Ok(out.stdout)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn go(o: GateOutcome) -> (Option<String>, Option<String>, MonitorState) {
        match o {
            GateOutcome::Go {
                context,
                diff,
                monitor,
            } => (context, diff, monitor.expect("monitor state")),
            other => panic!("expected go, got {other:?}"),
        }
    }

    /// A page that only flips CRLF/LF is not a change (no model call).
    #[test]
    fn line_ending_flips_are_not_a_change() {
        let crlf = b"line1\r\nline2\r\n";
        let lf = b"line1\nline2\n";
        let prior = watermark(crlf);
        assert!(matches!(evaluate(lf, Some(&prior)), GateOutcome::NoChange));
        assert!(matches!(
            evaluate(crlf, Some(&watermark(lf))),
            GateOutcome::NoChange
        ));
        assert!(!prior.preview.contains('\r'));
        assert!(matches!(
            evaluate(b"line1\r\nline3\r\n", Some(&prior)),
            GateOutcome::Go { .. }
        ));
        assert_eq!(
            normalized(b"a\rb\r\n").as_ref(),
            b"a\rb\n",
            "a lone CR is kept"
        );
    }

    #[test]
    fn hash_is_sha256_hex() {
        assert_eq!(
            hash_hex(b"hi\n"),
            "98ea6e4f216f2fb4b69fff9b3a44842c38686ca685f3f55dc48c5d3fb1107be4"
        );
    }

    #[test]
    fn first_run_goes_with_the_output_as_context() {
        let (ctx, diff, st) = go(evaluate(b"disk 50%\n", None));
        assert!(ctx.unwrap().contains("disk 50%"));
        assert_eq!(diff, None);
        assert_eq!(st.hash, hash_hex(b"disk 50%\n"));
        assert_eq!(st.preview, "disk 50%\n");
        assert!(!st.truncated);
    }

    #[test]
    fn unchanged_output_is_no_change() {
        let st = watermark(b"same\n");
        assert_eq!(evaluate(b"same\n", Some(&st)), GateOutcome::NoChange);
    }

    #[test]
    fn changed_output_yields_a_unified_diff() {
        let st = watermark(b"a\nb\nc\nd\ne\nf\ng\nh\n");
        let (ctx, diff, new) = go(evaluate(b"a\nb\nc\nd\nE\nf\ng\nh\n", Some(&st)));
        let diff = diff.unwrap();
        assert!(diff.starts_with("--- previous\n+++ current\n"), "{diff}");
        assert!(diff.contains("\n-e\n"), "{diff}");
        assert!(diff.contains("\n+E\n"), "{diff}");
        // three lines of context either side, not more
        assert!(diff.contains(" b\n") && diff.contains(" h\n"));
        assert!(!diff.contains(" a\n"), "{diff}");
        assert!(ctx.unwrap().contains(&diff));
        assert_eq!(new.hash, hash_hex(b"a\nb\nc\nd\nE\nf\ng\nh\n"));
    }

    #[test]
    fn diff_is_bounded() {
        let old: String = (0..3000).map(|i| format!("line {i}\n")).collect();
        let new: String = (0..3000).map(|i| format!("LINE {i}\n")).collect();
        let d = unified_diff(&old, &new, CONTEXT_MAX_CHARS);
        assert!(d.chars().count() <= CONTEXT_MAX_CHARS + "…[truncated]".chars().count());
        assert!(d.ends_with("…[truncated]"));
    }

    #[test]
    fn preview_is_cut_on_a_utf8_boundary() {
        let s = "é".repeat(2000); // 4000 bytes
        let (p, cut) = preview_of(&s, PREVIEW_MAX_BYTES);
        assert!(cut);
        assert!(p.len() <= PREVIEW_MAX_BYTES);
        assert_eq!(p.len(), 2048);
        let s = format!("a{}", "é".repeat(2000));
        let (p, _) = preview_of(&s, PREVIEW_MAX_BYTES);
        assert_eq!(p.len(), 2047);
    }

    #[test]
    fn change_beyond_the_preview_is_said_so() {
        let base = "x".repeat(3000);
        let st = watermark(format!("{base}\nold tail\n").as_bytes());
        assert!(st.truncated);
        let (ctx, diff, _) = go(evaluate(
            format!("{base}\nnew tail\n").as_bytes(),
            Some(&st),
        ));
        assert!(diff.unwrap().contains("beyond the first 2048 bytes"));
        assert!(ctx.unwrap().contains("beyond the first 2048 bytes"));
    }

    proptest::proptest! {
        #[test]
        fn preview_is_a_bounded_prefix_on_a_char_boundary(s in "(?s).{0,1200}", max in 0usize..3000) {
            let (p, cut) = preview_of(&s, max);
            proptest::prop_assert!(p.len() <= max);
            proptest::prop_assert!(s.starts_with(&p));
            proptest::prop_assert_eq!(cut, p.len() < s.len());
        }

        #[test]
        fn evaluate_is_total_and_consistent(a in proptest::collection::vec(proptest::num::u8::ANY, 0..3000),
                                             b in proptest::collection::vec(proptest::num::u8::ANY, 0..3000)) {
            let wa = watermark(&a);
            let same = evaluate(&a, Some(&wa));
            proptest::prop_assert_eq!(same, GateOutcome::NoChange);
            match evaluate(&b, Some(&wa)) {
                GateOutcome::NoChange => proptest::prop_assert_eq!(&a, &b),
                GateOutcome::Go { diff, monitor, .. } => {
                    proptest::prop_assert!(diff.is_some());
                    proptest::prop_assert_eq!(monitor, Some(watermark(&b)));
                }
                other => proptest::prop_assert!(false, "unexpected {:?}", other),
            }
        }
    }
}
