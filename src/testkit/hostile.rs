//! placeholder: testkit hostile
