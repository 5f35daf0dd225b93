//! The text form of a stored monitor diff for `cronsole diff`.
//!
//! Owns: choosing the history query, sanitising (no escape sequence or control byte from the
//! watched source reaches the terminal) and optional ANSI colouring. Must not touch: terminal
//! detection (the caller says whether to colour), printing.

use uuid::Uuid;

use crate::model::HistoryRow;
use crate::store::{HistoryQuery, HistoryReader, StoreError};

/// Why `cronsole diff` has nothing to show.
#[derive(Debug, thiserror::Error)]
pub enum DiffError {
    /// No such job: bad input (exit 2).
    #[error("no job named '{0}' in the store")]
    NoSuchJob(String),
    #[error("job '{job}' has no recorded monitor diff{}", run.map(|r| format!(" for run {r}")).unwrap_or_default())]
    NoDiff { job: String, run: Option<Uuid> },
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// The text `cronsole diff NAME [--run RUN_ID]` prints, read through the [`HistoryReader`] trait.
pub fn diff_text(
    store: &dyn HistoryReader,
    job: &str,
    run_id: Option<Uuid>,
    color: bool,
) -> Result<String, DiffError> {
    let rows = store.history(&query(job, run_id))?;
    // Defensive: a store that ignores a filter must not make us show another job's diff.
    let row = rows
        .into_iter()
        .find(|r| r.job == job && r.diff.is_some() && run_id.is_none_or(|id| r.run_id == id));
    match row {
        Some(r) => Ok(format_row(&r, color)),
        None if store.job(job)?.is_none() => Err(DiffError::NoSuchJob(job.to_string())),
        None => Err(DiffError::NoDiff {
            job: job.to_string(),
            run: run_id,
        }),
    }
}

/// The query for `cronsole diff NAME [--run RUN_ID]`: the latest (or the given) run with a diff.
pub fn query(job: &str, run_id: Option<Uuid>) -> HistoryQuery {
    HistoryQuery {
        job: Some(job.to_string()),
        with_diff: true,
        run_id,
        limit: 1,
        ..HistoryQuery::default()
    }
}

/// One diff line made inert by the one policy (`crate::text::visible_tabs`): control characters in
/// caret notation (`^[`), bidi overrides and zero-width characters as `\u{…}`, tabs kept, so a
/// diff can never move the cursor, change colours or retitle the terminal. Newlines are handled
/// by the caller, which sanitises line by line.
pub fn sanitize_line(line: &str) -> String {
    crate::text::visible_tabs(line).into_owned()
}

const RED: &str = "\x1b[31m";
const GREEN: &str = "\x1b[32m";
const CYAN: &str = "\x1b[36m";
const BOLD: &str = "\x1b[1m";
const RESET: &str = "\x1b[0m";

/// A header line and the sanitised, optionally coloured diff of `row`.
pub fn format_row(row: &HistoryRow, color: bool) -> String {
    let mut out = String::new();
    let slot = row
        .slot
        .map(|s| s.to_rfc3339_opts(chrono::SecondsFormat::Secs, true))
        .unwrap_or_else(|| "manual".to_string());
    let header = format!(
        "# job {} · run {} · {} · slot {} · finished {}",
        sanitize_line(&row.job),
        row.run_id,
        row.status,
        slot,
        row.finished_at
            .to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
    );
    if color {
        out.push_str(BOLD);
        out.push_str(&header);
        out.push_str(RESET);
    } else {
        out.push_str(&header);
    }
    out.push('\n');
    let diff = row.diff.as_deref().unwrap_or("");
    for line in diff.split('\n') {
        let clean = sanitize_line(line.strip_suffix('\r').unwrap_or(line));
        let colour = if !color {
            None
        } else if clean.starts_with("+++") || clean.starts_with("---") {
            Some(BOLD)
        } else if clean.starts_with("@@") {
            Some(CYAN)
        } else if clean.starts_with('+') {
            Some(GREEN)
        } else if clean.starts_with('-') {
            Some(RED)
        } else {
            None
        };
        match colour {
            Some(c) => {
                out.push_str(c);
                out.push_str(&clean);
                out.push_str(RESET);
            }
            None => out.push_str(&clean),
        }
        out.push('\n');
    }
    // `split` yields a trailing empty piece for a diff ending in '\n': do not double it.
    if diff.ends_with('\n') {
        out.pop();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Status, Trigger};
    use chrono::DateTime;

    fn row(diff: &str) -> HistoryRow {
        let t = DateTime::parse_from_rfc3339("2026-11-29T10:00:00Z")
            .unwrap()
            .to_utc();
        let mut r = HistoryRow::new(
            "disk-watch",
            Status::Succeeded,
            Trigger::Schedule,
            Some(t),
            "o",
            t,
        );
        r.run_id = Uuid::nil();
        r.diff = Some(diff.to_string());
        r
    }

    /// A store that only answers history (filtering like a real one) and `job` (none known).
    struct HistoryOnly(Vec<HistoryRow>);

    impl HistoryReader for HistoryOnly {
        fn job(&self, _: &str) -> crate::store::StoreResult<Option<crate::model::JobRecord>> {
            Ok(None)
        }
        fn history(&self, q: &HistoryQuery) -> crate::store::StoreResult<Vec<HistoryRow>> {
            Ok(self
                .0
                .iter()
                .filter(|r| q.job.as_ref().is_none_or(|j| &r.job == j))
                .filter(|r| !q.with_diff || r.diff.is_some())
                .filter(|r| q.run_id.is_none_or(|id| r.run_id == id))
                .take(q.limit.max(1))
                .cloned()
                .collect())
        }
    }

    #[test]
    fn diff_text_picks_the_latest_or_the_given_run() {
        let mut newest = row("-old\n+new\n");
        newest.run_id = Uuid::from_u128(2);
        let mut no_diff = row("");
        no_diff.diff = None;
        no_diff.run_id = Uuid::from_u128(9);
        let mut older = row("-older\n+old\n");
        older.run_id = Uuid::from_u128(1);
        let store = HistoryOnly(vec![no_diff, newest, older]);
        let latest = diff_text(&store, "disk-watch", None, false).unwrap();
        assert!(latest.contains("run 00000000-0000-0000-0000-000000000002"));
        assert!(latest.ends_with("-old\n+new\n"));
        let given = diff_text(&store, "disk-watch", Some(Uuid::from_u128(1)), false).unwrap();
        assert!(given.ends_with("-older\n+old\n"));
        assert!(matches!(
            diff_text(&store, "nope", None, false),
            Err(DiffError::NoSuchJob(j)) if j == "nope"
        ));
    }

    #[test]
    fn query_asks_for_one_row_with_a_diff() {
        let q = query("a", None);
        assert_eq!(q.job.as_deref(), Some("a"));
        assert!(q.with_diff);
        assert_eq!(q.limit, 1);
        assert_eq!(q.run_id, None);
    }

    #[test]
    fn plain_format() {
        let s = format_row(
            &row("--- previous\n+++ current\n@@ -1 +1 @@\n-a\n+b\n"),
            false,
        );
        assert_eq!(
            s,
            "# job disk-watch · run 00000000-0000-0000-0000-000000000000 · succeeded · \
             slot 2026-11-29T10:00:00Z · finished 2026-11-29T10:00:00Z\n\
             --- previous\n+++ current\n@@ -1 +1 @@\n-a\n+b\n"
        );
        assert!(!s.contains('\x1b'));
    }

    #[test]
    fn coloured_format() {
        let s = format_row(&row("@@ -1 +1 @@\n-a\n+b\n c\n"), true);
        assert!(s.contains("\x1b[31m-a\x1b[0m"));
        assert!(s.contains("\x1b[32m+b\x1b[0m"));
        assert!(s.contains("\x1b[36m@@ -1 +1 @@\x1b[0m"));
        assert!(s.contains("\n c\n"));
    }

    #[test]
    fn control_bytes_are_neutralised_with_or_without_colour() {
        let evil = "+\x1b]0;pwned\x07\x1b[2J\r\n-ok\u{9b}31m\u{202e}x\n";
        for color in [false, true] {
            let s = format_row(&row(evil), color);
            let body: String = s.split_once('\n').unwrap().1.to_string();
            let stripped = body
                .replace(RED, "")
                .replace(GREEN, "")
                .replace(RESET, "")
                .replace(BOLD, "")
                .replace(CYAN, "");
            assert!(!stripped.contains('\x1b'), "{stripped:?}");
            assert!(!stripped.contains('\x07') && !stripped.contains('\r'));
            assert!(!stripped.contains('\u{9b}') && !stripped.contains('\u{202e}'));
            assert!(stripped.contains("^[]0;pwned^G^[[2J"), "{stripped:?}");
        }
    }

    proptest::proptest! {
        #[test]
        fn no_control_character_survives(s in "(?s).{0,300}") {
            let out = sanitize_line(&s);
            proptest::prop_assert!(!out.chars().any(|c| c.is_control() && c != '\t'));
        }
    }
}
