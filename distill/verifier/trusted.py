"""What a worker may trust and run: the folders of trusted code (the audit hook lets frames from
there act), and on GPU the executables Triton starts (ptxas, the C compiler and its helpers)."""
from __future__ import annotations

import importlib.metadata
import os
import shutil
import sysconfig


def code_roots() -> list[str]:
    """Where trusted code lives: the interpreter's own paths, every folder holding an installed
    distribution (a user site, a `.pth`- or PYTHONPATH-added site dir: torch may be imported from
    there), and the verifier itself. The working directory is left out even when it holds metadata."""
    paths = sysconfig.get_paths()
    roots = {paths[k] for k in ("stdlib", "platstdlib", "purelib", "platlib") if k in paths}
    roots |= {str(d.locate_file("")) for d in importlib.metadata.distributions()}
    roots.add(os.path.dirname(os.path.abspath(__file__)))
    cwd = os.path.realpath(os.getcwd())
    return sorted({os.path.realpath(r) for r in roots if r and os.path.isabs(r)} - {cwd})


def toolchain() -> list[str]:
    """Executables a GPU worker may start: Triton's ptxas and the C compiler that builds launchers
    (files, and folders whose every file may run: Landlock rules apply beneath a folder)."""
    import triton

    found = []
    nv = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin")
    for name in ("ptxas", "ptxas-blackwell"):
        if os.path.exists(os.path.join(nv, name)):
            found.append(os.path.join(nv, name))
    for knob in ("ptxas", "ptxas_blackwell"):
        try:
            found.append(getattr(triton.knobs.nvidia, knob).path)
        except Exception:  # noqa: BLE001 - a missing tool only means that tool is not allowed
            continue
    cc = os.environ.get("CC") or shutil.which("gcc") or shutil.which("clang")
    if cc:
        found.append(cc)
        import subprocess

        for prog in ("cc1", "collect2", "as", "ld", "lto-wrapper"):
            try:
                out = subprocess.run([cc, f"-print-prog-name={prog}"], capture_output=True, text=True, timeout=10)
                path = out.stdout.strip()
                path = path if os.path.isabs(path) else (shutil.which(path) or "")
                if path:
                    found.append(path)
            except (OSError, subprocess.SubprocessError):
                continue
    for loader in ("/lib64/ld-linux-x86-64.so.2", "/lib/ld-linux-aarch64.so.1"):
        if os.path.exists(loader):
            found.append(loader)
    out = {os.path.realpath(p) for p in found}
    for path in sorted(out):
        out |= _behind(path)
    return sorted(out)


_SYSTEM = ("/usr/", "/bin/", "/sbin/", "/lib", "/etc/")


def _behind(path: str) -> set[str]:
    """What starting `path` also executes: a script's interpreter; and for a toolchain installed
    outside the system folders (/opt/gcc on the H100 box, whose `gcc` starts its own helpers by
    paths `-print-prog-name` does not list) its whole installation folder."""
    extra: set[str] = set()
    try:
        with open(path, "rb") as fh:
            head = fh.read(256)
    except OSError:
        return extra
    if head.startswith(b"#!"):
        words = head[2:].split(b"\n", 1)[0].split()
        if words:
            interp = os.fsdecode(words[0])
            if os.path.basename(interp) == "env" and len(words) > 1:
                interp = shutil.which(os.fsdecode(words[1])) or interp
            extra.add(os.path.realpath(interp))
    if not path.startswith(_SYSTEM) and os.path.basename(os.path.dirname(path)) in ("bin", "libexec"):
        prefix = os.path.dirname(os.path.dirname(path))
        if prefix not in ("/", "") and "site-packages" not in prefix:
            extra.add(prefix)
    return extra
