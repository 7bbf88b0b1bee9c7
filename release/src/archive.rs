//! The plugin's archives: the same bytes for the same files wherever and whenever they are
//! made. Entries sorted by name, every time the given one, owner root (numeric, no names),
//! modes fixed; gzip's header without a time or a name; the zip's entries Unix's, deflated.

use crate::Error;
use crate::platform::Platform;
use flate2::{Compression, GzBuilder};
use std::io::{Cursor, Write};

/// One file of an archive.
#[derive(Debug, Clone, Copy)]
pub struct PluginFile<'a> {
    pub name: &'a str,
    pub mode: u32,
    pub data: &'a [u8],
}

/// The archive of the plugin for `platform`: its binary (0755) and LICENSE (0644) at the top,
/// as krew's manifest names them. Returns the archive's file name and bytes.
pub fn plugin_archive(
    platform: &Platform,
    version: &str,
    binary: &[u8],
    license: &[u8],
    mtime: u64,
) -> Result<(String, Vec<u8>), Error> {
    let files = [
        PluginFile {
            name: platform.binary(),
            mode: 0o755,
            data: binary,
        },
        PluginFile {
            name: "LICENSE",
            mode: 0o644,
            data: license,
        },
    ];
    let bytes = match platform.extension() {
        "zip" => zip(&files, mtime)?,
        _ => tar_gz(&files, mtime)?,
    };
    Ok((platform.archive_name(version), bytes))
}

fn sorted<'a>(files: &[PluginFile<'a>]) -> Vec<PluginFile<'a>> {
    let mut files = files.to_vec();
    files.sort_by_key(|file| file.name);
    files
}

fn in_memory(source: std::io::Error) -> Error {
    Error::Io {
        path: "<archive in memory>".into(),
        source,
    }
}

