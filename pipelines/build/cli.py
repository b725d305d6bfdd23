"""`tritonforge build CONFIG.toml --out DIR [--scheduler ADDRESS] [--timing ...]`: the resumable dask build.

Before anything runs: the scheduler address is parsed and reached, the --out folder must be
writable, the config is checked key by key (and its teacher found), and a local cluster must have
what the config asks of it. Any of these failing is exit 2 with the flag, file or key named.
"""
from __future__ import annotations

import argparse
import asyncio
import dataclasses
import socket
import sys

from distill.verifier.verdict import TIMING

SCHEMES = ("tcp", "tls", "ws", "wss")  # dask's transports over TCP (inproc lives inside one process)
REACH_TIMEOUT_S = 5.0


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("config", help="build config (TOML), or a shipped config's name, e.g. demo")
    p.add_argument("--out", required=True, help="output folder (rerun with the same folder to resume)")
    p.add_argument("--scheduler", help="address of a running dask scheduler, [tcp://]HOST:PORT "
                                       "(default: a local cluster)")
    p.add_argument("--no-card", action="store_true", help="skip the dataset card and its plots")
    p.add_argument("--timing", choices=TIMING, default=None,
                   help="the config's [verify] timing, overridden: which baselines a GPU pass is timed against "
                        "(eager+compile, eager without torch.compile, off: correctness only)")


def summary_table(m: dict) -> str:
    c = m["counts"]
    lines = ["| what | rows |", "|---|---:|", f"| problems | {c['problems']} |", f"| SFT rows (verified pass) | {c['sft']} |"]
    lines += [f"| RL {k} | {v} |" for k, v in c["rl"].items()]
    lines += [f"| held-out {k} | {v} |" for k, v in c["heldout"].items()]
    lines.append(f"| attempts | {c['attempts']} ({', '.join(f'{k} {v}' for k, v in m['verdicts'].items()) or 'none'}) |")
    lines.append(f"| time | {m['timings']['total_s']:.1f} s, {m['shards']['resumed']} of {m['shards']['total']} shard tasks resumed |")
    return "\n".join(lines)


def check_scheduler(address: str) -> None:
    """`address` names a dask scheduler that answers within REACH_TIMEOUT_S (UsageError otherwise).

    A closed port is refused at once; a port that accepts but does not speak dask's handshake
    would leave the client waiting, so the handshake is tried too (for tcp)."""
    from distributed.comm import connect
    from distributed.comm.addressing import parse_address, parse_host_port

    from synth.cli_checks import UsageError

    what = f"--scheduler {address}"
    scheme, loc = parse_address(address)
    if scheme not in SCHEMES:
        raise UsageError(f"{what}: unknown scheme {scheme!r}; expected [{'|'.join(SCHEMES)}://]HOST:PORT")
    try:
        host, port = parse_host_port(loc)
    except ValueError as exc:
        raise UsageError(f"{what}: expected [{'|'.join(SCHEMES)}://]HOST:PORT ({exc})") from None
    if not host or not 1 <= port <= 65535:
        raise UsageError(f"{what}: expected a host and a port from 1 to 65535")
    try:
        socket.create_connection((host, port), timeout=REACH_TIMEOUT_S).close()
    except OSError as exc:
        raise UsageError(f"{what}: cannot reach it ({exc.strerror or exc}); is the scheduler "
                         f"running?") from None
    if scheme != "tcp":
        return

    async def handshake() -> None:
        comm = await asyncio.wait_for(connect(f"tcp://{loc}", timeout=REACH_TIMEOUT_S), REACH_TIMEOUT_S)
        await comm.close()

    try:
        asyncio.run(handshake())
    except (OSError, asyncio.TimeoutError) as exc:
        raise UsageError(f"{what}: the port is open but does not answer as a dask scheduler within "
                         f"{REACH_TIMEOUT_S:g} s ({type(exc).__name__})") from None


def check_local_cluster(cfg, path: str) -> None:
    """What a LocalCluster needs of this machine: a CUDA device, and GPUs to hand to the teach tasks."""
    from synth.cli_checks import UsageError

    if cfg.verify.device != "cuda":
        return
    if cfg.cluster.gpus_per_worker < 1:
        raise UsageError(f"{path}: [cluster] gpus_per_worker: must be >= 1 when [verify] device = \"cuda\" on a "
                         f"local cluster (each teach task asks for a GPU), got {cfg.cluster.gpus_per_worker}")
    import torch

    if not torch.cuda.is_available():
        raise UsageError(f"{path}: [verify] device: \"cuda\", but no CUDA device is available here "
                         f"(use \"cpu\", or --scheduler with GPU workers)")


def run(args: argparse.Namespace) -> int:
    from pipelines.build.config import load_config
    from pipelines.build.run import build
    from pipelines.configs import ConfigError, resolve_config
    from synth.cli_checks import UsageError, writable_folder

    try:
        if args.scheduler is not None:
            check_scheduler(args.scheduler)
        writable_folder(args.out, "--out")
        cfg = load_config(args.config)
        if args.timing is not None:
            cfg = dataclasses.replace(cfg, verify=dataclasses.replace(cfg.verify, timing=args.timing))
        if args.scheduler is None:
            check_local_cluster(cfg, str(resolve_config(args.config)))
        manifest = build(cfg, args.out, scheduler=args.scheduler, card=not args.no_card)
    except (ConfigError, UsageError) as exc:
        print(f"tritonforge build: error: {exc}", file=sys.stderr)
        return 2
    print(summary_table(manifest))
    return 0
