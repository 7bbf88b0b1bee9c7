//! target/images/images.txt, which `make images` writes: a line per image,
//! `name<TAB>archive<TAB>digest`. The digest of our two images is what the chart pins: the
//! manifest's or, for a multi-arch image, the index's (the line is the same).

use crate::Error;
use std::path::Path;

/// The images the chart deploys: the key of their values (`<key>.image.digest`) and their
/// repository under `image.registry`.
pub const IMAGES: [(&str, &str); 2] = [
    ("controller", "reboot-controller"),
    ("agent", "reboot-agent"),
];

/// One of our images as images.txt names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pinned {
    /// `controller` or `agent`.
    pub key: &'static str,
    /// `<registry>/<repository>:<version>`.
    pub name: String,
    /// `sha256:<64 hex digits>`.
    pub digest: String,
}

impl Pinned {
    /// How the chart renders it: `<registry>/<repository>@<digest>`.
    pub fn reference(&self) -> String {
        let repository = self.name.rsplit_once(':').map_or(&*self.name, |(r, _)| r);
        format!("{repository}@{}", self.digest)
    }
}

/// (name, digest) of every line; `path` only names the file in errors.
fn lines<'a>(text: &'a str, path: &Path) -> Result<Vec<(&'a str, &'a str)>, Error> {
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        match line.split('\t').collect::<Vec<_>>()[..] {
            [name, _archive, digest] if !name.is_empty() => out.push((name, digest)),
            _ => {
                return Err(Error::MalformedLine {
                    path: path.to_owned(),
                    line: n + 1,
                    text: line.to_owned(),
                });
            }
        }
    }
    Ok(out)
}

fn is_digest(digest: &str) -> bool {
    digest.strip_prefix("sha256:").is_some_and(|hex| {
        hex.len() == 64 && hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
    })
}

/// Our two images at `<registry>/<repository>:<version>`, with their digests; an error that
/// says what images.txt has instead when one is missing or of another version or registry.
pub fn pinned(
    text: &str,
    path: &Path,
    registry: &str,
    version: &str,
) -> Result<Vec<Pinned>, Error> {
    let lines = lines(text, path)?;
    let registry = registry.trim_end_matches('/');
    let problem = |problem: String| Error::Image {
        path: path.to_owned(),
        problem,
    };
    let mut out = Vec::new();
    for (key, repository) in IMAGES {
        let wanted = format!("{registry}/{repository}:{version}");
        if let Some((name, digest)) = lines.iter().find(|(name, _)| *name == wanted) {
            if !is_digest(digest) {
                return Err(problem(format!(
                    "{name} has the digest {digest:?}, not `sha256:` and 64 hex digits"
                )));
            }
            out.push(Pinned {
                key,
                name: wanted,
                digest: (*digest).to_owned(),
            });
            continue;
        }
        // Named otherwise: another tag, or another registry.
        let others = lines
            .iter()
            .map(|(name, _)| *name)
            .filter(|name| {
                let untagged = name.rsplit_once(':').map_or(*name, |(r, _)| r);
                untagged.rsplit('/').next() == Some(repository)
            })
            .collect::<Vec<_>>();
        return Err(problem(if others.is_empty() {
            format!("it has no {repository} image (wanted {wanted})")
        } else if others
            .iter()
            .all(|n| n.starts_with(&format!("{registry}/{repository}:")))
        {
            format!(
                "its {repository} is tagged {}, not the workspace's version: wanted {wanted}",
                others.join(", ")
            )
        } else {
            format!(
                "its {repository} is {}, not {wanted}; the registry of `make images` \
                 (OCI_IMAGES_REGISTRY, --registry) must be the one packaged",
                others.join(", ")
            )
        }));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: &str = "sha256:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
    const C: &str = "sha256:cccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccc";

    fn text(lines: &[(&str, &str)]) -> String {
        lines
            .iter()
            .map(|(name, digest)| format!("{name}\t/x/{name}.oci.tar\t{digest}\n"))
            .collect()
    }

    fn err(text: &str) -> String {
        pinned(text, Path::new("images.txt"), "r.example/x/", "1.2.3")
            .expect_err("refused")
            .to_string()
    }

    #[test]
    fn both_images_are_pinned_by_their_digests() {
        let t = text(&[
            ("r.example/x/reboot-agent:1.2.3", A),
            ("registry.k8s.io/pause:3.10", A),
            ("r.example/x/reboot-controller:1.2.3", C),
        ]);
        let got = pinned(&t, Path::new("images.txt"), "r.example/x/", "1.2.3").expect("pinned");
        let refs = got.iter().map(Pinned::reference).collect::<Vec<_>>();
        assert_eq!(
            refs,
            [
                format!("r.example/x/reboot-controller@{C}"),
                format!("r.example/x/reboot-agent@{A}")
            ]
        );
        assert_eq!((got[0].key, got[1].key), ("controller", "agent"));
    }

    #[test]
    fn a_missing_image_another_tag_or_registry_and_a_bad_digest_are_refused() {
        let agent = ("r.example/x/reboot-agent:1.2.3", A);
        let e = err(&text(&[agent]));
        assert!(
            e.contains("no reboot-controller image") && e.contains("make images"),
            "{e}"
        );
        let e = err(&text(&[agent, ("r.example/x/reboot-controller:1.2.2", C)]));
        assert!(
            e.contains("tagged r.example/x/reboot-controller:1.2.2"),
            "{e}"
        );
        let e = err(&text(&[agent, ("ghcr.io/y/reboot-controller:1.2.3", C)]));
        assert!(e.contains("OCI_IMAGES_REGISTRY"), "{e}");
        let e = err(&text(&[
            agent,
            ("r.example/x/reboot-controller:1.2.3", "sha256:C"),
        ]));
        assert!(e.contains("64 hex digits"), "{e}");
        let e = err("r.example/x/reboot-agent:1.2.3 sha256:a\n");
        assert!(e.contains("line 1 is not"), "{e}");
    }
}
