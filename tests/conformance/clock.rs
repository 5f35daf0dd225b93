//! Jobs stored on a clock ahead of the one that claims them (an `apply` on a faked clock, a
//! host's clock set right after it): every schedule form runs at its real slots.

use super::*;

/// Jobs of each schedule form stored an hour ahead of the claims' clock. The first claim on
/// that clock re-derives them, each record says so, and each has the slot a job stored on the
/// claims' clock gets: `every 60s` a minute on, a minute cron at the next minute, `in 2m` two
/// minutes on; an `at` keeps its instant. All four run by then.
pub fn jobs_stored_on_a_clock_an_hour_ahead_run_at_their_real_slots(f: Factory) {
    let s = f();
    let mut cron = every("cron", 60);
    cron.schedule = ScheduleSpec::Cron {
        expr: "* * * * *".into(),
        tz: "UTC".into(),
    };
    let mut inn = every("in", 60);
    inn.schedule = ScheduleSpec::In { seconds: 120 };
    let mut at = every("at", 60);
    at.schedule = ScheduleSpec::At { at: t(6100) };
    let jobs = vec![every("every", 60), cron, inn, at];
    s.apply(&file(jobs), t(6000 + 3600)).unwrap();
    let o = claim(&*s, "a", t(6010), 10);
    assert!(o.claims.is_empty() && o.rows.is_empty(), "{o:?}");
    let next = |name: &str| s.job(name).unwrap().unwrap().rt.next_slot;
    assert_eq!(next("every"), Some(t(6070)));
    assert_eq!(next("cron"), Some(t(6060)));
    assert_eq!(next("in"), Some(t(6130)));
    assert_eq!(next("at"), Some(t(6100)));
    for name in ["every", "cron", "in"] {
        let rec = s.job(name).unwrap().unwrap();
        let said = rec.rt.rederived.as_ref();
        assert!(said.is_some_and(|r| r.at == t(6010)), "{name}: {said:?}");
    }
    let o = claim(&*s, "a", t(6130), 10);
    let mut ran: Vec<&str> = o.claims.iter().map(|c| c.job.def.name.as_str()).collect();
    ran.sort_unstable();
    assert_eq!(ran, ["at", "cron", "every", "in"], "{o:?}");
}
