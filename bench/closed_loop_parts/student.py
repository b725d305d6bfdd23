"""Stage `student`: a Llama built from scratch (tokenizer trained on the SFT text), then SFT with TRL's SFTTrainer.

The SFT rows (`tritonforge export --format sft`) become prompt/completion pairs (the system and user
turns, then the verified answer), so the loss is on the answer only, as README's "Train on the
data" shows. Rows longer than `max_length` tokens are left out, never cut: a truncated answer
teaches a module that does not parse. The base (random) model is kept beside the SFT one: it is
what the `base` evaluation measures.
"""
from __future__ import annotations

import math
import shutil
import time
from typing import Any

from closed_loop_parts.common import Layout, StageClock, StageError, write_json
from closed_loop_parts.profiles import Profile

MAX_PARAMETERS = 100_000_000


def sft_rows(lay: Layout) -> list[dict[str, Any]]:
    from curriculum.schemas import SFT_SCHEMA
    from curriculum.shards import read_folder

    rows = read_folder(lay.sft, SFT_SCHEMA).select(["messages", "level"]).to_pylist()
    if not rows:
        raise StageError(f"{lay.sft} holds no SFT rows: run the `data` stage first (or it verified nothing)")
    return rows


def corpus(rows: list[dict[str, Any]]) -> list[str]:
    """The tokenizer's training text: every turn of every SFT conversation, and the template's role names."""
    return ["system\nuser\nassistant\n"] + [m["content"] for r in rows for m in r["messages"]]


def build_student(lay: Layout, p: Profile, rows: list[dict[str, Any]]) -> dict[str, Any]:
    from pipelines.grpo.tiny_model import build_llama, llama_parameters

    params = llama_parameters(p.vocab_size, p.hidden_size, p.num_layers, p.intermediate_size)
    if params > MAX_PARAMETERS:
        raise StageError(f"profile {p.name}: {params / 1e6:.1f}M parameters, more than the 100M the issue allows")
    build_llama(lay.base, corpus(rows), vocab_size=p.vocab_size, seed=p.seed, hidden_size=p.hidden_size,
                num_layers=p.num_layers, num_heads=p.num_heads, intermediate_size=p.intermediate_size)
    from transformers import AutoConfig

    cfg = AutoConfig.from_pretrained(lay.base)
    return {"vocab_size": cfg.vocab_size, "hidden_size": cfg.hidden_size, "num_layers": cfg.num_hidden_layers,
            "num_heads": cfg.num_attention_heads, "intermediate_size": cfg.intermediate_size,
            "parameters": llama_parameters(cfg.vocab_size, cfg.hidden_size, cfg.num_hidden_layers,
                                           cfg.intermediate_size)}


def _quantile(xs: list[int], q: float) -> int:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else 0


def pairs(rows: list[dict[str, Any]], tok: Any, max_length: int) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Prompt/completion pairs that fit `max_length` tokens, and token statistics of prompts and answers."""
    kept, answer_tokens, prompt_tokens, dropped = [], [], [], 0
    for r in rows:
        prompt, answer = list(r["messages"][:-1]), r["messages"][-1:]
        n_prompt = len(tok.apply_chat_template(prompt, add_generation_prompt=True, tokenize=True, return_dict=False))
        n_answer = len(tok(answer[0]["content"], add_special_tokens=False)["input_ids"]) + 2   # <|im_end|>, newline
        prompt_tokens.append(n_prompt)
        answer_tokens.append(n_answer)
        if n_prompt + n_answer > max_length:
            dropped += 1
            continue
        kept.append({"prompt": prompt, "completion": answer})
    stats = {"rows": len(rows), "kept": len(kept), "dropped_too_long": dropped,
             "prompt_tokens": {"p50": _quantile(prompt_tokens, 0.5), "max": max(prompt_tokens, default=0)},
             "answer_tokens": {"p50": _quantile(answer_tokens, 0.5), "p95": _quantile(answer_tokens, 0.95),
                               "max": max(answer_tokens, default=0)}}
    return kept, stats


def max_new_tokens(p: Profile, stats: dict[str, Any]) -> int:
    """Generation length for evaluation and GRPO: the profile's, or 1.25 x the longest SFT answer (capped)."""
    if p.eval_max_new_tokens > 0:
        return p.eval_max_new_tokens
    return min(p.eval_max_new_tokens_cap, math.ceil(1.25 * stats["answer_tokens"]["max"]))


def run(lay: Layout, p: Profile, budget_s: float | None) -> dict[str, Any]:
    """Build the student, SFT it, save it to student/sft; writes stages/student.json (with the settings)."""
    with StageClock(lay, "student", p.device) as clock:
        rows = sft_rows(lay)   # first: a missing input is said in a second, not after ~10 s of imports
        import torch
        from datasets import Dataset
        from transformers import AutoModelForCausalLM, AutoTokenizer
        from trl import SFTConfig, SFTTrainer

        from pipelines.grpo.trainer import TimeBudget

        model_info = build_student(lay, p, rows)
        tok = AutoTokenizer.from_pretrained(lay.base)
        kept, stats = pairs(rows, tok, p.sft_max_length)
        if not kept:
            raise StageError(f"no SFT row fits {p.sft_max_length} tokens")
        cuda = p.device == "cuda"
        if cuda and not torch.cuda.is_available():
            raise StageError("profile wants cuda, but torch sees no GPU")
        shutil.rmtree(lay.sft_run, ignore_errors=True)
        args = SFTConfig(
            output_dir=str(lay.sft_run), max_length=None, per_device_train_batch_size=p.sft_batch,
            num_train_epochs=p.sft_epochs, max_steps=p.sft_max_steps, learning_rate=p.sft_lr,
            lr_scheduler_type="cosine", warmup_steps=0.03, weight_decay=0.1, max_grad_norm=1.0,
            bf16=cuda, use_cpu=not cuda, logging_steps=max(1, p.sft_max_steps // 20) if p.sft_max_steps > 0 else 20,
            save_strategy="no", report_to=[], seed=p.seed, disable_tqdm=True, gradient_checkpointing=False,
            train_sampling_strategy="group_by_length", dataset_num_proc=None,
        )
        model = AutoModelForCausalLM.from_pretrained(lay.base, dtype=torch.float32)
        budget = TimeBudget(budget_s or p.sft_budget_s, save=False)   # the model is saved below
        trainer = SFTTrainer(model=model, args=args, train_dataset=Dataset.from_list(kept), processing_class=tok,
                             callbacks=[budget])
        t0 = time.perf_counter()
        result = trainer.train()
        train_s = time.perf_counter() - t0
        shutil.rmtree(lay.sft_model, ignore_errors=True)
        trainer.save_model(str(lay.sft_model))
        tok.save_pretrained(lay.sft_model)
        shutil.copy(lay.base / "generation_config.json", lay.sft_model / "generation_config.json")
        losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
        info = {"model": model_info, "sft_data": stats, "max_new_tokens": max_new_tokens(p, stats),
                "steps": trainer.state.global_step, "max_steps": trainer.state.max_steps,
                "stopped_by_budget": budget.stopped, "train_seconds": round(train_s, 1),
                "train_loss": result.training_loss, "loss_first_last": [losses[0], losses[-1]] if losses else None,
                "loss_curve": losses}
        clock.extra.update(info)
        write_json(lay.out / "student.json", info)
    return info
