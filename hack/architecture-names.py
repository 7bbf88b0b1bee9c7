#!/usr/bin/env python3
"""Checks that ARCHITECTURE.md names only files and folders that exist.

Every name in backquotes that looks like a path (it ends in `.rs`, `.md`, `.toml` or `/`, or
starts with a folder of the repository's root, as `vm/image` does) must exist: a path with a `/` from the repository root or, failing that, as the end of
some file's or folder's path (`cache/nodes.rs`, `decide/`); a bare file name (`run.rs`) as
some file's name. Prints each name that does not and exits 1, so that a file moved without
this page is caught by `make lint`.

Usage: hack/architecture-names.py [FILE]   (default: ARCHITECTURE.md)
"""

import re
import subprocess
import sys
from pathlib import Path

NAME = re.compile(r"`([\w./-]+)`")


def looks_like_path(name: str, top: set) -> bool:
    return name.endswith((".rs", ".md", ".toml", "/")) or name.split("/")[0] in top


def main() -> int:
    root = Path(__file__).resolve().parent.parent
    page = Path(sys.argv[1]) if sys.argv[1:] else root / "ARCHITECTURE.md"
    files = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
        cwd=root, capture_output=True, text=True, check=True,
    ).stdout.split()
    folders = {str(Path(f).parent) + "/" for f in files}
    folders |= {p + "/" for f in files for p in [str(q) for q in Path(f).parents] if p != "."}
    known = set(files) | folders | {f.rstrip("/") for f in folders}
    top = {f.split("/")[0] for f in files if "/" in f}
    missing, checked = [], 0
    for name in sorted(set(NAME.findall(page.read_text()))):
        if not looks_like_path(name, top):
            continue
        checked += 1
        bare = name.rstrip("/")
        if name in known or (name.endswith("/") and bare + "/" in known):
            continue
        if any(k == name or k.endswith("/" + name) for k in known):
            continue
        missing.append(name)
    for name in missing:
        print(f"{page.name}: `{name}` names no file or folder of the repository")
    print(f"{page.name}: {checked} file and folder names, {len(missing)} missing")
    # A page in which no name was found was not checked: that must not pass.
    return 1 if missing or not checked else 0


if __name__ == "__main__":
    sys.exit(main())
