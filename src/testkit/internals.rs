//! The engine's parts, for tests and benches: each crate-private module's public items, under
//! the same module names (`testkit::internals::proc::ProcSpec` is the crate's `proc::ProcSpec`).
//! Only builds with the `testkit` feature see them, so the crate's public API stays what its
//! documentation describes and a release build's compiler reports what nothing uses.
//!
//! Owns: nothing but these re-exports (and a forwarding function where the item is a function
//! of a public module). Must not touch: the items themselves.

/// Commands, model calls, the tool loop and tool sources.
pub mod action {
    pub use crate::action::*;
}
/// Which IP addresses count as public for the URL monitor (the probe and `validate` both ask).
pub mod addr {
    pub use crate::addr::*;
}
/// The engine's crate-private helpers.
pub mod engine {
    /// Who answers an approval from this process (`user@host`), as the run's record names them.
    pub fn operator() -> String {
        crate::engine::operator()
    }
}
/// Prices, budgets and how money is shown.
pub mod cost {
    pub use crate::cost::*;
}
/// The spend forecast (`stats`, `describe`, the console).
pub mod forecast {
    pub use crate::forecast::*;
}
/// Sinks and incidents.
pub mod deliver {
    pub use crate::deliver::*;
}
/// Gates: `pre_run`, monitors, the URL probe, notepad, context.
pub mod gate {
    pub use crate::gate::*;
}
/// The streamed `jobs --json` listing.
pub mod listing {
    pub use crate::listing::*;
}
/// Who runs on a store: owner records and the liveness rule.
pub mod owners {
    pub use crate::owners::*;
}
/// Running commands under the per-run supervisor.
pub mod proc {
    pub use crate::proc::*;
}
/// `/metrics`, `/healthz`, sd_notify, journald logging.
pub mod service {
    pub use crate::service::*;
}
/// The inert-text policy and redaction of secret values.
pub mod text {
    pub use crate::text::*;
}
/// The store's layers below the [`Store`](crate::store::Store) trait: the file-store line
/// format, the rules and policies every plan is built from, and the statistics the CLI prints.
pub mod store {
    /// The file store's integrity format: file headers, row checksums, segment seals.
    pub mod filefmt {
        pub use crate::store::filefmt::*;
    }
    /// Budget, counters, overlap, chains, operator edits, a definition arriving, a run's end.
    pub mod policy {
        pub use crate::store::policy::*;
    }
    /// Slots, periods, reason words, row identity, lease primitives.
    pub mod rules {
        pub use crate::store::rules::*;
    }
    /// Run and spend statistics from the per-job counters the store keeps.
    pub mod stats {
        pub use crate::store::stats::*;
    }
}
/// The console's state (keys → actions, panes, dialogs) and its history reads.
pub mod tui {
    /// The console's pure state.
    pub mod state {
        pub use crate::tui::state::*;
    }

    /// The store read behind a console [`state::Query`] (blocking).
    pub fn run_query(store: &dyn crate::store::HistoryReader, q: state::Query) -> state::Loaded {
        crate::tui::run_query(store, q)
    }

    /// How long an idle console waits before its next redraw (whole seconds, from its clock).
    pub fn idle_wait(app: &state::App) -> std::time::Duration {
        crate::tui::view::next_change(app)
    }
}
