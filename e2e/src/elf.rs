//! Which architecture a binary is for, from its ELF header: the tests that run the arm64
//! binaries under emulation check that they really got them.

use std::path::Path;

/// The architecture of an ELF file's `e_machine`, as Rust names it (`x86_64`, `aarch64`).
pub fn architecture(path: &Path) -> String {
    let elf = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert!(
        elf.len() > 20 && elf.starts_with(b"\x7fELF"),
        "{} is not an ELF file",
        path.display()
    );
    match u16::from_le_bytes([elf[18], elf[19]]) {
        0x3e => "x86_64".to_owned(),
        0xb7 => "aarch64".to_owned(),
        other => format!("e_machine {other:#x}"),
    }
}

/// The architecture the programs under test must be: `REBOOT_PROGRAMS_ARCH` (set by
/// hack/test-arm64.sh), else this machine's.
pub fn expected_architecture() -> String {
    std::env::var("REBOOT_PROGRAMS_ARCH").unwrap_or_else(|_| std::env::consts::ARCH.to_owned())
}
