//! placeholder: proc (being written)
