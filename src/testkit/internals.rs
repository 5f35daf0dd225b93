//! The engine's parts, for tests and benches: each crate-private module's public items, under
//! the same module names (`testkit::internals::proc::ProcSpec` is the crate's `proc::ProcSpec`).
//! Only builds with the `testkit` feature see them, so the crate's public API stays what its
//! documentation describes and a release build's compiler reports what nothing uses.
//!
//! Owns: nothing but these re-exports. Must not touch: the items themselves.

/// Commands, model calls, the tool loop and tool sources.
pub mod action {
    pub use crate::action::*;
}
/// Prices, budgets and how money is shown.
pub mod cost {
    pub use crate::cost::*;
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
