//! API errors by kind, for decisions (retry, re-read, give up) and for metrics; shared with the
//! agent through the `observability` crate.

pub use observability::ApiErrorKind;
