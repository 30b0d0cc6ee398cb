#!/usr/bin/python3
# SPDX-License-Identifier: GPL-2.0
"""ci/syzbot-hangs.toml, the regression suite a distro's CI runs, written
from what the benchmark measured (tests/bench/syzbot_repros.py's states)
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

  tests/bench/syzbot_suite.py --from STATE CORPUS [--from ...] [--bisections ROOT]... [--out FILE]
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from harness.base import reproducers, syzkaller  # noqa: E402
from harness.reports.views import line_version  # noqa: E402
import syzbot_repros  # noqa: E402  (beside this file)

HEAD = """\
# syzbot's hang bugs kstall reproduced with syzbot's own title on Debian's
# kernels: the regression suite a distro's CI runs (ci/README.md). Each bug's
# C reproducer and record are fetched from syzbot's dashboard by its id as its
# cell runs (`syzbot = ID`), so the suite needs internet, not a corpus.
# Written by tests/bench/syzbot_suite.py from the benchmark's runs (120 s a run,
# up to 3 tries where one hung) and its fix hunts; run it again to refresh.
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
            out[h.bug_id]["changelog"].append(entry["subject"] if entry else hunt.get("text", ""))
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


def suite(sources: list[tuple[Path, Path]], bisections: list[Path]) -> str:
    found = fixes_found(bisections)
    bugs, kernels = [], set()
    for state, corpus in sources:
        tried = cells(state)
        for path, h in syzbot_repros.sample(corpus):
            mine = {k: t for (b, k), t in tried.items() if b == h.bug_id}
            if any(t.get("matched") for ts in mine.values() for t in ts):
                bugs.append((path, h, mine))
                kernels |= set(mine)
    order = sorted(kernels, key=lambda k: (line_version(k) or ("", ()))[1])
    out, expects = [HEAD], {k: {} for k in order}
    for path, h, mine in sorted(bugs, key=lambda b: b[1].bug_id):
        name = reproducers.guest_name("syz-" + h.bug_id[:12])
        record = syzkaller.record_beside(path) or {}
        fix = next((str(f["title"]) for f in record.get("fix-commits") or [] if f.get("title")), "")
        hunt = found.get(h.bug_id, {"fixed_in": [], "changelog": []})
        out.append(f"\n# {h.bug_id[:12]} \"{h.title}\" (syzbot: {h.status}"
                   + (f"; upstream fix: {fix}" if fix else "") + ")")
        out += [f"#   {k}: {syzbot_repros.cell_text(mine[k], waits=False)}" for k in order if k in mine]
        out += [f"#   fixed in {v}: {c}" for v, c in zip(hunt["fixed_in"], hunt["changelog"])]
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
                    required=True, help="a benchmark state and the reproducers it ran (repeatable)")
    ap.add_argument("--bisections", action="append", type=Path, default=[],
                    help="a results root holding `kstall bisect debian` runs (repeatable)")
    ap.add_argument("--out", type=Path, help="write the suite here (default: print it)")
    args = ap.parse_args()
    text = suite([(s, c) for s, c in args.sources], args.bisections)
    if args.out:
        args.out.write_text(text)
        print(f"wrote {args.out}")
    else:
        print(text, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
