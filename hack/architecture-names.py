#!/usr/bin/env python3
"""Checks that the code map and the comments name only files and folders that exist.

ARCHITECTURE.md: every name in backquotes that looks like a path (it ends in `.rs`, `.md`,
`.toml` or `/`, or starts with a folder of the repository's root, as `vm/image` does) must
exist: a path with a `/` from the repository root or, failing that, as the end of some file's
or folder's path (`cache/nodes.rs`, `decide/`); a bare file name (`run.rs`) as some file's
name.

The comments of the Rust sources, the Makefile, the shell scripts and the manifests: the same
for each name in backquotes that starts with a folder of the root or ends in `.rs`, `.md` or
`.toml`, and for every
page of the docs they point at (`docs/src/concepts.md`) with or without backquotes. A name
that git ignores (what a build makes, such as `testenv/bin/`) and an absolute path (the
guest's or the container's own) are not the repository's and pass.

Prints each name that does not exist and exits 1, so that a file moved or a page renamed
without what points at it is caught by `make lint`.

Usage: hack/architecture-names.py [FILE]   (default: ARCHITECTURE.md and the comments)
"""

import re
import subprocess
import sys
from pathlib import Path

NAME = re.compile(r"`([\w./-]+)`")
DOCS_PAGE = re.compile(r"\b(docs/src/[\w./-]*\.md)\b")
ROOT = Path(__file__).resolve().parent.parent


def tracked() -> list:
    return subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT, capture_output=True, text=True, check=True,
    ).stdout.split()


class Tree:
    def __init__(self, files: list):
        folders = {p + "/" for f in files for p in [str(q) for q in Path(f).parents] if p != "."}
        self.known = set(files) | folders | {f.rstrip("/") for f in folders}
        self.top = {f.split("/")[0] for f in files if "/" in f}

    def has(self, name: str) -> bool:
        bare = name.rstrip("/")
        if name in self.known or bare in self.known:
            return True
        return any(k == bare or k.endswith("/" + bare) for k in self.known)


def ignored(names: set) -> set:
    """The names git ignores: what builds make."""
    if not names:
        return set()
    out = subprocess.run(
        ["git", "check-ignore", "--no-index", "--stdin"], cwd=ROOT, input="\n".join(names),
        capture_output=True, text=True,
    ).stdout.split()
    return set(out)


def comments(path: Path) -> str:
    marker = "//" if path.suffix == ".rs" else "#"
    lines = path.read_text(errors="replace").splitlines()
    return "\n".join(line.split(marker, 1)[1] for line in lines if marker in line)


def check_page(page: Path, tree: Tree) -> tuple:
    names = sorted(set(NAME.findall(page.read_text())))
    names = [n for n in names if n.endswith((".rs", ".md", ".toml", "/")) or n.split("/")[0] in tree.top]
    missing = [n for n in names if not tree.has(n)]
    return [f"{page.name}: `{n}` names no file or folder of the repository" for n in missing], len(names)


def check_comments(files: list, tree: Tree) -> tuple:
    sources = [
        f for f in files
        if f.endswith((".rs", ".sh")) or f == "Makefile" or (f.startswith("manifests/") and f.endswith(".yaml"))
    ]
    found = []
    for source in sources:
        text = comments(ROOT / source)
        names = {n for n in NAME.findall(text) if n.split("/")[0] in tree.top or n.endswith((".rs", ".md", ".toml"))}
        names |= set(DOCS_PAGE.findall(text))
        names = {n for n in names if not n.startswith(("/", "~", "."))}
        found += [(source, n) for n in sorted(names) if not tree.has(n)]
    generated = ignored({n for _, n in found})
    missing = [(s, n) for s, n in found if n not in generated and n.rstrip("/") not in generated]
    return [f"{s}: `{n}` names no file or folder of the repository" for s, n in missing], len(sources)


def main() -> int:
    tree = Tree(tracked())
    if sys.argv[1:]:
        problems, checked = check_page(Path(sys.argv[1]), tree)
        sources = 0
    else:
        problems, checked = check_page(ROOT / "ARCHITECTURE.md", tree)
        more, sources = check_comments(tracked(), tree)
        problems += more
    for problem in problems:
        print(problem)
    print(f"{checked} names of the code map and the comments of {sources} files checked, {len(problems)} missing")
    # A page in which no name was found was not checked: that must not pass.
    return 1 if problems or not checked else 0


if __name__ == "__main__":
    sys.exit(main())
