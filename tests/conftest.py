import os

# Triton kernels run on the CPU through the interpreter in this suite.
os.environ.setdefault("TRITON_INTERPRET", "1")
