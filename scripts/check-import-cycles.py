#!/usr/bin/env python3
# check-import-cycles.py: fail when the source files of a workspace crate import each
# other in a circle.
#
# For every member of the workspace (Cargo.toml [workspace] members) it walks the library
# module tree (src/lib.rs and the `mod x;` files reachable from it), builds a graph
# "file A -> file B" whenever A's non-test code names a path into B's module
# (`use crate::..`, `super::..`, `self::..`, `child::..`, inline `crate::x::Y`), and runs
# Tarjan's SCC over it. Each strongly connected component of more than one file is a
# circle: it is printed with one cycle through it and the exit status is 1. With none it
# prints a one-line summary and exits 0. Comments (doc comments included), string and
# char literals and `#[cfg(test)]` items are ignored; binaries (src/main.rs, src/bin/)
# are not looked at.
#
# Usage (from anywhere; Python 3.11+, stdlib only):
#   python3 scripts/check-import-cycles.py                 # check every crate
#   python3 scripts/check-import-cycles.py --graph model   # print model's edges too
#   python3 scripts/check-import-cycles.py --root DIR      # another workspace
#   python3 scripts/check-import-cycles.py --explicit-only # outside `use`, only paths
#       starting with crate::/self::/super:: (not `child::f()`, `used_mod::sub::f()`)

from __future__ import annotations

import argparse
import os
import re
import sys
import tomllib
from dataclasses import dataclass, field

# ---------------------------------------------------------------------------------------
# Lexing: blank out comments, strings and char literals (same length, newlines kept, so
# offsets into the blanked text are offsets into the original).


def blank(src: str) -> str:
    out = list(src)
    n = len(src)
    i = 0

    def wipe(a: int, b: int) -> None:
        for k in range(a, min(b, n)):
            if out[k] != "\n":
                out[k] = " "

    def ident_char(c: str) -> bool:
        return c.isalnum() or c == "_"

    while i < n:
        c = src[i]
        if c == "/" and i + 1 < n and src[i + 1] == "/":
            j = src.find("\n", i)
            j = n if j < 0 else j
            wipe(i, j)
            i = j
        elif c == "/" and i + 1 < n and src[i + 1] == "*":
            depth, j = 1, i + 2
            while j < n and depth:
                if src.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif src.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            wipe(i, j)
            i = j
        elif c in "rbc" and (i == 0 or not ident_char(src[i - 1])):
            # Raw strings r"..", r#".."#, br"..", cr"..": no escapes inside.
            m = re.compile(r'(?:br|cr|r)(#*)"').match(src, i)
            if m:
                close = '"' + m.group(1)
                j = src.find(close, m.end())
                j = n if j < 0 else j + len(close)
                wipe(i, j)
                i = j
            elif src.startswith(('b"', 'c"'), i):
                i = skip_string(src, i + 1, wipe)
            elif src.startswith("b'", i):
                i = skip_char(src, i + 1, wipe)
            else:
                j = i
                while j < n and ident_char(src[j]):
                    j += 1
                i = j
        elif c == '"':
            i = skip_string(src, i, wipe)
        elif c == "'":
            i = skip_char(src, i, wipe)
        elif ident_char(c):
            j = i
            while j < n and ident_char(src[j]):
                j += 1
            i = j
        else:
            i += 1
    return "".join(out)


def skip_string(src: str, i: int, wipe) -> int:
    """src[i] is the opening quote; wipe to the closing one and return past it."""
    j, n = i + 1, len(src)
    while j < n:
        if src[j] == "\\":
            j += 2
        elif src[j] == '"':
            j += 1
            break
        else:
            j += 1
    wipe(i, j)
    return j


def skip_char(src: str, i: int, wipe) -> int:
    """src[i] is a quote: a char literal ('x', '\\n', '\\u{..}') or a lifetime/label."""
    n = len(src)
    if i + 1 < n and src[i + 1] == "\\":
        j = i + 2
        if j < n and src[j] == "u":
            k = src.find("}", j)
            j = k + 1 if k >= 0 else j + 1
        else:
            j += 1
            if j < n and src[j - 1] == "x":
                j += 2  # '\x7f'
        if j < n and src[j] == "'":
            j += 1
        wipe(i, j)
        return j
    if i + 2 < n and src[i + 2] == "'":
        wipe(i, i + 3)
        return i + 3
    return i + 1  # lifetime or label: leave it


