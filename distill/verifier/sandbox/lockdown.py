"""Kernel-level confinement of a worker process: network namespace, Landlock, seccomp, capabilities.

Called once in a fresh worker before any candidate code exists. Each layer is tried and its outcome
reported (never silently assumed): `LockdownReport` goes back to the parent and into every verdict's
`checks["sandbox"]`. Landlock also scopes ptrace, so a worker cannot read the parent's memory.

What enforces each rule (CPU lane | GPU lane), with the case that tests it (cases.json):
  no process starts           seccomp: no fork/exec at all | Landlock execute: only the toolchain's
                              files; the audit hook: only inside Triton's own launches (triton_build_helper)
  no native code              seccomp + Landlock execute | Landlock execute; the audit hook: ctypes,
                              and native modules from outside the installation only in Triton's launches
  writes only in scratch      Landlock (both); the audit hook for Python paths (torch_save_outside)
  reads                       Landlock read rules (both): an allow-list (readable(): the installation,
                              system libraries, the toolchain, scratch); not /tmp, home, /etc's secrets
                              (read_outside_allowlist); of /proc only its own entries but its memory
                              (proc_self_mem), however spelled; the hook too (proc_dotdot)
  compile caches              one per candidate, seeded from a template Landlock keeps read-only (both)
  stdout, stderr, files, disk RLIMIT_FSIZE + seccomp (no setrlimit); scratch total measured after
                              each step (both; caps.py) (stdout_flood, disk_filler)
  device memory               - | torch's allocator fraction, setter guarded (hog_device_memory)
  network                     netns (both)
"""
from __future__ import annotations

import ctypes
import errno
import glob
import os
from dataclasses import asdict, dataclass

_libc = ctypes.CDLL(None, use_errno=True)
_SYS = {"landlock_create_ruleset": 444, "landlock_add_rule": 445, "landlock_restrict_self": 446,
        "capset": 126, "unshare": 272}
PR_SET_NO_NEW_PRIVS, PR_CAPBSET_DROP = 38, 24
CLONE_NEWNET, CLONE_NEWUSER, CLONE_THREAD = 0x40000000, 0x10000000, 0x00010000
# Landlock filesystem rights by bit; the ABI version says how many exist.
_FS_BITS_BY_ABI = {1: 13, 2: 14, 3: 15, 4: 15, 5: 16}
LL_EXECUTE, LL_WRITE_FILE, LL_READ_FILE, LL_READ_DIR, LL_TRUNCATE, LL_IOCTL_DEV = 1, 2, 4, 8, 1 << 14, 1 << 15
_FILE_RIGHTS = LL_EXECUTE | LL_WRITE_FILE | LL_READ_FILE | LL_TRUNCATE | LL_IOCTL_DEV


@dataclass
class LockdownReport:
    netns: str = "not tried"
    landlock: str = "not tried"
    seccomp: str = "not tried"
    capabilities: str = "not tried"
    no_new_privs: bool = False

    def to_dict(self) -> dict:
        return asdict(self)


def _syscall(name: str, *args: object) -> int:
    res = _libc.syscall(_SYS[name], *args)
    if res < 0:
        raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))
    return res


def unshare_network() -> str:
    """A private network namespace (only loopback, down). Falls back to a user namespace if not root."""
    try:
        _syscall("unshare", CLONE_NEWNET)
        return "ok (CLONE_NEWNET)"
    except OSError as exc:
        first = exc.strerror
    try:
        uid, gid = os.getuid(), os.getgid()
        _syscall("unshare", CLONE_NEWUSER | CLONE_NEWNET)
        for path, text in (("/proc/self/setgroups", "deny"), ("/proc/self/uid_map", f"{uid} {uid} 1"),
                           ("/proc/self/gid_map", f"{gid} {gid} 1")):
            with open(path, "w") as fh:
                fh.write(text)
        return "ok (user namespace + CLONE_NEWNET)"
    except OSError as exc:
        return f"unavailable: {first}; user namespace: {exc.strerror}"


def _landlock_abi() -> int:
    try:
        return _syscall("landlock_create_ruleset", None, 0, 1)
    except OSError:
        return 0


