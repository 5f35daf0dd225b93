//! Every reference case of `tests/data/cron_vectors.json` (a copy of the shared vectors): the
//! next 5 slots after `after` and the previous 3 before it, exact instants, no case skipped.

use chrono::{DateTime, Utc};
use cronsole::schedule::{CronSchedule, parse_tz};
use serde::Deserialize;

#[derive(Deserialize)]
struct Vectors {
    cases: Vec<Case>,
}

#[derive(Deserialize)]
struct Case {
    id: String,
    expr: String,
    tz: String,
    after: String,
    next: Vec<String>,
    prev: Vec<String>,
}

fn instant(s: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(s)
        .unwrap_or_else(|e| panic!("bad instant {s} in the vectors: {e}"))
        .to_utc()
}

#[test]
fn every_vector_matches() {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/cron_vectors.json"
    ))
    .expect("tests/data/cron_vectors.json is part of the repository");
    let v: Vectors = serde_json::from_str(&text).expect("the vectors file is valid JSON");
    assert_eq!(v.cases.len(), 275, "the vectors file should hold 275 cases");
    let mut failures = Vec::new();
    for c in &v.cases {
        let tz = parse_tz(&c.tz).unwrap_or_else(|e| panic!("{}: {e}", c.id));
        let s = CronSchedule::parse(&c.expr, tz).unwrap_or_else(|e| panic!("{}: {e}", c.id));
        let after = instant(&c.after);
        let mut got_next = Vec::new();
        let mut cur = after;
        for _ in 0..c.next.len() {
            match s.next_after(cur) {
                Some(n) => {
                    got_next.push(n);
                    cur = n;
                }
                None => break,
            }
        }
        let mut got_prev = Vec::new();
        let mut cur = after;
        for _ in 0..c.prev.len() {
            match s.prev_before(cur) {
                Some(p) => {
                    got_prev.push(p);
                    cur = p;
                }
                None => break,
            }
        }
        let want_next: Vec<_> = c.next.iter().map(|x| instant(x)).collect();
        let want_prev: Vec<_> = c.prev.iter().map(|x| instant(x)).collect();
        if got_next != want_next || got_prev != want_prev {
            failures.push(format!(
                "{} '{}' {} after {}:\n  next want {:?}\n       got  {:?}\n  prev want {:?}\n       got  {:?}",
                c.id, c.expr, c.tz, c.after, want_next, got_next, want_prev, got_prev
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} cases failed:\n{}",
        failures.len(),
        v.cases.len(),
        failures.join("\n")
    );
}