/// A gzipped tar, its header ustar's (no user or group names).
pub fn tar_gz(files: &[PluginFile<'_>], mtime: u64) -> Result<Vec<u8>, Error> {
    let mut builder = tar::Builder::new(Vec::new());
    for file in sorted(files) {
        let mut header = tar::Header::new_ustar();
        header.set_path(file.name).map_err(in_memory)?;
        header.set_entry_type(tar::EntryType::Regular);
        header.set_size(file.data.len() as u64);
        header.set_mode(file.mode);
        header.set_uid(0);
        header.set_gid(0);
        header.set_mtime(mtime);
        header.set_cksum();
        builder.append(&header, file.data).map_err(in_memory)?;
    }
    let tar = builder.into_inner().map_err(in_memory)?;
    // GzBuilder writes no name and a zero time unless told; the level is fixed.
    let mut gzip = GzBuilder::new().write(Vec::new(), Compression::best());
    gzip.write_all(&tar).map_err(in_memory)?;
    gzip.finish().map_err(in_memory)
}

/// A zip whose entries carry Unix modes and the time `mtime` (zip cannot say a time before
/// 1980: earlier ones are 1980-01-01).
pub fn zip(files: &[PluginFile<'_>], mtime: u64) -> Result<Vec<u8>, Error> {
    let mut writer = zip::ZipWriter::new(Cursor::new(Vec::new()));
    for file in sorted(files) {
        let options = zip::write::SimpleFileOptions::default()
            .system(zip::System::Unix)
            .compression_method(zip::CompressionMethod::Deflated)
            .compression_level(Some(9))
            .last_modified_time(zip_time(mtime))
            .unix_permissions(file.mode);
        writer.start_file(file.name, options)?;
        writer.write_all(file.data).map_err(in_memory)?;
    }
    Ok(writer.finish()?.into_inner())
}

/// Seconds since 1970 (UTC) as zip's time, which starts in 1980 and ends in 2107.
fn zip_time(seconds: u64) -> zip::DateTime {
    let (year, month, day) = civil_date(seconds / 86_400);
    let second_of_day = seconds % 86_400;
    let time = (|| {
        zip::DateTime::from_date_and_time(
            u16::try_from(year).ok()?,
            month,
            day,
            u8::try_from(second_of_day / 3600).ok()?,
            u8::try_from(second_of_day / 60 % 60).ok()?,
            u8::try_from(second_of_day % 60).ok()?,
        )
        .ok()
    })();
    time.unwrap_or_default()
}

/// The proleptic Gregorian date of a day since 1970-01-01 (Howard Hinnant's `civil_from_days`).
fn civil_date(days: u64) -> (u64, u8, u8) {
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + u64::from(month <= 2);
    // Both fit: a day is 1..=31 and a month 1..=12.
    (year, month as u8, day as u8)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    const FILES: [PluginFile<'static>; 2] = [
        PluginFile {
            name: "kubectl-reboot",
            mode: 0o755,
            data: b"\x7fELF program",
        },
        PluginFile {
            name: "LICENSE",
            mode: 0o644,
            data: b"Apache License",
        },
    ];

    #[test]
    fn dates_are_the_calendars() {
        assert_eq!(civil_date(0), (1970, 1, 1));
        assert_eq!(civil_date(11_016), (2000, 2, 29));
        assert_eq!(civil_date(20_454), (2026, 1, 1));
        let time = zip_time(1_767_225_600 + 3600 + 62);
        assert_eq!(
            (
                time.year(),
                time.month(),
                time.day(),
                time.hour(),
                time.minute(),
                time.second()
            ),
            (2026, 1, 1, 1, 1, 2)
        );
        assert_eq!(zip_time(0), zip::DateTime::default(), "before 1980: 1980");
    }

    #[test]
    fn the_tar_gz_is_sorted_fixed_and_has_no_time_in_gzip() {
        let bytes = tar_gz(&FILES, 1234).unwrap();
        assert_eq!(bytes, tar_gz(&FILES, 1234).unwrap());
        assert_eq!(&bytes[4..8], &[0, 0, 0, 0], "gzip's MTIME");
        assert_eq!(bytes[3] & 0x08, 0, "gzip's FNAME flag");
        let mut archive = tar::Archive::new(flate2::read::GzDecoder::new(&bytes[..]));
        let entries: Vec<_> = archive
            .entries()
            .unwrap()
            .map(|entry| {
                let mut entry = entry.unwrap();
                let header = entry.header().clone();
                let mut data = Vec::new();
                entry.read_to_end(&mut data).unwrap();
                let name = entry.path().unwrap().display().to_string();
                (
                    name,
                    header.mode().unwrap(),
                    header.mtime().unwrap(),
                    header.uid().unwrap(),
                    data,
                )
            })
            .collect();
        assert_eq!(
            entries,
            [
                (
                    "LICENSE".to_owned(),
                    0o644,
                    1234,
                    0,
                    b"Apache License".to_vec()
                ),
                (
                    "kubectl-reboot".to_owned(),
                    0o755,
                    1234,
                    0,
                    b"\x7fELF program".to_vec()
                ),
            ]
        );
    }

    #[test]
    fn the_zip_is_sorted_and_fixed() {
        let bytes = zip(&FILES, 0).unwrap();
        assert_eq!(bytes, zip(&FILES, 0).unwrap());
        let mut archive = zip::ZipArchive::new(Cursor::new(&bytes)).unwrap();
        let mut entries = Vec::new();
        for i in 0..archive.len() {
            let mut file = archive.by_index(i).unwrap();
            let mut data = Vec::new();
            file.read_to_end(&mut data).unwrap();
            entries.push((file.name().unwrap().to_string(), file.unix_mode(), data));
        }
        assert_eq!(
            entries,
            [
                (
                    "LICENSE".to_owned(),
                    Some(0o100644),
                    b"Apache License".to_vec()
                ),
                (
                    "kubectl-reboot".to_owned(),
                    Some(0o100755),
                    b"\x7fELF program".to_vec()
                ),
            ]
        );
    }
}
