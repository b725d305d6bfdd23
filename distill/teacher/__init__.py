"""distill.teacher: ask a teacher for Triton candidates, extract them, loop failed verdicts back.

A teacher is a vLLM engine, an OpenAI-compatible server, a replay file or the reference lowering;
a failed verdict goes back to it for repair.

Backends load lazily through `make_teacher("vllm:PATH" | "openai:URL" | "replay:FILE" | "lowering")`;
the interface every backend implements is documented in `distill.teacher.base`.
"""
from distill.teacher.base import (
    Completion,
    SamplingConfig,
    Teacher,
    TeacherOptions,
    TeacherRequest,
    TeacherSpecError,
    derive_seed,
    make_teacher,
    parse_spec,
)
from distill.teacher.extract import Extraction, extract
from distill.teacher.prompts import PromptSet, list_prompts, load_prompts
from distill.teacher.records import Attempt, read_samples, samples_schema, write_samples
from distill.teacher.refine import run_distill

__all__ = [
    "Attempt", "Completion", "Extraction", "PromptSet", "SamplingConfig", "Teacher", "TeacherOptions",
    "TeacherRequest", "TeacherSpecError", "derive_seed", "extract", "list_prompts", "load_prompts",
    "make_teacher", "parse_spec", "read_samples", "run_distill", "samples_schema", "write_samples",
]
