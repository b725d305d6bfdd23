"""distill.verifier.sandbox: what runs inside the untrusted worker and replayer processes, entered only at its entry points.

Every module here runs in a process that runs, or once ran, candidate code: a worker (it imports the
candidate's module) or a replayer (it runs the candidate's kernels, never its module), both forked
from the zygote and confined the same way. What they report is a claim; the trusted side
(distill/verifier/, the caller's process and the reference processes) checks it and decides.

The trusted side touches this package only at its entry points (tests/test_architecture.py checks
that no other module of it is imported from outside):
  worker.worker_main      the process function of every worker and replayer (fleet.py starts them)
  zygote                  the forkserver's preload, named by procs.py; workers and references fork from it
  lockdown, caps          a process confining itself: a worker here, and screen.py's child, which runs
                          a problem's code; fleet.py reads lockdown.DEFAULT_LAYERS for the workers' config
  worker._warm_up         run by a reference process on a GPU, so the worker's warm-up kernel is in the
                          template cache every worker's own cache is copied from

Inside: the command loop (worker, replayer, zygote); confinement (lockdown, caps, guard: the audit
hook; seal: process-wide state; integrity: patched attributes); what `forward` ran (provenance,
bands, calls, inputsets, replay); the CPU lane's interpreter and its GPU compile check (interp_shims,
interp_grid, interp_rewrite, interp_scan, libdevice_np, gpu_compile, gpu_deps).

What both sides read stays in distill/verifier/: codec (the messages), record (a traced call as
data: written here, checked by the parent's replaycheck and statecheck), inflight (the compile
marker the parent reads after a crash), policy (the op tables, OpCount), problemio, memplan, timing,
running. This package imports those; they import nothing of it.

Nothing is imported here: importing lockdown from screen.py's child costs only lockdown.
"""
