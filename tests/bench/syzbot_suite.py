#!/usr/bin/python3
# SPDX-License-Identifier: GPL-2.0
"""ci/syzbot-hangs.toml, the regression suite a distro's CI runs, written
from what the benchmark measured (tests/bench/syzbot_repros.py's states, or
the rows repro/README.md keeps of them, the newest word on a kernel counting)
and the fix hunts over Debian's versions (`kstall bisect debian`'s
bisect.json): every bug kstall reproduced with syzbot's title on a Debian
kernel, fetched by its id as its cell runs.

Each kernel's expectation for a bug, from its tries there:
  vulnerable      syzbot's title in at least half of them (1 of 1, 2 of 3);
  not_reproduced  every try ran clean, on a kernel at or after the first
                  version of its release line (flavour included) a fix hunt
                  found without the hang (fixed_in);
  any             the rest: a clean run of a program with no P(miss) says
                  the hang did not come, not that it cannot, and a hang in
                  1 of 3 would make a CI red one time in two.

  tests/bench/syzbot_suite.py --from STATE|DOC CORPUS [--from ...] [--bisections ROOT]... [--keep FILE]
                              [--out FILE]

  e.g. --from repro/README.md CORPUS --from STATE CORPUS --keep ci/syzbot-hangs.toml --out ci/syzbot-hangs.toml
"""
from __future__ import annotations

import argparse
import json
import re
import sys
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from harness.base import reproducers, syzkaller  # noqa: E402
from harness.reports.views import line_version  # noqa: E402
import syzbot_repros  # noqa: E402  (beside this file)
import syzbot_rows  # noqa: E402

HEAD = """\
# syzbot's hang bugs kstall reproduced with syzbot's own title on Debian's
# kernels: the regression suite a distro's CI runs (ci/README.md). Each bug's
# C reproducer and record are fetched from syzbot's dashboard by its id as its
# cell runs (`syzbot = ID`), so the suite needs internet, not a corpus; without
# it, KSTALL_SYZBOT_URL=file:///DIR reads them from a directory of ID.c and ID.json.
# The dashboard serves the bug's first crash's reproducer, which may be another
# program than the collection's that was measured.
# Written by tests/bench/syzbot_suite.py from the benchmark's runs (120 s a run,
# up to 3 tries where one hung), the rows repro/README.md keeps of them (the
# newest run of a bug on a kernel counts) and its fix hunts; an entry of a bug
# none of those measured (kept by hand, or measured on a machine whose state
# is gone) stays as written (--keep). Run it again to refresh.
#   vulnerable      syzbot's title in at least half of the kernel's tries
#   not_reproduced  at or after the release line's first version without it (fixed_in)
#   any             a clean run (no P(miss)), or a hang in 1 of 3
# Shard it as any matrix: kstall matrix ci/syzbot-hangs.toml --shard I/N, then
# kstall report over the shards: summary.md's page per kernel lists what is
# open there ("ID open: ..."), fixed (and in which version), not reproduced.
"""


def cells(state: Path) -> dict[tuple[str, str], list[dict]]:
    """Every try the state holds, by (bug, kernel), in try order."""
    out: dict[tuple[str, str], list[dict]] = {}
    for p in sorted((state / "cells").glob("*.json"), key=lambda p: (p.name.rsplit("__", 1)[0],
                                                                      int(p.stem.rsplit("__", 1)[1]))):
        c = json.loads(p.read_text())
        out.setdefault((c["bug"], c["kernel"]), []).append(c)
    return out


def told(text: str) -> list[dict]:
    """A kept column's tries, as far as its words say them (syzbot_repros.cell_text's):
    "reproduced (how) k/n" and "different: ... k/n" hung k times in n (the other
    tries unknown), "not reproduced" ran clean, "-" did not run, the rest did not tell."""
    n = re.search(r" (\d+)/(\d+)(?:;.*)?$", text)
    k, of = (int(n[1]), int(n[2])) if n else (1, 1)
    m = re.match(r"reproduced \((\w+)\)", text)
    if m or text.startswith("different: "):
        hang = {"verdict": "VULNERABLE", "matched": {"how": m[1]} if m else None, "text": text}
        return [hang] * k + [{"verdict": "", "text": text}] * (of - k)
    if text in ("", "-"):
        return []
    return [{"verdict": "NOT_REPRODUCED" if text.startswith("not reproduced") else "", "text": text}]


def rows_cells(doc: Path, corpus: Path) -> dict[tuple[str, str], list[dict]]:
    """The tries of every rows block a document keeps (repro/README.md: the
    benchmark's state goes with a machine, the document stays), by (bug, kernel);
    a later block's word on a kernel replaces an earlier's (a document adds its blocks as it goes)."""
    ids = {h.bug_id[:12]: h.bug_id for _, h in syzbot_repros.sample(corpus)}
    out: dict[tuple[str, str], list[dict]] = {}
    for _, kernels, rows in syzbot_rows.blocks(doc.read_text()):
        for short, columns in rows.items():
            for k, text in zip(kernels, columns):
                if short in ids and (t := told(text)):
                    out[(ids[short], k)] = t
    return out


