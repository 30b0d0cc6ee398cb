# SPDX-License-Identifier: GPL-2.0
"""Latency stalls a reproducer measures itself, judged by what its data file
declares ([stall] in repro/NAME.toml, harness/base/reproducers.py StallSpec):
per timed path a threshold, a title and the prefix of its progress fields.
A new latency reproducer needs no Python here.

The reproducer prints, per path and CPU (bpf-ringbuf's, for one):
    # stats path=nmi cpu=0 reserves=401 nulls=1 max_ns=385686 over=0 sum_ns=3722446
    # hist path=nmi cpu=0 10=10 11=77 12=302     (log2(ns) bucket=count)
and, while it runs, progress lines with each path's running figures:
    # progress count=84 ... nmi_max_ns=36324135 switch_max_ns=37287683 over=0
A run that froze never prints the final lines; the last progress line then
is the evidence.
"""
from __future__ import annotations

import html
import math
import re
from typing import Callable

from harness.base.reproducers import StallSpec
from harness.base.untrusted import num

_KV = re.compile(r"(\w{1,32})=(\d{1,20})\b")  # bounded: guest text, no quadratic scans
# one color per path, in the order the data file declares them
COLORS = ("#c0392b", "#2c7fb8", "#27ae60", "#8e44ad", "#d35400")


def _from_progress(spec: StallSpec, progress: dict) -> dict:
    """Each path's figures from the last progress line (PREFIX_max_ns, PREFIX_over, ...)."""
    out = {}
    for path in spec.paths:
        prefix = path.progress + "_"
        fields = {k[len(prefix):]: num(v, 0) for k, v in progress.items() if k.startswith(prefix)}
        if "max_ns" in fields:
            out[path.name] = {"max_ns": fields["max_ns"], "over": fields.get("over", 0),
                              "nulls": fields.get("nulls", 0), "per_cpu": [], "hist": {}, "from_progress": True}
    return out


def parse(lines: list[str], spec: StallSpec, progress: dict | None = None) -> dict:
    paths: dict[str, dict] = {}
    for line in lines:
        m = re.match(r"^# (stats|hist) path=(\w+) cpu=(\d{1,6})(.*)$", line)
        if not m:
            continue
        kind, path, cpu = m.group(1), m.group(2), int(m.group(3))
        fields = {k: int(v) for k, v in _KV.findall(m.group(4))}
        p = paths.setdefault(path, {"per_cpu": {}})
        c = p["per_cpu"].setdefault(cpu, {"cpu": cpu})
        if kind == "stats":
            c.update(fields)
        else:
            c["hist"] = {int(k): int(v) for k, v in re.findall(r"\b(\d{1,3})=(\d{1,20})\b", m.group(4))}
    complete = bool(paths)
    for path, p in paths.items():
        cpus = sorted(p["per_cpu"].values(), key=lambda c: c["cpu"])
        p["per_cpu"] = cpus
        # every counter is summed over the CPUs, the maximum is the largest
        for k in dict.fromkeys(k for c in cpus for k in c if k not in ("cpu", "hist", "max_ns")):
            p[k] = sum(c.get(k, 0) for c in cpus)
        p["max_ns"] = max((c.get("max_ns", 0) for c in cpus), default=0)
        measured = p.get(spec.count_field, 0)
        p["mean_ns"] = p.get("sum_ns", 0) // measured if measured else 0
        hist: dict[int, int] = {}
        for c in cpus:
            for b, n in c.get("hist", {}).items():
                hist[b] = hist.get(b, 0) + n
        p["hist"] = dict(sorted(hist.items()))
    if not complete and progress:
        paths = _from_progress(spec, progress)
    first = next((int(m.group(1)) for l in lines if (m := re.match(r"^# first-stall count=(\d{1,20})\b", l))), None)
    return {"complete": complete, "paths": paths, "first_stall_count": first}


def evaluate(data: dict, spec: StallSpec,
             host_wait: Callable[[str, float], float | None] | None = None) -> tuple[list[dict], list[dict]]:
    """(paths that stalled, paths whose stall the host may have made): max
    latency past the path's threshold (ms), with at least its min_stalls
    measurements counted past it by the reproducer. Under TCG the guest's
    clock runs on while the host keeps a vCPU's thread waiting, so a stall is
    the kernel's only if it stays past the threshold without the most a vCPU
    thread waited for a host CPU while it lasted (host_wait(path, its length
    in ms), harness/guest/hostwait.py). It fails closed: a stall the gauge
    read nothing for (no gauge, or no samples then) is a suspect too."""
    stalled, suspect = [], []
    thresholds, titles, needed = spec.thresholds(), spec.titles(), spec.min_stalls_of()
    for path, p in data["paths"].items():
        ms = thresholds.get(path)
        over = p.get("over", 0)
        if ms is not None and p.get("max_ns", 0) >= ms * 1e6 and over >= needed.get(path, spec.min_stalls):
            s = {"path": path, "title": titles.get(path, path), "max_ms": round(p["max_ns"] / 1e6, 1),
                 "over": over, "nulls": p.get("nulls"), "threshold_ms": ms,
                 "host_wait_ms": host_wait(path, p["max_ns"] / 1e6) if host_wait else None}
            waited = s["host_wait_ms"]
            (suspect if waited is None or s["max_ms"] - waited < ms else stalled).append(s)
    return sorted(stalled, key=lambda s: -s["max_ms"]), sorted(suspect, key=lambda s: -s["max_ms"])


