#!/usr/bin/env python3
"""Lists the import cycles between the modules of each crate of the workspace.

A module is a source file (src/a/b.rs or src/a/b/mod.rs is `a::b`); an edge a -> b is a
`crate::`, `super::` or `self::` path in a's code (not its `#[cfg(test)]` tail, nor files
named *_tests.rs, which only tests compile) that names b or something in b. A parent's
`mod child;` lines are not edges. Prints each cycle (a strongly connected component of more
than one module) and exits 1 if there is any outside test code (modules declared under
`#[cfg(test)]`, which it lists but does not fail on), so that it can guard a Makefile target.

Usage: hack/module-cycles.py [CRATE_DIR...]   (default: every crate with a src/ folder)
"""

import re
import sys
from pathlib import Path

PATH = re.compile(r"\b(crate|super|self)((?:::\w+)+)")
TEST_MOD = re.compile(r"#\[cfg\(test\)\]\s*(?:#\[[^\]]*\]\s*)*(?:pub(?:\([^)]*\))?\s+)?mod\s+(\w+)\s*;")
USE = re.compile(r"^\s*(?:pub(?:\([^)]*\))?\s+)?use\s+(.*?);", re.S | re.M)


def module_of(src: Path, file: Path) -> tuple:
    parts = list(file.relative_to(src).with_suffix("").parts)
    if parts[-1] in ("mod", "lib", "main"):
        parts.pop()
    return tuple(parts)


def code_of(text: str) -> str:
    """The text without comments and without the tail from `#[cfg(test)]` + `mod`."""
    text = re.sub(r"//[^\n]*", "", text)
    tail = re.search(r"#\[cfg\(test\)\]\s*(?:#\[[^\]]*\]\s*)*mod\s+\w+\s*\{", text)
    return text[: tail.start()] if tail else text


def expand(tree: str) -> list:
    """`crate::{a::X, b::{Y, Z}}` -> ["crate::a::X", "crate::b::Y", "crate::b::Z"]."""
    tree = re.sub(r"\s+", "", tree)
    brace = tree.find("{")
    if brace < 0:
        return [tree]
    prefix, depth, start, items = tree[:brace], 0, brace + 1, []
    for i in range(brace, len(tree)):
        if tree[i] == "{":
            depth += 1
        elif tree[i] == "}":
            depth -= 1
            if depth == 0:
                items.append(tree[start:i])
                break
        elif tree[i] == "," and depth == 1:
            items.append(tree[start:i])
            start = i + 1
    return [p for item in items if item for p in expand(prefix + item)]


def targets(code: str, here: tuple, modules: set) -> set:
    paths = [p for m in USE.finditer(code) for p in expand(m.group(1))]
    paths += [m.group(0) for m in PATH.finditer(USE.sub("", code))]
    found = set()
    for path in paths:
        segs = path.split("::")
        if segs[0] == "crate":
            base = ()
        elif segs[0] in ("super", "self"):
            base = here
            while segs and segs[0] in ("super", "self"):
                base = base[:-1] if segs.pop(0) == "super" else base
            segs.insert(0, "")
        else:
            continue
        segs = [s for s in segs[1:] if s and s not in ("*", "self")]
        # The longest prefix that is a module: `crate::a::X` names module a.
        for n in range(len(segs), 0, -1):
            cand = base + tuple(segs[:n])
            if cand in modules:
                found.add(cand)
                break
    return found


def test_only(modules: dict) -> set:
    """The modules a parent declares under `#[cfg(test)]` (`mod model;`), and theirs."""
    declared = set()
    for mod, file in modules.items():
        for child in TEST_MOD.findall(file.read_text()):
            declared.add(mod + (child,))
    return {m for m in modules if any(m[: len(d)] == d for d in declared)}


def cycles(src: Path) -> list:
    """Each cycle, with whether only tests compile its modules."""
    files = [f for f in src.rglob("*.rs") if not f.name.endswith("_tests.rs")]
    if (src / "lib.rs").exists():
        # main.rs is then another crate, which uses this one by its name.
        files = [f for f in files if f != src / "main.rs"]
    modules = {module_of(src, f): f for f in files}
    tests = test_only(modules)
    graph = {}
    for mod, file in modules.items():
        code = code_of(file.read_text())
        # A module naming its own ancestors (super::) is not a cycle of its own making.
        graph[mod] = {t for t in targets(code, mod, set(modules)) if t != mod and t}
    return [(sorted(c), set(c) <= tests) for c in scc(graph) if len(c) > 1]


def scc(graph: dict) -> list:
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            out.append(comp)

    sys.setrecursionlimit(10000)
    for v in graph:
        if v not in index:
            visit(v)
    return out


def main() -> int:
    root = Path(__file__).resolve().parent.parent
    crates = [Path(a) for a in sys.argv[1:]] or sorted(
        p.parent.parent for p in root.rglob("src/lib.rs") if "target" not in p.parts
    )
    crates += [] if sys.argv[1:] else sorted(
        p.parent.parent
        for p in root.rglob("src/main.rs")
        if "target" not in p.parts and not (p.parent / "lib.rs").exists()
    )
    if not crates or not all((c / "src").is_dir() for c in crates):
        # A check that looked at nothing must not pass.
        print(f"no crate with a src/ folder among {[str(c) for c in crates]}")
        return 1
    found, in_tests = 0, 0
    for crate in crates:
        for cycle, test_code in cycles(crate / "src"):
            found += not test_code
            in_tests += test_code
            names = ", ".join("::".join(m) for m in cycle)
            where = " (test code)" if test_code else ""
            print(f"{crate.relative_to(root) if crate.is_absolute() else crate}: {names}{where}")
    print(f"{found} cycle(s), and {in_tests} in test code, in {len(crates)} crate(s)")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