def landlock(write_dirs: list[str], exec_files: list[str], device_files: list[str], read_paths: list[str]) -> str:
    """Read only `read_paths` (readable(): the installation, the toolchain, system libraries) and
    this process's own /proc entries but its memory; write only beneath `write_dirs`; execute only
    `exec_files`; no TCP; scoped."""
    abi = _landlock_abi()
    if abi <= 0:
        return "unavailable (kernel without Landlock)"
    fs_all = (1 << _FS_BITS_BY_ABI.get(abi, 16)) - 1
    fields = [fs_all]
    if abi >= 4:
        fields.append(0b11)  # BIND_TCP | CONNECT_TCP, with no rule granting either
    if abi >= 6:
        fields.append(0b11)  # scope abstract unix sockets and signals to this domain
    attr = (ctypes.c_uint64 * len(fields))(*fields)
    fd = _syscall("landlock_create_ruleset", ctypes.byref(attr), ctypes.sizeof(attr), 0)

    class PathBeneath(ctypes.Structure):
        _pack_ = 1
        _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]

    def allow(path: str, access: int) -> None:
        pfd = os.open(path, os.O_PATH | os.O_CLOEXEC)
        try:
            if not os.path.isdir(path):
                access &= _FILE_RIGHTS
            rule = PathBeneath(access & fs_all, pfd)
            _syscall("landlock_add_rule", fd, 1, ctypes.byref(rule), 0)
        finally:
            os.close(pfd)

    try:
        for path in read_paths:
            try:
                allow(path, LL_READ_FILE | LL_READ_DIR)
            except OSError:
                continue
        # In /proc, only this process's own entries (however the path is spelled: '..', /proc/self
        # links) and a few system-wide files: another process's environ, maps or fds stay out of
        # reach, whichever code (C++ too) opens them. Of its own, not its memory (mem, and each
        # thread's under task/, listed but not opened): the harness's records and secrets live there.
        own = os.path.join("/proc", str(os.getpid()))
        for name in os.listdir(own):
            # Not its links (root, cwd, exe): a rule on one would be a rule on what it points to, "/".
            if name not in _PROC_UNREADABLE and not os.path.islink(os.path.join(own, name)):
                try:
                    allow(os.path.join(own, name), LL_READ_DIR if name in _PROC_LIST_ONLY else LL_READ_FILE | LL_READ_DIR)
                except OSError:
                    continue
        for name in _PROC_SHARED:
            if os.path.exists(os.path.join("/proc", name)):
                allow(os.path.join("/proc", name), LL_READ_FILE | LL_READ_DIR)
        for d in write_dirs:
            allow(d, fs_all & ~LL_EXECUTE)
        for f in exec_files:  # a toolchain's folder: its helpers are found by listing it
            allow(f, LL_EXECUTE | LL_READ_FILE | LL_READ_DIR)
        for f in device_files:
            allow(f, LL_READ_FILE | LL_WRITE_FILE | LL_IOCTL_DEV)
        _syscall("landlock_restrict_self", fd, 0)
    finally:
        os.close(fd)
    return f"ok (ABI {abi}, reads: an allow-list)"


# System-wide /proc entries that torch, glibc and the CUDA driver read.
_PROC_SHARED = ("cpuinfo", "meminfo", "stat", "sys", "driver", "devices", "modules", "filesystems", "version",
                "loadavg", "uptime", "pressure")
# A process's own /proc entries that read its (or its threads') memory or physical layout.
_PROC_UNREADABLE = frozenset({"mem", "pagemap", "map_files", "syscall", "stack"})
_PROC_LIST_ONLY = frozenset({"task", "fd"})  # listed (thread counts, closing fds); task/N/mem stays shut
# System folders of libraries, headers and the toolchain (whatever exists of them), and the few files
# of /etc the dynamic loader, time zones and user lookups read. Not /etc as a whole (shadow, keys,
# an environment file), not /tmp, /home, /root, /var, /srv, /mnt, /run, /opt or a work tree.
_SYSTEM_READ = ("/usr", "/lib", "/lib64", "/lib32", "/libx32", "/bin", "/sbin", "/sys")
_ETC_READ = ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "localtime", "timezone", "zoneinfo", "nsswitch.conf",
             "passwd", "group", "host.conf", "hosts", "gai.conf", "os-release", "lsb-release", "debian_version",
             "alternatives", "mime.types", "nvidia", "OpenCL", "vulkan", "gcc")


