# %% [markdown]
# # TritonForge quickstart
# Sample problems, look at one, get a verified Triton solution from the `lowering` teacher, and read
# a built dataset with `datasets`. Run as a script (`python examples/quickstart.py [BUILD_DIR]`) or
# cell by cell in a notebook (VS Code / Jupytext `# %%` cells). BUILD_DIR defaults to `out/demo`,
# which `make demo` creates.

# %%
import os
import sys

os.environ.setdefault("TRITON_INTERPRET", "1")  # CPU: run Triton kernels through the interpreter

import synth

problems = synth.sample(4, levels=[1, 2], seed=0)
for p in problems:
    print(p.problem_id, p.ops, p.input_shapes, "->", p.output_shapes)

# %% [markdown]
# In a notebook, `problems[0]` alone shows the source, the ops, the shapes and a drawing of the graph.

# %%
problem = problems[-1]
print(problem.summary())
print(problem.source)

# %% [markdown]
# ## A verified solution
# The `lowering` teacher compiles the problem's graph to Triton kernels, no model needed; the
# verifier runs the candidate in a sandboxed worker and compares it with the reference.

# %%
from distill.teacher.base import TeacherRequest, make_teacher
from distill.teacher.extract import extract
from distill.verifier import verify

with make_teacher("lowering") as teacher:
    (completion,) = teacher.generate([TeacherRequest(problem, [], 0, (0,), 0)])
answer = extract(completion.text, completion.finish_reason)
print((completion.reasoning or answer.reasoning or "")[:600])
print(answer.code[answer.code.find("class ModelNew"):][:1500])  # the module; its kernels come before it
verdict = verify(problem, answer.code, device="cpu")
print("verdict:", verdict.status, "-", verdict.reason)

# %% [markdown]
# ## Reading a built dataset
# Every config of the dataset card loads with `datasets`, locally exactly as from the Hub.

# %%
from datasets import load_dataset

build_dir = sys.argv[1] if len(sys.argv) > 1 else "out/demo"
sft = load_dataset(build_dir, "sft", split="train")
stage1 = load_dataset(build_dir, "stage1", split="train")
print(sft)
print(sft[0]["messages"][-1]["content"][:400])
print(stage1[0]["prompt"][-1]["content"][:400])
