"""The candidate policy as tables: which modules, names and calls a candidate may not use, and why.

Shared by the static layer (a cheap first filter on the source) and the in-process guard (which
enforces the same categories at run time for code that dodged the static layer).
"""
from __future__ import annotations

# Top-level modules a candidate may import. Everything else is refused with the category below.
ALLOWED_IMPORTS: frozenset[str] = frozenset(
    {"torch", "triton", "math", "typing", "functools", "itertools", "collections", "dataclasses",
     "numbers", "enum", "__future__", "abc"}
)

# Modules refused with a category a person can act on (others: "import of <name> is not allowed").
MODULE_CATEGORY: dict[str, str] = {
    **{m: "process" for m in ("os", "subprocess", "multiprocessing", "pty", "posix", "_posixsubprocess",
                              "pexpect", "sh", "spawn", "runpy")},
    **{m: "network" for m in ("socket", "_socket", "ssl", "http", "urllib", "urllib3", "requests",
                              "ftplib", "smtplib", "asyncio", "selectors", "select", "xmlrpc", "telnetlib")},
    **{m: "file" for m in ("io", "_io", "pathlib", "tempfile", "shutil", "glob", "fileinput", "mmap",
                           "pickle", "shelve", "sqlite3", "zipfile", "tarfile")},
    **{m: "ctypes" for m in ("ctypes", "_ctypes", "cffi")},
    **{m: "threads" for m in ("threading", "_thread", "concurrent", "queue")},
    **{m: "signal" for m in ("signal", "faulthandler", "resource", "atexit")},
    **{m: "timer" for m in ("time", "timeit", "datetime")},
    **{m: "introspection" for m in ("sys", "gc", "inspect", "traceback", "builtins", "importlib", "code",
                                    "codeop", "marshal", "types", "dis", "weakref", "ast", "linecache",
                                    "operator", "copyreg", "pdb")},
    **{m: "foreign compute" for m in ("numpy", "cupy", "numba", "jax", "jaxlib", "scipy", "tensorflow",
                                      "pycuda", "cuda", "tvm", "tilelang")},
    "distill": "harness", "tritonforge": "harness", "synth": "harness", "pytest": "harness",
}

# torch submodules that reach compilers, the dispatcher or process machinery.
FORBIDDEN_TORCH_PREFIXES: dict[str, str] = {
    "torch.compile": "torch.compile", "torch._dynamo": "torch.compile", "torch._inductor": "torch.compile",
    "torch.compiler": "torch.compile", "torch.jit": "torch.compile", "torch.export": "torch.compile",
    "torch.fx": "torch.compile", "torch.library": "torch patching", "torch.utils": "introspection",
    "torch.multiprocessing": "process", "torch.distributed": "network", "torch.testing": "harness",
    "torch.overrides": "torch patching", "torch.backends": "torch patching", "torch.hub": "network",
    "triton.testing": "timer", "triton.runtime": "harness", "triton.knobs": "harness",
    "triton.compiler": "harness", "triton.backends": "harness", "triton.tools": "harness",
}

# Library modules re-exported as attributes (`torch.os`, `torch.ctypes`, `torch.nn.functional.np`):
# reaching them through torch is the same as importing them.
# Curated, not derived from MODULE_CATEGORY: `torch.cuda`, `torch.select`, `torch.signal` and
# `torch.types` are torch's own and must stay usable.
REEXPORTED_MODULES: dict[str, str] = {
    "os": "process", "subprocess": "process", "multiprocessing": "process", "sys": "introspection",
    "gc": "introspection", "inspect": "introspection", "importlib": "introspection", "builtins": "introspection",
    "traceback": "introspection", "weakref": "introspection", "ctypes": "ctypes", "threading": "threads",
    "socket": "network", "shutil": "file", "tempfile": "file", "pickle": "file", "time": "timer",
    "np": "foreign compute", "numpy": "foreign compute",
}

# Builtin calls refused outright (dynamic code, files, introspection).
FORBIDDEN_CALLS: dict[str, str] = {
    "eval": "dynamic code", "exec": "dynamic code", "compile": "dynamic code", "__import__": "dynamic code",
    "open": "file", "globals": "introspection", "locals": "introspection", "vars": "introspection",
    "breakpoint": "introspection", "input": "process", "memoryview": "introspection", "exit": "process",
    "quit": "process", "help": "introspection", "setattr": "torch patching", "delattr": "torch patching",
}

# Dunder attributes a candidate may touch; all others are introspection.
ALLOWED_DUNDERS: frozenset[str] = frozenset({"__init__", "__name__", "__doc__", "__future__"})

# Names of the reference problem that a candidate must not reuse.
REFERENCE_NAMES: frozenset[str] = frozenset({"Model"})

# Categories reported as `forbidden` (DESIGN §4); any other finding would be a bug in this table.
CATEGORIES: frozenset[str] = frozenset(
    {"process", "network", "file", "ctypes", "threads", "signal", "timer", "introspection",
     "foreign compute", "harness", "torch.compile", "torch patching", "reference reuse",
     "try/except fallback", "dynamic code", "import"}
)


def module_category(dotted: str) -> str | None:
    """Why importing `dotted` is refused, or None if it is allowed."""
    for prefix, cat in FORBIDDEN_TORCH_PREFIXES.items():
        if dotted == prefix or dotted.startswith(prefix + "."):
            return cat
    top = dotted.split(".", 1)[0]
    if top in ALLOWED_IMPORTS:
        if any(part.startswith("_") and part != "__future__" for part in dotted.split(".")[1:]):
            return "introspection"
        return None
    return MODULE_CATEGORY.get(top, "import")