# ---------------------------------------------------------------------------------------
# Dropping #[cfg(test)] items (on the blanked text, which has no strings/comments left).

ATTR_START = re.compile(r"#\s*!?\s*\[")
ITEM_KW = re.compile(
    r"\s*(?:pub\s*(?:\([^)]*\))?\s*)?(?:(?:unsafe|async|default|extern(?:\s+\"[^\"]*\")?)\s+)*"
    r"(fn|mod|impl|struct|enum|trait|type|const|static|use|union|macro_rules\s*!)\b"
)


def match_close(text: str, i: int) -> int:
    """text[i] is an opening bracket; return the index just past its partner."""
    pairs = {"(": ")", "[": "]", "{": "}"}
    stack = []
    n = len(text)
    while i < n:
        c = text[i]
        if c in pairs:
            stack.append(pairs[c])
        elif c in ")]}":
            if stack:
                stack.pop()
            if not stack:
                return i + 1
        i += 1
    return n


def cfg_is_test_only(pred: str) -> bool:
    pred = re.sub(r"\s+", "", pred)
    if pred == "test":
        return True
    if pred.startswith("all(") and pred.endswith(")"):
        depth, parts, cur = 0, [], ""
        for ch in pred[4:-1]:
            if ch == "(":
                depth += 1
            elif ch == ")":
                depth -= 1
            if ch == "," and depth == 0:
                parts.append(cur)
                cur = ""
            else:
                cur += ch
        parts.append(cur)
        return any(cfg_is_test_only(p) for p in parts)
    return False


def item_end(text: str, i: int) -> int:
    """Index just past the item / statement / field starting at i (after its attributes)."""
    n = len(text)
    kw = ITEM_KW.match(text, i)
    semi_only = kw is not None and kw.group(1) in ("const", "static", "use", "type")
    depth = 0
    j = i
    while j < n:
        c = text[j]
        if c in "([{":
            if c == "{" and depth == 0 and kw is not None and not semi_only:
                return match_close(text, j)
            depth += 1
        elif c in ")]}":
            if depth == 0:
                return j  # end of the enclosing block / list
            depth -= 1
            if depth == 0 and c == "}" and kw is None:
                # A braced expression statement (`#[cfg(test)] { .. }`) ends here unless
                # the expression goes on.
                k = j + 1
                while k < n and text[k].isspace():
                    k += 1
                if k >= n or text[k] not in ".?;,":
                    return j + 1
        elif c == ";" and depth == 0:
            return j + 1
        elif c == "," and depth == 0 and kw is None:
            return j + 1
        j += 1
    return n


def strip_cfg_test(text: str) -> str:
    out = list(text)
    i = 0
    n = len(text)
    while True:
        m = re.compile(r"#\s*\[\s*cfg\s*\(").search(text, i)
        if not m:
            break
        attr_open = text.index("[", m.start())
        attr_end = match_close(text, attr_open)
        pred_open = text.index("(", m.start())
        pred = text[pred_open + 1 : match_close(text, pred_open) - 1]
        if not cfg_is_test_only(pred):
            i = attr_end
            continue
        # Skip any further attributes, then the item itself.
        j = attr_end
        while True:
            while j < n and text[j].isspace():
                j += 1
            a = ATTR_START.match(text, j)
            if not a:
                break
            j = match_close(text, a.end() - 1)
        end = item_end(text, j)
        for k in range(m.start(), end):
            if out[k] != "\n":
                out[k] = " "
        i = end
    return "".join(out)


# ---------------------------------------------------------------------------------------
# The module tree.

ModPath = tuple[str, ...]
IDENT = r"(?:r#)?[A-Za-z_][A-Za-z0-9_]*"


@dataclass
class Scope:
    """A module defined in a file: the file's own module or an inline `mod x { }`."""

    path: ModPath
    file: str
    start: int  # region of the code (in the file's text) that belongs to it
    end: int
    children: set[str] = field(default_factory=set)
    aliases: dict[str, ModPath] = field(default_factory=dict)  # `use` names of modules
    globs: list[ModPath] = field(default_factory=list)  # `use m::*` of modules


@dataclass
class Crate:
    name: str
    dir: str
    files: dict[str, str] = field(default_factory=dict)  # rel path -> stripped code
    scopes: dict[ModPath, Scope] = field(default_factory=dict)
    file_scopes: dict[str, list[Scope]] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)