def readable(extra: list[str]) -> list[str]:
    """What a worker may read (Landlock rules, beneath each path): the system folders above, the
    Python installation and environment (sys.prefix, base_prefix: stdlib, site-packages, headers),
    and `extra` (the pool's trusted code roots, the verifier's package, its template cache). The
    toolchain and scratch get their own rules; /proc and /dev theirs."""
    import sys

    paths = list(_SYSTEM_READ) + [os.path.join("/etc", n) for n in _ETC_READ]
    paths += [sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix] + list(extra)
    return sorted({os.path.realpath(p) for p in paths if p and os.path.exists(p)})


def default_device_files() -> list[str]:
    names = ["/dev/null", "/dev/zero", "/dev/full", "/dev/urandom", "/dev/random"]
    return [p for p in names + sorted(glob.glob("/dev/nvidia*")) if os.path.exists(p)]


class _ArgCmp(ctypes.Structure):
    _fields_ = [("arg", ctypes.c_uint), ("op", ctypes.c_int), ("a", ctypes.c_uint64), ("b", ctypes.c_uint64)]


_NE, _LT, _GT, _MASKED_EQ = 1, 2, 6, 7
_DENY_ALWAYS = ("socket", "ptrace", "process_vm_readv", "process_vm_writev", "pidfd_getfd", "kcmp", "mount",
                "umount2", "pivot_root", "chroot", "unshare", "setns", "swapon", "swapoff", "reboot",
                "kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module", "bpf",
                "perf_event_open", "userfaultfd", "keyctl", "add_key", "request_key", "acct", "quotactl",
                "settimeofday", "clock_settime", "clock_adjtime", "adjtimex", "sethostname", "setdomainname",
                "iopl", "ioperm", "open_by_handle_at", "name_to_handle_at", "setrlimit", "tkill",
                "pidfd_send_signal", "fanotify_init", "io_uring_setup", "mount_setattr", "move_mount",
                "open_tree", "fsopen", "fsmount")
_DENY_CHILDREN = ("fork", "vfork", "execve", "execveat")


def seccomp(no_children: bool, no_signal_handlers: bool) -> str:
    """Deny dangerous syscalls (EPERM); clone3 answers ENOSYS so glibc falls back to a filterable clone."""
    lib = None
    for name in ("libseccomp.so.2", "libseccomp.so"):  # find_library would spawn gcc/ldconfig
        try:
            lib = ctypes.CDLL(name, use_errno=True)
            break
        except OSError:
            continue
    if lib is None:
        return "unavailable (no libseccomp)"
    lib.seccomp_init.restype = ctypes.c_void_p
    lib.seccomp_init.argtypes = [ctypes.c_uint32]
    lib.seccomp_rule_add_array.argtypes = [ctypes.c_void_p, ctypes.c_uint32, ctypes.c_int, ctypes.c_uint,
                                           ctypes.POINTER(_ArgCmp)]
    lib.seccomp_syscall_resolve_name.argtypes = [ctypes.c_char_p]
    lib.seccomp_attr_set.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_uint32]
    lib.seccomp_load.argtypes = [ctypes.c_void_p]
    lib.seccomp_release.argtypes = [ctypes.c_void_p]
    allow, eperm, enosys = 0x7FFF0000, 0x00050000 | errno.EPERM, 0x00050000 | errno.ENOSYS
    ctx = lib.seccomp_init(allow)
    if not ctx:
        return "failed: seccomp_init"
    pid = os.getpid()

    def rule(action: int, syscall: str, *cmps: tuple[int, int, int, int]) -> None:
        nr = lib.seccomp_syscall_resolve_name(syscall.encode())
        if nr < 0:
            return
        arr = (_ArgCmp * max(len(cmps), 1))(*[_ArgCmp(*c) for c in cmps])
        rc = lib.seccomp_rule_add_array(ctx, action, nr, len(cmps), arr)
        if rc < 0:
            raise OSError(-rc, f"seccomp rule for {syscall}")

    try:
        lib.seccomp_attr_set(ctx, 4, 1)  # SCMP_FLTATR_CTL_TSYNC: every thread of the process
        for sc in _DENY_ALWAYS:
            rule(eperm, sc)
        rule(eperm, "prlimit64", (2, _NE, 0, 0))
        rule(enosys, "clone3")
        for sc in ("kill", "tgkill", "rt_sigqueueinfo", "rt_tgsigqueueinfo"):  # only ourselves
            rule(eperm, sc, (0, _LT, pid, 0))
            rule(eperm, sc, (0, _GT, pid, 0))
        if no_children:
            for sc in _DENY_CHILDREN:
                rule(eperm, sc)
            rule(eperm, "clone", (0, _MASKED_EQ, CLONE_THREAD, 0))
        if no_signal_handlers:
            rule(eperm, "rt_sigaction", (1, _NE, 0, 0))
        rc = lib.seccomp_load(ctx)
        if rc < 0:
            return f"failed: seccomp_load {os.strerror(-rc)}"
    except OSError as exc:
        return f"failed: {exc}"
    finally:
        lib.seccomp_release(ctx)
    extra = ", no child processes" if no_children else ", child processes allowed (Triton's ptxas and C compiler)"
    return "ok (sockets, ptrace, mounts, namespaces, foreign signals denied" + extra + ")"


