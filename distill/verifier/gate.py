"""A readers-writer gate per GPU: correctness work shares the device, timing has it alone.

Every piece of GPU work is started by a parent command (a worker's `run` or `time`, a reference's
`trials`, `prepare_timing` or `measure`), and each such command synchronises the device before it
answers, so gating the commands gates the device. Writers are preferred, so timing never starves.
"""
from __future__ import annotations

import threading
from contextlib import contextmanager
from typing import Iterator


class GpuGate:
    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._readers = 0
        self._writer = False
        self._writers_waiting = 0

    @contextmanager
    def shared(self) -> Iterator[None]:
        with self._cond:
            while self._writer or self._writers_waiting:
                self._cond.wait()
            self._readers += 1
        try:
            yield
        finally:
            with self._cond:
                self._readers -= 1
                if self._readers == 0:
                    self._cond.notify_all()

    @contextmanager
    def exclusive(self) -> Iterator[None]:
        with self._cond:
            self._writers_waiting += 1
            while self._writer or self._readers:
                self._cond.wait()
            self._writers_waiting -= 1
            self._writer = True
        try:
            yield
        finally:
            with self._cond:
                self._writer = False
                self._cond.notify_all()
