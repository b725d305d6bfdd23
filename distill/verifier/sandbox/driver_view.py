"""Triton's active driver as the candidate's frames see it: its read-only queries, nothing else.

The static policy lets a candidate name only the driver's queries that Triton's tutorials make
(policy.DRIVER_QUERIES: `get_active_torch_device`, `get_current_target`, `get_current_device`,
`utils.get_device_properties`) and checks every use of `from triton.runtime import driver`. Static
names are one layer: on the GPU lane the real driver was in reach at run time (the hostile
`driver_alias` passed there with the static layer off), and with it the launchers, `utils.load_binary`
and the launch hooks, none of which the guard sees. Installed in every sandbox
(provenance.install_patches), before any candidate code and before the integrity snapshot:

* `triton.runtime.driver.active`, read from the candidate's frames, is a view that answers those
  queries from the driver behind it and raises for every other attribute, on both lanes.
* Behind it: the real driver on a GPU; on the CPU lane, which has none, cuda_standin's H100.
* Trusted frames (Triton's launch path, the harness) read the real `active`, as before: on the CPU
  lane that is Triton's own "0 active drivers" error.

Not covered: the driver reached without `.active` (Triton's `DriverConfig` keeps it in private
attributes) or through the view's own dunders (its methods' closures): both are introspection, which the
static layer refuses.
"""
from __future__ import annotations

import sys
from typing import Any, Callable

from triton.runtime.driver import DriverConfig

from distill.verifier import policy

_PREFIX = "triton.runtime.driver.active."
_QUERIES = frozenset(q[len(_PREFIX):] for q in policy.DRIVER_QUERIES if "." not in q[len(_PREFIX):])
_UTILS = frozenset(q[len(_PREFIX) + len("utils."):] for q in policy.DRIVER_QUERIES
                   if q[len(_PREFIX):].startswith("utils."))


def _refused(name: str) -> RuntimeError:
    asked = ", ".join(sorted(q[len(_PREFIX):] for q in policy.DRIVER_QUERIES))
    return RuntimeError(f"triton.runtime.driver.active.{name} is not for kernels: a kernel may ask the driver "
                        f"only {asked}")


def _view(backing: Callable[[], Any]) -> Any:
    """The queries of `backing()` (the driver answering them), by closures: no public attribute of the
    view leads to the driver itself."""

    class Utils:
        __slots__ = ()

        def __getattr__(self, name: str) -> Any:
            if name in _UTILS:
                return getattr(backing().utils, name)
            raise _refused(f"utils.{name}")

    utils = Utils()

    class Queries:
        __slots__ = ()

        def __getattr__(self, name: str) -> Any:
            if name == "utils":
                return utils
            if name in _QUERIES:
                return getattr(backing(), name)
            raise _refused(name)

        def __setattr__(self, name: str, value: Any) -> None:
            raise _refused(name)

    return Queries()


class CandidateDriverConfig(DriverConfig):
    """The type `install` gives `triton.runtime.driver`; a class, so the integrity check watches all of it."""

    candidate: Callable[[Any], bool] = staticmethod(lambda frame: False)
    view: Any = None

    @property
    def active(self) -> Any:
        if CandidateDriverConfig.candidate(sys._getframe(1)):
            return CandidateDriverConfig.view
        return super().active


def install(candidate: Callable[[Any], bool]) -> None:
    """Give the candidate's frames the view; `candidate(frame)` tells them from trusted ones."""
    from triton.runtime import driver

    try:
        driver.active  # noqa: B018 - a process with a GPU: the view asks the live driver, as Triton does
        backing: Callable[[], Any] = lambda: driver.active  # noqa: E731
    except RuntimeError:  # the CPU lane: no driver in this process
        from distill.verifier.sandbox import cuda_standin

        backing = cuda_standin.StandinDriver
    CandidateDriverConfig.candidate = staticmethod(candidate)
    CandidateDriverConfig.view = _view(backing)
    driver.__class__ = CandidateDriverConfig
