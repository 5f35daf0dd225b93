//! The per-job notepad: a small key/value scratchpad an agent reads at the top of its
//! prompt and may update by ending its reply with a ```` ```notepad ```` block.
//!
//! Owns: rendering the notepad for the prompt (never monitor internals), parsing and stripping the
//! reply block, merging updates, and the 16 KiB serialised cap of the notepad. Must not touch:
//! the store (the caller persists the state we return; over the cap it keeps the prior one).
//!
//! Decisions:
//! - Only a block at the very end of the reply counts (trailing whitespace ignored); a notepad
//!   block in the middle of a reply is ordinary text and is delivered as is.
//! - `key=value` lines: key and value are trimmed; a line without `=`, or with an empty key, is
//!   ignored; `key=` (empty value) deletes the key; blank lines are ignored.
//! - Keys and values are single lines by construction, so the rendered notepad round-trips.
//! - The cap is measured on the JSON of the notepad alone (`JobState::notepad_size`): the monitor
//!   watermark, incident and budget-stop state have their own space and never count against it,
//!   so a full notepad cannot evict the watermark (which would make every poll look like a
//!   change and call the model), and an over-cap update is rejected
//!   alone, the rest of the run's state still saved.

use std::collections::BTreeMap;

use crate::model::{JobState, STATE_MAX_BYTES};

/// Heading of the notepad section in the prompt; the guide quotes it, so it does not change.
pub const NOTEPAD_HEADING: &str = "Notepad (state since last run):";

/// The notepad section for the prompt, or `None` when the notepad is empty. Reads only
/// `state.notepad`: the monitor watermark and incident state are never shown.
pub fn render(state: &JobState) -> Option<String> {
    if state.notepad.is_empty() {
        return None;
    }
    let mut s = String::from(NOTEPAD_HEADING);
    for (k, v) in &state.notepad {
        s.push('\n');
        s.push_str(k);
        s.push('=');
        s.push_str(v);
    }
    Some(s)
}

/// Updates parsed from a reply's trailing notepad block: `Some(v)` sets, `None` deletes.
pub type NotepadUpdates = BTreeMap<String, Option<String>>;

/// Split a model reply into the text to deliver and the trailing notepad block's updates.
/// Without a trailing block the reply is returned unchanged and the updates are `None`.
pub fn parse_reply(reply: &str) -> (String, Option<NotepadUpdates>) {
    let trimmed = reply.trim_end();
    let Some(body) = trimmed.strip_suffix("```") else {
        return (reply.to_string(), None);
    };
    // The block's closing fence must start its own line.
    if !(body.is_empty() || body.ends_with('\n')) {
        return (reply.to_string(), None);
    }
    // Find the opening fence: the last line that is exactly ```notepad.
    let mut search_end = body.len();
    let open = loop {
        let Some(pos) = body[..search_end].rfind("```") else {
            return (reply.to_string(), None);
        };
        let at_line_start = pos == 0 || body[..pos].ends_with('\n');
        let line_end = body[pos..]
            .find('\n')
            .map(|i| pos + i)
            .unwrap_or(body.len());
        let fence = body[pos..line_end].trim_end();
        if at_line_start && fence == "```notepad" {
            break (pos, line_end);
        }
        if at_line_start {
            // Another fence closes first: the last block is not a notepad block.
            return (reply.to_string(), None);
        }
        search_end = pos;
    };
    let (open_start, open_line_end) = open;
    let inner = &body[(open_line_end + 1).min(body.len())..];
    let mut updates = NotepadUpdates::new();
    for line in inner.lines() {
        let Some((k, v)) = line.split_once('=') else {
            continue;
        };
        let (k, v) = (k.trim(), v.trim());
        if k.is_empty() {
            continue;
        }
        updates.insert(k.to_string(), (!v.is_empty()).then(|| v.to_string()));
    }
    let delivered = body[..open_start].trim_end().to_string();
    (delivered, Some(updates))
}

/// The state would be over the cap: rejected, the prior state is kept, so one oversized reply
/// cannot erase what earlier runs wrote.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "notepad update rejected: the notepad would be {size} bytes, over the {cap}-byte cap; prior notepad kept"
)]
pub struct StateTooLarge {
    pub size: usize,
    pub cap: usize,
}

/// Serialised size of a job state's notepad (the part the cap applies to).
pub fn serialised_size(state: &JobState) -> usize {
    state.notepad_size()
}

