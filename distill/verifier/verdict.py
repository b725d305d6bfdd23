"""The Verdict record (DESIGN §4): one status per (problem, candidate), computed by trusted code only."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from distill.verifier.environ import MAX_REASON, scrub

# Which baselines a GPU verification times (`VerifierPool(timing=...)`, `--timing`, `[verify] timing`;
# the first is the default): the candidate against the reference run eagerly and under torch.compile,
# against eager only (no compile: on the H100 it took most of ~14 s per `gpu`-profile problem), or
# nothing timed (correctness only; speedups stay null). Every verdict records it in checks["baselines"].
TIMING = ("eager+compile", "eager", "off")

# Exactly the vocabulary of DESIGN §4, in the order checks run.
STATUSES: tuple[str, ...] = (
    "pass",
    "syntax_error",
    "no_kernel",
    "forbidden",
    "compile_error",
    "runtime_error",
    "not_triton",
    "mutates_input",
    "aliases_input",
    "wrong_output",
    "nondeterministic",
    "timeout",
    "crash",
    "timing_invalid",
)


@dataclass
class Verdict:
    """What the verifier concluded about one candidate.

    `checks` holds per-check details (static findings, per-trial errors, provenance counts,
    sandbox facts, timing samples). Timing fields stay None on the CPU lane.
    """

    status: str
    reason: str = ""
    checks: dict[str, Any] = field(default_factory=dict)
    device: str = "cpu"
    ref_eager_ms: float | None = None
    ref_compile_ms: float | None = None
    kernel_ms: float | None = None
    speedup_eager: float | None = None
    speedup_compile: float | None = None
    versions: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"unknown verdict status {self.status!r}; expected one of {STATUSES}")
        # Texts a candidate can influence (its exceptions, its output) are bounded and carry no
        # value of the verifier's environment: verdicts go into datasets and refinement prompts.
        self.reason = scrub(str(self.reason), MAX_REASON)
        self.checks = scrub(self.checks)

    @property
    def passed(self) -> bool:
        return self.status == "pass"

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict with every DESIGN §4 field."""
        return asdict(self)

    @classmethod
    def from_dict(cls, row: dict[str, Any]) -> "Verdict":
        known = {k: row[k] for k in cls.__dataclass_fields__ if k in row}
        return cls(**known)

    def summary(self) -> str:
        line = f"{self.status}: {self.reason}" if self.reason else self.status
        if self.kernel_ms is not None:
            line += f"  (kernel {self.kernel_ms:.4f} ms"
            if self.speedup_eager is not None:
                line += f", {self.speedup_eager:.2f}x eager"
            if self.speedup_compile is not None:
                line += f", {self.speedup_compile:.2f}x compile"
            line += ")"
        return line
