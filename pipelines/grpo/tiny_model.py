"""Builds a tiny random-weight Llama with a locally trained tokenizer, for tests, benchmarks and grpo-tiny.

Nothing may be downloaded on these machines, so every model-driven test runs against a model made
here: 2 layers, hidden 128, 2 heads (head_dim 64 — vLLM's CPU attention rejects smaller heads), a
byte-level BPE tokenizer trained with `tokenizers` on the project's own prompt templates, a
ChatML-style chat template, and a deliberately unhelpful `generation_config.json` (tiny
`max_new_tokens`, odd temperature) so tests can show samplers ignore it on purpose.

Run as a module to build one: `python -m pipelines.grpo.tiny_model OUT_DIR`.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

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


def build_tiny_llama(out_dir: str | Path, *, vocab_size: int = 2048, seed: int = 0, hidden_size: int = 128,
                     num_layers: int = 2, num_heads: int = 2, intermediate_size: int = 256) -> Path:
    """Write a loadable HF Llama checkpoint + tokenizer into `out_dir` (idempotent) and return it."""
    out = Path(out_dir)
    if (out / "config.json").exists() and (out / "tokenizer.json").exists():
        return out
    out.mkdir(parents=True, exist_ok=True)

    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    from synth.atomic_write import apply_umask

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=SPECIALS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False,
    )
    tok.train_from_iterator(_corpus(), trainer=trainer)
    hf_tok = PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<|bos|>", eos_token="<|im_end|>", pad_token="<|pad|>",
        additional_special_tokens=["<|im_start|>", "<|eos|>"],
    )
    hf_tok.chat_template = CHAT_TEMPLATE
    hf_tok.save_pretrained(out)

    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=len(hf_tok), hidden_size=hidden_size, intermediate_size=intermediate_size,
        num_hidden_layers=num_layers, num_attention_heads=num_heads, num_key_value_heads=num_heads,
        max_position_embeddings=8192, bos_token_id=hf_tok.bos_token_id, eos_token_id=hf_tok.eos_token_id,
        pad_token_id=hf_tok.pad_token_id, tie_word_embeddings=False, torch_dtype="bfloat16",
    )
    model = LlamaForCausalLM(config).to(torch.bfloat16)
    model.save_pretrained(out, safe_serialization=True)
    # save_pretrained writes its own generation_config.json; replace it with the hostile one.
    gen = {"bos_token_id": hf_tok.bos_token_id, "eos_token_id": hf_tok.eos_token_id,
           "do_sample": True, **HOSTILE_GENERATION_CONFIG}
    (out / "generation_config.json").write_text(json.dumps(gen, indent=2))
    apply_umask(out)  # safetensors writes the weights 0o600 whatever the umask
    return out


if __name__ == "__main__":
    print(build_tiny_llama(sys.argv[1] if len(sys.argv) > 1 else "/tmp/tiny-llama"))