/// Check the 16 KiB notepad cap.
pub fn check_cap(state: &JobState) -> Result<(), StateTooLarge> {
    let size = serialised_size(state);
    if size > STATE_MAX_BYTES {
        Err(StateTooLarge {
            size,
            cap: STATE_MAX_BYTES,
        })
    } else {
        Ok(())
    }
}

/// Apply updates to a copy of `prior`; over the cap → `Err` (and `prior` is what stays stored).
pub fn apply_updates(
    prior: &JobState,
    updates: &NotepadUpdates,
) -> Result<JobState, StateTooLarge> {
    let mut next = prior.clone();
    for (k, v) in updates {
        match v {
            Some(v) => {
                next.notepad.insert(k.clone(), v.clone());
            }
            None => {
                next.notepad.remove(k);
            }
        }
    }
    check_cap(&next)?;
    Ok(next)
}

/// The job state to persist after a run (for the run pipeline): `prior`, plus the gate's new
/// monitor watermark when it went, plus the reply's notepad updates. A notepad update that would
/// push the state over the cap is rejected on its own — the returned reason belongs in the row —
/// and the prior notepad is kept, while the (bounded) watermark still advances.
#[cfg(test)]
pub fn state_after_run(
    prior: &JobState,
    monitor: Option<crate::model::MonitorState>,
    updates: Option<&NotepadUpdates>,
) -> (JobState, Option<String>) {
    let mut base = prior.clone();
    if let Some(m) = monitor {
        base.monitor = Some(m);
    }
    match updates {
        None => (base, None),
        Some(u) => match apply_updates(&base, u) {
            Ok(next) => (next, None),
            Err(e) => (base, Some(e.to_string())),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::MonitorState;

    fn state(pairs: &[(&str, &str)]) -> JobState {
        JobState {
            notepad: pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            ..JobState::default()
        }
    }

    #[test]
    fn render_format() {
        let s = state(&[("seen", "42"), ("last", "disk 80%")]);
        assert_eq!(
            render(&s).unwrap(),
            "Notepad (state since last run):\nlast=disk 80%\nseen=42"
        );
        assert_eq!(render(&JobState::default()), None);
    }

    #[test]
    fn render_never_shows_monitor_internals() {
        let mut s = state(&[("k", "v")]);
        s.monitor = Some(MonitorState {
            hash: "deadbeefcafe".into(),
            preview: "SECRET-PREVIEW".into(),
            truncated: false,
        });
        let r = render(&s).unwrap();
        assert!(!r.contains("deadbeefcafe") && !r.contains("SECRET-PREVIEW"));
        s.notepad.clear();
        assert_eq!(render(&s), None);
    }

    #[test]
    fn reply_block_is_parsed_and_stripped() {
        let reply =
            "Disk grew by 5%.\n\n```notepad\nlast=85%\n  trend = up \nbogus line\n=x\ngone=\n```\n";
        let (text, upd) = parse_reply(reply);
        assert_eq!(text, "Disk grew by 5%.");
        let upd = upd.unwrap();
        assert_eq!(upd.get("last"), Some(&Some("85%".to_string())));
        assert_eq!(upd.get("trend"), Some(&Some("up".to_string())));
        assert_eq!(upd.get("gone"), Some(&None));
        assert_eq!(upd.len(), 3);
    }

    #[test]
    fn reply_without_trailing_block_is_untouched() {
        for r in [
            "plain answer",
            "```notepad\na=1\n```\nthen more text",
            "code:\n```rust\nfn x() {}\n```",
            "",
        ] {
            let (text, upd) = parse_reply(r);
            assert_eq!(text, r);
            assert!(upd.is_none(), "{r}");
        }
        // a code block followed by a notepad block: only the notepad block is stripped
        let r = "```sh\nls\n```\nok\n```notepad\nk=v\n```";
        let (text, upd) = parse_reply(r);
        assert_eq!(text, "```sh\nls\n```\nok");
        assert_eq!(upd.unwrap().get("k"), Some(&Some("v".into())));
    }

    #[test]
    fn state_after_run_keeps_the_watermark_when_the_notepad_is_rejected() {
        let prior = state(&[("a", "1")]);
        let wm = MonitorState {
            hash: "h".into(),
            preview: "p".into(),
            truncated: false,
        };
        let mut big = NotepadUpdates::new();
        big.insert("big".into(), Some("x".repeat(STATE_MAX_BYTES)));
        let (next, why) = state_after_run(&prior, Some(wm.clone()), Some(&big));
        assert!(why.unwrap().contains("over the 16384-byte cap"));
        assert_eq!(next.notepad, prior.notepad);
        assert_eq!(next.monitor, Some(wm.clone()));
        let mut small = NotepadUpdates::new();
        small.insert("b".into(), Some("2".into()));
        let (next, why) = state_after_run(&prior, None, Some(&small));
        assert_eq!(why, None);
        assert_eq!(next.notepad.len(), 2);
        assert_eq!(next.monitor, None);
    }

    #[test]
    fn a_full_notepad_never_evicts_the_monitor_watermark() {
        // A 15.5 KB notepad plus a 2 KiB preview would go over one shared 16 KiB cap, and the
        // whole state (watermark included) would be dropped on every run.
        let mut prior = state(&[("log", &"n".repeat(15_500))]);
        prior.monitor = Some(MonitorState {
            hash: "a".repeat(64),
            preview: "p".repeat(2048),
            truncated: true,
        });
        assert!(serde_json::to_vec(&prior).unwrap().len() > STATE_MAX_BYTES);
        assert_eq!(check_cap(&prior), Ok(()));
        let (merged, why) = JobState::merge_capped(&JobState::default(), prior.clone());
        assert_eq!((merged, why), (prior.clone(), None));
        // An over-cap notepad is rejected alone: the new watermark is still taken.
        let mut next = prior.clone();
        next.notepad.insert("more".into(), "m".repeat(2000));
        next.monitor.as_mut().unwrap().hash = "b".repeat(64);
        let (merged, why) = JobState::merge_capped(&prior, next.clone());
        assert!(why.unwrap().contains("prior notepad kept"));
        assert_eq!(merged.notepad, prior.notepad);
        assert_eq!(merged.monitor, next.monitor);
    }

    #[test]
    fn updates_merge_and_delete() {
        let prior = state(&[("a", "1"), ("b", "2")]);
        let (_, upd) = parse_reply("x\n```notepad\na=10\nb=\nc=3\n```");
        let next = apply_updates(&prior, &upd.unwrap()).unwrap();
        assert_eq!(next.notepad, state(&[("a", "10"), ("c", "3")]).notepad);
    }

    #[test]
    fn cap_rejects_and_prior_is_kept() {
        let prior = state(&[("a", "1")]);
        let mut upd = NotepadUpdates::new();
        upd.insert("big".into(), Some("x".repeat(STATE_MAX_BYTES)));
        let err = apply_updates(&prior, &upd).unwrap_err();
        assert!(err.size > STATE_MAX_BYTES);
        assert_eq!(err.cap, 16 * 1024);
        assert!(err.to_string().contains("prior notepad kept"));
        // the caller still holds the unchanged prior
        assert_eq!(prior.notepad.len(), 1);
        // just under the cap is accepted
        let base = serialised_size(&prior);
        let mut upd = NotepadUpdates::new();
        // `,"b":"…"` adds 7 bytes of JSON around the value
        upd.insert("b".into(), Some("y".repeat(STATE_MAX_BYTES - base - 7)));
        let next = apply_updates(&prior, &upd).unwrap();
        assert_eq!(serialised_size(&next), STATE_MAX_BYTES);
    }

    proptest::proptest! {
        #[test]
        fn parse_reply_never_panics_and_only_shortens(reply in "(?s).{0,400}") {
            let (text, upd) = parse_reply(&reply);
            if upd.is_none() {
                proptest::prop_assert_eq!(&text, &reply);
            } else {
                proptest::prop_assert!(text.len() < reply.len());
            }
        }

        #[test]
        fn parsed_block_round_trips(pairs in proptest::collection::btree_map("[a-z]{1,8}", "[a-z0-9 %]{1,12}", 0..6)) {
            let block: String = pairs.iter().map(|(k, v)| format!("{k}={v}\n")).collect();
            let (text, upd) = parse_reply(&format!("answer\n```notepad\n{block}```\n"));
            proptest::prop_assert_eq!(text, "answer");
            let upd = upd.unwrap();
            for (k, v) in &pairs {
                let want = (!v.trim().is_empty()).then(|| v.trim().to_string());
                proptest::prop_assert_eq!(upd.get(k), Some(&want));
            }
        }
    }
}