MOD_DECL = re.compile(
    r"(?<![A-Za-z0-9_])(?:pub\s*(?:\([^)]*\))?\s*)?mod\s+(" + IDENT + r")\s*([;{])"
)


def load(path: str) -> str:
    with open(path, encoding="utf-8") as f:
        return f.read()


def build_tree(crate: Crate) -> None:
    root = os.path.join(crate.dir, "src", "lib.rs")
    if not os.path.isfile(root):
        return
    # (file abs path, module path, directory where its `mod x;` children live)
    todo = [(root, (), os.path.dirname(root))]
    while todo:
        abspath, modpath, moddir = todo.pop()
        rel = os.path.relpath(abspath, crate.dir)
        if rel in crate.files:
            crate.problems.append(f"{rel} is included twice (as {'::'.join(modpath)})")
            continue
        original = load(abspath)
        code = strip_cfg_test(blank(original))
        crate.files[rel] = code
        top = Scope(modpath, rel, 0, len(code))
        crate.scopes[modpath] = top
        crate.file_scopes[rel] = [top]
        # Inline modules: find `mod x {` and match its brace.
        stack: list[tuple[Scope, str]] = [(top, moddir)]
        for m in MOD_DECL.finditer(code):
            while len(stack) > 1 and m.start() >= stack[-1][0].end:
                stack.pop()
            parent, pdir = stack[-1]
            name = m.group(1).removeprefix("r#")
            child_path = parent.path + (name,)
            parent.children.add(name)
            # A #[path = ".."] attribute right before the declaration?
            before = code[max(0, m.start() - 300) : m.start()].rstrip()
            explicit = None
            if before.endswith("]"):
                head = before.rfind("#")
                attr = before[head:] if head >= 0 else ""
                if re.match(r"#\s*\[\s*path\s*=", attr):
                    off = max(0, m.start() - 300) + head
                    lit = re.search(r'"([^"]*)"', original[off : m.start()])
                    if lit:
                        explicit = lit.group(1)
            if m.group(2) == "{":
                brace = m.end() - 1
                sc = Scope(child_path, rel, brace, match_close(code, brace))
                crate.scopes[child_path] = sc
                crate.file_scopes[rel].append(sc)
                cdir = os.path.join(pdir, explicit) if explicit else os.path.join(pdir, name)
                stack.append((sc, cdir))
            else:
                if explicit:
                    # Relative to the file's directory, or inside an inline module to its dir.
                    base_dir = pdir if len(stack) > 1 else os.path.dirname(abspath)
                    cand = [os.path.normpath(os.path.join(base_dir, explicit))]
                else:
                    cand = [os.path.join(pdir, name + ".rs"), os.path.join(pdir, name, "mod.rs")]
                found = next((c for c in cand if os.path.isfile(c)), None)
                if found is None:
                    crate.problems.append(
                        f"{rel}: `mod {name};` has no file ({', '.join(os.path.relpath(c, crate.dir) for c in cand)})"
                    )
                    continue
                # A mod.rs (or a #[path] file) keeps its children beside it; foo.rs in foo/.
                if explicit or os.path.basename(found) == "mod.rs":
                    cdir = os.path.dirname(found)
                else:
                    cdir = os.path.join(os.path.dirname(found), name)
                todo.append((found, child_path, cdir))


# ---------------------------------------------------------------------------------------
# Paths named by the code.

USE_STMT = re.compile(r"(?<![A-Za-z0-9_:])use\s+")
INLINE_PATH = re.compile(
    r"(?<![A-Za-z0-9_:$.'])(\$?" + IDENT + r")((?:\s*::\s*(?:" + IDENT + r"))+)"
)


def parse_use_tree(s: str) -> list[tuple[list[str], str | None]]:
    """`crate::a::{b, c::{self, D as E}, *}` -> [(segments, alias)], `*` kept as a segment."""
    toks = re.findall(r"::|\{|\}|,|\*|\$?" + IDENT, s)
    pos = 0

    def tree(prefix: list[str]) -> list[tuple[list[str], str | None]]:
        nonlocal pos
        segs = list(prefix)
        while pos < len(toks):
            t = toks[pos]
            if t == "{":
                pos += 1
                res = []
                while pos < len(toks) and toks[pos] != "}":
                    if toks[pos] == ",":
                        pos += 1
                        continue
                    res.extend(tree(segs))
                pos += 1  # the "}"
                return res
            if t == "::":
                pos += 1
                continue
            if t in (",", "}"):
                return [(segs, None)]
            if t == "as":
                pos += 1
                alias = toks[pos] if pos < len(toks) else None
                pos += 1
                return [(segs, alias)]
            segs.append(t.removeprefix("r#"))
            pos += 1
        return [(segs, None)]

    out = []
    while pos < len(toks):
        if toks[pos] == ",":
            pos += 1
            continue
        out.extend(tree([]))
    return out


