//! Sanitising outside text before it is drawn (an escape sequence in a job's output
//! must not rewrite the operator's screen). The policy lives in
//! [`crate::text`] (one policy for every output); the console keeps these names for its views.
//!
//! Owns: nothing of its own. Must not touch: layout, colour, the terminal.

pub use crate::text::{line, lines};
