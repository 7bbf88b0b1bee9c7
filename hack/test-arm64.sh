#!/usr/bin/env bash
# The arm64 programs really run: the agent's process-level tests (its reboot methods, among
# them reboot(2) in a PID namespace of its own, and its answers to bad flags), then the
# protocol's end-to-end tests with both programs, run against the arm64 binaries that
# `make static` built for the images, under QEMU's user-mode emulation (hack/install-cross.sh
# registers it with binfmt_misc). The test binaries, the control plane and the simulated
# nodes are this machine's; only the programs under test are arm64. On an arm64 machine the
# same is done for the amd64 binaries.
set -euo pipefail
cd "$(dirname "$0")/.."
case $(uname -m) in
  x86_64) arch=aarch64 ;;
  aarch64) arch=x86_64 ;;
  *) echo "test-arm64: no foreign architecture is set up for a $(uname -m) machine" >&2; exit 1 ;;
esac
agent=$PWD/target/$arch-unknown-linux-gnu/release/reboot-agent
[[ -x $agent ]] || { echo "test-arm64: $agent is missing: run \`make static\`" >&2; exit 1; }
# A foreign binary that does not start means binfmt_misc does not know it: say so plainly
# rather than as a test failure.
version=$("$agent" --version 2>&1) || {
  echo "test-arm64: $agent does not start ($version); run hack/install-cross.sh (QEMU user mode and binfmt_misc)" >&2
  exit 1
}
echo "test-arm64: $version, $arch, under $(qemu-$arch-static --version | head -n1)"
# What QEMU's user mode cannot do as a kernel on that architecture would, each a test left out
# here (they run on this machine's binary in `make test`):
# - setns(2) into another mount namespace: the kernel refuses it (EINVAL) to a process whose
#   threads share its filesystem context, and the emulator always runs threads of its own;
# - real-time signals: the emulator numbers the target's SIGRTMIN+n as this machine's
#   SIGRTMIN+n+2 (it keeps two for itself), so the target gets SIGRTMIN+7;
# - a program that does not exist: the emulator runs glibc's vfork-style spawn as a fork, so
#   the failed exec is an exit status 127 in the child, not an error of the spawn.
not_emulated=(
  command_enters_the_mount_namespace_of_pid_1
  a_failing_command_in_the_mount_namespace_of_pid_1_is_reported
  a_missing_command_in_the_mount_namespace_of_pid_1_is_reported
  signal_sends_sigrtmin_plus_5_to_the_target
  a_missing_command_is_reported
)
skips=()
for name in "${not_emulated[@]}"; do skips+=(--skip "$name"); done
controller=$PWD/target/$arch-unknown-linux-gnu/release/reboot-controller
[[ -x $controller ]] || { echo "test-arm64: $controller is missing: run \`make static\`" >&2; exit 1; }

# The test binaries as `make test` built them (hack/test-binaries.sh): the same cargo command,
# so the same features and nothing rebuilt; a package's own build of one test target would
# unify features differently and compile its dependencies again.
artifacts=$(cargo test --workspace --exclude vmtest --locked --no-run --message-format=json-render-diagnostics)
test_exe() { # $1 the package's directory, $2 the test target
  grep -F "\"manifest_path\":\"$PWD/$1/Cargo.toml\"" <<<"$artifacts" \
    | grep -F '"kind":["test"]' | grep -F "\"name\":\"$2\"" \
    | sed -n 's/.*"executable":"\([^"]*\)".*/\1/p' | tail -n1
}

status=0
echo "test-arm64: left out under emulation: ${not_emulated[*]}"
for test in reboot_methods bad_input; do
  exe=$(test_exe agent "$test")
  [[ -x $exe ]] || { echo "test-arm64: cargo built no $test test binary" >&2; exit 1; }
  echo "test-arm64: agent/tests/$test.rs against the $arch agent"
  (cd agent && REBOOT_AGENT_BIN=$agent REBOOT_AGENT_ARCH=$arch "$exe" --exact "${skips[@]}") || status=1
done
# Both programs against the real local API server: TLS (ring's $arch code), the agent's watch
# of its Node, the controller's decisions, on simulated nodes whose agents reboot them with a
# command in their own mount namespace.
exe=$(test_exe e2e scenarios)
[[ -x $exe ]] || { echo "test-arm64: cargo built no scenarios test binary" >&2; exit 1; }
echo "test-arm64: e2e/tests/protocol.rs with the $arch agent and controller"
(cd e2e && REBOOT_AGENT_BIN=$agent REBOOT_CONTROLLER_BIN=$controller REBOOT_PROGRAMS_ARCH=$arch "$exe" protocol::) || status=1
exit $status
