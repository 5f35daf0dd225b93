//! `overlap:` and `max_concurrent_runs:` in the jobs file, per job and in `defaults`. Each wrong
//! form asserts its message and its `line:column`.

use super::super::*;
use super::{check, errors};
use crate::model::Overlap;

const JOB: &str = "jobs:\n  - name: a\n    schedule: every 1h\n    command: \"true\"\n";

fn policies(text: &str) -> Vec<Overlap> {
    let c = check(text);
    assert!(c.diagnostics.is_empty(), "{:#?}", c.diagnostics);
    c.into_result()
        .unwrap()
        .file
        .jobs
        .iter()
        .map(|j| j.overlap)
        .collect()
}

#[test]
fn every_policy_is_read_and_skip_is_the_default() {
    assert_eq!(policies(JOB), vec![Overlap::Skip]);
    for (word, want) in [
        ("skip", Overlap::Skip),
        ("buffer_one", Overlap::BufferOne),
        ("cancel_previous", Overlap::CancelPrevious),
    ] {
        assert_eq!(policies(&format!("{JOB}    overlap: {word}\n")), vec![want]);
    }
    assert_eq!(
        policies(&format!(
            "{JOB}    overlap: allow\n    max_concurrent_runs: 3\n"
        )),
        vec![Overlap::Allow {
            max_concurrent_runs: 3
        }]
    );
}

#[test]
fn defaults_are_inherited_key_by_key() {
    let text = "defaults:\n  overlap: allow\n  max_concurrent_runs: 4\njobs:\n  - name: a\n    schedule: every 1h\n    command: \"true\"\n  - name: b\n    schedule: every 1h\n    command: \"true\"\n    max_concurrent_runs: 2\n  - name: c\n    schedule: every 1h\n    command: \"true\"\n    overlap: buffer_one\n";
    assert_eq!(
        policies(text),
        vec![
            Overlap::Allow {
                max_concurrent_runs: 4
            },
            Overlap::Allow {
                max_concurrent_runs: 2
            },
            Overlap::BufferOne,
        ]
    );
}

#[test]
fn wrong_forms_are_errors_at_their_key() {
    let c = check(&format!("{JOB}    overlap: bufer_one\n"));
    let e = errors(&c);
    assert_eq!(e.len(), 1, "{e:?}");
    assert_eq!(
        (e[0].0.as_str(), e[0].1, e[0].2),
        ("jobs[0].overlap", 5, 14)
    );
    assert!(e[0].3.contains("did you mean buffer_one"), "{}", e[0].3);

    let c = check(&format!("{JOB}    overlap: allow\n"));
    let e = errors(&c);
    assert_eq!(e.len(), 1, "{e:?}");
    assert_eq!(
        (e[0].0.as_str(), e[0].1, e[0].2),
        ("jobs[0].overlap", 5, 14)
    );
    assert!(e[0].3.contains("needs max_concurrent_runs"), "{}", e[0].3);

    let c = check(&format!(
        "{JOB}    overlap: allow\n    max_concurrent_runs: 1\n"
    ));
    let e = errors(&c);
    assert_eq!(e.len(), 1, "{e:?}");
    assert_eq!(
        (e[0].0.as_str(), e[0].1, e[0].2),
        ("jobs[0].max_concurrent_runs", 6, 26)
    );
    assert!(e[0].3.contains("from 2 to 1000"), "{}", e[0].3);

    let c = check(&format!("{JOB}    max_concurrent_runs: 3\n"));
    let e = errors(&c);
    assert_eq!(e.len(), 1, "{e:?}");
    assert_eq!(
        (e[0].0.as_str(), e[0].1, e[0].2),
        ("jobs[0].max_concurrent_runs", 5, 26)
    );
    assert!(
        e[0].3.contains("only applies to overlap: allow"),
        "{}",
        e[0].3
    );

    let c = check(&format!(
        "{JOB}    overlap: cancel_previous\n    max_concurrent_runs: 3\n"
    ));
    assert_eq!(errors(&c).len(), 1);

    for bad in ["3", "true", "[allow]", "\"\""] {
        let c = check(&format!("{JOB}    overlap: {bad}\n"));
        assert!(
            errors(&c).iter().any(|e| e.0 == "jobs[0].overlap"),
            "{bad}: {:?}",
            c.diagnostics
        );
    }
    for bad in ["2.0", "\"2\"", "-1", "1001", ".inf"] {
        let c = check(&format!(
            "{JOB}    overlap: allow\n    max_concurrent_runs: {bad}\n"
        ));
        let e = errors(&c);
        assert_eq!(e.len(), 1, "{bad}: {e:?}");
        assert_eq!(e[0].0, "jobs[0].max_concurrent_runs");
    }

    let c = check("defaults:\n  overlap: allow\njobs: []\n");
    let e = errors(&c);
    assert_eq!(e.len(), 1, "{e:?}");
    assert_eq!(
        (e[0].0.as_str(), e[0].1, e[0].2),
        ("defaults.overlap", 2, 12)
    );
}

#[test]
fn bounds_hold_for_a_file_built_in_code() {
    let mut j = crate::testkit::jobs::command_job("a", 60);
    j.overlap = Overlap::Allow {
        max_concurrent_runs: 1,
    };
    let f = crate::model::JobsFile {
        settings: Default::default(),
        jobs: vec![j],
    };
    let e = check_bounds(&f).unwrap_err();
    assert!(e.to_string().contains("max_concurrent_runs"), "{e}");
}
