"""The policy: a transformers causal LM from a local folder (optionally with LoRA), its device and precision.

Weights train in fp32 (master weights); on a GPU the forward passes run under bf16 autocast, which
is the usual mixed-precision recipe and keeps a resumed run exact. A run that resumes loads the
checkpoint's weights instead of the configured model's.
"""
from __future__ import annotations

import contextlib
import copy
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import torch

from pipelines.grpo.config import ModelConfig


@dataclass
class Policy:
    model: Any
    tokenizer: Any
    device: torch.device
    autocast: Callable[[], Any] | None     # a context factory for forward passes, or None (fp32)
    reference: Any | None = None           # frozen reference for the KL term (None when beta == 0)

    @contextlib.contextmanager
    def forward_ctx(self):
        if self.autocast is None:
            yield
        else:
            with self.autocast():
                yield

    def reference_ctx(self):
        """Context in which `reference_model` computes the reference log-probabilities."""
        if self.reference is None and hasattr(self.model, "disable_adapter"):
            return self.model.disable_adapter()
        return contextlib.nullcontext()

    @property
    def reference_model(self) -> Any:
        return self.reference if self.reference is not None else self.model


def pick_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("model.device = 'cuda' but no CUDA device is available")
    return torch.device(name)


def _autocast(device: torch.device, precision: str) -> Callable[[], Any] | None:
    if precision == "fp32" or (precision == "auto" and device.type != "cuda"):
        return None
    return lambda: torch.autocast(device_type=device.type, dtype=torch.bfloat16)


def load_policy(cfg: ModelConfig, beta: float, checkpoint: Path | None = None) -> Policy:
    """Build the policy from `cfg.path` (building a tiny model there first if asked), or from a checkpoint."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = Path(cfg.path)
    if not (path / "config.json").exists():
        if not cfg.build_tiny:
            raise FileNotFoundError(f"model.path: no Hugging Face model at {path} (set model.build_tiny = true "
                                    "to build a tiny local one there)")
        from pipelines.grpo.tiny_model import build_tiny_llama

        build_tiny_llama(path)
    device = pick_device(cfg.device)
    tokenizer = AutoTokenizer.from_pretrained(path)
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    base = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    reference = None
    if cfg.lora is not None:
        from peft import LoraConfig, PeftModel, get_peft_model

        if checkpoint is not None:
            model = PeftModel.from_pretrained(base, checkpoint / "model", is_trainable=True)
        else:
            model = get_peft_model(base, LoraConfig(r=cfg.lora.r, lora_alpha=cfg.lora.alpha,
                                                    lora_dropout=cfg.lora.dropout,
                                                    target_modules=list(cfg.lora.target_modules),
                                                    task_type="CAUSAL_LM"))
        # the reference is the base model: adapters disabled (no second copy in memory)
    else:
        if beta > 0:
            reference = copy.deepcopy(base)  # the starting policy, frozen
            reference.requires_grad_(False).eval().to(device)
        model = base
        if checkpoint is not None:
            model = AutoModelForCausalLM.from_pretrained(checkpoint / "model", dtype=torch.float32)
    model.to(device)
    model.train()
    if hasattr(model, "config"):
        model.config.use_cache = False  # training passes; the sampler asks for the cache itself
    return Policy(model, tokenizer, device, _autocast(device, cfg.precision), reference)


def make_optimizer(model: Any, lr: float, weight_decay: float) -> torch.optim.Optimizer:
    params = [p for p in model.parameters() if p.requires_grad]
    return torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay)
