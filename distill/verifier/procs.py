"""Parent-side handles on worker and reference processes: start, talk with deadlines, kill.

Processes are forked from a multiprocessing *forkserver* (our zygote): a process started fresh by
`spawn`, which preloads torch and Triton and never initialises CUDA, so starting a worker costs a
fork (milliseconds) rather than a Python + torch import (seconds), and no process that initialised
CUDA is ever forked.

The zygote can die (killed, out of memory). `ensure_running` restarts a dead one (it reaps it with
`waitpid`), but a zygote that dies while it serves a start leaves that start with an EOF, and one
that hangs would hold it forever; so every start runs under a deadline whose watchdog kills the
zygote, is tried once more on a restarted zygote, then falls back to `spawn` (correct, only slower).
Children of the zygote die with it (PR_SET_PDEATHSIG): the zygote lives exactly as long as the pool's
process, so a parent killed with SIGKILL leaves no worker running a candidate with nobody to stop it.
Spawned children (the fallback) do without: a thread's exit would fire the signal.
"""
from __future__ import annotations

import ctypes
import multiprocessing
import os
import select
import signal
import sys
import threading
import time
import weakref
from typing import Any, Callable

from distill.verifier import codec, environ, protocol, running, wirecheck

# Sparse: pages exist only where a reply wrote; a tensor past it goes to the arena's overflow file.
ARENA_BYTES = 1 << 30
ARENA_PREFIX = "tritonforge-arena-"  # + the parent's pid: `leftovers` sweeps those of dead parents
_ZYGOTE_PRELOAD = ["torch", "triton", "triton.language", "distill.verifier.sandbox.zygote"]
_ctx_lock = threading.Lock()
_zygote_device: str | None = None
# CPU lane: a phase's limit is CPU seconds of the process, within this many times the limit of wall time,
# for a process the box starves (runnable, or stopped); one that sleeps past its limit is not starved.
STARVED_WALL = 4.0
# How a process is told starved from asleep at its limit: this many looks at its threads' states.
STATE_LOOKS, STATE_EVERY_S = 10, 0.1
# CPU lane: a process that used no CPU for this long, with every thread of it and its children asleep
# in each look, is deadlocked (a corrupted heap's futex, a lock it holds itself): the interpreter never
# waits on anything outside the process, so it ends now instead of at its limit (up to 120 s in tests).
STALL_S = 15.0


def zygote_context(device: str) -> Any:
    """The forkserver context for `device`.

    Triton decides at import time whether its own `@jit` library functions are interpreted, so
    the zygote's TRITON_INTERPRET must match the device of the workers it forks. There is one
    forkserver per process: the first device to ask gets it; a pool for the other device then
    falls back to `spawn` (correct, only slower to start).
    """
    global _zygote_device
    with _ctx_lock:
        if _zygote_device is None:
            ctx = multiprocessing.get_context("forkserver")
            # Replace the default ['__main__'] so the zygote never imports the caller's script.
            ctx.set_forkserver_preload(list(_ZYGOTE_PRELOAD))
            from multiprocessing import forkserver

            # The zygote execs with the allow-list as its environment (child_environ): no secrets.
            with environ.child_environ(TRITON_INTERPRET="1" if device == "cpu" else "0"):
                forkserver.ensure_running()
            _zygote_device = device
        if _zygote_device == device:
            return multiprocessing.get_context("forkserver")
        return multiprocessing.get_context("spawn")


class ProcDied(RuntimeError):
    def __init__(self, exitcode: int | None, phase: str) -> None:
        self.exitcode, self.phase = exitcode, phase
        how = f"signal {-exitcode} ({_signame(-exitcode)})" if exitcode and exitcode < 0 else f"exit code {exitcode}"
        super().__init__(f"worker died during {phase}: {how}")


class ProcTimeout(RuntimeError):
    def __init__(self, phase: str, seconds: float, stalled: float | None = None) -> None:
        self.phase, self.seconds = phase, seconds
        super().__init__(f"{phase} ran past its {seconds:g} s limit" if stalled is None else
                         f"{phase} stopped: no thread ran for {stalled:.0f} s (deadlocked), limit {seconds:g} s")


class ProcProtocol(RuntimeError):
    """A reply that is malformed or carries the wrong nonce: the worker's channel was tampered with."""


class ProcStartError(RuntimeError):
    """No process could be started, on the zygote (twice) nor by `spawn`, before the deadline."""


PR_SET_PDEATHSIG = 1


def zygote_pid() -> int | None:
    """The running zygote's pid (multiprocessing keeps it in its private forkserver singleton)."""
    from multiprocessing import forkserver

    return getattr(forkserver._forkserver, "_forkserver_pid", None)


