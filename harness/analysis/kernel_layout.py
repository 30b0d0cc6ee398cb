# SPDX-License-Identifier: GPL-2.0
"""Where one kernel keeps the records kernel_waits.read() and
task_waits.read() follow: the offsets of kernel-waits.toml's structures and
members from the kernel's BTF, and its variables' addresses from its
kallsyms; worked out once per kernel (harness/drivers/layouts.py caches it
by spec_key()). A part a kernel lacks is left out, with why."""
from __future__ import annotations

import functools
import hashlib
import tomllib

from harness.analysis import btf
from harness.analysis.kernel_waits import SPEC_FILE, variables
from harness.base.arch import KERNEL_HALF


@functools.cache
def load_spec() -> dict:
    """kernel-waits.toml, read once per process."""
    with open(SPEC_FILE, "rb") as f:
        return tomllib.load(f)


def layout(btf_blob: bytes, symbols_text: str, kernel_from: int = KERNEL_HALF) -> dict:
    """Addresses and offsets read() needs for one kernel, its byte order
    (its BTF's) and where its pointers begin (its architecture's). A part the
    kernel lacks (no such structure or variable) is left out, with why under
    "missing"; the JSON-able result is cached beside the kernel's symbols."""
    spec = load_spec()
    out: dict = {"missing": {}}
    try:
        types = btf.Btf(btf_blob)
    except btf.BtfError as e:
        out["missing"]["btf"] = str(e)
        return out
    out["order"], out["kernel_from"] = types.order, kernel_from  # how Memory reads the guest
    parts = {k: v for k, v in spec.items() if isinstance(v, dict)}
    names = {spec["per_cpu_offset"], *(p["variable"] for p in parts.values() if "variable" in p)}
    addrs = variables(symbols_text, names)
    if spec["per_cpu_offset"] not in addrs:
        out["missing"]["per_cpu_offset"] = f"no symbol {spec['per_cpu_offset']}"
        return out
    out["per_cpu_offset"] = addrs[spec["per_cpu_offset"]]
    for part, build in (("csd", _csd_layout), ("rqspinlock", _rqspinlock_layout), ("running", _running_layout),
                        ("tasks", _tasks_layout)):
        if part not in parts:
            continue
        if parts[part]["variable"] not in addrs:
            out["missing"][part] = f"no symbol {parts[part]['variable']}"
            continue
        try:
            out[part] = {"variable": addrs[parts[part]["variable"]]} | build(types, parts[part])
        except btf.BtfError as e:
            out["missing"][part] = str(e)
    if "locks" in parts:
        try:
            out["locks"] = _locks_layout(types, parts["locks"])
        except btf.BtfError as e:
            out["missing"]["locks"] = str(e)
    return out


def _csd_layout(types: btf.Btf, c: dict) -> dict:
    cfd = types.find(btf.STRUCT, c["struct"])
    mask = types.member(cfd, c["mask"])
    if not types.is_pointer(mask.type_id) and types.array_of(mask.type_id) is None:
        raise btf.BtfError(f"{c['struct']}.{c['mask']} is neither a pointer nor an array")
    return {"csd": types.member(cfd, c["csd"]).offset, "mask": mask.offset,
            "mask_pointer": types.is_pointer(mask.type_id),
            "flags": types.member(types.find(btf.STRUCT, c["csd_struct"]), c["flags"]).offset,
            "locked": types.enum_value(c["locked"])}


def _rqspinlock_layout(types: btf.Btf, r: dict) -> dict:
    held = types.find(btf.STRUCT, r["struct"])
    locks = types.member(held, r["locks"])
    arr = types.array_of(locks.type_id)
    if arr is None:
        raise btf.BtfError(f"{r['struct']}.{r['locks']} is not an array")
    return {"count": types.member(held, r["count"]).offset, "locks": locks.offset, "max": arr[1]}


def _running_layout(types: btf.Btf, r: dict) -> dict:
    return {"curr": types.member(types.find(btf.STRUCT, r["struct"]), r["curr"]).offset,
            "pid": types.member(types.find(btf.STRUCT, r["task_struct"]), r["pid"]).offset}


def _tasks_layout(types: btf.Btf, t: dict) -> dict:
    """Where a task keeps what the wait-for graph reads (task_waits.py)."""
    task = types.find(btf.STRUCT, t["struct"])

    def off(name: str) -> int:
        return types.member(task, name).offset
    state = next((n for n in t["state"] if _has(types, task, n)), None)
    if state is None:
        raise btf.BtfError(f"{t['struct']} has none of {', '.join(t['state'])}")
    out = {name: off(t[name]) for name in ("tasks", "pid", "tgid", "comm", "stack", "signal", "thread_node")}
    out |= {"state": off(state), "comm_bytes": types.size(types.member(task, t["comm"]).type_id),
            "thread_head": types.member(types.find(btf.STRUCT, t["signal_struct"]), t["thread_head"]).offset,
            "stack_bytes": t["stack_bytes"], "uninterruptible": t["uninterruptible"], "noload": t["noload"],
            "interruptible": t["interruptible"], "pf_kthread": t["pf_kthread"], "exit_zombie": t["exit_zombie"],
            "flags": off(t["flags"]), "exit_state": off(t["exit_state"]), "ptrace": off(t["ptrace"]),
            "parent": off(t["parent"])}
    if _has(types, task, t["on_cpu"]):  # an int, or narrower where a kernel packed it
        out |= {"on_cpu": off(t["on_cpu"]), "on_cpu_bytes": types.size(types.member(task, t["on_cpu"]).type_id)}
    if _has(types, task, t["blocker"]):
        out |= {"blocker": off(t["blocker"]), "blocker_kinds": t["blocker_kinds"]}
    return out


def _locks_layout(types: btf.Btf, lk: dict) -> dict:
    """Each sleeping lock's owner, count and wait list, and where a waiter
    keeps its task (task_waits.py)."""
    out = {"waiter_task": types.member(types.find(btf.STRUCT, lk["waiter_struct"]), lk["waiter_task"]).offset,
           "owner_flags": lk["owner_flags"], "mutex_waiters": lk["mutex_waiters"],
           "rwsem_reader_owned": lk["rwsem_reader_owned"],
           "rwsem_writer_locked": lk["rwsem_writer_locked"], "rwsem_waiters": lk["rwsem_waiters"]}
    for kind in ("mutex", "rw_semaphore", "semaphore"):
        spec = lk[kind]
        struct_id = types.find(btf.STRUCT, spec["struct"])
        out[kind] = {k: types.member(struct_id, v.rstrip("?")).offset for k, v in spec.items()
                     if k != "struct" and (not v.endswith("?") or _has(types, struct_id, v.rstrip("?")))}
    return out


def _has(types: btf.Btf, struct_id: int, name: str) -> bool:
    try:
        types.member(struct_id, name)
        return True
    except btf.BtfError:
        return False


# what layout() makes of the same kernel-waits.toml: a new one is made when this changes
LAYOUT_VERSION = b"6"


def spec_key() -> str:
    """What a layout was worked out from besides the kernel: kernel-waits.toml, and how it was read."""
    return hashlib.sha256(SPEC_FILE.read_bytes() + LAYOUT_VERSION).hexdigest()[:16]
