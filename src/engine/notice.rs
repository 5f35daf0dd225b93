//! The words an operator reads after a request: one line per outcome of a trigger, a retry, a
//! cancel or a pause, shared by the console (engine or attached) and the CLI.
//!
//! Owns: those sentences. Must not touch: the store (callers pass what it answered).

use crate::store::TriggerOutcome;

/// One line saying what a trigger request did: the console's notice (engine or attached) and
/// the CLI's `trigger` output, so the operator reads the same words everywhere.
pub fn trigger_notice(job: &str, out: &TriggerOutcome) -> String {
    match out {
        TriggerOutcome::Queued => {
            format!("triggered {job}: the next owner claiming will run it now")
        }
        TriggerOutcome::AlreadyQueued => {
            format!("{job} already has a trigger queued; nothing changed")
        }
        TriggerOutcome::AlreadyRunning => format!("{job} is running now; not triggered"),
    }
}

/// One line saying what an operator action did (console notice, CLI output).
pub fn operator_notice(job: &str, out: &crate::store::EditOutcome) -> String {
    use crate::store::EditOutcome as O;
    match out {
        O::Queued { added, queued } => {
            let runs = if *added == 1 {
                "1 run".to_string()
            } else {
                format!("{added} runs")
            };
            // The job's total only when runs were already waiting: "1 run queued (1 queued)"
            // says the same number twice.
            let total = if queued > added {
                format!(" ({queued} queued in all)")
            } else {
                String::new()
            };
            let who = if *added == 1 && *queued == 1 {
                "the next owner claiming runs it"
            } else {
                "owners run them one at a time"
            };
            format!("{job}: {runs} queued{total}; {who}")
        }
        O::CancelRequested { run_id } => {
            format!("{job}: cancel of run {run_id} requested; its owner kills it")
        }
        O::AlreadyCancelling { run_id } => {
            format!("{job}: run {run_id} is already being cancelled")
        }
        O::Dequeued(n) => {
            format!("{job}: not running; {n} queued run(s) dropped (a skipped row each)")
        }
        O::Paused { changed: true } => format!("{job}: done"),
        O::Paused { changed: false } => format!("{job}: already so; nothing changed"),
        O::Answered {
            run_id,
            tool,
            approved: true,
        } => format!("{job}: run {run_id}'s call to {tool} approved; its owner runs it"),
        O::Answered {
            run_id,
            tool,
            approved: false,
        } => format!("{job}: run {run_id}'s call to {tool} denied; the model is told"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::EditOutcome;

    #[test]
    fn a_queued_run_says_its_count_once() {
        let q = |added, queued| operator_notice("j", &EditOutcome::Queued { added, queued });
        assert_eq!(q(1, 1), "j: 1 run queued; the next owner claiming runs it");
        assert_eq!(
            q(1, 3),
            "j: 1 run queued (3 queued in all); owners run them one at a time"
        );
        assert_eq!(q(4, 4), "j: 4 runs queued; owners run them one at a time");
        assert_eq!(
            q(2, 5),
            "j: 2 runs queued (5 queued in all); owners run them one at a time"
        );
    }
}
