use agent::Args;
use clap::Parser;
use std::process::ExitCode;

fn main() -> ExitCode {
    // First, while the process has one thread: the command reboot method re-executes the agent
    // in this mode to enter the host's mount namespace.
    if let Some(failed) = agent::host_exec::exec_if_requested() {
        return failed;
    }
    let args = Args::parse();
    if args.validate {
        println!("valid");
        return ExitCode::SUCCESS;
    }
    observability::logs::init(args.log_format);
    if args.reboot_once_for_test {
        return agent::test_hook::reboot_once_for_test(&args);
    }
    let node = args.node_name.clone().unwrap_or_default();
    match agent::run_blocking(args) {
        Ok(()) => ExitCode::SUCCESS,
        // Every error's message carries its cause and what to do about it.
        Err(error) => {
            tracing::error!(%node, "{error}");
            ExitCode::from(error.exit_code())
        }
    }
}