def drop_capabilities() -> str:
    try:
        for cap in range(64):
            if _libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 and ctypes.get_errno() == errno.EINVAL:
                break
        header = (ctypes.c_uint32 * 2)(0x20080522, 0)
        data = (ctypes.c_uint32 * 6)()
        _syscall("capset", ctypes.byref(header), ctypes.byref(data))
        return "ok (all dropped)"
    except OSError as exc:
        return f"failed: {exc.strerror}"


LAYERS = ("netns", "landlock", "seccomp", "capabilities")
# What `lockdown=True` means per device: every layer on both. On the H100 box Landlock once made
# every GPU compile fail with EACCES: its `gcc` is a dash script in /opt/gcc that starts helpers
# `-print-prog-name` does not list; trusted.toolchain() now allows the script's interpreter and
# such a toolchain's own folder (bench/probe_gpu_sandbox.py, 2026-11-24).
DEFAULT_LAYERS = {"cpu": LAYERS, "cuda": LAYERS}


def lock_down(scratch: str, exec_files: list[str], no_children: bool, layers: tuple[str, ...] = LAYERS,
              netns: str | None = None, read_paths: list[str] | None = None) -> LockdownReport:
    """Apply the requested layers that this kernel allows, each while it still has its privileges.

    `netns` is the outcome of an `unshare_network()` done earlier (it must precede any thread).
    `read_paths`: what Landlock lets the worker read besides its own (default: readable([])).
    """
    rep = LockdownReport(**{k: "disabled" for k in LAYERS if k not in layers})
    rep.netns = netns if netns is not None else (unshare_network() if "netns" in layers else "disabled")
    rep.no_new_privs = _libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0
    if "landlock" in layers:
        try:
            rep.landlock = landlock([scratch], [f for f in exec_files if os.path.exists(f)], default_device_files(),
                                    read_paths if read_paths is not None else readable([]))
        except OSError as exc:
            rep.landlock = f"failed: {exc.strerror}"
    if "seccomp" in layers:
        rep.seccomp = seccomp(no_children=no_children, no_signal_handlers=no_children)
    if "capabilities" in layers:
        rep.capabilities = drop_capabilities()
    return rep


PR_SET_CHILD_SUBREAPER = 36


def become_subreaper() -> bool:
    """Orphaned descendants are re-parented to this process (running.py finds them in its tree)."""
    return _libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0


def close_inherited_fds(keep: int) -> None:
    """Close every descriptor but stdio and our pipe: multiprocessing hands children the
    forkserver's liveness pipe and the resource tracker's pipe, which candidate code could
    otherwise write into (and take the zygote down for every worker)."""
    fds = [int(fd) for fd in os.listdir("/proc/self/fd") if fd.isdigit()]
    for fd in fds:
        if fd > 2 and fd != keep:
            try:
                os.close(fd)
            except OSError:
                pass
