"""The `tritonforge` command: one subcommand per pipeline step, each living beside the code it drives.

Every subcommand module exposes `add_arguments(parser)` and `run(args) -> int`; it is imported only
when its subcommand is used, so `tritonforge sample` never pays for vLLM or dask imports.
"""
from __future__ import annotations

import argparse
import copy
import importlib
import sys

# name -> (module, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "sample": ("synth.cli_sample", "draw problems at a level and write a problems Parquet shard"),
    "show": ("synth.cli_show", "print one row of a shard; --write saves its problem and candidate as .py files"),
    "verify": ("distill.verifier.cli", "verify one candidate against one problem"),
    "distill": ("distill.cli", "have a teacher write candidates for problems and verify them"),
    "build": ("pipelines.build.cli", "run the resumable dask build from a TOML config"),
    "export": ("curriculum.cli", "export shards as sft, rl, verl or trl"),
    "publish": ("pipelines.publish.cli", "publish a built dataset folder to the Hugging Face Hub"),
    "train-grpo": ("pipelines.grpo.cli", "train a policy with GRPO, the verifier as reward"),
}


class _Help(argparse.ArgumentDefaultsHelpFormatter):
    """argparse's formatter that shows every option's default, also for options without help text,
    except where there is none to show (None, a flag's False, a required option) or the help says it."""

    @staticmethod
    def _has_default(action: argparse.Action) -> bool:
        shown = action.default is not None and action.default is not False and action.default != argparse.SUPPRESS
        return shown and not action.required and bool(action.option_strings)

    def _format_action(self, action: argparse.Action) -> str:
        if action.help is None and self._has_default(action):
            action = copy.copy(action)
            action.help = "default: %(default)s"
        return super()._format_action(action)

    def _get_help_string(self, action: argparse.Action) -> str | None:
        if not self._has_default(action) or "default" in (action.help or ""):
            return action.help
        return super()._get_help_string(action)


def build_parser(argv: list[str] | None = None) -> tuple[argparse.ArgumentParser, dict]:
    parser = argparse.ArgumentParser(prog="tritonforge", description="Training data for honest, fast Triton kernels.",
                                     formatter_class=_Help)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    wanted = None
    args = sys.argv[1:] if argv is None else argv
    for token in args:
        if not token.startswith("-"):
            wanted = token
            break
    modules = {}
    for name, (module, help_text) in COMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text, formatter_class=_Help)
        if name == wanted:   # only the command asked for is imported: `--help` stays fast
            modules[name] = importlib.import_module(module)
            modules[name].add_arguments(p)
    return parser, modules


def main(argv: list[str] | None = None) -> int:
    parser, modules = build_parser(argv)
    args = parser.parse_args(argv)
    try:
        return int(modules[args.command].run(args) or 0)
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
