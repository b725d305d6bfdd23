"""Which sandbox layers a GPU worker can run under, and what a layer breaks (run on a GPU box).

Prints, for each layer set, the verdict of an honest candidate through a one-worker CUDA pool
and the tail of the worker's own log; then applies Landlock alone in a fresh process and compiles
and launches a Triton kernel there, printing the first error with its path. This is how the GPU
lane's layers (lockdown.DEFAULT_LAYERS["cuda"]) were chosen:

    python3 bench/probe_gpu_sandbox.py
"""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import textwrap

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

STANDALONE = textwrap.dedent('''
    import os, sys, tempfile, traceback
    sys.path.insert(0, sys.argv[1])
    import torch, triton, triton.language as tl
    from distill.verifier import trusted
    from distill.verifier.sandbox import lockdown
    d = tempfile.mkdtemp()
    for sub in ("triton", "tmp", "home"):
        os.makedirs(os.path.join(d, sub))
    os.environ.update(TRITON_CACHE_DIR=os.path.join(d, "triton"), TMPDIR=os.path.join(d, "tmp"),
                      HOME=os.path.join(d, "home"))
    tempfile.tempdir = os.path.join(d, "tmp")
    torch.cuda.init()
    print("landlock:", lockdown.landlock([d], trusted.toolchain(), lockdown.default_device_files()), flush=True)

    @triton.jit
    def k(x, n, B: tl.constexpr):
        o = tl.program_id(0) * B + tl.arange(0, B)
        tl.store(x + o, tl.load(x + o, mask=o < n) + 1, mask=o < n)

    try:
        x = torch.zeros(1000, device="cuda")
        k[(4,)](x, 1000, B=256)
        torch.cuda.synchronize()
        print("standalone kernel ok:", float(x.sum()))
    except BaseException:
        traceback.print_exc()
''')


def main() -> None:
    from distill.verifier import VerifierPool
    from distill.verifier.sandbox.lockdown import LAYERS
    from tests.distill.verifier.conftest import honest, problem

    from distill.verifier import trusted

    print("toolchain:", trusted.toolchain(), flush=True)
    script = os.path.join(tempfile.mkdtemp(), "probe_kernel.py")  # @triton.jit needs a source file
    with open(script, "w") as fh:
        fh.write(STANDALONE)
    out = subprocess.run([sys.executable, script, os.getcwd()], capture_output=True, text=True, timeout=300)
    print("== Landlock alone, standalone process\n", out.stdout[-3000:], out.stderr[-3000:], flush=True)
    for layers in (LAYERS,):
        with VerifierPool(workers=1, device="cuda", timeout=120, timing_trials=20, lockdown=layers) as pool:
            v = pool.verify(problem("add"), honest("add"))
            print(f"== pool with {layers}: {v.status}: {v.reason}\n   sandbox: {v.checks.get('sandbox')}", flush=True)
            for name in ("softmax", "matmul"):
                w = pool.verify(problem(name), honest(name))
                print(f"   honest {name}: {w.status}: {w.reason[:200]}", flush=True)
            if v.status != "pass":
                for slot in pool.fleet.slots:
                    log = os.path.join(slot.scratch, "output.log")
                    if os.path.exists(log):
                        print(open(log, errors="replace").read()[-3000:])


if __name__ == "__main__":
    main()