def describe(stalled: list[dict], measure: str) -> str:
    """'NMI reserve stalled 99.2 ms (3 reserves >= 50 ms)'"""
    return "; ".join(f"{s['title']} stalled {s['max_ms']:.1f} ms ({s['over']} {measure}"
                     f"{'s' if s['over'] != 1 else ''} >= {s['threshold_ms']:g} ms)" for s in stalled)


def evidence(spec: StallSpec, lines: list[str], progress: dict,
             host_wait: Callable[[str, float], float | None] | None = None) -> dict:
    """run.json's evidence.stalls (with the measurement under "data"): enough
    to judge, describe and chart the run from the run record alone."""
    data = parse(lines, spec, progress)
    stalled, suspect = evaluate(data, spec, host_wait)
    return {"threshold_ms": spec.thresholds(), "titles": spec.titles(), "min_stalls": spec.min_stalls_of(),
            "measure": spec.measure, "title": spec.title, "signature": spec.signature,
            "stalled": stalled, "text": describe(stalled, spec.measure), "suspect": suspect, "data": data}


def _fmt_ns(ns: float) -> str:
    for unit, div in (("s", 1e9), ("ms", 1e6), ("us", 1e3)):
        if ns >= div:
            return f"{ns / div:.3g}{unit}"
    return f"{ns:.3g}ns"


def svg(stalls: dict, thresholds: dict[str, float], titles: dict[str, str], title: str) -> str:
    """A small log2 latency histogram per path (counts on a log scale), with
    each path's stall threshold marked: self-contained SVG for run dirs and
    reports. thresholds and titles: per path, in the data file's order."""
    # bucket keys are strings once the data has been through JSON (matrix.json)
    paths = [(k, dict(p, hist={int(b): n for b, n in p["hist"].items()}))
             for k, p in stalls.get("paths", {}).items() if p.get("hist")]
    if not paths:
        return ""
    thr = {k: int(ms * 1e6).bit_length() - 1 for k, ms in thresholds.items()}
    buckets = [b for _, p in paths for b in p["hist"]] + [thr[k] for k, _ in paths if k in thr]
    lo, hi = min(buckets), max(buckets)
    width, row_h, left, plot_w = 680, 110, 160, 500
    bw = plot_w / (hi - lo + 1)
    order = list(thresholds) + [k for k, _ in paths if k not in thresholds]
    parts = [f'<svg class="latency" xmlns="http://www.w3.org/2000/svg" width="{width}" '
             f'height="{row_h * len(paths) + 40}" role="img" aria-label="latency histograms">'
             f'<text x="0" y="14" font-size="13">{html.escape(title)}</text>']
    for i, (path, p) in enumerate(paths):
        top = 30 + i * row_h
        peak = max(p["hist"].values())
        parts.append(f'<text x="0" y="{top + 45}" font-size="12">{html.escape(titles.get(path, path))}</text>'
                     f'<text x="0" y="{top + 61}" font-size="11">max {_fmt_ns(p.get("max_ns", 0))}</text>')
        for b in range(lo, hi + 1):
            n = p["hist"].get(b, 0)
            h = 0 if not n else max(2.0, 70 * (1 + math.log10(n)) / (1 + math.log10(peak)))
            x = left + (b - lo) * bw
            if n:
                parts.append(f'<rect x="{x:.1f}" y="{top + 75 - h:.1f}" width="{max(bw - 1, 1):.1f}" height="{h:.1f}" '
                             f'fill="{COLORS[order.index(path) % len(COLORS)]}"><title>{path}: {n} in '
                             f'[{_fmt_ns(2 ** b)}, {_fmt_ns(2 ** (b + 1))})</title></rect>')
        for b in range(lo, hi + 1, max(1, (hi - lo) // 6)):
            parts.append(f'<text x="{left + (b - lo) * bw:.1f}" y="{top + 90}" font-size="10">{_fmt_ns(2 ** b)}</text>')
        if path in thr:
            x = left + (thr[path] - lo) * bw
            parts.append(f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{top}" y2="{top + 78}" stroke="#000" '
                         f'stroke-dasharray="3,3"><title>stall threshold {thresholds[path]:g} ms</title></line>')
    parts.append("</svg>")
    return "".join(parts)

