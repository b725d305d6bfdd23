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
    """Executables a GPU worker may start: Triton's ptxas and the C compiler that builds launchers."""
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
    return sorted({os.path.realpath(p) for p in found})