def _child_main(target: Callable, conn: Any, cfg: dict[str, Any]) -> None:
    """First code of every child: die with the zygote that forked it, then run `target`."""
    if cfg.get("die_with_zygote"):
        ctypes.CDLL(None).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    target(conn, cfg)


def _kill_zygote(pid: int) -> None:
    """The watchdog of a start that ran past its deadline: the start then ends with an EOF. The
    zygote is our child and not yet reaped, so its pid cannot belong to anyone else."""
    try:
        os.kill(pid, signal.SIGKILL)
    except OSError:
        pass


def _pidfd_open(pid: int) -> int | None:
    """A descriptor that turns readable when `pid` exits (Linux >= 5.3), or None."""
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):
        return None


def _signame(num: int) -> str:
    try:
        return signal.Signals(num).name
    except ValueError:
        return "?"


class Proc:
    """One child process speaking the codec over a pipe."""

    def __init__(self, target: Callable, cfg: dict[str, Any], name: str, seconds: float = 300.0,
                 untrusted: bool = False) -> None:
        """Start `target(conn, cfg)` in a child; raises ProcStartError if no start succeeded within
        `seconds` (each try on the zygote under that deadline, then one by `spawn`). An `untrusted` child
        (a worker, a replayer) has every message checked against its type as it is decoded (wirecheck.py)."""
        ctx = zygote_context(cfg["device"])
        self.untrusted, self.serving = untrusted, None  # the command its messages answer (None: starting)
        # The parent's handling of the messages it acknowledges (decoding, judging, the ack), from the
        # message's arrival: wall seconds, and this thread's CPU seconds in them. The child waits all of
        # the wall; the part that is not CPU is this thread waiting for the GIL or torch's threads
        # (job.py's `*.handled`).
        self.handled_s, self.handled_cpu_s = 0.0, 0.0
        self._arrived = (0.0, 0.0)
        # The reply arena and its overflow (codec.reply_arena): created here, opened by the child before it
        # runs anything untrusted, unlinked once the child is ready so no other process can open them by name.
        self.arena, opened = codec.reply_arena(f"{ARENA_PREFIX}{os.getpid()}-{os.urandom(8).hex()}", ARENA_BYTES)
        cfg = {**cfg, **opened}
        methods = ["forkserver", "forkserver", "spawn"] if ctx.get_start_method() == "forkserver" else ["spawn"]
        deadline = time.monotonic() + seconds
        errors: list[str] = []
        # A (re)started zygote or a spawned child takes its environment (Triton's mode included) from
        # os.environ at its exec, which child_environ cuts to the allow-list for that call alone: never
        # the caller's secrets. The zygote serves only its own device (zygote_context), so the mode is
        # the child's device either way.
        interpret = "1" if cfg["device"] == "cpu" else "0"
        with _ctx_lock, environ.child_environ(TRITON_INTERPRET=interpret):
            main = sys.modules.get("__main__")
            hidden = {k: getattr(main, k) for k in ("__file__", "__spec__") if hasattr(main, k)}
            try:
                # Children run functions of this package and never need the caller's script; without
                # this, multiprocessing re-imports it as __mp_main__ in every child, which re-runs an
                # unguarded script (a notebook export, a quick example) and kills the child at start-up.
                for k in hidden:
                    delattr(main, k) if k == "__file__" else setattr(main, k, None)
                for method in methods:
                    left = deadline - time.monotonic()
                    if left <= 0 and method != "spawn":
                        continue
                    try:
                        self.conn, self.process = self._launch(method, target, cfg, name, left)
                        break
                    except (OSError, EOFError) as exc:  # the zygote died or was killed by the watchdog
                        errors.append(f"{method}: {type(exc).__name__}: {exc}")
                        time.sleep(0.1)  # a zygote killed just now becomes reapable, and is restarted
                else:
                    self._unlink_arena()
                    raise ProcStartError(f"{name} could not be started: {'; '.join(errors)}")
            finally:
                for k, v in hidden.items():
                    setattr(main, k, v)
        self.pid: int = self.process.pid
        # Whether the child lives, asked of the kernel: multiprocessing asks the zygote, which
        # answers "dead" for every child once it died and nothing while it hangs.
        self._pidfd = _pidfd_open(self.pid)
        # Closed when the Proc is collected or at interpreter exit, which may come before an atexit hook
        # that still kills this process (the reward scorer's): `_pidfd_usable` says which.
        self._pidfd_closer = weakref.finalize(self, os.close, self._pidfd) if self._pidfd is not None else None
        self.started = time.monotonic()
        self.info: dict[str, Any] = {}
        self.served = 0  # jobs handed this process (a fresh one has served none)
        # On the CPU lane a limit counts the process's CPU seconds: on a box busy with other work it
        # gets less than a core, and a verdict must not depend on that (the interpreter is slow).
        self.cpu_clock = cfg["device"] == "cpu"

    @staticmethod
    def _launch(method: str, target: Callable, cfg: dict[str, Any], name: str, seconds: float) -> tuple[Any, Any]:
        ctx = multiprocessing.get_context(method)
        zygote = None
        if method == "forkserver":
            from multiprocessing import forkserver

            forkserver.ensure_running()  # starts a new zygote if the last one died (it reaps it)
            zygote = zygote_pid()
        conn, child = ctx.Pipe(duplex=True)
        process = ctx.Process(target=_child_main, args=(target, child, {**cfg, "die_with_zygote": bool(zygote)}),
                              name=name, daemon=True)
        # A start blocks until the zygote forks (a restarted one imports torch first); one that hangs
        # is killed, which ends the start with an EOF.
        watchdog = threading.Timer(max(seconds, 0.0), _kill_zygote, (zygote,)) if zygote else None
        try:
            if watchdog is not None:
                watchdog.daemon = True
                watchdog.start()
            process.start()
        except BaseException:
            conn.close()
            raise
        finally:
            if watchdog is not None:
                watchdog.cancel()
            child.close()
        return conn, process

    def _unlink_arena(self) -> None:
        if self.arena is not None:
            for arena in filter(None, (self.arena, self.arena.overflow)):
                try:
                    os.unlink(arena.path)
                except OSError:
                    pass

    def wait_ready(self, seconds: float) -> dict[str, Any]:
        try:
            self.info = self.receive(seconds, "start-up")
        finally:
            self._unlink_arena()
        if not self.info.get("ready"):
            raise ProcProtocol("worker did not report ready")
        return self.info

    def send(self, msg: dict[str, Any]) -> None:
        if msg.get("cmd") not in wirecheck.MID_COMMAND:
            self.serving = msg.get("cmd")
        try:
            self.conn.send_bytes(codec.encode(msg))
        except (BrokenPipeError, ConnectionResetError, OSError):
            raise ProcDied(self._exitcode(), "send") from None

    def _cpu_seconds(self) -> float | None:
        try:
            with open(f"/proc/{self.pid}/stat") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
            return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime
        except (OSError, IndexError, ValueError):
            return None

    def _starved(self, states: str = "RTt") -> bool:
        """Whether the process or a descendant (a compiler it waits on) is in one of `states` (runnable
        or stopped) in any of STATE_LOOKS looks: a busy box keeps such a process off its CPU. One whose
        every thread sleeps in each look (a lock it never gets, a corrupted heap's futex, `time.sleep`)
        is waiting on nothing the box withholds, and its limit stands."""
        for _ in range(STATE_LOOKS):
            for pid in (self.pid, *running.descendants(self.pid)):
                try:
                    tids = os.listdir(f"/proc/{pid}/task")
                except OSError:
                    continue
                for tid in tids:
                    try:
                        with open(f"/proc/{pid}/task/{tid}/stat") as fh:
                            state = fh.read().rsplit(")", 1)[1].split()[0]
                    except (OSError, IndexError):
                        continue
                    if state in states:
                        return True
            time.sleep(STATE_EVERY_S)
        return False

    def receive(self, seconds: float, phase: str) -> dict[str, Any]:
        start = time.monotonic()
        deadline, cpu0 = start + seconds, self._cpu_seconds() if self.cpu_clock else None
        last_cpu, moved = cpu0, start
        while True:
            if cpu0 is not None and time.monotonic() - moved >= STALL_S:
                used = self._cpu_seconds()
                if used != last_cpu or self._starved("RDTt"):  # ran, or waits on the disk or the box
                    last_cpu, moved = used, time.monotonic()
                elif self.alive():
                    raise ProcTimeout(phase, seconds, stalled=time.monotonic() - moved)
            left = deadline - time.monotonic()
            if left <= 0:
                # Past the wall limit: a CPU-lane process that has not yet used `seconds` of CPU and is
                # runnable was starved by other work on the box; it gets the CPU seconds it has left, up
                # to STARVED_WALL times the limit in wall time. One that sleeps is not starved.
                used, now = (self._cpu_seconds() if cpu0 is not None else None), time.monotonic()
                if (used is None or used - cpu0 >= seconds or now >= start + STARVED_WALL * seconds
                        or not self._starved()):
                    raise ProcTimeout(phase, seconds)
                deadline = min(start + STARVED_WALL * seconds, now + max(seconds - (used - cpu0), 0.05))
                continue
            try:
                ready = self.conn.poll(min(left, 0.5))
            except (EOFError, OSError):
                raise ProcDied(self._exitcode(), phase) from None
            if ready:
                self._arrived = (time.monotonic(), time.thread_time())
                try:
                    data = self.conn.recv_bytes()
                except (EOFError, OSError):
                    raise ProcDied(self._exitcode(), phase) from None
                try:
                    msg = codec.decode(data, self.arena)
                except codec.CodecError as exc:
                    raise ProcProtocol(f"malformed reply during {phase}: {exc}") from None
                if not isinstance(msg, dict):
                    raise ProcProtocol(f"reply during {phase} is not an object")
                if self.untrusted:
                    wrong = wirecheck.breach(self.serving, msg)
                    if wrong is not None:
                        raise ProcProtocol(f"a message during {phase} is not what `{self.serving or 'start-up'}` "
                                           f"may send: {wrong}")
                if self.arena is not None and "progress" not in msg and "trial" not in msg:
                    self.arena.settle()  # a command's reply: its messages' pages in the overflow go now
                return msg
            if not self.alive():
                raise ProcDied(self._exitcode(), phase)

    def begin(self, msg: dict[str, Any]) -> str:
        """Send one command; returns the nonce its reply must carry."""
        nonce = os.urandom(16).hex()
        self.send({**msg, "nonce": nonce})
        return nonce

    def finish(self, nonce: str, seconds: float, phase: str, total: float | None = None,
               on_progress: Callable[[str], None] | None = None, until: str | None = None,
               on_data: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
        """Wait for the reply to `nonce`. `progress` messages restart the per-phase clock (each call
        of `forward` is a phase) but never past `total`; `on_progress` hears each one's step, and
        `on_data` each one's whole message (a call's report, callstream.py), which is then dropped. With
        `until`, an announcement of that step ends the wait instead: {} then, the command still running."""
        hard = time.monotonic() + (total if total is not None else seconds)
        current = phase
        while True:
            left = min(seconds, hard - time.monotonic())
            if left <= 0:
                raise ProcTimeout(current, seconds)
            try:
                reply = self.receive(left, current)
            except ProcTimeout:
                raise ProcTimeout(current, seconds) from None
            if reply.get("nonce") != nonce:
                raise ProcProtocol(f"reply during {current} does not carry this command's nonce")
            if "progress" in reply:
                current = str(reply["progress"])[:100]
                if on_progress is not None:
                    on_progress(current)
                if on_data is not None:
                    on_data(reply)
                if reply.get("ack") is True:  # copied out: the child may write its next message over this one
                    self.send(protocol.Ack(cmd="ack", nonce=nonce))
                    self.handled_s += time.monotonic() - self._arrived[0]
                    self.handled_cpu_s += time.thread_time() - self._arrived[1]
                del reply  # a call's outputs: gone before the next message is read
                if current == until:
                    return {}
                continue
            return reply

    def until_step(self, nonce: str, step: str, seconds: float, phase: str) -> dict[str, Any] | None:
        """Wait, `seconds` in all, for the command `nonce` to announce `step`: None then, with the
        command still running; its final reply instead if it ends first (an error before the step)."""
        return self.finish(nonce, seconds, phase, total=seconds, until=step) or None

    def request(self, msg: dict[str, Any], seconds: float, phase: str, total: float | None = None,
                on_progress: Callable[[str], None] | None = None,
                on_data: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
        return self.finish(self.begin(msg), seconds, phase, total, on_progress, on_data=on_data)

    def _exitcode(self) -> int | None:
        self._wait_exit(2)
        self.process.join(timeout=2)  # the status comes from the zygote, when it answers
        return self.process.exitcode

    def _pidfd_usable(self) -> bool:
        return self._pidfd_closer is not None and self._pidfd_closer.alive

    def _wait_exit(self, seconds: float) -> bool:
        if not self._pidfd_usable():
            self.process.join(timeout=seconds)
            return not self.process.is_alive()
        return bool(select.select([self._pidfd], [], [], seconds)[0])

    def alive(self) -> bool:
        return not self._wait_exit(0)

    def kill(self) -> None:
        self._unlink_arena()
        try:
            os.killpg(self.pid, signal.SIGKILL)
        except OSError:
            pass
        try:
            if self._pidfd_usable():  # never a reused pid
                signal.pidfd_send_signal(self._pidfd, signal.SIGKILL)
            else:
                self.process.kill()
        except (OSError, ValueError, AttributeError):
            pass
        self._wait_exit(5)
        if self.arena is not None and not self.alive():
            self.arena.release()  # a reply it left unread (a death mid-message) frees its memory and disk now
        self.process.join(timeout=1)  # collects the exit status when the zygote answers
        try:
            self.conn.close()
        except OSError:
            pass
