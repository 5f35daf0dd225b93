//! The engine's dependencies for tests: a plain HTTP client (5 s connect timeout, no system
//! proxy, so loopback test servers are reached directly), an injected environment and the
//! backoff the test chooses — the one builder every engine test uses instead of its own copy.
//!
//! Owns: building [`RunDeps`] for tests. Must not touch: production defaults
//! ([`RunDeps::from_env`]).

use std::sync::Arc;
use std::time::Duration;

use crate::action::BackoffConfig;
use crate::action::llm::{HttpOptions, http_client};
use crate::engine::RunDeps;
use crate::engine::run::EnvLookup;
use crate::gate::GateConfig;

/// [`RunDeps`] with `env` as the environment and `backoff` between attempts; default gates.
pub fn run_deps(env: EnvLookup, backoff: BackoffConfig) -> RunDeps {
    let http = match http_client(&HttpOptions {
        connect_timeout: Duration::from_secs(5),
        system_proxy: false,
    }) {
        Ok(c) => c,
        Err(e) => panic!("building the test HTTP client: {e}"),
    };
    RunDeps {
        http,
        env,
        backoff,
        gate: GateConfig::default(),
        tools: Arc::new(crate::action::tools::NoTools),
    }
}

/// An environment with no variables at all.
pub fn no_env() -> EnvLookup {
    Arc::new(|_: &str| None)
}
