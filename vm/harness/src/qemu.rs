//! One guest: `qemu-system-x86_64` with a qcow2 overlay on the base image, the seed disk, a
//! user-mode network that reaches nothing but the API server (and, for real nodes, the
//! registry the chart's images come from), and its serial console in a
//! file that outlives the guest's reboots (the QEMU process stays; the guest resets).
//!
//! QEMU never outlives the test process, however that ends: [`Vm`]'s `Drop` kills it, and it
//! runs under `setpriv --pdeathsig KILL`, so the kernel kills it when the test process dies
//! without running any `Drop` (SIGKILL, abort). Its forwarding processes (one `socat` per
//! connection of the guest) read from and write to QEMU alone: they end when QEMU does.

use crate::{Error, image::BaseImage};
use std::{
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    sync::{Mutex, OnceLock, mpsc},
    time::{Duration, Instant},
};
use testenv::GUEST_FORWARD_ADDRESS;

/// The port at which a guest reaches the API server on [`GUEST_FORWARD_ADDRESS`].
pub const GUEST_API_PORT: u16 = 6443;

/// The port at which a guest reaches the registry on [`GUEST_FORWARD_ADDRESS`], whatever its
/// port on the host: the registry's certificate names the address, not the port.
pub const GUEST_REGISTRY_PORT: u16 = 5000;

/// `tcg` (software emulation, works everywhere) unless `VM_ACCEL` says `kvm`.
pub fn accelerator() -> String {
    std::env::var("VM_ACCEL").unwrap_or_else(|_| "tcg".into())
}

/// How to start one guest.
#[derive(Debug, Clone)]
pub struct VmSpec {
    pub name: String,
    pub memory_mib: u32,
    /// The loopback port of the API server on the host.
    pub api_port: u16,
    /// The loopback port of a registry on the host, forwarded at [`GUEST_REGISTRY_PORT`].
    pub registry_port: Option<u16>,
    pub seed_disk: PathBuf,
    /// Where the overlay, the serial log and QEMU's own log go.
    pub dir: PathBuf,
    /// More of the kernel's command line, such as `systemd.hostname=node-1`.
    pub kernel_args: String,
    /// Named virtio serial ports (`/dev/virtio-ports/<name>` in the guest), each written to
    /// `<dir>/<vm>.<name>.log` on the host, across the guest's reboots.
    pub log_ports: Vec<String>,
}

/// A running guest; dropping it stops QEMU (and with it the forwarding processes).
#[derive(Debug)]
pub struct Vm {
    pub name: String,
    serial: PathBuf,
    child: Child,
    pub started: Instant,
}

/// The line that vm-node-reporter prints on the console once a boot is reported.
const REPORTED: &str = "vm-node-reporter: node ";

