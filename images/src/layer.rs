//! A layer: the tar of an image's files, the same bytes for the same files wherever and
//! whenever it is built (sorted entries, mtime 0, numeric owners only, no user or group names).

use crate::Error;
use std::collections::BTreeMap;

/// What a path in the layer is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Content {
    File(Vec<u8>),
    Dir,
    Symlink(String),
}

/// One path of an image's file system.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// Relative to the image's root: `etc/passwd`, not `/etc/passwd`.
    pub path: String,
    pub mode: u32,
    pub uid: u64,
    pub gid: u64,
    pub content: Content,
}

impl Entry {
    /// A file owned by root; a leading `/` is dropped.
    pub fn file(path: &str, mode: u32, data: Vec<u8>) -> Entry {
        Entry::new(path, mode, Content::File(data))
    }

    pub fn dir(path: &str, mode: u32) -> Entry {
        Entry::new(path, mode, Content::Dir)
    }

    pub fn symlink(path: &str, target: &str) -> Entry {
        Entry::new(path, 0o777, Content::Symlink(target.to_owned()))
    }

    pub fn owned_by(self, uid: u64, gid: u64) -> Entry {
        Entry { uid, gid, ..self }
    }

    fn new(path: &str, mode: u32, content: Content) -> Entry {
        Entry {
            path: path.trim_start_matches('/').to_owned(),
            mode,
            uid: 0,
            gid: 0,
            content,
        }
    }
}

/// The layer's tar. Missing parent directories are added (root, 0755), so that every runtime
/// creates them alike rather than with its own defaults.
pub fn tar(entries: &[Entry]) -> Result<Vec<u8>, Error> {
    let sorted = with_parents(entries)?;
    let mut builder = tar::Builder::new(Vec::new());
    for entry in sorted.values() {
        append(&mut builder, entry).map_err(|source| Error::Tar {
            path: entry.path.clone(),
            source,
        })?;
    }
    builder.into_inner().map_err(|source| Error::Tar {
        path: "the end of the archive".to_owned(),
        source,
    })
}

/// By path: a parent sorts before its children because it is their prefix.
fn with_parents(entries: &[Entry]) -> Result<BTreeMap<String, Entry>, Error> {
    let mut sorted = BTreeMap::new();
    for entry in entries {
        check_path(&entry.path)?;
        if sorted.insert(entry.path.clone(), entry.clone()).is_some() {
            return Err(Error::Duplicate(entry.path.clone()));
        }
    }
    for entry in entries {
        let mut parent = entry.path.as_str();
        while let Some((dir, _)) = parent.rsplit_once('/') {
            sorted
                .entry(dir.to_owned())
                .or_insert_with(|| Entry::dir(dir, 0o755));
            parent = dir;
        }
    }
    Ok(sorted)
}

fn check_path(path: &str) -> Result<(), Error> {
    let bad = path.is_empty()
        || path.starts_with('/')
        || path.ends_with('/')
        || path
            .split('/')
            .any(|c| c.is_empty() || c == "." || c == "..");
    if bad {
        Err(Error::BadPath(path.to_owned()))
    } else {
        Ok(())
    }
}

fn append(builder: &mut tar::Builder<Vec<u8>>, entry: &Entry) -> std::io::Result<()> {
    let mut header = tar::Header::new_ustar();
    header.set_mode(entry.mode);
    header.set_uid(entry.uid);
    header.set_gid(entry.gid);
    header.set_mtime(0);
    match &entry.content {
        Content::File(data) => {
            header.set_entry_type(tar::EntryType::Regular);
            header.set_size(data.len() as u64);
            builder.append_data(&mut header, &entry.path, data.as_slice())
        }
        Content::Dir => {
            header.set_entry_type(tar::EntryType::Directory);
            header.set_size(0);
            builder.append_data(&mut header, &entry.path, std::io::empty())
        }
        Content::Symlink(target) => {
            header.set_entry_type(tar::EntryType::Symlink);
            header.set_size(0);
            builder.append_link(&mut header, &entry.path, target)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// (path, mode, uid, gid, mtime, kind) of every entry, in the archive's order.
    fn listing(tar_bytes: &[u8]) -> Vec<(String, u32, u64, u64, u64, tar::EntryType)> {
        let mut archive = tar::Archive::new(tar_bytes);
        archive
            .entries()
            .expect("a tar")
            .map(|e| {
                let e = e.expect("an entry");
                let h = e.header();
                (
                    e.path().expect("a path").display().to_string(),
                    h.mode().expect("a mode"),
                    h.uid().expect("a uid"),
                    h.gid().expect("a gid"),
                    h.mtime().expect("an mtime"),
                    h.entry_type(),
                )
            })
            .collect()
    }

    fn files() -> Vec<Entry> {
        vec![
            Entry::file("/zeta", 0o755, b"z".to_vec()),
            Entry::file("etc/passwd", 0o644, b"root:x:0:0::/:\n".to_vec()),
            Entry::dir("home/nonroot", 0o700).owned_by(65532, 65532),
            Entry::symlink("bin/sh", "busybox"),
        ]
    }

    #[test]
    fn the_same_files_give_the_same_bytes_in_any_order() {
        let mut reversed = files();
        reversed.reverse();
        assert_eq!(tar(&files()).unwrap(), tar(&reversed).unwrap());
    }

    #[test]
    fn entries_are_sorted_with_parents_first_mtime_zero_and_modes_kept() {
        use tar::EntryType::{Directory, Regular, Symlink};
        let got = listing(&tar(&files()).unwrap());
        let want = [
            ("bin", 0o755, 0, 0, Directory),
            ("bin/sh", 0o777, 0, 0, Symlink),
            ("etc", 0o755, 0, 0, Directory),
            ("etc/passwd", 0o644, 0, 0, Regular),
            ("home", 0o755, 0, 0, Directory),
            ("home/nonroot", 0o700, 65532, 65532, Directory),
            ("zeta", 0o755, 0, 0, Regular),
        ];
        let want: Vec<_> = want
            .iter()
            .map(|(p, m, u, g, t)| ((*p).to_owned(), *m, *u, *g, 0, *t))
            .collect();
        assert_eq!(got, want);
    }

    #[test]
    fn no_user_or_group_names_are_recorded() {
        let bytes = tar(&files()).unwrap();
        let mut archive = tar::Archive::new(bytes.as_slice());
        for entry in archive.entries().unwrap() {
            let entry = entry.unwrap();
            assert_eq!(entry.header().username().unwrap(), Some(""));
            assert_eq!(entry.header().groupname().unwrap(), Some(""));
        }
    }

    #[test]
    fn bad_and_duplicate_paths_are_refused() {
        for path in ["", "a/../b", "a//b", "./a", "a/"] {
            let err = tar(&[Entry::file(path, 0o644, vec![])]).unwrap_err();
            assert!(matches!(err, Error::BadPath(_)), "{path:?}: {err}");
        }
        let twice = [Entry::file("a", 0o644, vec![]), Entry::dir("a", 0o755)];
        assert!(matches!(tar(&twice).unwrap_err(), Error::Duplicate(_)));
    }
}
