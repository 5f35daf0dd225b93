//! The job-by-job reading of the jobs file (a file of a million jobs
//! is never held whole): the streaming check gives exactly what
//! the whole-document check gives — same diagnostics at the same `line:column`, same jobs —
//! for every shape of file, including the ones that cannot stream (they are read whole).

use std::path::Path;

use super::super::*;

fn streamed(text: &str) -> Checked {
    check_with(text, Path::new("jobs.yaml"), &|_| true, None, None, false)
}

fn whole(text: &str) -> Checked {
    check_with(text, Path::new("jobs.yaml"), &|_| true, None, None, true)
}

/// Both checks agree on `text`; returns the (streamed) result.
fn same(text: &str) -> Checked {
    let (s, w) = (streamed(text), whole(text));
    assert_eq!(s.diagnostics, w.diagnostics, "diagnostics of:\n{text}");
    assert_eq!(s.jobs, w.jobs, "jobs of:\n{text}");
    assert_eq!(s.settings, w.settings, "settings of:\n{text}");
    s
}

fn keys(c: &Checked) -> Vec<String> {
    c.diagnostics
        .iter()
        .map(|d| format!("{}:{} {}", d.line, d.column, d.key))
        .collect()
}

#[test]
fn a_plain_jobs_list_streams_and_its_items_are_not_held() {
    let mut text = String::from("defaults: {tz: UTC}\njobs:\n");
    for i in 0..200 {
        text.push_str(&format!(
            "  - name: j{i}\n    schedule: \"every 5m\"\n    command: \"true\"\n"
        ));
    }
    let mut seen = 0;
    let doc = yaml::Document::parse_streaming(&text, &mut |item| {
        assert_eq!(item.index, seen);
        seen += 1;
        Ok(())
    })
    .unwrap()
    .unwrap();
    assert!(doc.streamed());
    assert_eq!(seen, 200);
    assert!(
        doc.nodes_held() < 10,
        "items dropped as they are read: {} nodes held",
        doc.nodes_held()
    );
    let c = same(&text);
    assert_eq!(c.jobs.iter().flatten().count(), 200);
    assert!(c.diagnostics.is_empty(), "{:?}", c.diagnostics);
}

#[test]
fn later_sections_and_later_names_are_known_to_earlier_jobs() {
    // `jobs:` first: its jobs use `defaults`, `agents` and `delivery` written after it, and
    // name jobs written after them.
    let c = same(
        "jobs:
  - name: a
    agent: helper
    context_from: [b]
    deliver: [out]
  - name: b
    schedule: \"every 5m\"
    command: \"true\"
    after: c
  - name: c
    schedule: \"every 5m\"
    command: \"true\"
defaults:
  tz: Europe/Berlin
  schedule: nope
agents:
  helper: {model: gpt-4o-mini}
delivery:
  out: {file: out.log}
",
    );
    // Job `a` lacks a schedule (it is not chained); nothing else is wrong with it.
    assert_eq!(keys(&c), ["2:5 jobs[0]", "15:3 defaults.schedule"]);
}

#[test]
fn whole_list_checks_point_where_they_did() {
    // A cycle (list and scalar forms), `on: change` without a monitor, a repeated name, an
    // unknown name in `after` and `context_from`, an unknown key, a bad schedule.
    let c = same(
        "jobs:
  - name: a
    schedule: \"every 5m\"
    command: \"true\"
    after: [{job: b, on: success}, {job: d, on: change}]
  - name: b
    schedule: \"every 5m\"
    command: \"true\"
    after: a
  - name: d
    schedule: \"every 5m\"
    command: \"true\"
  - name: a
    schedule: \"every 5m\"
    command: \"true\"
  - name: e
    schedule: \"every 5 lightyears\"
    command: \"true\"
    colour: red
    after: nobody
    context_from: [ghost]
",
    );
    let k = keys(&c);
    for want in [
        "5:49 jobs[0].after[1].on",
        "9:12 jobs[1].after",
        "13:11 jobs[3].name",
        "17:15 jobs[4].schedule",
        "19:5 jobs[4].colour",
        "20:12 jobs[4].after",
        "21:20 jobs[4].context_from[0]",
    ] {
        assert!(k.iter().any(|x| x == want), "{want} in {k:#?}");
    }
}