impl Vm {
    pub fn boot(image: &BaseImage, spec: &VmSpec) -> Result<Vm, Error> {
        std::fs::create_dir_all(&spec.dir)
            .map_err(Error::io(format!("create {}", spec.dir.display())))?;
        let overlay = spec.dir.join(format!("{}.qcow2", spec.name));
        let output = Command::new("qemu-img")
            .args(["create", "-q", "-f", "qcow2", "-F", "qcow2", "-b"])
            .arg(image.disk())
            .arg(&overlay)
            .output()
            .map_err(Error::io("run qemu-img"))?;
        if !output.status.success() {
            return Err(Error::Setup(format!(
                "qemu-img create {} failed: {}",
                overlay.display(),
                String::from_utf8_lossy(&output.stderr).trim()
            )));
        }
        let serial = spec.dir.join(format!("{}.console.log", spec.name));
        let qemu_log = spec.dir.join(format!("{}.qemu.log", spec.name));
        let log = std::fs::File::create(&qemu_log).map_err(Error::io("create the QEMU log"))?;
        let log_err = log.try_clone().map_err(Error::io("dup the QEMU log"))?;
        let forward = network(spec);
        let mut qemu = Command::new(crate::find_on_path("setpriv").unwrap_or("setpriv".into()));
        // The parent death signal is the kernel's: QEMU gets SIGKILL when its parent dies.
        qemu.args(["--pdeathsig", "KILL", "--", "qemu-system-x86_64"])
            .args([
                "-name",
                &spec.name,
                "-accel",
                &accelerator(),
                "-cpu",
                "max",
                "-smp",
                "1",
            ])
            .args(["-m", &spec.memory_mib.to_string()])
            .args(["-nodefaults", "-no-user-config", "-display", "none"])
            .arg("-kernel")
            .arg(image.kernel())
            .arg("-initrd")
            .arg(image.initrd())
            .args([
                "-append",
                &format!(
                    "root=/dev/vda rw console=ttyS0 net.ifnames=0 panic=-1 mitigations=off {}",
                    spec.kernel_args
                ),
            ])
            .arg("-drive")
            .arg(format!("file={},if=virtio,format=qcow2", overlay.display()))
            .arg("-drive")
            .arg(format!(
                "file={},if=virtio,format=raw,readonly=on",
                spec.seed_disk.display()
            ))
            .args(["-nic", &forward, "-device", "virtio-rng-pci"])
            .args(log_port_args(spec))
            .arg("-serial")
            .arg(format!("file:{}", serial.display()))
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log_err);
        let child = spawn_for_the_whole_run(qemu).map_err(Error::io("start qemu-system-x86_64"))?;
        Ok(Vm {
            name: spec.name.clone(),
            serial,
            child,
            started: Instant::now(),
        })
    }

    pub fn serial_log_path(&self) -> &Path {
        &self.serial
    }

    /// What the guest wrote to its log port `port` so far (see [`VmSpec::log_ports`]).
    pub fn port_log(&self, port: &str) -> String {
        let path = self
            .serial
            .with_file_name(format!("{}.{port}.log", self.name));
        String::from_utf8_lossy(&std::fs::read(path).unwrap_or_default()).into_owned()
    }

    /// Everything the guest wrote to its serial console so far.
    pub fn serial_log(&self) -> String {
        String::from_utf8_lossy(&std::fs::read(&self.serial).unwrap_or_default()).into_owned()
    }

    /// The boot ids the guest itself reported on its console, one per boot, in order.
    pub fn boot_ids(&self) -> Vec<String> {
        boot_ids_in(&self.serial_log(), &self.name)
    }

    /// How many times a kernel started, by its banner on the console: evidence of the boots
    /// that does not depend on anything of ours running in the guest.
    pub fn kernel_starts(&self) -> usize {
        self.serial_log().matches("] Linux version ").count()
    }

    /// How many times the kernel restarted the machine, by its last words on the console: a
    /// reboot under way shows here before the next kernel's banner does.
    pub fn restarts(&self) -> usize {
        self.serial_log()
            .matches("reboot: Restarting system")
            .count()
    }

    /// Whether QEMU still runs (a guest that powered off or crashed ends it).
    pub fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }
}