def scope_at(crate: Crate, rel: str, pos: int) -> Scope:
    best = crate.file_scopes[rel][0]
    for sc in crate.file_scopes[rel][1:]:
        if sc.start <= pos < sc.end and len(sc.path) > len(best.path):
            best = sc
    return best


def lookup_first(crate: Crate, scope: Scope, seg: str) -> ModPath | None:
    """The module the first segment of a relative path names in `scope`, if any."""
    if seg in ("crate", "$crate"):
        return ()
    if seg == "self":
        return scope.path
    if seg == "super":
        return scope.path[:-1] if scope.path else None
    if seg in scope.children:
        return scope.path + (seg,)
    if seg in scope.aliases:
        return scope.aliases[seg]
    for g in scope.globs:
        gs = crate.scopes.get(g)
        if gs is not None and seg in gs.children:
            return g + (seg,)
    return None


def resolve(crate: Crate, scope: Scope, segs: list[str]) -> tuple[ModPath, bool] | None:
    """Deepest module the path names, and whether every segment was a module."""
    if not segs:
        return None
    cur = lookup_first(crate, scope, segs[0])
    if cur is None:
        return None
    i = 1
    while i < len(segs) and segs[i] == "super" and segs[i - 1] == "super":
        if not cur:
            return None
        cur = cur[:-1]
        i += 1
    all_mods = True
    for seg in segs[i:]:
        if seg == "self":
            continue
        sc = crate.scopes.get(cur)
        if sc is not None and seg in sc.children:
            cur = cur + (seg,)
        else:
            all_mods = False
            break
    return cur, all_mods


def collect_uses(crate: Crate) -> dict[str, list[tuple[int, list[str], str | None]]]:
    """Each file's `use` leaves, and bind module aliases / globs into their scopes."""
    uses: dict[str, list[tuple[int, list[str], str | None]]] = {}
    for rel, code in crate.files.items():
        lst = []
        for m in USE_STMT.finditer(code):
            end = code.find(";", m.end())
            if end < 0:
                continue
            body = code[m.end() : end]
            if body.lstrip().startswith("::"):
                continue  # ::extern_crate::..
            for segs, alias in parse_use_tree(body):
                lst.append((m.start(), segs, alias))
        uses[rel] = lst
    # Binding is iterated: `use crate::a; use a::b;` needs `a` bound before `b`.
    for _ in range(4):
        changed = False
        for rel, lst in uses.items():
            for pos, segs, alias in lst:
                scope = scope_at(crate, rel, pos)
                if segs and segs[-1] == "*":
                    r = resolve(crate, scope, segs[:-1])
                    if r and r[1] and r[0] not in scope.globs:
                        scope.globs.append(r[0])
                        changed = True
                    continue
                r = resolve(crate, scope, segs)
                if r and r[1]:
                    name = alias or (segs[-2] if segs[-1] == "self" and len(segs) > 1 else segs[-1])
                    if name != "_" and name not in ("crate", "self", "super") and scope.aliases.get(name) != r[0]:
                        scope.aliases[name] = r[0]
                        changed = True
        if not changed:
            break
    return uses


def build_edges(crate: Crate, explicit_only: bool = False) -> dict[str, dict[str, int]]:
    """file -> {file it names: line of the first such reference}"""
    uses = collect_uses(crate)
    edges: dict[str, dict[str, int]] = {rel: {} for rel in crate.files}

    def add(rel: str, pos: int, target: ModPath) -> None:
        tfile = crate.scopes[target].file
        if tfile != rel and tfile not in edges[rel]:
            edges[rel][tfile] = crate.files[rel].count("\n", 0, pos) + 1

    for rel, code in crate.files.items():
        use_spans = []
        for m in USE_STMT.finditer(code):
            end = code.find(";", m.end())
            use_spans.append((m.start(), end if end >= 0 else len(code)))
        for pos, segs, _alias in uses[rel]:
            if segs and segs[-1] == "*":
                segs = segs[:-1]
            r = resolve(crate, scope_at(crate, rel, pos), segs)
            if r:
                add(rel, pos, r[0])
        for m in INLINE_PATH.finditer(code):
            if any(a <= m.start() < b for a, b in use_spans):
                continue
            segs = [m.group(1).removeprefix("r#")] + [
                s.strip().removeprefix("r#") for s in m.group(2).split("::") if s.strip()
            ]
            if explicit_only and segs[0] not in ("crate", "$crate", "self", "super"):
                continue
            r = resolve(crate, scope_at(crate, rel, m.start()), segs)
            if r:
                add(rel, m.start(), r[0])
    return edges


