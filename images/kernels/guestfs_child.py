# SPDX-License-Identifier: GPL-2.0
"""libguestfs work for image: kernels, run in a child process so that kstall
can bound it in time and kill it (images/kernels/image.py starts it):

  extract IMAGE FORMAT RELEASE DEST   inspect read-only, choose the kernel
                                      (RELEASE, else grub's default, else the
                                      newest in /boot), copy vmlinuz, config,
                                      initrd and the modules the guest needs
                                      into DEST; JSON on stdout
  install OVERLAY GUEST_DIR UNIT      put the agent, the reproducers and a
                                      systemd unit (its text in file UNIT)
                                      into a writable overlay; JSON on stdout
  extract OVERLAY qcow2 RELEASE DEST GUEST_DIR UNIT
                                      both in one libguestfs launch (a first
                                      --boot-image), reading through the overlay

Errors are one JSON object {"error": ...} and exit status 1.
"""
from __future__ import annotations

import json
import os
import re
import shlex
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from harness.base import untrusted  # noqa: E402
from images.kernels import modules  # noqa: E402
from images.kernels.debian import version_key  # noqa: E402
from images.kernels.kernel import Kernel, SpecError  # noqa: E402

APPLIANCE_CPUS = 4
INITRDS = ("/boot/initrd.img-{r}", "/boot/initramfs-{r}.img", "/boot/initrd-{r}")


def launch(image: str, fmt: str, readonly: bool):
    import guestfs
    g = guestfs.GuestFS(python_return_dict=True)
    # the appliance's one vCPU by default: under TCG a second one took a launch and
    # an inspection of an LVM and XFS image from 47 s to 34 s on a 2-core host
    g.set_smp(min(APPLIANCE_CPUS, os.cpu_count() or 1))
    g.add_drive_opts(image, format=fmt, readonly=readonly)
    g.launch()
    roots = g.inspect_os()
    if not roots:
        filesystems = ", ".join(f"{d} ({t})" for d, t in g.list_filesystems().items()) or "none"
        raise SpecError(f"libguestfs found no operating system in {image} (filesystems it could read: "
                        f"{filesystems})")
    root = roots[0]
    mounts = g.inspect_get_mountpoints(root)
    for mp in sorted(mounts, key=len):
        try:
            (g.mount_ro if readonly else g.mount)(mounts[mp], mp)
        except RuntimeError as e:
            print(f"could not mount {mounts[mp]} on {mp}: {e}", file=sys.stderr)
    return g, root


# -- which kernel grub boots ------------------------------------------------

def _quoted(s: str) -> list[str]:
    try:
        return shlex.split(s)
    except ValueError:
        return s.split()


def grub_entries(text: str) -> list[dict]:
    """Menu entries of a grub.cfg in menu order: title, id, path (titles of
    submenus joined with '>'), linux (kernel path) and its arguments."""
    entries: list[dict] = []
    stack: list[dict] = []  # open submenus/entries
    counters = [0]          # next item number at each submenu level
    prefix: list[str] = []  # the open submenus' own numbers
    for raw in text.splitlines():
        line = raw.strip()
        words = _quoted(line.rstrip("{").strip()) if line.startswith(("menuentry ", "submenu ")) else []
        if words:
            title = words[1] if len(words) > 1 else ""
            ident = next((words[i + 1] for i, w in enumerate(words[:-1]) if w in ("$menuentry_id_option", "--id")),
                         "")
            index = ">".join(prefix + [str(counters[-1])])
            counters[-1] += 1
            node = {"kind": words[0], "title": title, "id": ident, "index": index,
                    "titles": [n["title"] for n in stack if n["kind"] == "submenu"] + [title],
                    "ids": [n["id"] for n in stack if n["kind"] == "submenu"] + [ident]}
            stack.append(node)
            if words[0] == "submenu":
                prefix.append(index.rsplit(">", 1)[-1])
                counters.append(0)
            else:
                entries.append(node)
        elif re.match(r"(linux|linuxefi|linux16)\s", line) and stack and stack[-1]["kind"] == "menuentry":
            parts = line.split(None, 2)
            stack[-1]["linux"] = parts[1] if len(parts) > 1 else ""
            stack[-1]["args"] = parts[2] if len(parts) > 2 else ""
        elif line == "}" and stack:
            if stack.pop()["kind"] == "submenu":
                counters.pop()
                prefix.pop()
    return entries


