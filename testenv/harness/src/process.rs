use std::fs::{File, OpenOptions};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use crate::Error;

const LOG_TAIL_LINES: usize = 20;

/// One component of the control plane, with everything needed to start it again.
#[derive(Debug)]
pub(crate) struct Proc {
    pub name: &'static str,
    program: PathBuf,
    args: Vec<String>,
    log: PathBuf,
    child: Option<Child>,
}

impl Proc {
    /// Starts `program`; its stdout and stderr are appended to `<dir>/<name>.log`.
    pub fn spawn(
        name: &'static str,
        program: PathBuf,
        args: Vec<String>,
        dir: &Path,
    ) -> Result<Proc, Error> {
        let mut proc = Proc {
            name,
            program,
            args,
            log: dir.join(format!("{name}.log")),
            child: None,
        };
        proc.start()?;
        Ok(proc)
    }

    fn start(&mut self) -> Result<(), Error> {
        let log = open_log(&self.log)?;
        let err = log
            .try_clone()
            .map_err(Error::io("duplicate a log file handle"))?;
        let child = Command::new(&self.program)
            .args(&self.args)
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(err)
            .spawn()
            .map_err(|source| Error::Spawn {
                name: self.name,
                path: self.program.clone(),
                source,
            })?;
        tracing::debug!(name = self.name, pid = child.id(), "started");
        self.child = Some(child);
        Ok(())
    }

    pub fn restart(&mut self, grace: Duration) -> Result<(), Error> {
        self.stop(grace);
        self.start()
    }

    /// SIGTERM, then SIGKILL after `grace`; `start` runs it again with the same arguments.
    pub fn stop(&mut self, grace: Duration) {
        stop_all(std::slice::from_mut(self), grace);
    }

    /// Starts it again after `stop`.
    pub fn start_again(&mut self) -> Result<(), Error> {
        self.start()
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// SIGHUP: Prometheus and Alertmanager read their configuration again.
    pub fn reload(&self) {
        self.signal(Signal::SIGHUP);
    }

    /// SIGSTOP, then SIGCONT with `false`: the process holds still, its connections open.
    pub fn pause(&self, paused: bool) {
        self.signal(if paused {
            Signal::SIGSTOP
        } else {
            Signal::SIGCONT
        });
    }

    /// Fails with the log's tail when the process has exited.
    pub fn ensure_running(&mut self) -> Result<(), Error> {
        let status = match self.child.as_mut().map(Child::try_wait) {
            Some(Ok(None)) => return Ok(()),
            Some(Ok(Some(status))) => status,
            Some(Err(e)) => return Err(Error::io(format!("wait for {}", self.name))(e)),
            None => return Err(Error::io(format!("find {}", self.name))(not_started())),
        };
        self.child = None;
        Err(Error::Exited {
            name: self.name,
            status,
            log: self.log.clone(),
            tail: self.log_tail(),
        })
    }

    pub fn not_ready(&self, waited: Duration, last: String) -> Error {
        Error::NotReady {
            name: self.name,
            waited,
            last,
            log: self.log.clone(),
            tail: self.log_tail(),
        }
    }

    pub fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        if lines.is_empty() {
            return "(the log is empty)".to_owned();
        }
        lines[lines.len().saturating_sub(LOG_TAIL_LINES)..].join("\n")
    }

    fn signal(&self, signal: Signal) {
        if let Some(child) = &self.child
            && let Ok(pid) = i32::try_from(child.id())
        {
            // The process may have exited on its own already; nothing to do then.
            let _ = kill(Pid::from_raw(pid), signal);
        }
    }

    /// Forgets the process once it has exited (and reaps it, so no zombie is left).
    fn reap(&mut self) {
        if let Some(child) = self.child.as_mut()
            && !matches!(child.try_wait(), Ok(None))
        {
            self.child = None;
        }
    }
}

/// SIGTERM to every process, then SIGKILL to those still running after `grace`; reaps them all.
pub(crate) fn stop_all(procs: &mut [Proc], grace: Duration) {
    procs.iter().for_each(|p| p.signal(Signal::SIGTERM));
    let deadline = Instant::now() + grace;
    loop {
        procs.iter_mut().for_each(Proc::reap);
        if procs.iter().all(|p| p.child.is_none()) {
            return;
        }
        if Instant::now() >= deadline {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    for proc in procs.iter_mut() {
        if let Some(mut child) = proc.child.take() {
            tracing::warn!(
                name = proc.name,
                "did not stop within {grace:?} of SIGTERM; killing it"
            );
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn open_log(path: &Path) -> Result<File, Error> {
    OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(Error::io(format!("open {}", path.display())))
}

fn not_started() -> std::io::Error {
    std::io::Error::other("the process is not running")
}
