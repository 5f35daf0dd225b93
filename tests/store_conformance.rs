//! Runs the shared store conformance suite (`tests/conformance/`) against both stores: the file
//! store in a temp directory and the PostgreSQL store in a fresh database per case.
#![allow(clippy::unwrap_used)] // test code

mod conformance;
mod support;

use std::sync::Arc;

use cronsole::store::Store;

mod file_store {
    use super::*;

    /// One temp dir per test (removed when the test ends, even by a panic), one fresh store
    /// directory in it per call.
    fn factory() -> Option<impl Fn() -> Arc<dyn Store>> {
        let root = support::tempdir("conf");
        Some(move || {
            let dir = root.join(uuid::Uuid::new_v4().to_string());
            std::fs::create_dir_all(&dir).unwrap();
            Arc::new(cronsole::store::file::FileStore::open(&dir).unwrap()) as Arc<dyn Store>
        })
    }

    conformance_suite!(factory());
}

mod pg_store {
    use super::*;

    fn factory() -> Option<impl Fn() -> Arc<dyn Store>> {
        support::pg::server()?;
        Some(|| {
            let url = support::pg::database().expect("server checked above");
            // The suite drives time by hand: the store decides with the caller's `now`.
            let opts = cronsole::store::postgres::PgOptions {
                clock: cronsole::store::postgres::PgClock::Caller,
                ..Default::default()
            };
            Arc::new(cronsole::store::postgres::PgStore::open_with(&url, opts).unwrap())
                as Arc<dyn Store>
        })
    }

    conformance_suite!(factory());
}