impl Drop for Vm {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Waits until `booted` holds for every guest's first boot (each checked until it does), and
/// prints each guest's time from its start with `tag`; fails when a guest's QEMU exits or
/// `timeout` passes, naming the guests and where their logs are.
pub async fn wait_for_first_boots(
    vms: &mut [Vm],
    timeout: Duration,
    logs: &Path,
    tag: &str,
    mut booted: impl AsyncFnMut(&Vm) -> bool,
) -> Result<(), Error> {
    let started = Instant::now();
    let mut pending: Vec<usize> = (0..vms.len()).collect();
    while !pending.is_empty() {
        let mut still = Vec::new();
        for index in pending {
            let vm = &mut vms[index];
            if !vm.is_running() {
                return Err(Error::Setup(format!(
                    "{}'s QEMU exited during its first boot; see {}",
                    vm.name,
                    vm.serial_log_path().display()
                )));
            }
            if booted(vm).await {
                eprintln!(
                    "{tag}: {} booted and Ready after {}",
                    vm.name,
                    crate::secs(vm.started.elapsed())
                );
            } else {
                still.push(index);
            }
        }
        pending = still;
        if started.elapsed() > timeout {
            let names: Vec<&str> = pending.iter().map(|&i| vms[i].name.as_str()).collect();
            return Err(Error::Setup(format!(
                "{} did not boot and report Ready within {timeout:?}; their logs are in {}",
                names.join(", "),
                logs.display()
            )));
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    Ok(())
}

/// The `-nic` of a guest: QEMU's user-mode network with restrict=on, which leaves the guest no
/// way out but the forwards of [`GUEST_FORWARD_ADDRESS`]: the API server, and the registry when
/// the spec has one. guestfwd's `cmd:` starts one socat per connection (a plain `tcp:`
/// forward would serve only the first).
fn network(spec: &VmSpec) -> String {
    let forward = |guest_port: u16, host_port: u16| {
        format!(
            ",guestfwd=tcp:{GUEST_FORWARD_ADDRESS}:{guest_port}-cmd:socat - TCP:127.0.0.1:{host_port}"
        )
    };
    let mut nic = "user,model=virtio-net-pci,restrict=on".to_owned();
    nic.push_str(&forward(GUEST_API_PORT, spec.api_port));
    if let Some(port) = spec.registry_port {
        nic.push_str(&forward(GUEST_REGISTRY_PORT, port));
    }
    nic
}

/// QEMU's arguments for the spec's log ports: one virtio serial controller, a file per port.
fn log_port_args(spec: &VmSpec) -> Vec<String> {
    if spec.log_ports.is_empty() {
        return Vec::new();
    }
    let mut args = vec!["-device".to_owned(), "virtio-serial-pci".to_owned()];
    for (index, port) in spec.log_ports.iter().enumerate() {
        let path = spec.dir.join(format!("{}.{port}.log", spec.name));
        args.push("-chardev".to_owned());
        args.push(format!("file,id=log{index},path={}", path.display()));
        args.push("-device".to_owned());
        args.push(format!("virtserialport,chardev=log{index},name={port}"));
    }
    args
}

/// Spawns `command` from a thread that lives as long as the process.
///
/// The parent death signal that `setpriv --pdeathsig` asks for fires when the THREAD that
/// spawned the child ends, not the process: spawned from a runtime's worker or a blocking-pool
/// thread (which ends after some idle seconds), QEMU would be killed in the middle of the test.
fn spawn_for_the_whole_run(command: Command) -> std::io::Result<Child> {
    type Request = (Command, mpsc::Sender<std::io::Result<Child>>);
    static SPAWNER: OnceLock<Mutex<mpsc::Sender<Request>>> = OnceLock::new();
    let spawner = SPAWNER.get_or_init(|| {
        let (requests, incoming) = mpsc::channel::<Request>();
        // Never joined: it waits for requests until the process exits (the static sender is
        // never dropped).
        std::thread::Builder::new()
            .name("vm-spawner".into())
            .spawn(move || {
                for (mut command, reply) in incoming {
                    let _ = reply.send(command.spawn());
                }
            })
            .expect("start the thread that spawns the guests");
        Mutex::new(requests)
    });
    let (reply, answer) = mpsc::channel();
    spawner
        .lock()
        .map_err(|_| std::io::Error::other("the spawner's lock is poisoned"))?
        .send((command, reply))
        .map_err(|_| std::io::Error::other("the spawner thread is gone"))?;
    answer
        .recv()
        .map_err(|_| std::io::Error::other("the spawner thread is gone"))?
}

/// The boot ids in a serial log, from vm-node-reporter's line of each boot.
pub fn boot_ids_in(serial_log: &str, node: &str) -> Vec<String> {
    let prefix = format!("{REPORTED}{node} Ready with boot id ");
    let mut ids: Vec<String> = serial_log
        .lines()
        .filter_map(|line| line.split_once(&prefix))
        .map(|(_, id)| boot_id_prefix(id))
        .collect();
    // A reporter restarted within one boot prints the same id again.
    ids.dedup();
    ids
}

/// The boot id at the start of `text` (a guest's console line): the kernel may print on the console in the middle of
/// a line, so that the id is followed by one of its messages without a line break.
pub fn boot_id_prefix(text: &str) -> String {
    text.trim_start()
        .chars()
        .take_while(|c| c.is_ascii_hexdigit() || *c == '-')
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_registry_is_forwarded_beside_the_api_server_at_its_fixed_guest_port() {
        let spec = |registry_port| VmSpec {
            name: "node-1".into(),
            memory_mib: 1024,
            api_port: 40001,
            registry_port,
            seed_disk: "seed.img".into(),
            dir: "run".into(),
            kernel_args: String::new(),
            log_ports: Vec::new(),
        };
        let api = "guestfwd=tcp:10.0.2.100:6443-cmd:socat - TCP:127.0.0.1:40001";
        let registry = "guestfwd=tcp:10.0.2.100:5000-cmd:socat - TCP:127.0.0.1:40002";
        let with = network(&spec(Some(40002)));
        assert!(with.contains("restrict=on") && with.contains(api) && with.contains(registry));
        let without = network(&spec(None));
        assert!(without.contains(api) && !without.contains("10.0.2.100:5000"));
    }

    #[test]
    fn boot_ids_are_read_from_the_reporters_lines() {
        let log = "[  1.0] Linux version\n\
                   vm-node-reporter: node vm-1 Ready with boot id aaa\r\n\
                   [  OK  ] Started reboot-agent\n\
                   vm-node-reporter: node vm-2 Ready with boot id zzz\n\
                   vm-node-reporter: node vm-1 Ready with boot id bbb\n\
                   vm-node-reporter: node vm-1 Ready with boot id bbb\n";
        assert_eq!(boot_ids_in(log, "vm-1"), ["aaa", "bbb"]);
        assert!(boot_ids_in("", "vm-1").is_empty());
    }
}