# ---------------------------------------------------------------------------------------
# Tarjan's strongly connected components (iterative).


def tarjan(nodes: list[str], edges: dict[str, dict[str, int]]) -> list[list[str]]:
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    sccs: list[list[str]] = []
    counter = 0
    for root in nodes:
        if root in index:
            continue
        work = [(root, iter(sorted(edges.get(root, ()))))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            v, it = work[-1]
            advanced = False
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(edges.get(w, ())))))
                    advanced = True
                    break
                if w in on_stack:
                    low[v] = min(low[v], index[w])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                sccs.append(sorted(comp))
    return sccs


def cycle_through(comp: list[str], edges: dict[str, dict[str, int]]) -> list[str]:
    """A shortest cycle through the component's first file, staying inside it."""
    members = set(comp)
    start = comp[0]
    prev: dict[str, str] = {}
    frontier = [start]
    seen = {start}
    while frontier:
        nxt = []
        for v in frontier:
            for w in sorted(edges[v]):
                if w not in members:
                    continue
                if w == start:
                    path = [v]
                    while path[-1] != start:
                        path.append(prev[path[-1]])
                    return list(reversed(path)) + [start]
                if w not in seen:
                    seen.add(w)
                    prev[w] = v
                    nxt.append(w)
        frontier = nxt
    return [start]


# ---------------------------------------------------------------------------------------


def main() -> int:
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__ or "check for import cycles")
    ap.add_argument("--root", default=os.path.dirname(here), help="workspace root")
    ap.add_argument("--graph", metavar="CRATE", action="append", default=[],
                    help="print CRATE's edges (directory name as in members)")
    ap.add_argument("--explicit-only", action="store_true",
                    help="outside `use`, count only paths starting with crate/self/super "
                         "(not `child::f()` or `alias::sub::f()` through a `use`d module)")
    args = ap.parse_args()

    with open(os.path.join(args.root, "Cargo.toml"), "rb") as f:
        members = tomllib.load(f).get("workspace", {}).get("members", [])
    if not members:
        print("check-import-cycles: no [workspace] members in Cargo.toml", file=sys.stderr)
        return 2

    known = {m for m in members}
    for g in args.graph:
        if g not in known:
            print(f"check-import-cycles: --graph {g}: not a member ({', '.join(members)})",
                  file=sys.stderr)
            return 2

    n_files = n_edges = 0
    circles = []
    problems = []
    for member in members:
        crate = Crate(member, os.path.join(args.root, member))
        build_tree(crate)
        problems.extend(f"{member}: {p}" for p in crate.problems)
        edges = build_edges(crate, args.explicit_only)
        n_files += len(crate.files)
        n_edges += sum(len(t) for t in edges.values())
        if member in args.graph:
            print(f"# {member}: {len(crate.files)} files")
            for a in sorted(edges):
                for b in sorted(edges[a]):
                    print(f"{a} -> {b}    (line {edges[a][b]})")
        for comp in tarjan(sorted(crate.files), edges):
            if len(comp) > 1:
                cyc = cycle_through(comp, edges)
                circles.append(
                    f"{member}: circle of {len(comp)} files: {' -> '.join(cyc)}"
                    f"  [files: {', '.join(comp)}]"
                )

    for p in problems:
        print(f"warning: {p}", file=sys.stderr)
    if circles:
        for c in circles:
            print(c)
        print(f"check-import-cycles: {len(circles)} circle(s) in {len(members)} crates "
              f"({n_files} files, {n_edges} edges)")
        return 1
    print(f"check-import-cycles: no circles: {len(members)} crates, {n_files} files, "
          f"{n_edges} edges")
    return 0


if __name__ == "__main__":
    sys.exit(main())
