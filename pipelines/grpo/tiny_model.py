"""Builds a tiny random-weight Llama with a locally trained tokenizer, for tests, benchmarks and grpo-tiny.

Nothing may be downloaded on these machines, so every model-driven test runs against a model made
here: 2 layers, hidden 128, 2 heads (head_dim 64 — vLLM's CPU attention rejects smaller heads), a
byte-level BPE tokenizer trained with `tokenizers` on the project's own prompt templates, a
ChatML-style chat template, and a deliberately unhelpful `generation_config.json` (tiny
`max_new_tokens`, odd temperature) so tests can show samplers ignore it on purpose.

`build_llama` is the general form: any size, a tokenizer trained on the texts given (the closed-loop
bench trains its student's tokenizer on the SFT text) and a greedy generation config by default.

Run as a module to build one: `python -m pipelines.grpo.tiny_model OUT_DIR`.
"""
from __future__ import annotations

import json
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
SPECIALS = ["<|pad|>", "<|bos|>", "<|eos|>", "<|im_start|>", "<|im_end|>"]
# What the model's own generation_config.json asks for. Samplers must not let these leak in:
# the teacher tests check completions run past 8 tokens and that provenance records this file.
HOSTILE_GENERATION_CONFIG = {"max_new_tokens": 8, "temperature": 0.05, "top_p": 0.5}


def _corpus() -> list[str]:
    from synth.catalog import DATA_DIR

    texts = []
    for path in sorted((DATA_DIR / "prompts").rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts:   # an installed copy has byte-compiled examples
            texts.append(path.read_text())
    texts.append("def forward(self, x):\n    return torch.relu(x)\n<think>plan the kernel</think>\n")
    return texts * 4


def train_tokenizer(texts: Iterable[str], vocab_size: int) -> Any:
    """A byte-level BPE tokenizer trained on `texts` (nothing downloaded), as a transformers tokenizer
    with the ChatML-style template: `<|im_end|>` ends a turn and is the EOS token."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=SPECIALS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    hf_tok = PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<|bos|>", eos_token="<|im_end|>", pad_token="<|pad|>",
        additional_special_tokens=["<|im_start|>", "<|eos|>"],
    )
    hf_tok.chat_template = CHAT_TEMPLATE
    return hf_tok


def llama_parameters(vocab_size: int, hidden_size: int, num_layers: int, intermediate_size: int) -> int:
    """Parameters of the untied Llama `build_llama` makes (MHA: as many KV heads as heads), before it is built."""
    layer = 4 * hidden_size * hidden_size + 3 * hidden_size * intermediate_size + 2 * hidden_size
    return num_layers * layer + 2 * vocab_size * hidden_size + hidden_size


def build_llama(out_dir: str | Path, texts: Iterable[str], *, vocab_size: int, seed: int = 0, hidden_size: int,
                num_layers: int, num_heads: int, intermediate_size: int, max_positions: int = 8192,
                generation_config: dict[str, Any] | None = None) -> Path:
    """Write a random-weight HF Llama (bf16, untied embeddings) and a tokenizer trained on `texts` into
    `out_dir` (idempotent: an existing model there is kept) and return it. `generation_config` is
    written over the one save_pretrained makes (default: greedy, stop at `<|im_end|>`)."""
    out = Path(out_dir)
    if (out / "config.json").exists() and (out / "tokenizer.json").exists():
        return out
    out.mkdir(parents=True, exist_ok=True)

    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from synth.atomic_write import apply_umask

    hf_tok = train_tokenizer(texts, vocab_size)
    hf_tok.save_pretrained(out)
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=len(hf_tok), hidden_size=hidden_size, intermediate_size=intermediate_size,
        num_hidden_layers=num_layers, num_attention_heads=num_heads, num_key_value_heads=num_heads,
        max_position_embeddings=max_positions, bos_token_id=hf_tok.bos_token_id, eos_token_id=hf_tok.eos_token_id,
        pad_token_id=hf_tok.pad_token_id, tie_word_embeddings=False, torch_dtype="bfloat16",
    )
    model = LlamaForCausalLM(config).to(torch.bfloat16)
    model.save_pretrained(out, safe_serialization=True)
    gen = {"bos_token_id": hf_tok.bos_token_id, "eos_token_id": hf_tok.eos_token_id,
           **(generation_config or {"pad_token_id": hf_tok.pad_token_id, "do_sample": False})}
    (out / "generation_config.json").write_text(json.dumps(gen, indent=2))
    apply_umask(out)  # safetensors writes the weights 0o600 whatever the umask
    return out


def build_tiny_llama(out_dir: str | Path, *, vocab_size: int = 2048, seed: int = 0, hidden_size: int = 128,
                     num_layers: int = 2, num_heads: int = 2, intermediate_size: int = 256) -> Path:
    """Write a loadable HF Llama checkpoint + tokenizer into `out_dir` (idempotent) and return it."""
    # save_pretrained writes its own generation_config.json; it is replaced with the hostile one.
    return build_llama(out_dir, _corpus(), vocab_size=vocab_size, seed=seed, hidden_size=hidden_size,
                       num_layers=num_layers, num_heads=num_heads, intermediate_size=intermediate_size,
                       generation_config={"do_sample": True, **HOSTILE_GENERATION_CONFIG})


if __name__ == "__main__":
    print(build_tiny_llama(sys.argv[1] if len(sys.argv) > 1 else "/tmp/tiny-llama"))
