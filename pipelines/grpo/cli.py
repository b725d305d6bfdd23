"""`tritonforge train-grpo CONFIG.toml [--out DIR]`: the GRPO trainer's command line (TRL underneath).

One process: `tritonforge train-grpo CONFIG`. Several (one per GPU):
`accelerate launch [--config_file data/accelerate/ZERO.yaml] -m pipelines.cli train-grpo CONFIG`.
Exit codes: 0 done, 2 bad config or usage (the message names the key), 1 a failure while training.
"""
from __future__ import annotations

import argparse
import json
import os
import sys


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("config", help="TOML config, or a shipped config's name (e.g. grpo-tiny; see data/configs/)")
    parser.add_argument("--out", default=None, help="output folder (overrides the config's `out`; "
                        "default out/NAME); a folder with a checkpoint is resumed")
    parser.add_argument("--steps", type=int, default=None, help="train to this many steps (overrides grpo.max_steps)")
    parser.add_argument("--budget-s", type=float, default=None, help="stop, with a checkpoint, at the first step end "
                        "past this many seconds of training; rerun with the same --out to go on")


def run(args: argparse.Namespace) -> int:
    from pipelines.configs import ConfigError
    from pipelines.grpo.config import grpo_args, load_config
    from synth.cli_checks import UsageError, writable_folder

    try:
        cfg = load_config(args.config, args.out)
        if args.steps is not None and args.steps < 1:
            raise ConfigError("--steps", "must be >= 1")
        if args.budget_s is not None and not args.budget_s > 0:   # also refuses nan
            raise ConfigError("--budget-s", "must be a number of seconds > 0")
        grpo_args(cfg)   # GRPOConfig's own checks, before any model is loaded
        writable_folder(cfg.out, "--out" if args.out else f"{args.config}: out")
    except ConfigError as exc:
        print(f"tritonforge train-grpo: error: {exc}", file=sys.stderr)
        return 2
    except UsageError as exc:
        return exc.report("train-grpo")

    from pipelines.multicast import keep_off

    keep_off()   # before torch.distributed starts (under accelerate launch, in every rank)
    from pipelines.grpo.trainer import train

    try:
        summary = train(cfg, args.steps, args.budget_s)
    except (FileNotFoundError, ValueError) as exc:
        print(f"tritonforge train-grpo: {exc}", file=sys.stderr)
        return 2
    from accelerate import PartialState

    if PartialState().is_main_process:   # under `accelerate launch`, one summary
        print(json.dumps(summary))
    import torch.distributed as dist

    # A rank that exits with its process group still up can abort in the group's C++ threads
    # ("terminate called without an active exception", seen in CI with two gloo ranks) and the
    # launcher then reports the whole run failed; every rank leaves the group together instead. That
    # was not enough: a loaded 2-core box still saw rank 1 of two abort so at interpreter teardown (1
    # run in 4, 2026-11-29), a native thread's object destroyed while joinable. Every output is written
    # and closed by now (the trainer saved, the summary printed), so a rank of a launched group ends here
    # without running native destructors. A group of one is vLLM's colocated engine inside a caller's
    # process (a notebook, a test): vLLM owns it and closes it, and the call returns.
    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        dist.barrier()
        dist.destroy_process_group()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
    return 0
