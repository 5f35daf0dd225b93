//! `cronsole stats`: every job's runs and spend, the global line and the spend forecast, read
//! from the store a page at a time so the memory it takes does not grow with the jobs' records.
//!
//! Owns: printing `stats` (text and JSON). Must not touch: the arithmetic (`store::stats`,
//! `forecast`), store internals (it speaks only the trait).
//!
//! Decisions: `stats --json` streams: each job's line is printed as its page is read, and the
//! object's members come in the order they can be known — `period`, `jobs`, then `global` and
//! `forecast`, which need every job. Each member is shaped as before (its keys sorted). The
//! text table needs every line to size its columns, so text keeps the compact lines (numbers,
//! no record) until the last page.

use std::io::Write;
use std::process::ExitCode;

use anyhow::Result;
use chrono::{DateTime, SecondsFormat, Utc};

use crate::cli::args::Cli;
use crate::cost::usd;
use crate::model::{JobRecord, Settings};
use crate::store::Store;
use crate::store::stats::{self, StatsLine};

use super::store_cmds::{store, table};

/// Jobs read from the store per page.
const PAGE: usize = crate::listing::PAGE;

pub fn stats(cli: &Cli, json: bool) -> Result<ExitCode> {
    let store = store(cli)?;
    let now = Utc::now();
    let settings = store.settings()?;
    if json {
        let mut out = std::io::BufWriter::new(std::io::stdout().lock());
        write_json(&mut out, store.as_ref(), &settings, now, PAGE)?;
        out.flush()?;
        return Ok(ExitCode::SUCCESS);
    }
    let mut sb = stats::Builder::new(&settings, now);
    let mut fb = crate::forecast::Builder::new(&settings, now);
    let mut lines = Vec::new();
    each_job(store.as_ref(), PAGE, |rec| {
        fb.add(rec);
        lines.push(sb.add(rec));
        Ok(())
    })?;
    let (period, global) = sb.finish();
    let s = stats::Stats {
        period,
        global,
        jobs: lines,
    };
    let engine =
        !crate::owners::live(&crate::engine::JudgeAt::owners_now(store.as_ref())?).is_empty();
    for l in stats_text(&s, &fb.finish(), now, engine) {
        println!("{l}");
    }
    Ok(ExitCode::SUCCESS)
}

/// Calls `each` on every job's record, in name order, `page` records at a time (none kept).
fn each_job(
    store: &dyn Store,
    page: usize,
    mut each: impl FnMut(&JobRecord) -> Result<()>,
) -> Result<()> {
    let mut after: Option<String> = None;
    loop {
        let recs = store.jobs_page(after.as_deref(), page)?;
        for r in &recs {
            each(r)?;
        }
        match recs.last() {
            Some(r) if recs.len() == page => after = Some(r.def.name.clone()),
            _ => return Ok(()),
        }
    }
}

/// `value` pretty-printed as a member `indent` deep: its first line follows what is already
/// written, the others are indented. Keys are sorted, as `stats --json` has always printed them.
fn nested(w: &mut impl Write, value: &impl serde::Serialize, indent: &str) -> Result<()> {
    let text = crate::text::to_json_pretty(&serde_json::to_value(value)?)?;
    for (i, l) in text.lines().enumerate() {
        if i > 0 {
            write!(w, "\n{indent}")?;
        }
        w.write_all(l.as_bytes())?;
    }
    Ok(())
}

/// `stats --json`, streamed: `{"period", "jobs": [a line per job as its page is read],
/// "global", "forecast"}`, pretty-printed as `text::to_json_pretty` prints that object.
fn write_json(
    w: &mut impl Write,
    store: &dyn Store,
    settings: &Settings,
    now: DateTime<Utc>,
    page: usize,
) -> Result<()> {
    let mut sb = stats::Builder::new(settings, now);
    let mut fb = crate::forecast::Builder::new(settings, now);
    write!(w, "{{\n  \"period\": ")?;
    nested(w, &sb.period(), "  ")?;
    write!(w, ",\n  \"jobs\": [")?;
    let mut n = 0usize;
    each_job(store, page, |rec| {
        fb.add(rec);
        let line = sb.add(rec);
        write!(w, "{}\n    ", if n == 0 { "" } else { "," })?;
        nested(w, &line, "    ")?;
        n += 1;
        Ok(())
    })?;
    write!(w, "{}", if n == 0 { "]" } else { "\n  ]" })?;
    let (_, global) = sb.finish();
    write!(w, ",\n  \"global\": ")?;
    nested(w, &global, "  ")?;
    write!(w, ",\n  \"forecast\": ")?;
    nested(w, &fb.finish(), "  ")?;
    writeln!(w, "\n}}")?;
    Ok(())
}

