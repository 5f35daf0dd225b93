//! The store commands end to end through the binary: apply → jobs → pause/resume/trigger →
//! history → stats, with SPEC §13.2 exit codes (0 ok, 1 runtime condition, 2 bad input).

mod support;

use support::cli::run;

#[test]
fn apply_jobs_pause_trigger_history_stats() {
    let dir = support::tempdir("cli");
    std::fs::write(
        dir.join("jobs.yaml"),
        "jobs:\n  - name: alpha\n    schedule: every 1h\n    command: \"echo a\"\n  - name: beta\n    schedule: \"0 7 * * *\"\n    command: \"echo b\"\n    max_cost_usd: 0.5\n",
    )
    .unwrap();
    let (c, out, err) = run(&dir, &["apply", "jobs.yaml"]);
    assert_eq!(c, 0, "{err}");
    assert!(
        out.contains("created   alpha") && out.contains("2 created"),
        "{out}"
    );
    let (c, out, _) = run(&dir, &["apply", "jobs.yaml"]);
    assert_eq!(c, 0);
    assert!(
        out.contains("0 created, 0 updated, 0 retired, 2 unchanged"),
        "{out}"
    );

    let (c, out, _) = run(&dir, &["jobs", "--json"]);
    assert_eq!(c, 0);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v.as_array().unwrap().len(), 2);
    assert_eq!(v[0]["name"], "alpha");
    assert_eq!(v[0]["state"], "idle");

    assert_eq!(run(&dir, &["pause", "alpha"]).0, 0);
    let (_, out, _) = run(&dir, &["jobs"]);
    assert!(
        out.lines()
            .any(|l| l.starts_with("alpha") && l.contains("paused")),
        "{out}"
    );
    assert_eq!(run(&dir, &["resume", "alpha"]).0, 0);
    let (c, _, err) = run(&dir, &["pause", "nope"]);
    assert_eq!(c, 2, "{err}");
    assert!(err.contains("nope"));

    let (c, out, _) = run(&dir, &["trigger", "beta"]);
    assert_eq!(c, 0);
    assert!(out.contains("triggered beta"));
    let (c, out, _) = run(&dir, &["trigger", "beta"]);
    assert_eq!(c, 0);
    assert!(out.contains("already"));
    assert_eq!(run(&dir, &["trigger", "ghost"]).0, 2);

    let (c, out, _) = run(&dir, &["history", "--json"]);
    assert_eq!(c, 0);
    assert!(out.is_empty());
    assert_eq!(run(&dir, &["history", "--status", "bogus"]).0, 2);
    assert_eq!(run(&dir, &["history", "--since", "yesterday-ish"]).0, 2);
    assert_eq!(run(&dir, &["history", "--since", "2h"]).0, 0);

    let (c, out, _) = run(&dir, &["stats", "--json"]);
    assert_eq!(c, 0);
    let s: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(s["global"]["total_executions"], 0);
    assert_eq!(
        s["global"]["remaining_budget"], 1.0,
        "default budget $1/day"
    );
    assert_eq!(s["jobs"][1]["remaining_budget"], 0.5);
    assert_eq!(s["jobs"][0]["remaining_budget"], serde_json::Value::Null);

    std::fs::write(
        dir.join("jobs.yaml"),
        "jobs:\n  - name: alpha\n    schedule: every 2h\n    command: \"echo a\"\n",
    )
    .unwrap();
    let (_, out, _) = run(&dir, &["apply", "jobs.yaml"]);
    assert!(
        out.contains("updated   alpha") && out.contains("retired   beta"),
        "{out}"
    );
    let (_, out, _) = run(&dir, &["jobs"]);
    assert!(
        out.lines()
            .any(|l| l.starts_with("beta") && l.contains("retired")),
        "{out}"
    );
}