def grub_choice(entries: list[dict], default: str) -> dict | None:
    """The entry grub's `default` names: an index ('0', '1>2'), a title or an id
    (alone or as 'submenu>entry')."""
    if not entries:
        return None
    for e in entries:
        if default in (e["index"], e["id"], e["title"], ">".join(e["titles"]), ">".join(e["ids"])):
            return e
    if default.isdigit() or re.fullmatch(r"\d+(>\d+)*", default):
        # a submenu's own index: grub boots its first entry
        return next((e for e in entries if e["index"].startswith(default + ">")), None)
    return None


def grub_default(text: str, env: dict[str, str]) -> tuple[dict | None, str]:
    entries = grub_entries(text)
    sets = [v for v in re.findall(r'^\s*set default="?([^"\n]*)"?\s*$', text, re.M) if "next_entry" not in v]
    default = sets[0] if sets else "0"
    if "saved_entry" in default:
        default = env.get("saved_entry") or "0"
    return grub_choice(entries, default), default


def read_env(g, paths_: tuple[str, ...]) -> dict[str, str]:
    for p in paths_:
        if g.is_file(p):
            return dict(l.split("=", 1) for l in g.cat(p).splitlines() if "=" in l and not l.startswith("#"))
    return {}


def bls_entries(g) -> list[dict]:
    out = []
    if not g.is_dir("/boot/loader/entries"):
        return out
    for name in g.ls("/boot/loader/entries"):
        if not name.endswith(".conf"):
            continue
        fields = {}
        for l in g.cat(f"/boot/loader/entries/{name}").splitlines():
            k, _, v = l.strip().partition(" ")
            fields[k] = v.strip()
        out.append({"id": name[:-5], "title": fields.get("title", ""), "linux": fields.get("linux", ""),
                    "args": fields.get("options", ""), "version": fields.get("version", "")})
    return sorted(out, key=lambda e: version_key(e["version"] or e["id"]), reverse=True)


def release_of(linux_path: str) -> str:
    base = linux_path.rsplit("/", 1)[-1]
    return base.removeprefix("vmlinuz-") if base.startswith("vmlinuz-") else linux_path.split("/")[-2]


def installed(g, refused: list[str] | None = None) -> dict[str, str]:
    """release -> path of its vmlinuz, from /boot and (Fedora) lib/modules.
    A name that is no kernel release ('..', a '/') is not a kernel (the
    release is joined into paths on the host): it goes to refused."""
    out = {}
    refused = [] if refused is None else refused
    if g.is_dir("/boot"):
        for name in g.ls("/boot"):
            if name.startswith("vmlinuz-") and not name.endswith((".old", "-rescue")) and "rescue" not in name:
                release = untrusted.release(name.removeprefix("vmlinuz-"))
                if release:
                    out[release] = f"/boot/{name}"
                else:
                    refused.append(f"/boot/{name}")
    for base in ("/usr/lib/modules", "/lib/modules"):
        if g.is_dir(base):
            for rel in g.ls(base):
                if rel not in out and g.is_file(f"{base}/{rel}/vmlinuz"):
                    if untrusted.release(rel):
                        out[rel] = f"{base}/{rel}/vmlinuz"
                    else:
                        refused.append(f"{base}/{rel}/vmlinuz")
    return out


def choose(g, wanted: str) -> tuple[str, str, str]:
    """(release, why, kernel arguments of its boot entry)"""
    refused: list[str] = []
    kernels = installed(g, refused)
    if not kernels:
        why = f"; refused, as no kernel release: {', '.join(refused)}" if refused else ""
        raise SpecError(f"the image has no kernel (nothing in /boot/vmlinuz-* or /lib/modules/*/vmlinuz{why})")
    if wanted:
        if wanted not in kernels:
            raise SpecError(f"the image has no kernel {wanted}; it has {', '.join(sorted(kernels))}")
        return wanted, f"{wanted} as asked (#RELEASE)", ""
    env = read_env(g, ("/boot/grub/grubenv", "/boot/grub2/grubenv"))
    for cfg in ("/boot/grub/grub.cfg", "/boot/grub2/grub.cfg"):
        if not g.is_file(cfg):
            continue
        text = g.cat(cfg)
        if "blscfg" in text:
            entries = bls_entries(g)
            saved = env.get("saved_entry")
            e = next((x for x in entries if x["id"] == saved), entries[0] if entries else None)
            if e and release_of(e["linux"]) in kernels:
                how = f"saved_entry {saved}" if saved and e["id"] == saved else "the newest entry"
                return release_of(e["linux"]), f"grub's default ({cfg}, BLS: {how})", \
                    e["args"].replace("$kernelopts", env.get("kernelopts", ""))
        e, default = grub_default(text, env)
        if e and e.get("linux") and release_of(e["linux"]) in kernels:
            return release_of(e["linux"]), f"grub's default ({cfg}: default={default!r}, entry {e['title']!r})", \
                e.get("args", "")
    newest = max(kernels, key=version_key)
    return newest, f"the newest kernel in /boot ({len(kernels)} installed; no grub configuration names one)", ""


