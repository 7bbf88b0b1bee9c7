use clap::Parser;
use std::{ffi::OsStr, os::unix::ffi::OsStrExt};

/// A command line (arguments separated by NUL bytes, as the kernel hands them over, any
/// bytes in them) for `kubectl reboot`, and for the controller and the agent, which take
/// flags from the same kind of hands: parsing never panics, and a refusal renders a message.
pub fn kubectl_args(data: &[u8]) {
    let args: Vec<&OsStr> = data.split(|b| *b == 0).map(OsStr::from_bytes).collect();
    check::<kubectl_reboot::Cli>("kubectl-reboot", &args);
    check::<controller::Args>("reboot-controller", &args);
    check::<agent::Args>("reboot-agent", &args);
}

fn check<P: Parser>(program: &str, args: &[&OsStr]) {
    let argv = std::iter::once(OsStr::new(program)).chain(args.iter().copied());
    if let Err(error) = P::try_parse_from(argv) {
        assert!(!error.render().to_string().is_empty(), "{args:?}");
    }
}
