"""Queues that hand out workers and reference processes, with deadlines instead of forever.

Every process a caller waits for is, at any moment, queued, held by a job (whose every phase has a
limit) or being started (under a start limit); so a wait fails with `PoolError` when nothing came
back to the queue for longer than one hold and one start together: something was lost, and saying
so beats a hang. A busy pool keeps handing things back, so long queues of callers do not fail.
"""
from __future__ import annotations

import queue
import time
from typing import Callable, Generic, TypeVar

from distill.verifier import procs

T = TypeVar("T")


class PoolError(RuntimeError):
    """The pool could not serve a pair: no worker or reference could be had in time, or the pool
    closed. It says nothing about the candidate or the problem."""


class Handout(Generic[T]):
    """A FIFO whose `get` fails after `stall_s` without a `put` (by anyone), or once `closed()`."""

    def __init__(self, what: str, stall_s: float, closed: Callable[[], bool]) -> None:
        self.what, self.stall_s, self._closed = what, stall_s, closed
        self._q: queue.Queue[T] = queue.Queue()
        self._last_put = time.monotonic()

    def put(self, item: T) -> None:
        self._last_put = time.monotonic()
        self._q.put(item)

    def get(self) -> T:
        since = time.monotonic()
        while True:
            if self._closed():
                raise PoolError(f"the pool closed while waiting for a {self.what}")
            try:
                return self._q.get(timeout=0.25)
            except queue.Empty:
                pass
            if time.monotonic() - max(since, self._last_put) > self.stall_s:
                raise PoolError(f"no {self.what} came free for {self.stall_s:g} s: one was lost")

    def drain(self) -> list[T]:
        items = []
        while True:
            try:
                items.append(self._q.get_nowait())
            except queue.Empty:
                return items


class References:
    """Reference processes of one role on one GPU, always handed out alive.

    One that died while idle, or broke during a command (`release(broken=True)`), is killed and a
    fresh one started when next handed out. `acquire(fresh=True)` hands out one that has served no
    job: the retry of a job whose reference failed, so a problem is blamed only when a fresh process
    fails on it too.
    """

    def __init__(self, what: str, start: Callable[[], procs.Proc], discard: Callable[[procs.Proc], None],
                 stall_s: float, closed: Callable[[], bool]) -> None:
        self._start, self._discard = start, discard
        self._q: Handout[procs.Proc | None] = Handout(what, stall_s, closed)
        self.replaced = 0

    def add(self, proc: procs.Proc) -> None:
        self._q.put(proc)

    def acquire(self, fresh: bool = False) -> procs.Proc:
        proc = self._q.get()
        if proc is not None and proc.alive() and not (fresh and proc.served):
            proc.served += 1
            return proc
        if proc is not None:
            self._discard(proc)
        try:
            proc = self._start()
        except (procs.ProcStartError, procs.ProcDied, procs.ProcTimeout, procs.ProcProtocol) as exc:
            self._q.put(None)  # the next caller tries again
            raise PoolError(f"a {self._q.what} could not be started: {exc}") from None
        self.replaced += 1
        proc.served = 1
        return proc

    def release(self, proc: procs.Proc, broken: bool) -> None:
        if broken:
            self._discard(proc)
        self._q.put(None if broken else proc)

    def drain(self) -> list[procs.Proc]:
        return [p for p in self._q.drain() if p is not None]