# -- commands ---------------------------------------------------------------

def extract(g, root: str, wanted: str, dest: Path) -> dict:
    release, why, args = choose(g, wanted)
    vmlinuz = installed(g)[release]
    dest.mkdir(parents=True, exist_ok=True)
    g.download(vmlinuz, str(dest / "vmlinuz"))
    moddir = next((d for d in (f"/usr/lib/modules/{release}", f"/lib/modules/{release}") if g.is_dir(d)), None)
    config = next((p for p in (f"/boot/config-{release}", f"{moddir}/config" if moddir else "") if p and g.is_file(p)),
                  None)
    if config:
        g.download(config, str(dest / "config"))
    initrd = next((p.format(r=release) for p in INITRDS if g.is_file(p.format(r=release))), None)
    if initrd:
        g.download(initrd, str(dest / "initrd"))
    plan: dict[str, list[str]] = {}
    k = Kernel("", "", Path(), "", config=dest / "config" if config else None)
    if moddir:
        tree = modules.Tree(dest / "staging", release)
        tree.dir.mkdir(parents=True, exist_ok=True)
        for meta in modules.METADATA:
            if g.is_file(f"{moddir}/{meta}"):
                g.download(f"{moddir}/{meta}", str(tree.dir / meta))
        names = modules.wanted(modules.every_need(), k.config_value if config else None, tree.builtin())
        if names:
            if not (tree.dir / "modules.dep").is_file():
                raise SpecError(f"{moddir} in the image has no modules.dep (run depmod in the image)")
            plan = modules.install(tree, names, dest / "modules",
                                   fetch=lambda rel, local: g.download(f"{moddir}/{rel}", str(local)))
    elif config and modules.wanted(modules.every_need(), k.config_value):
        raise SpecError(f"kernel {release} needs modules but the image has no /lib/modules/{release}")
    root_uuid = ""
    try:
        root_uuid = g.vfs_uuid(root)
    except RuntimeError:
        pass
    return {"release": release, "why": why, "args": args, "initrd": initrd, "config": config,
            "modules": plan, "root": root, "root_uuid": root_uuid,
            "os": {k2: str(getattr(g, f"inspect_get_{k2}")(root)) for k2 in ("distro", "product_name")},
            "init": "systemd" if g.exists("/lib/systemd/systemd") or g.exists("/usr/lib/systemd/systemd")
            else "unknown"}


def install(g, guest_dir: Path, unit_file: Path) -> dict:
    if not (g.exists("/lib/systemd/systemd") or g.exists("/usr/lib/systemd/systemd")):
        raise SpecError("--boot-image needs an image that boots with systemd")
    g.mkdir_p("/opt/kstall/bin")
    g.upload(str(guest_dir / "init"), "/opt/kstall/init")
    g.chmod(0o755, "/opt/kstall/init")
    for p in sorted(guest_dir.iterdir()):
        if p.is_file() and p.name != "init":
            g.upload(str(p), f"/opt/kstall/bin/{p.name}")
            g.chmod(0o755, f"/opt/kstall/bin/{p.name}")
    g.write("/etc/systemd/system/kstall-agent.service", unit_file.read_text())
    g.mkdir_p("/etc/systemd/system/multi-user.target.wants")
    g.ln_sf("/etc/systemd/system/kstall-agent.service",
            "/etc/systemd/system/multi-user.target.wants/kstall-agent.service")
    g.sync()
    return {"installed": sorted(g.ls("/opt/kstall/bin"))}


def main(argv: list[str]) -> int:
    try:
        if argv[0] not in ("extract", "install"):
            raise SpecError(f"unknown command {argv[0]}")
        # install (and extract with GUEST_DIR UNIT after DEST) writes a kstall overlay, never the image
        writable = argv[0] == "install" or len(argv) > 5
        g, root = launch(argv[1], "qcow2" if writable else argv[2], readonly=not writable)
        try:
            if argv[0] == "extract":
                out = extract(g, root, argv[3], Path(argv[4]))
                if writable:
                    out |= install(g, Path(argv[5]), Path(argv[6]))
            else:
                out = install(g, Path(argv[2]), Path(argv[3]))
        finally:
            g.shutdown()
            g.close()
    except (SpecError, RuntimeError) as e:
        print(json.dumps({"error": str(e)}))
        return 1
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
