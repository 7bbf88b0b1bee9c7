//! The agent's internal mode for `--reboot-method command` with the host's mount namespace:
//! `reboot-agent <MODE> <namespace file> -- <program> <args>...` enters the mount namespace
//! and replaces itself with the program. It must run before anything starts a thread
//! (setns(CLONE_NEWNS) fails in a multi-threaded process), so `main` checks for it first.

use nix::{
    sched::{CloneFlags, setns},
    unistd::execvp,
};
use std::{
    ffi::{CString, OsString},
    fs::File,
    os::unix::ffi::OsStringExt,
    process::ExitCode,
};

/// The hidden first argument that selects this mode. Not a flag: no operator types it.
pub const MODE: &str = "__exec-in-mount-namespace";

/// If the process was started in this mode, enters the namespace and execs the program; it
/// returns only when that failed, with the exit code to end with (126 cannot enter, 127
/// cannot run the program, as a shell does). `None` when started normally.
pub fn exec_if_requested() -> Option<ExitCode> {
    let mut args = std::env::args_os().skip(1);
    if args.next().is_none_or(|first| first != MODE) {
        return None;
    }
    let namespace = args.next().unwrap_or_default();
    let mut argv: Vec<OsString> = args.collect();
    if argv.first().is_some_and(|a| a == "--") {
        argv.remove(0);
    }
    let (code, what, why) = match enter_and_exec(&namespace, &argv) {
        Err(Failure::Enter(why)) => (126, "enter", why),
        Err(Failure::Exec(why)) => (127, "run the command in", why),
    };
    let command = argv.join(" ".as_ref());
    eprintln!(
        "reboot-agent: cannot {what} the mount namespace {}: {why} (command `{}`); the \
         command method needs hostPID: true and CAP_SYS_ADMIN",
        namespace.to_string_lossy(),
        command.to_string_lossy(),
    );
    Some(ExitCode::from(code))
}

enum Failure {
    Enter(String),
    Exec(String),
}

fn enter_and_exec(
    namespace: &OsString,
    argv: &[OsString],
) -> Result<std::convert::Infallible, Failure> {
    let file = File::open(namespace).map_err(|e| Failure::Enter(e.to_string()))?;
    setns(&file, CloneFlags::CLONE_NEWNS).map_err(|e| Failure::Enter(e.to_string()))?;
    let argv: Vec<CString> = argv
        .iter()
        .map(|a| CString::new(a.clone().into_vec()))
        .collect::<Result<_, _>>()
        .map_err(|e| Failure::Exec(e.to_string()))?;
    let program = argv
        .first()
        .ok_or_else(|| Failure::Exec("no command given".into()))?;
    execvp(program, &argv).map_err(|e| Failure::Exec(e.to_string()))
}
