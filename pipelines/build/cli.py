"""`tritonforge build CONFIG.toml --out DIR [--scheduler ADDRESS]`: the resumable dask build."""
from __future__ import annotations

import argparse
import sys


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("config", help="build config (TOML), or a shipped config's name, e.g. demo")
    p.add_argument("--out", required=True, help="output folder (rerun with the same folder to resume)")
    p.add_argument("--scheduler", help="address of a running dask scheduler (default: a local cluster)")
    p.add_argument("--no-card", action="store_true", help="skip the dataset card and its plots")


def summary_table(m: dict) -> str:
    c = m["counts"]
    lines = ["| what | rows |", "|---|---:|", f"| problems | {c['problems']} |", f"| SFT rows (verified pass) | {c['sft']} |"]
    lines += [f"| RL {k} | {v} |" for k, v in c["rl"].items()]
    lines += [f"| held-out {k} | {v} |" for k, v in c["heldout"].items()]
    lines.append(f"| attempts | {c['attempts']} ({', '.join(f'{k} {v}' for k, v in m['verdicts'].items()) or 'none'}) |")
    lines.append(f"| time | {m['timings']['total_s']:.1f} s, {m['shards']['resumed']} of {m['shards']['total']} shard tasks resumed |")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    from pipelines.build.config import ConfigError, load_config
    from pipelines.build.run import build

    try:
        cfg = load_config(args.config)
        manifest = build(cfg, args.out, scheduler=args.scheduler)
    except ConfigError as exc:
        print(f"tritonforge build: error: {exc}", file=sys.stderr)
        return 2
    if not args.no_card:
        from pipelines.publish.card import write_card

        write_card(args.out, manifest)
    print(summary_table(manifest))
    return 0