def fixes_found(roots: list[Path]) -> dict[str, dict]:
    """By bug id: the first version without the hang, and the changelog's word, from each fix hunt."""
    out: dict[str, dict] = {}
    for root in roots:
        for f in sorted(root.glob("*/bisect.json")):
            d = json.loads(f.read_text())
            path = Path(str(d.get("reproducer", "")).removeprefix(syzkaller.SPEC))
            h = syzkaller.read_header(path) if path.suffix == ".c" and path.is_file() else None
            if h is None or d.get("direction") != "fix" or not d.get("first_new"):
                continue
            hunt = d.get("fix_entries") or {}
            entry = next((e for e in hunt.get("entries", []) if e["why"] == "the record's fix"), None)
            out.setdefault(h.bug_id, {"fixed_in": [], "changelog": []})
            out[h.bug_id]["fixed_in"].append(f"debian:{d['first_new']}{d.get('flavour_suffix', '')}")
            near = "; ".join(f'"{e["subject"]}"' for e in hunt.get("entries", []))
            out[h.bug_id]["changelog"].append(entry["subject"] if entry else hunt.get("text", "")
                                              + (f": {near}" if near else ""))
    return out


def paragraph(text: str, ident: str) -> str:
    """The suite's paragraph of the bug ident (its comment and [[reproducer]]), '' if none."""
    return next((x.strip("\n") for x in text.split("\n\n") if re.search(rf'^syzbot = "{ident}"$', x, re.M)), "")


def line_of(spec: str) -> str:
    return (line_version(spec) or ("",))[0]


def kept_fixes(path: Path) -> dict[str, dict]:
    """By bug id: the fix hunts an existing suite records (fixed_in, and its
    "#   fixed in V: ..." comment lines). A hunt's bisect.json goes with the
    machine that ran it, as a state does; what the suite learnt from it stays."""
    if not path.is_file():
        return {}
    text = path.read_text()
    out: dict[str, dict] = {}
    for r in tomllib.loads(text).get("reproducer", []):
        ident, fixed = str(r.get("syzbot", "")), r.get("fixed_in") or []
        said = dict(re.findall(r"^#   fixed in (\S+): (.*)$", paragraph(text, ident), re.M))
        if ident and fixed:
            out[ident] = {"fixed_in": list(fixed), "changelog": [said.get(v, "") for v in fixed]}
    return out


def merged_fixes(kept: dict[str, dict], found: dict[str, dict]) -> dict[str, dict]:
    """A bug's fix hunts, a line's new hunt (found) over the kept one of the same release line."""
    out = {b: {"fixed_in": list(h["fixed_in"]), "changelog": list(h["changelog"])} for b, h in kept.items()}
    for bug, hunt in found.items():
        lines = {line_of(v) for v in hunt["fixed_in"]}
        old = out.get(bug, {"fixed_in": [], "changelog": []})
        keep = [(v, c) for v, c in zip(old["fixed_in"], old["changelog"]) if line_of(v) not in lines]
        pairs = keep + list(zip(hunt["fixed_in"], hunt["changelog"]))
        out[bug] = {"fixed_in": [v for v, _ in pairs], "changelog": [c for _, c in pairs]}
    return out


def expectation(tries: list[dict], kernel: str, fixed_in: list[str]) -> str:
    matched = sum(bool(t.get("matched")) for t in tries)
    if matched and 2 * matched >= len(tries):
        return "vulnerable"
    here = line_version(kernel)
    # not_reproduced only where every try ran clean: a different hang, an INCONCLUSIVE or an ERROR
    # there says nothing of the fix, and a CI would go red on it from its first run
    clean = bool(tries) and all(t.get("verdict") == "NOT_REPRODUCED" for t in tries)
    if clean and here and any((v := line_version(f)) and v[0] == here[0] and v[1] <= here[1]
                              for f in fixed_in):
        return "not_reproduced"
    return "any"


def column(tries: list[dict]) -> str:
    """A kernel's word on a bug in the suite's comment: a kept block's words as they were, a state's tries told."""
    texts = list(dict.fromkeys(t["text"] for t in tries if "text" in t))
    state = [t for t in tries if "text" not in t]
    return ", then ".join(texts + ([syzbot_repros.cell_text(state, waits=False)] if state else []))


