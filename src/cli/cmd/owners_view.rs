//! The owners of a store as `jobs` and `check` print them: how many engines are live (by the
//! one rule in `crate::owners`), each one's clock offset against the store's, and any that
//! stopped claiming, with why — read from the owner records the engines rewrite at every
//! heartbeat (`Store::owners`, on both stores).
//!
//! Owns: those lines and their JSON form. Must not touch: the liveness rule (`owners::live`),
//! the store.

use crate::model::OwnerSeen;
use crate::when;
use chrono::Duration;

/// `+0.012s`, `-7.301s`: an owner's clock minus the store's.
fn offset(ms: i64) -> String {
    format!("{:+.3}s", ms as f64 / 1000.0)
}

/// The owner lines: a summary, one line per live owner, then what is known of the others.
pub fn lines(owners: &[OwnerSeen]) -> Vec<String> {
    let live = crate::owners::live(owners);
    let gone = crate::owners::GONE_AFTER_SECS;
    let stopped = owners
        .iter()
        .filter(|o| live.contains(&o.record.owner) && o.record.claims_stopped.is_some())
        .count();
    let mut out = vec![match (live.len(), stopped) {
        (0, _) => {
            format!("owners: none live ({})", crate::owners::NO_ENGINE)
        }
        (n, 0) => format!("owners: {n} live, all claiming"),
        (n, s) => format!("owners: {n} live, {s} not claiming"),
    }];
    for o in owners.iter().filter(|o| live.contains(&o.record.owner)) {
        let r = &o.record;
        let doing = match &r.claims_stopped {
            Some(why) => format!("claims stopped: {}", crate::text::line(why)),
            None => "claiming".to_string(),
        };
        out.push(format!(
            "  {}  heard {} ago  clock {}  {doing}",
            r.owner,
            when::span(o.ago.max(Duration::zero())),
            offset(r.clock_offset_ms)
        ));
    }
    // The others: the newest that stopped cleanly, the newest whose process on this host is
    // gone (killed: not live at once, whatever its record's age), and the newest that went silent.
    let kind = |o: &OwnerSeen| match (
        o.record.signed_off.is_some(),
        crate::owners::process_gone(o),
    ) {
        (true, _) => 0,
        (false, true) => 1,
        (false, false) => 2,
    };
    for (k, why) in [
        (0, "stopped cleanly".to_string()),
        (1, "process gone on this host".to_string()),
        (2, format!("not heard from for over {gone}s")),
    ] {
        let mut others: Vec<&OwnerSeen> = owners
            .iter()
            .filter(|o| !live.contains(&o.record.owner) && kind(o) == k)
            .collect();
        others.sort_by_key(|o| o.ago);
        if let Some(newest) = others.first() {
            let more = if others.len() > 1 {
                format!(" (and {} older)", others.len() - 1)
            } else {
                String::new()
            };
            out.push(format!(
                "  {why}: {}, {} ago{more}",
                newest.record.owner,
                when::span(newest.ago.max(Duration::zero()))
            ));
        }
    }
    out
}

/// The same as JSON: `{"live": N, "owners": [{owner, live, heard_secs_ago, clock_offset_ms,
/// claims_stopped, signed_off}]}`.
pub fn json(owners: &[OwnerSeen]) -> serde_json::Value {
    let live = crate::owners::live(owners);
    serde_json::json!({
        "live": live.len(),
        "owners": owners
            .iter()
            .map(|o| serde_json::json!({
                "owner": o.record.owner,
                "live": live.contains(&o.record.owner),
                "heard_secs_ago": o.ago.num_milliseconds() as f64 / 1000.0,
                "clock_offset_ms": o.record.clock_offset_ms,
                "claims_stopped": o.record.claims_stopped,
                "signed_off": o.record.signed_off,
            }))
            .collect::<Vec<_>>(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::OwnerRecord;

    fn seen(owner: &str, ago: i64, offset_ms: i64, stopped: Option<&str>) -> OwnerSeen {
        signed(owner, ago, offset_ms, stopped, false)
    }

    fn signed(
        owner: &str,
        ago: i64,
        offset_ms: i64,
        stopped: Option<&str>,
        signed_off: bool,
    ) -> OwnerSeen {
        let t = chrono::DateTime::parse_from_rfc3339("2026-12-07T03:00:00Z")
            .map(|t| t.to_utc())
            .unwrap_or_default();
        OwnerSeen {
            record: OwnerRecord {
                owner: owner.into(),
                host: "h".into(),
                pid: 1,
                pid_space: None,
                version: "0".into(),
                started_at: t,
                last_seen: t,
                clock_offset_ms: offset_ms,
                claims_stopped: stopped.map(str::to_string),
                signed_off: signed_off.then_some(t),
            },
            ago: Duration::seconds(ago),
        }
    }

    #[test]
    fn live_owners_their_offsets_and_why_one_stopped() {
        let owners = [
            seen("a:1:aa", 2, 12, None),
            seen("b:2:bb", 4, -7301, Some("clock 7.3s behind the store's")),
            seen("c:3:cc", 120, 0, None),
            seen("d:4:dd", 3600, 0, None),
        ];
        let l = lines(&owners);
        assert_eq!(l[0], "owners: 2 live, 1 not claiming");
        assert_eq!(
            l[1],
            format!(
                "  a:1:aa  heard {} ago  clock +0.012s  claiming",
                when::span(Duration::seconds(2))
            )
        );
        assert!(
            l[2].starts_with("  b:2:bb  heard ")
                && l[2].ends_with("clock -7.301s  claims stopped: clock 7.3s behind the store's"),
            "{}",
            l[2]
        );
        assert!(
            l[3].starts_with("  not heard from for over 30s: c:3:cc, ")
                && l[3].ends_with(" (and 1 older)"),
            "{}",
            l[3]
        );
        assert_eq!(
            lines(&[])[0],
            "owners: none live (no engine is running on this store)"
        );
        let j = json(&owners);
        assert_eq!(j["live"], 2);
        assert_eq!(
            j["owners"][1]["claims_stopped"],
            "clock 7.3s behind the store's"
        );
        assert_eq!(j["owners"][2]["live"], false);
        // An owner that signed off a second ago is not live, and said to have stopped cleanly.
        let owners = [signed("e:5:ee", 1, 0, None, true)];
        let l = lines(&owners);
        assert_eq!(
            l[0],
            "owners: none live (no engine is running on this store)"
        );
        assert!(l[1].starts_with("  stopped cleanly: e:5:ee, "), "{}", l[1]);
        assert_eq!(json(&owners)["owners"][0]["live"], false);
    }
}
