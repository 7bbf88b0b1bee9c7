//! The bodies of the fuzz targets: one function per parser that takes outside input (flags,
//! annotations, the ledger Lease, the metrics text, a command line), fed arbitrary bytes. Each
//! must never panic, and checks what matters about its result beyond that: a value's text
//! parses back to the same value, a ledger that decodes re-encodes to one that decodes equal,
//! a budget stays within the pool.
//!
//! The cargo-fuzz targets of `fuzz/` call these (`make fuzz`, nightly and libFuzzer); the
//! test `tests/corpus.rs` feeds them every input kept in `fuzz/corpus/` and
//! `fuzz/regressions/` on stable, as part of `make test`.

mod annotations;
mod budget;
mod duration;
mod kubectl_args;
mod ledger;
mod metrics;
mod notify;
mod selector;
mod sentinel;
mod window;

pub use annotations::annotations;
pub use budget::budget;
pub use duration::duration;
pub use kubectl_args::kubectl_args;
pub use ledger::ledger;
pub use metrics::metrics;
pub use notify::notify;
pub use selector::selector;
pub use sentinel::sentinel;
pub use window::window;

/// A fuzz target: its name (that of `fuzz/fuzz_targets/<name>.rs` and of its corpus folder)
/// and its body.
pub type Target = (&'static str, fn(&[u8]));

/// Every target, for the corpus test.
pub const TARGETS: &[Target] = &[
    ("annotations", annotations),
    ("budget", budget),
    ("duration", duration),
    ("kubectl_args", kubectl_args),
    ("ledger", ledger),
    ("metrics", metrics),
    ("notify", notify),
    ("selector", selector),
    ("sentinel", sentinel),
    ("window", window),
];

/// The input as text: the parsers take `&str` (flags, annotation values and JSON are UTF-8
/// by the time they reach them), so other bytes are no input at all.
fn text(data: &[u8]) -> Option<&str> {
    std::str::from_utf8(data).ok()
}