/// The text of `stats`: the period, the forecast with a line per job, and the table, every
/// amount in the one money format ([`usd`]).
fn stats_text(
    s: &stats::Stats,
    f: &crate::forecast::Forecast,
    now: DateTime<Utc>,
    engine: bool,
) -> Vec<String> {
    let mut out = vec![
        format!("period {}", s.period),
        format!(
            "forecast: {} (spent {}, projected {} by {})",
            if engine {
                f.phrase_with(now, usd)
            } else {
                f.phrase_without_engine(now, usd)
            },
            usd(f.spent_usd),
            usd(f.projected_total_usd),
            f.until.to_rfc3339_opts(SecondsFormat::Secs, true)
        ),
    ];
    for j in &f.jobs {
        out.push(format!("  {:<24} {}", j.job, j.breakdown(usd)));
    }
    let line = |l: &StatsLine| {
        vec![
            l.job.clone(),
            l.total_executions.to_string(),
            l.successful_executions.to_string(),
            l.failed_executions.to_string(),
            format!("{:.2}", l.success_rate),
            usd(l.total_cost_usd),
            usd(l.period_cost_usd),
            usd(l.in_flight_usd),
            l.remaining_budget.map_or("-".to_string(), usd),
            format!("{:.1}s", l.runtime_seconds),
            if l.cost_incomplete {
                "(spend incomplete)".to_string()
            } else {
                String::new()
            },
        ]
    };
    let rows: Vec<Vec<String>> = s.jobs.iter().chain([&s.global]).map(line).collect();
    let header = [
        "JOB",
        "RUNS",
        "OK",
        "FAIL",
        "RATE%",
        "TOTAL",
        "PERIOD",
        "IN-FLIGHT",
        "LEFT",
        "RUNTIME",
        "",
    ];
    out.extend(table(&header, &rows, &[1, 2, 3, 4, 5, 6, 7, 8, 9]));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Status;

    /// `stats` shows a job's spend and what its limit leaves at one precision, so they add up
    /// to the limit as printed ($0.214 + $0.086 = $0.30, never $0.21 beside $0.086), and counts
    /// an abandoned run among RUNS.
    #[test]
    fn stats_money_adds_up_as_printed_and_an_abandoned_run_is_a_run() {
        use crate::store::policy::define::tests_support::job;
        let now = chrono::DateTime::parse_from_rfc3339("2026-11-29T12:00:00Z")
            .unwrap()
            .to_utc();
        let settings = crate::model::Settings {
            budget: None,
            ..Default::default()
        };
        let mut a = job("a", now);
        a.def.max_cost_usd = Some(0.30);
        a.rt.counters.by_status.insert(Status::Succeeded, 2);
        a.rt.counters.total_cost_usd = 0.214;
        a.rt.counters.period_key = crate::cost::budget_period(&settings).key(now);
        a.rt.counters.period_cost_usd = 0.214;
        let mut b = job("b", now);
        b.rt.counters.by_status.insert(Status::Abandoned, 1);
        let jobs = [a, b];
        let s = crate::store::stats::compute(&jobs, &settings, now);
        let f = crate::forecast::compute(&jobs, &settings, now);
        let text = stats_text(&s, &f, now, true);
        let row = |name: &str| {
            text.iter()
                .skip_while(|l| !l.starts_with("JOB "))
                .find(|l| l.split_whitespace().next() == Some(name))
                .map(|l| l.split_whitespace().collect::<Vec<_>>())
                .unwrap_or_else(|| panic!("no row {name}: {text:#?}"))
        };
        // JOB RUNS OK FAIL RATE% TOTAL PERIOD IN-FLIGHT LEFT RUNTIME
        assert_eq!(
            row("a")[1..9],
            [
                "2", "2", "0", "100.00", "$0.214", "$0.214", "$0.00", "$0.086"
            ]
        );
        assert_eq!(row("b")[1..3], ["1", "0"], "an abandoned run is a run");
        assert_eq!(row("*")[1], "3");
        assert!(!text.iter().any(|l| l.contains("$0.21 ")), "{text:#?}");
        // The forecast line says what the limit leaves with the same digits.
        assert!(text.iter().any(|l| l.contains("($0.086 left")), "{text:#?}");
    }

    /// The streamed `stats --json` is the object `text::to_json_pretty` prints, member for
    /// member, across page boundaries and for an empty store.
    #[test]
    fn streamed_json_is_the_pretty_printed_object_across_pages() {
        use crate::store::policy::define::tests_support::def;
        #[derive(serde::Serialize)]
        struct Whole {
            period: String,
            jobs: Vec<serde_json::Value>,
            global: serde_json::Value,
            forecast: serde_json::Value,
        }
        let dir = crate::testkit::tmp::TempDir::new("stats-json");
        let store = crate::store::file::FileStore::open(&dir).unwrap();
        let now = chrono::DateTime::parse_from_rfc3339("2026-11-29T12:00:00Z")
            .unwrap()
            .to_utc();
        for n in [0usize, 1, 3, 4, 7] {
            let file = crate::model::JobsFile {
                settings: Settings::default(),
                jobs: (0..n).map(|i| def(&format!("j{i}"))).collect(),
            };
            store.apply(&file, now).unwrap();
            let settings = store.settings().unwrap();
            let jobs = store.jobs().unwrap();
            let s = stats::compute(&jobs, &settings, now);
            let f = crate::forecast::compute(&jobs, &settings, now);
            let v = |x: &dyn erased::Ser| x.value();
            let want = crate::text::to_json_pretty(&Whole {
                period: s.period.clone(),
                jobs: s.jobs.iter().map(|l| v(l)).collect(),
                global: v(&s.global),
                forecast: v(&f),
            })
            .unwrap();
            let mut got = Vec::new();
            write_json(&mut got, &store, &settings, now, 3).unwrap();
            assert_eq!(String::from_utf8(got).unwrap(), want + "\n", "{n} jobs");
        }
    }

    mod erased {
        /// A value of any serialisable type, as a JSON value (keys sorted).
        pub trait Ser {
            fn value(&self) -> serde_json::Value;
        }
        impl<T: serde::Serialize> Ser for T {
            fn value(&self) -> serde_json::Value {
                serde_json::to_value(self).unwrap()
            }
        }
    }
}
