//! placeholder: cost (being written)
