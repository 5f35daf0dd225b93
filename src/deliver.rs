//! placeholder: deliver (being written)
