"""The mechanisms behind the construction-state, provenance and sandbox cases, one by one: state
left for the harness (seal.py), the kernel-table block's reach, the per-file cap and Landlock's /proc rule. The whole-verdict behaviour is in the
adversarial suite (cases.json)."""
from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import textwrap

import pytest
import torch
from torch.overrides import TorchFunctionMode

from distill.verifier.sandbox import provenance, seal

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def test_modules_named_by_string_exist():
    """The forkserver's preload (procs.py) and the integrity snapshot's namespaces (integrity.py) name
    modules by string, and both skip a name that does not import: a module moved without them would
    leave the zygote cold or a namespace of the harness unwatched, silently."""
    from distill.verifier import procs
    from distill.verifier.sandbox import integrity

    ours = [m for m in procs._ZYGOTE_PRELOAD + list(integrity.MODULES) if m.startswith("distill.")]
    assert len(ours) >= 10
    assert [m for m in ours if importlib.util.find_spec(m) is None] == []


class _Mode(TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


def test_seal_sees_state_left_behind_and_nothing_else():
    base = seal.snapshot()
    assert seal.changed(base) == []
    mode = _Mode()
    mode.__enter__()
    try:
        assert any("torch function modes" in c for c in seal.changed(base))
    finally:
        mode.__exit__(None, None, None)
    torch.set_default_dtype(torch.float64)
    try:
        assert any("default dtype" in c for c in seal.changed(base))
    finally:
        torch.set_default_dtype(torch.float32)
    handle = torch.nn.modules.module.register_module_forward_hook(lambda m, a, o: o)
    try:
        assert any("_global_forward_hooks" in c for c in seal.changed(base))
    finally:
        handle.remove()
    from triton import knobs

    knobs.runtime.launch_enter_hook = lambda *a: None
    try:
        assert any("triton.knobs.runtime" in c for c in seal.changed(base))
    finally:
        del knobs.runtime.__dict__["launch_enter_hook"]
    assert seal.changed(base) == []


def test_block_reaches_every_operator_namespace_and_leaves_no_finalizer():
    names = provenance.backend_names(("CPU",))["CPU"]
    spaces = {n.split("::", 1)[0] for n in names}
    assert "aten" in spaces and len(spaces - {"aten"}) >= 3, spaces
    # nothing a candidate could call to lift it: no new finalizer (torch.library's Library registers
    # one). Counted in a fresh process: in a test lane's process other threads may make their own.
    out = _child("""
        import weakref, torch
        from distill.verifier.sandbox import provenance
        before = set(weakref.finalize._registry)
        block = provenance.BackendBlock(("CPU",))
        block.install()
        print(len(set(weakref.finalize._registry) - before))
        try:
            torch.ones(3).exp()
        except RuntimeError as e:
            print("blocked" if "not allowed" in str(e) else e)
        block.remove()
        print(float(torch.ones(3).exp().sum()) > 0)
    """)
    assert out.stdout.split() == ["0", "blocked", "True"], out.stdout + out.stderr[-2000:]


def test_initialisers_stay_callable_until_the_block_is_completed():
    block = provenance.BackendBlock(("CPU",))
    block.install(provenance.INITIALISERS | {"aten::mul"})
    try:
        torch.nn.Linear(8, 4)  # kaiming_uniform_ -> uniform_
        torch.ones(3) * 2  # the reference's own constructor op: callable
        with pytest.raises(RuntimeError, match="not allowed"):
            torch.ones(3).exp()
        assert block.complete() > 0
        for blocked in (lambda: torch.empty(3).uniform_(), lambda: torch.ones(3) * 2):
            with pytest.raises(RuntimeError, match="not allowed"):
                blocked()
    finally:
        block.remove()


def _child(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=120,
                          cwd=ROOT)


def test_file_size_cap_makes_a_write_fail_not_the_process():
    out = _child("""
        import os, tempfile
        from distill.verifier.sandbox import caps
        print(caps.cap_files(1 << 20))
        path = os.path.join(tempfile.mkdtemp(), "big")
        try:
            with open(path, "wb") as fh:
                fh.write(b"x" * (2 << 20))
            print("wrote")
        except OSError as exc:
            print("refused", exc.errno == 27, os.path.getsize(path))
    """)
    assert out.returncode == 0, out.stderr
    assert "refused True 1048576" in out.stdout, out.stdout


def test_landlock_keeps_other_processes_proc_out_however_spelled():
    """Reads are an allow-list (lockdown.readable): another process's /proc entries, this one's
    memory, /tmp and /etc's secrets are refused; the installation and its own status are not."""
    out = _child("""
        import os, tempfile
        from distill.verifier import trusted
        from distill.verifier.sandbox import lockdown
        planted = tempfile.mkstemp()[1]
        print(lockdown.landlock([tempfile.mkdtemp()], [], lockdown.default_device_files(),
                                lockdown.readable(trusted.code_roots())))
        ppid = os.getppid()
        for p in (f"/proc/{ppid}/environ", f"/proc/self/../{ppid}/environ", f"/proc//{ppid}/./cmdline",
                  "/proc/self/mem", "/proc/thread-self/mem", "/etc/shadow", planted,
                  "/proc/self/status", "/proc/cpuinfo", os.__file__):
            try:
                open(p, "rb").read(1)
                print("read", p)
            except PermissionError:
                print("denied", p)
        print(planted)
    """)
    if "unavailable" in out.stdout:
        pytest.skip("kernel without Landlock")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    os.unlink(lines[-1])
    assert [ln.split()[0] for ln in lines[1:-1]] == ["denied"] * 7 + ["read"] * 3, out.stdout
