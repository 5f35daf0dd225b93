//! `cronsole approvals`, `approve RUN_ID [--call ID]`, `deny RUN_ID [--reason R]`: the
//! operator's side of tool calls awaiting approval, from any host through the store.
//!
//! Owns: the listing of what waits and the answer's output. Must not touch: the answer's rules
//! (`store::policy::operator`), the wait itself (the engine), the rule saying whether the call's
//! owner is live (`engine::call_owner`).
//!
//! A call whose owner is not live (killed, or cut off from the store) is still listed, marked,
//! and an answer to it is recorded (it takes effect if that owner comes back) but exits
//! [`OWNER_GONE`], saying plainly that nothing runs now.

use crate::store::OperationError;
use std::process::ExitCode;

use crate::store::StoreError;
use anyhow::Result;
use chrono::{SecondsFormat, Utc};
use serde::Serialize;
use uuid::Uuid;

use super::{bad_input, inert, jobs_file, open_existing_store, store_location};
use crate::cli::args::{AnswerArgs, Cli};
use crate::engine::call_owner;

/// The exit status of an answer recorded for a call whose owner is not live: distinct from 1
/// (nothing recorded: the run no longer waits), since the answer takes effect if that owner
/// comes back.
const OWNER_GONE: u8 = 3;

/// One call awaiting approval, as `approvals --json` prints it.
#[derive(Serialize)]
struct Pending {
    job: String,
    run_id: Uuid,
    /// The call's id in the conversation (`approve --call`).
    call_id: String,
    tool: String,
    arguments: String,
    since: String,
    deadline: String,
    /// The owner running the run.
    owner: String,
    /// Whether that owner picks an answer up now.
    owner_live: bool,
    /// Seconds since the store last heard of the owner (`null`: it holds no record of it).
    owner_heard_seconds_ago: Option<i64>,
    /// Why an answer reaches nobody now, when the owner is not live.
    #[serde(skip_serializing_if = "Option::is_none")]
    owner_gone: Option<String>,
}

fn rfc(t: chrono::DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Secs, true)
}

pub fn approvals(cli: &Cli, json: bool) -> Result<ExitCode> {
    let store = open_existing_store(&store_location(cli, jobs_file(cli).as_deref()))?;
    // Leases and heartbeats are judged on the store's clock: this host's may be off.
    let at = crate::engine::JudgeAt::store(store.as_ref());
    let (owners, now) = (at.owners(store.as_ref())?, at.now());
    let mut pending = Vec::new();
    for rec in store.jobs()? {
        for l in rec.rt.leases() {
            if let Some(a) = l.awaiting.as_ref().filter(|a| a.answer.is_none()) {
                let who = call_owner(l, &owners, now);
                pending.push(Pending {
                    job: rec.def.name.clone(),
                    run_id: l.run_id,
                    call_id: a.call_id.clone(),
                    tool: a.tool.clone(),
                    arguments: a.arguments.clone(),
                    since: rfc(a.since),
                    deadline: rfc(a.deadline),
                    owner: who.owner,
                    owner_live: who.gone.is_none(),
                    owner_heard_seconds_ago: who.heard_ago.map(|d| d.num_seconds()),
                    owner_gone: who.gone,
                });
            }
        }
    }
    if json {
        println!("{}", crate::text::to_json_pretty(&pending)?);
        return Ok(ExitCode::SUCCESS);
    }
    if pending.is_empty() {
        println!("no tool call is awaiting approval");
        return Ok(ExitCode::SUCCESS);
    }
    for p in &pending {
        // The arguments are the model's text: shown inert, on one line.
        println!(
            "{}  run {}  call {}  {}  {}  since {}  denied at {}",
            inert(&p.job),
            p.run_id,
            inert(&p.call_id),
            inert(&p.tool),
            inert(&crate::transcript::cap_bytes(&p.arguments, 200)),
            p.since,
            p.deadline
        );
        if let Some(why) = &p.owner_gone {
            println!("  ! owner not live: {why}");
        }
    }
    println!(
        "answer with: cronsole approve RUN_ID [--call CALL_ID] | cronsole deny RUN_ID [--call \
         CALL_ID] [--reason TEXT] (or a/x in the console)"
    );
    Ok(ExitCode::SUCCESS)
}

pub fn answer(cli: &Cli, a: &AnswerArgs, approve: bool) -> Result<ExitCode> {
    let run_id = Uuid::parse_str(a.run_id.trim())
        .map_err(|_| bad_input(format!("'{}' is not a run id", inert(&a.run_id))))?;
    let store =
        super::open_existing_store_to_write(&store_location(cli, jobs_file(cli).as_deref()))?;
    // Approve's reason is kept on the run's record (`history --json`, the transcript's call);
    // deny's is also what the model reads as the tool's result.
    let reason = a.reason.clone().filter(|r| !r.trim().is_empty());
    let via = if approve {
        "cronsole approve"
    } else {
        "cronsole deny"
    };
    let at = crate::engine::JudgeAt::store(store.as_ref());
    let to = (run_id, a.call.as_deref().map(str::trim));
    match crate::engine::answer_call(store.as_ref(), to, approve, reason, via, at) {
        Ok(a) if a.owner_gone => {
            eprintln!("error: {}", a.notice);
            Ok(ExitCode::from(OWNER_GONE))
        }
        Ok(a) => {
            println!("{}", a.notice);
            Ok(ExitCode::SUCCESS)
        }
        // A run that no longer waits is a runtime fact, not bad input: exit 1, saying so.
        Err(StoreError::Operation(OperationError::NotAwaiting(why))) => {
            eprintln!("error: {why}");
            Ok(ExitCode::from(1))
        }
        Err(e) => Err(e.into()),
    }
}
