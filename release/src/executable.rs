//! Which platform a program is for, from its header: ELF for Linux, PE for Windows, Mach-O
//! for macOS; so that an archive never holds another platform's binary under its name.

fn u16_le(bytes: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_le_bytes(bytes.get(at..at + 2)?.try_into().ok()?))
}

fn u32_le(bytes: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(bytes.get(at..at + 4)?.try_into().ok()?))
}

/// (`os`, `arch`) as krew names them, or None for anything else.
pub fn platform(bytes: &[u8]) -> Option<(&'static str, &'static str)> {
    if bytes.starts_with(b"\x7fELF") {
        let arch = match u16_le(bytes, 18)? {
            0x3e => "amd64",
            0xb7 => "arm64",
            _ => return None,
        };
        return Some(("linux", arch));
    }
    if bytes.starts_with(b"MZ") {
        let pe = usize::try_from(u32_le(bytes, 0x3c)?).ok()?;
        if bytes.get(pe..pe + 4)? != b"PE\0\0" {
            return None;
        }
        let arch = match u16_le(bytes, pe + 4)? {
            0x8664 => "amd64",
            0xaa64 => "arm64",
            _ => return None,
        };
        return Some(("windows", arch));
    }
    if u32_le(bytes, 0)? == 0xfeed_facf {
        let arch = match u32_le(bytes, 4)? {
            0x0100_0007 => "amd64",
            0x0100_000c => "arm64",
            _ => return None,
        };
        return Some(("darwin", arch));
    }
    None
}

/// `linux/amd64`, or what the header is when it is no program of ours.
pub fn describe(bytes: &[u8]) -> String {
    match platform(bytes) {
        Some((os, arch)) => format!("a {os}/{arch} program"),
        None => "no Linux, Windows or macOS program for amd64 or arm64".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn elf(machine: u16) -> Vec<u8> {
        let mut bytes = b"\x7fELF\x02\x01\x01".to_vec();
        bytes.resize(18, 0);
        bytes.extend(machine.to_le_bytes());
        bytes.resize(64, 0);
        bytes
    }

    fn pe(machine: u16) -> Vec<u8> {
        let mut bytes = b"MZ".to_vec();
        bytes.resize(0x3c, 0);
        bytes.extend(0x80u32.to_le_bytes());
        bytes.resize(0x80, 0);
        bytes.extend(b"PE\0\0");
        bytes.extend(machine.to_le_bytes());
        bytes.resize(0x100, 0);
        bytes
    }

    fn mach_o(cpu: u32) -> Vec<u8> {
        let mut bytes = 0xfeed_facfu32.to_le_bytes().to_vec();
        bytes.extend(cpu.to_le_bytes());
        bytes.resize(32, 0);
        bytes
    }

    #[test]
    fn each_header_names_its_platform() {
        assert_eq!(platform(&elf(0x3e)), Some(("linux", "amd64")));
        assert_eq!(platform(&elf(0xb7)), Some(("linux", "arm64")));
        assert_eq!(platform(&elf(0x28)), None, "32-bit ARM");
        assert_eq!(platform(&pe(0x8664)), Some(("windows", "amd64")));
        assert_eq!(platform(&pe(0x14c)), None, "x86");
        assert_eq!(platform(&mach_o(0x0100_000c)), Some(("darwin", "arm64")));
        assert_eq!(platform(&mach_o(0x0100_0007)), Some(("darwin", "amd64")));
        assert_eq!(platform(b"#!/bin/sh\n"), None);
        assert_eq!(platform(b"MZ"), None, "cut short");
    }
}