#[test]
fn anchors_in_jobs_and_merges_read_as_before() {
    // An anchor inside a job named by a later job and by a section after the list; a merge
    // of a template written before the list; problems inside merged content.
    same(
        "x-tmpl: &t {schedule: \"every 5m\", command: \"true\", tags: [x]}
jobs:
  - &first
    name: a
    schedule: \"every 5m\"
    command: \"true\"
  - <<: *first
    name: b
  - <<: *t
    name: c
    max_retries: 0
  - <<: [*t, *first]
    name: d
x-again: *first
",
    );
}

#[test]
fn yaml_errors_keep_their_order_and_position() {
    // A repeated key in a job, then a syntax error later: the syntax error is the one reported
    // (the whole-document parse builds every node before it materializes any).
    let c = same(
        "jobs:
  - name: a
    name: b
    command: \"true\"
  - name: c
    command: [unclosed
",
    );
    assert_eq!(c.diagnostics.len(), 1);
    // Repeated keys in a job and in a section after the list: the job's comes first.
    let c = same(
        "jobs:
  - name: a
    command: \"true\"
    command: \"false\"
defaults:
  tz: UTC
  tz: UTC
",
    );
    assert_eq!(keys(&c), ["4:5 (yaml)"]);
    // A repeated `jobs:` key (the first was streamed).
    same("jobs:\n  - {name: a, schedule: \"every 5m\", command: \"true\"}\njobs: []\n");
    // A second document after the list.
    same("jobs: []\n---\njobs: []\n");
    // A bad merge inside a job.
    same("jobs:\n  - <<: 5\n    name: a\n");
}

#[test]
fn an_alias_bomb_inside_a_job_is_refused_as_before() {
    let mut text = String::from("x-a: &a [1, 1, 1, 1, 1, 1, 1, 1, 1, 1]\n");
    let names = ["a", "b", "c", "d", "e", "f", "g"];
    for w in names.windows(2) {
        text.push_str(&format!(
            "x-{}: &{} [{}]\n",
            w[1],
            w[1],
            vec![format!("*{}", w[0]); 10].join(", ")
        ));
    }
    text.push_str("jobs:\n  - name: boom\n    command: \"true\"\n    x-bomb: *g\n");
    let c = same(&text);
    assert_eq!(c.diagnostics.len(), 1);
    assert!(
        c.diagnostics[0].message.contains("alias bomb"),
        "{:?}",
        c.diagnostics
    );
}

#[test]
fn lists_that_cannot_stream_are_read_whole() {
    for text in [
        // Anchored (it could be named again), brought in by an alias or a merge, tagged.
        "jobs: &all\n  - {name: a, schedule: \"every 5m\", command: \"true\"}\nx-copy: *all\n",
        "x-list: &l\n  - {name: a, schedule: \"every 5m\", command: \"true\"}\njobs: *l\n",
        "x-top: &top\n  jobs:\n    - {name: a, schedule: \"every 5m\", command: \"true\"}\n<<: *top\n",
        "jobs: !weird\n  - {name: a}\n",
        // Not a list, missing, empty, null; not a mapping; nothing at all.
        "jobs: 5\n",
        "defaults: {tz: UTC}\n",
        "jobs: []\n",
        "jobs:\n",
        "- a\n- b\n",
        "",
        "# only a comment\n",
    ] {
        same(text);
    }
}

#[test]
fn a_prepared_file_hands_over_what_load_file_loads() {
    let dir = crate::testkit::tmp::TempDir::new("prep");
    let path = dir.join("jobs.yaml");
    let mut text = String::from(
        "delivery:\n  out: {file: out.log}\nx-t: &t {schedule: \"every 5m\", command: \"true\"}\njobs:\n",
    );
    for i in 0..50 {
        text.push_str(&format!(
            "  - <<: *t\n    name: j{i}\n    deliver: [out]\n    after: {}\n",
            if i == 0 {
                "[]".to_string()
            } else {
                format!("j{}", i - 1)
            }
        ));
    }
    // `after: []` is an error: the file is refused with load_file's diagnostics.
    std::fs::write(&path, &text).unwrap();
    let refused = prepare_file(&path).err().unwrap();
    assert_eq!(refused, load_file(&path).unwrap_err());

    let text = text.replacen("after: []", "x-first: true", 1);
    std::fs::write(&path, &text).unwrap();
    let loaded = load_file(&path).unwrap();
    let prepared = prepare_file(&path).unwrap();
    assert_eq!(prepared.settings(), &loaded.file.settings);
    assert_eq!(prepared.warnings, loaded.warnings);
    let mut jobs = Vec::new();
    prepared
        .for_each_job(&mut |j| {
            jobs.push(j);
            Ok::<(), ()>(())
        })
        .unwrap();
    assert_eq!(jobs, loaded.file.jobs);
    assert_eq!(jobs.len(), 50);

    // The receiver's refusal stops the hand-over and is returned as it was given.
    let prepared = prepare_file(&path).unwrap();
    let mut n = 0;
    let r = prepared.for_each_job(&mut |_| {
        n += 1;
        if n == 3 { Err("full") } else { Ok(()) }
    });
    assert!(matches!(r, Err(Handover::Refused("full"))));
    assert_eq!(n, 3);
}

/// `validate`'s check ([`validate_str_at`]) holds no definition of a streamed file and gives
/// [`check_str_at`]'s diagnostics, counts and valid jobs (handed over afterwards, in file
/// order, the invalid ones skipped); a file read whole (an anchored list) too.
#[test]
fn validate_counts_the_jobs_and_hands_the_valid_ones_over_afterwards() {
    let now = chrono::DateTime::parse_from_rfc3339("2026-06-01T00:00:00Z")
        .unwrap()
        .with_timezone(&chrono::Utc);
    let mut text = String::from("jobs:\n");
    for i in 0..30 {
        let schedule = if i % 7 == 3 { "nope" } else { "every 5m" };
        text.push_str(&format!(
            "  - name: j{i}\n    schedule: \"{schedule}\"\n    command: \"true\"\n"
        ));
    }
    text.push_str("  - name: late\n    schedule: \"at 2020-01-01 00:00\"\n    command: \"true\"\n");
    let anchored = "jobs: &all\n  - name: a\n    schedule: \"every 5m\"\n    command: \"true\"\n  - name: b\n    schedule: nope\n    command: \"true\"\nx-copy: *all\n";
    for text in [text.as_str(), anchored] {
        let path = Path::new("jobs.yaml");
        let c = check_str_at(text, path, now);
        let v = validate_str_at(text, path, now);
        assert_eq!(v.diagnostics, c.diagnostics, "diagnostics of:\n{text}");
        assert_eq!(v.has_errors(), c.has_errors());
        assert_eq!(v.jobs, c.jobs.len());
        assert_eq!(v.valid, c.jobs.iter().flatten().count());
        let mut handed = Vec::new();
        v.for_each_valid(path, &mut |j| {
            handed.push(j.clone());
            Ok::<(), ()>(())
        })
        .unwrap();
        let want: Vec<JobDef> = c.jobs.into_iter().flatten().collect();
        assert_eq!(handed, want, "valid jobs of:\n{text}");
    }
    let v = validate_str_at(&text, Path::new("jobs.yaml"), now);
    assert!(
        matches!(v.valid_jobs, ValidJobs::Streamed(..)),
        "a plain list holds no definition"
    );
    assert_eq!((v.jobs, v.valid), (31, 26));
    assert!(v.diagnostics.iter().any(|d| d.key == "jobs[30].schedule"));
}

/// Whether `text` is checked in one parse ([`check_one_pass`] stands), and what it gives is
/// what the whole-document check gives.
fn one_pass(text: &str) -> bool {
    let env = |_: &str| true;
    let mut checker = new_checker(Path::new("jobs.yaml"), &env, None, None);
    let mut handed = 0;
    let done = matches!(
        check_one_pass(text, Path::new("jobs.yaml"), &mut checker, &mut |_| {
            handed += 1
        }),
        OnePass::Done(..)
    );
    same(text);
    done
}

#[test]
fn jobs_last_with_backward_names_is_checked_in_one_parse() {
    // Sections before `jobs:` (with their own errors and an agent warning located there),
    // chains, `context_from`, a duplicate name and per-job errors, all naming earlier jobs.
    let text = "defaults:
  tz: Europe/Berlin
  schedule: nope
budget: {max_cost_usd: 5}
agents:
  helper: {model: no-such-model, api_key_env: HELPER_KEY}
jobs:
  - name: a
    schedule: \"every 5m\"
    command: \"true\"
  - name: b
    agent: helper
    message: hi
    schedule: \"every 5m\"
    context_from: [a, b]
    after: {job: a, on: change}
  - name: a
    schedule: \"every 5 lightyears\"
    command: \"true\"
  - name: c
    schedule: \"every 5m\"
    command: \"true\"
    after: [b, {job: a, on: failure}]
";
    assert!(one_pass(text));
    let k = keys(&same(text));
    for want in ["3:3 defaults.schedule", "17:11 jobs[2].name"] {
        assert!(k.iter().any(|x| x == want), "{want} in {k:?}");
    }
    // Empty and plain files too.
    assert!(one_pass("jobs: []\n"));
    assert!(one_pass(
        "jobs:\n  - name: x\n    schedule: \"every 5m\"\n    command: \"true\"\n"
    ));
}

#[test]
fn a_file_one_parse_cannot_check_is_checked_as_before() {
    let job = |n: &str, extra: &str| {
        format!("  - name: {n}\n    schedule: \"every 5m\"\n    command: \"true\"\n{extra}")
    };
    // A later name (`after:` and `context_from`), an unknown one, a section after `jobs:`,
    // `jobs:` not at column 1, a flow list, a YAML error after the list, an anchored list.
    let forward_after = format!("jobs:\n{}{}", job("a", "    after: b\n"), job("b", ""));
    let forward_context = format!(
        "jobs:\n{}{}",
        job("a", "    context_from: [b]\n"),
        job("b", "")
    );
    let unknown = format!("jobs:\n{}", job("a", "    after: ghost\n"));
    let section_after = format!("jobs:\n{}defaults: {{tz: Europe/Paris}}\n", job("a", ""));
    let quoted = format!("\"jobs\":\n{}", job("a", ""));
    let flow = "jobs: [{name: a, schedule: \"every 5m\", command: \"true\"}]\n".to_string();
    let broken = format!("jobs:\n{}  bad: [\n", job("a", ""));
    let anchored = format!("jobs: &all\n{}", job("a", ""));
    for text in [
        &forward_after,
        &forward_context,
        &unknown,
        &section_after,
        &quoted,
        &broken,
        &anchored,
    ] {
        assert!(!one_pass(text), "not in one parse:\n{text}");
    }
    // A flow list streams like a block one (its line is `jobs:`), and is checked in one parse.
    assert!(one_pass(&flow));
    // The fallback found what a file read whole finds.
    let k = keys(&same(&forward_after));
    assert!(k.is_empty(), "{k:?}");
    assert!(
        keys(&same(&unknown))
            .iter()
            .any(|x| x == "5:12 jobs[0].after")
    );
}
