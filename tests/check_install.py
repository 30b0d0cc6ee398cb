#!/usr/bin/python3
# SPDX-License-Identifier: GPL-2.0
"""`make check-install`: the package as a user gets it. Not part of `make
test` (a clean root and its packages take minutes); root only.

  1. `make deb`'s package;
  2. a clean bookworm root (debootstrap, minbase; kept in the cache and
     reused, its packages refreshed), where `apt install ./kstall_*.deb`
     must pull in every dependency;
  3. as an ordinary user, from /tmp, with a cold cache: kstall --version,
     kstall doctor, verify debian:6.16.12 perf-refresh (VULNERABLE, exit 1),
     verify debian:6.17.8 ./my.c (a verdict);
  4. nothing written under /usr/lib/kstall, and the results in the user's
     ~/.local/state/kstall/results, as the README says;
  5. root's verify too leaves nothing under /usr/lib/kstall that dpkg does
     not own (Python writes bytecode wherever it may).

Prints each step's time; exit 1 on the first failure.
"""
from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from clean_root import ROOT, build_deb, in_root, mounted, step  # noqa: E402

USER = "kstall"
MY_C = '#include <stdio.h>\nint main(void) { printf("hello from my.c\\n"); return 0; }\n'


def main() -> int:
    if os.geteuid() != 0:
        print("check-install: skipped: a clean root and its mounts take root")
        return 0
    deb = build_deb()
    with mounted():
        shutil.copy2(deb, ROOT / "tmp" / deb.name)
        step("apt install ./kstall.deb (its dependencies pulled in)",
             in_root(f"apt-get purge -y -q kstall >/dev/null 2>&1; DEBIAN_FRONTEND=noninteractive "
                     f"apt-get install -y -q --no-install-recommends /tmp/{deb.name}"))
        step("an ordinary user, its cache and results cold", in_root(
            f"id {USER} >/dev/null 2>&1 || useradd --create-home --shell /bin/bash {USER}; "
            f"rm -rf /home/{USER}/.cache /home/{USER}/.local"))
        (ROOT / "tmp" / "my.c").write_text(MY_C)
        stamp = ROOT / "tmp" / "installed.stamp"
        stamp.touch()
        ver = step("kstall --version", in_root("cd /tmp && kstall --version", USER))
        print(f"     {ver.stdout.strip()}")
        step("kstall doctor", in_root("cd /tmp && kstall doctor", USER))
        v = step("kstall verify debian:6.16.12 perf-refresh", in_root(
            "cd /tmp && kstall verify debian:6.16.12 perf-refresh", USER), ok=(1,))
        print(f"     {v.stdout.splitlines()[0]}")
        v = step("kstall verify debian:6.17.8 ./my.c", in_root("cd /tmp && kstall verify debian:6.17.8 ./my.c", USER),
                 ok=(0, 1, 3, 5))
        print(f"     {v.stdout.splitlines()[0]}")
        written = [p for p in (ROOT / "usr" / "lib" / "kstall").rglob("*") if p.stat().st_mtime > stamp.stat().st_mtime]
        results = list((ROOT / "home" / USER / ".local" / "state" / "kstall" / "results").iterdir())
        print(f"{'ok  ' if not written else 'FAIL'} nothing written under /usr/lib/kstall ({len(written)} files)")
        print(f"{'ok  ' if len(results) >= 2 else 'FAIL'} results in ~/.local/state/kstall/results ({len(results)})")
        # root may write where the package lies (Python's bytecode beside its modules):
        # it must not, or the files outlive `apt purge`
        v = step("as root: kstall verify debian:6.16.12 perf-refresh", in_root(
            f"cd /tmp && KSTALL_CACHE=/home/{USER}/.cache/kstall kstall verify debian:6.16.12 perf-refresh"), ok=(1,))
        print(f"     {v.stdout.splitlines()[0]}")
        owned = set(step("dpkg -L kstall", in_root("dpkg -L kstall")).stdout.split())
        alien = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "usr" / "lib" / "kstall").rglob("*")
                       if "/" + str(p.relative_to(ROOT)) not in owned)
        print(f"{'ok  ' if not alien else 'FAIL'} under /usr/lib/kstall, nothing dpkg does not own "
              f"({len(alien)} files{': ' + ', '.join(alien[:5]) if alien else ''})")
        return 0 if not written and len(results) >= 2 and not alien else 1


if __name__ == "__main__":
    sys.exit(main())
