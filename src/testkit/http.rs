//! placeholder: testkit http
