//! placeholder: gate (being written)
