//! The embedded file store (SPEC §14.1). (Implementation: store helper.)

use std::path::Path;

use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::*;
use crate::model::{HistoryRow, JobRecord, JobsFile, Settings};

pub struct FileStore {}

impl FileStore {
    pub fn open(dir: &Path) -> StoreResult<FileStore> {
        let _ = dir;
        todo!("store helper")
    }
}

impl Store for FileStore {
    fn location(&self) -> String {
        todo!()
    }
    fn apply(&self, file: &JobsFile, now: DateTime<Utc>) -> StoreResult<ApplyReport> {
        let _ = (file, now);
        todo!()
    }
    fn settings(&self) -> StoreResult<Settings> {
        todo!()
    }
    fn change_token(&self) -> StoreResult<u64> {
        todo!()
    }
    fn jobs(&self) -> StoreResult<Vec<JobRecord>> {
        todo!()
    }
    fn job(&self, name: &str) -> StoreResult<Option<JobRecord>> {
        let _ = name;
        todo!()
    }
    fn next_wakeup(&self, now: DateTime<Utc>) -> StoreResult<Option<DateTime<Utc>>> {
        let _ = now;
        todo!()
    }
    fn claim_due(&self, req: &ClaimRequest<'_>) -> StoreResult<ClaimOutcome> {
        let _ = req;
        todo!()
    }
    fn renew(
        &self,
        job: &str,
        run_id: Uuid,
        owner: &str,
        now: DateTime<Utc>,
    ) -> StoreResult<RenewOutcome> {
        let _ = (job, run_id, owner, now);
        todo!()
    }
    fn complete(&self, c: Completion) -> StoreResult<CompleteOutcome> {
        let _ = c;
        todo!()
    }
    fn history(&self, q: &HistoryQuery) -> StoreResult<Vec<HistoryRow>> {
        let _ = q;
        todo!()
    }
    fn set_paused(&self, name: &str, paused: bool, now: DateTime<Utc>) -> StoreResult<()> {
        let _ = (name, paused, now);
        todo!()
    }
    fn request_trigger(&self, name: &str, now: DateTime<Utc>) -> StoreResult<TriggerOutcome> {
        let _ = (name, now);
        todo!()
    }
    fn spend(&self, job: &str, now: DateTime<Utc>) -> StoreResult<SpendNow> {
        let _ = (job, now);
        todo!()
    }
}
