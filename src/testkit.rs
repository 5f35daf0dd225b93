//! placeholder: testkit (being written)
