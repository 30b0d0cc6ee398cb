# SPDX-License-Identifier: GPL-2.0
"""The architecture seam: every architecture's facts come from one table
(harness/base/arches.toml); the code outside it never names one."""
import ast
import re
from pathlib import Path

from harness.analysis import classify, cpu_state, unwind
from harness.base import arch

REPO = Path(__file__).resolve().parents[2]
NAMES = re.compile(r"\b(x86[_-]64|x86|amd64|aarch64|arm64|i386|riscv64)\b", re.I)
# the walkers the table names are an architecture's own code
OWN = {Path(m.__file__).resolve() for m in unwind.UNWINDERS.values()}


def _docstrings(tree: ast.AST) -> set[int]:
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                out.add(id(first.value))
    return out


def _help_texts(tree: ast.AST) -> set[int]:
    """The strings of argparse's help, description and epilog: they may name one as an example."""
    return {id(n) for node in ast.walk(tree) if isinstance(node, ast.keyword)
            and node.arg in ("help", "description", "epilog") for n in ast.walk(node.value)}


def test_no_code_outside_the_table_names_an_architecture():
    found = []
    for pkg in ("harness", "images", "gdbscripts"):
        for f in sorted((REPO / pkg).rglob("*.py")):
            if f.resolve() in OWN:
                continue
            tree = ast.parse(f.read_text())
            docs = _docstrings(tree) | _help_texts(tree)
            for node in ast.walk(tree):
                if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
                    if NAMES.search(node.value) and not node.value.startswith(("--", "usage")):
                        found.append(f"{f.relative_to(REPO)}:{node.lineno}: {node.value[:60]!r}")
    assert found == [], "\n".join(found)


# how a kernel's console spells where a CPU was and where a stack trace starts (arches.toml console)
CONSOLE = re.compile(r"RIP: 0010|Call [Tt]race:|\bpc : |PC is at")


def test_no_code_outside_the_table_spells_an_architectures_console():
    """A console rule written for x86's "RIP: 0010:" or "Call Trace:" alone
    titles another architecture's report otherwise: the spellings are the table's."""
    found = []
    for pkg in ("harness", "images", "gdbscripts"):
        for f in sorted((REPO / pkg).rglob("*.py")):
            tree = ast.parse(f.read_text())
            docs = _docstrings(tree) | _help_texts(tree)
            for node in ast.walk(tree):
                if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs \
                        and CONSOLE.search(node.value):
                    found.append(f"{f.relative_to(REPO)}:{node.lineno}: {node.value[:60]!r}")
    assert found == [], "\n".join(found)


def test_an_arm64_csd_lock_timeout_is_titled_as_an_x86_one():
    from harness.analysis import console
    head = "[ 61.1] smp: csd: Detected non-responsive CSD lock (#1) on CPU#0, waiting 5000000 ns for CPU#01 " \
           "do_nothing+0x0/0x8(0x0)."
    x86 = [head, "[ 61.1] NMI backtrace for cpu 1", "[ 61.1] RIP: 0010:hrtimer_cancel+0x28/0x40",
           "[ 61.1] Call Trace:", "[ 61.1]  <TASK>", "[ 61.1]  cpu_clock_event_stop+0x1c/0x60"]
    arm64 = [head, "[ 61.1] NMI backtrace for cpu 1", "[ 61.1] pstate: 60000005 (nZCv daif -PAN -UAO)",
             "[ 61.1] pc : hrtimer_cancel+0x28/0x40", "[ 61.1] lr : cpu_clock_event_stop+0x1c/0x60",
             "[ 61.1] Call trace:", "[ 61.1]  hrtimer_cancel+0x28/0x40", "[ 61.1]  cpu_clock_event_stop+0x1c/0x60"]
    titles = [[r.title for r in console.scan("\n".join(log)) if r.name == "csd-lock-timeout"] for log in (x86, arm64)]
    assert titles == [["INFO: csd lock timeout in hrtimer_cancel"]] * 2


def test_the_x86_64_row_answers_what_the_code_used_to_know():
    a = arch.get("x86_64")
    assert a.debian == "amd64" and a.gdb_arch == "i386:x86-64" and (a.pc, a.sp, a.fp) == ("rip", "rsp", "rbp")
    assert a.in_user_mode({"cs": "0x33"}) and not a.in_user_mode({"cs": "0x10"})
    assert a.irqs_off({"eflags": "0x46"}) and not a.irqs_off({"eflags": "0x246"}) and not a.irqs_off({})
    assert a.syscall["futex"] == 202 and unwind.for_arch(a).CODE_BEFORE == 7
    assert arch.by_gdb("i386:x86-64") is a and arch.by_debian("amd64") is a


def test_a_dump_says_its_architecture_and_an_old_one_is_the_first_rows():
    cpu = {"cpu": 0, "regs": {"cs": "0x33", "rip": "0x401000"}}
    assert classify.in_user_mode(cpu) and classify.in_user_mode(cpu | {"arch": "x86_64"})
    rules = cpu_state.Rules.load()
    assert cpu_state.state_of(cpu, rules).state == "user"


def test_what_every_row_shares_is_written_once_and_a_row_overrides_it():
    """arches.toml's [defaults]: the detectors were one list copied into all
    five rows; a row says its own value where it differs (x86_64's own gdb
    and QEMU's NMIs)."""
    import tomllib
    with open(arch.TABLE_FILE, "rb") as f:
        doc = tomllib.load(f)
    defaults = doc.pop(arch.DEFAULTS)
    assert arch.DEFAULTS not in arch.names() and set(arch.names()) == set(doc)
    for key, value in defaults.items():
        written = [row for row in doc.values() if key in row]
        assert [row[key] for row in written if row[key] == value] == [], f"{key}: a row repeats its default"
        assert all(arch.get(n).table[key] == doc[n].get(key, value) for n in arch.names())
    assert arch.get("aarch64").gdb == defaults["gdb"] and arch.get("x86_64").gdb == doc["x86_64"]["gdb"] != \
        defaults["gdb"]
    assert arch.get("x86_64").nmi == "qmp" and arch.get("s390x").nmi == defaults["nmi"]
    assert all(arch.get(n).table["detectors"] == defaults["detectors"] for n in arch.names())