def kept(path: Path, measured: set[str]) -> tuple[list[str], dict[str, dict[str, str]]]:
    """An existing suite's entries of bugs the sources did not measure (with
    their comment): their paragraphs, and each kernel's expectations of
    them. Written by hand, or by this script from a state that went with its
    machine, they stay: a wiped cache is no reason to drop a regression test.
    An entry of a bug the sources measured is made again from the newest
    measurements, or goes with them (it no longer hangs anywhere)."""
    if not path.is_file():
        return [], {}
    text = path.read_text()
    doc = tomllib.loads(text)
    out, names = [], set()
    for r in doc.get("reproducer", []):
        ident = str(r.get("syzbot", ""))
        if not ident:
            raise ValueError(f"{path}: a [[reproducer]] without syzbot = ID ({r}): the suite holds syzbot's bugs")
        para = paragraph(text, ident)
        if ident[:12] in {m[:12] for m in measured} or not para:
            continue
        out.append(para)
        names.add(r.get("name") or reproducers.guest_name("syz-" + ident[:12]))
    expects = {k["spec"]: {n: e for n, e in k.get("expect", {}).items() if n in names} for k in doc.get("kernel", [])}
    return out, expects


def suite(sources: list[tuple[Path, Path]], bisections: list[Path], keep: Path | None = None) -> str:
    """sources: (a benchmark state or a document with rows blocks, the corpus its bugs came from), oldest
    first: a later source's tries of a bug on a kernel replace an earlier's, as today's code replaces older."""
    found = merged_fixes(kept_fixes(keep) if keep else {}, fixes_found(bisections))
    tried: dict[tuple[str, str], list[dict]] = {}
    for source, corpus in sources:
        if not (source.exists() and corpus.is_dir()):
            raise SystemExit(f"syzbot_suite: no {source if not source.exists() else corpus}")
        tried.update(rows_cells(source, corpus) if source.is_file() else cells(source))
    bugs, kernels = [], set()
    for path, h in {h.bug_id: (p, h) for _, corpus in sources for p, h in syzbot_repros.sample(corpus)}.values():
        mine = {k: t for (b, k), t in tried.items() if b == h.bug_id}
        if any(t.get("matched") for ts in mine.values() for t in ts):
            bugs.append((path, h, mine))
            kernels |= set(mine)
    hand, theirs = kept(keep, {b for b, _ in tried}) if keep else ([], {})
    kernels |= {k for k, e in theirs.items() if e}
    order = sorted(kernels, key=lambda k: (line_version(k) or ("", ()))[1])
    out, expects = [HEAD], {k: dict(theirs.get(k, {})) for k in order}
    out += ["\n" + x for x in hand]
    for path, h, mine in sorted(bugs, key=lambda b: b[1].bug_id):
        name = reproducers.guest_name("syz-" + h.bug_id[:12])
        record = syzkaller.record_beside(path) or {}
        fix = next((str(f["title"]) for f in record.get("fix-commits") or [] if f.get("title")), "")
        hunt = found.get(h.bug_id, {"fixed_in": [], "changelog": []})
        out.append(f"\n# {h.bug_id[:12]} \"{h.title}\" (syzbot: {h.status}"
                   + (f"; upstream fix: {fix}" if fix else "") + ")")
        out += [f"#   {k}: {column(mine[k])}" for k in order if k in mine]
        out += [f"#   fixed in {v}" + (f": {c}" if c else "") for v, c in zip(hunt["fixed_in"], hunt["changelog"])]
        out.append(f'[[reproducer]]\nsyzbot = "{h.bug_id}"\nduration = 120')
        if fix:
            out.append(f"fix = {json.dumps(fix)}")
        if hunt["fixed_in"]:
            out.append("fixed_in = [" + ", ".join(json.dumps(v) for v in hunt["fixed_in"]) + "]")
        for k in order:
            expects[k][name] = expectation(mine.get(k, []), k, hunt["fixed_in"])
    for k in order:
        said = ", ".join(f'{n} = "{e}"' for n, e in expects[k].items())
        out.append(f'\n[[kernel]]\nspec = "{k}"\nexpect = {{ {said} }}')
    return "\n".join(out) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--from", dest="sources", nargs=2, action="append", type=Path, metavar=("STATE", "CORPUS"),
                    required=True, help="a benchmark state, or a document keeping its rows blocks "
                    "(repro/README.md), and the reproducers it ran (repeatable)")
    ap.add_argument("--bisections", action="append", type=Path, default=[],
                    help="a results root holding `kstall bisect debian` runs (repeatable)")
    ap.add_argument("--keep", type=Path, help="an existing suite: its entries of bugs no source measured stay, "
                    "as written, and its fix hunts' findings (fixed_in) unless --bisections hunted that line again")
    ap.add_argument("--out", type=Path, help="write the suite here (default: print it)")
    args = ap.parse_args()
    text = suite([(s, c) for s, c in args.sources], args.bisections, args.keep)
    if args.out:
        args.out.write_text(text)
        print(f"wrote {args.out}")
    else:
        print(text, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
