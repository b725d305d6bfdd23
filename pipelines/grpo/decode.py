"""Decoding of a Llama policy with a static KV cache, one step a CUDA graph on a GPU: greedy or sampled.

Why: transformers' `generate` decoded the closed loop's 12-layer student at 72-82 ms a token on an H100
whatever the batch (16 or 200): host-bound, ~6 ms a decoder layer of Python and launches, so one
evaluation batch of answers that run to 3,072 tokens took ~4 minutes and one GRPO step of 32
completions 192 s (bench/RESULTS.md, 2026-11-26). Here the whole batch's step (every layer, the
choice of the next token, the end-of-answer bookkeeping) is one graph replay, and the host only checks
every `CHECK_EVERY` steps whether every answer has ended. The closed loop's evaluation
(bench/closed_loop_parts/evaluate.py) decodes greedily with it; train-grpo's rollouts sample with it
(pipelines/grpo/trainer.py, `rollouts = "static"`).

What it keeps: the model's own modules and arithmetic (its embedding, RMSNorms, projections, rotary
embedding, MLPs and head are called as they are; only attention reads a preallocated cache), an answer
ends at its first end token (any of `eos_token_id`, one id or several), left-padded prompts with the
positions `generate` gives them. Temperature 0 is greedy argmax on the head's logits, as before this
module sampled. Otherwise the logits (in float32) are divided by the temperature, then cut to the
`top_k` largest (0: off) and to the smallest set of tokens whose probability reaches `top_p` (1: off;
transformers' order and rule), and the next token is drawn from their softmax with the exponential
race (argmax of p / E, E ~ Exp(1): an exact draw, with no host sync), from the decoder's own
`torch.Generator`, seeded with `seed` at each `run`, so a batch's answers are the same for the same
seed, weights and device. The log-probability of each chosen token under that distribution (the model's own,
untempered, when greedy) is kept beside it: TRL's `logprobs`.
What it simplifies: Llama only, as `pipelines.grpo.tiny_model.build_llama` makes it (`supports` says
whether a model is one; peft's wrapper is looked through); no min_p, repetition penalty or other logit
processors; the cache is as long as the longest prompt plus `max_new_tokens`, and attention reads all
of it under a mask (at the student's sizes that is cheaper than the launches it saves); one decoder
holds one batch shape. `autocast` runs the step under torch.autocast of that dtype (the trainer's mixed
precision, as accelerate's wrapper gives `generate`). On the CPU the same step runs without a graph:
`tests/pipelines/grpo/test_decode.py` checks its greedy tokens against `generate` and its draws
against the softmax of the model's logits there.
"""
from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Any

import torch

CHECK_EVERY = 32      # steps between the host's looks at whether every answer has ended (one sync each)
PREFILL_ROWS = 32     # prompts a prefill pass takes at once (its mask is rows x prompt x cache)


def llama_of(model: Any) -> Any:
    """The `LlamaForCausalLM` under `model` (itself, or the one a peft wrapper holds), else None."""
    from transformers import LlamaForCausalLM

    if hasattr(model, "get_base_model"):
        model = model.get_base_model()
    return model if isinstance(model, LlamaForCausalLM) else None


def supports(model: Any) -> bool:
    """Whether the decoder can step `model`: a Llama of transformers' own modules (build_llama's kind)."""
    return llama_of(model) is not None


class StaticDecoder:
    """Answers of one left-padded batch: `run(input_ids, attention_mask)` -> new tokens per row;
    `run(..., logprobs=True)` -> (tokens, their log-probabilities)."""

    def __init__(self, model: Any, batch: int, prompt_len: int, max_new_tokens: int,
                 eos_token_id: int | Sequence[int], pad_token_id: int, *, temperature: float = 0.0, top_k: int = 0,
                 top_p: float = 1.0, seed: int = 0, autocast: Any = None) -> None:
        model = llama_of(model)
        if model is None:
            raise TypeError("StaticDecoder steps a transformers LlamaForCausalLM only (see `supports`)")
        if temperature < 0 or top_k < 0 or not 0 < top_p <= 1:
            raise ValueError(f"need temperature >= 0, top_k >= 0, 0 < top_p <= 1; got {temperature}, {top_k}, {top_p}")
        self.model, self.pad_id = model, pad_token_id
        self.eos_ids = [eos_token_id] if isinstance(eos_token_id, int) else list(eos_token_id)
        self.temperature, self.top_k, self.top_p, self.seed = float(temperature), int(top_k), float(top_p), seed
        cfg = model.config
        self.heads, self.kv_heads = cfg.num_attention_heads, cfg.num_key_value_heads
        self.head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
        self.B, self.P, self.new = batch, prompt_len, max_new_tokens
        self.S = prompt_len + max_new_tokens
        dev = model.device
        self.autocast = autocast
        dt = autocast or model.dtype
        shape = (batch, self.kv_heads, self.S, self.head_dim)
        self.k = [torch.zeros(shape, device=dev, dtype=dt) for _ in range(cfg.num_hidden_layers)]
        self.v = [torch.zeros(shape, device=dev, dtype=dt) for _ in range(cfg.num_hidden_layers)]
        self.slots = torch.arange(self.S, device=dev)
        self.eos = torch.tensor(self.eos_ids, device=dev, dtype=torch.long)
        self.gen = torch.Generator(device=dev)
        self.gen.manual_seed(seed)
        # the step's state, read and written in place so that a captured graph replays it
        self.tok = torch.full((batch, 1), pad_token_id, device=dev, dtype=torch.long)
        self.slot = torch.zeros((), device=dev, dtype=torch.long)        # the cache slot this step writes
        self.pad = torch.zeros(batch, device=dev, dtype=torch.long)      # left padding of each prompt
        self.done = torch.zeros(batch, device=dev, dtype=torch.bool)
        self.out = torch.full((batch, max_new_tokens), pad_token_id, device=dev, dtype=torch.long)
        self.logp = torch.zeros((batch, max_new_tokens), device=dev, dtype=torch.float32)
        self.graph = None
        if dev.type == "cuda":
            try:
                self._capture()
            except (RuntimeError, AttributeError) as exc:   # the same step runs without a graph: slower, the same tokens
                import sys

                print(f"decode: no CUDA graph ({type(exc).__name__}: {str(exc)[:200]}); stepping without one",
                      file=sys.stderr)
                self.graph = None

    def _ctx(self) -> Any:
        if self.autocast is None:
            return contextlib.nullcontext()
        return torch.autocast(self.model.device.type, dtype=self.autocast, cache_enabled=False)

    def _forward(self, ids: Any, pos: Any, write_at: Any, mask: Any, rows: slice) -> Any:
        """Logits of each row's last position; the keys and values of `ids` go to cache slots `write_at`
        of the cache rows `rows`."""
        from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

        m = self.model.model
        B, T = ids.shape
        h = m.embed_tokens(ids)
        cos, sin = m.rotary_emb(h, pos)
        for i, layer in enumerate(m.layers):
            a = layer.self_attn
            x = layer.input_layernorm(h)
            q = a.q_proj(x).view(B, T, self.heads, self.head_dim).transpose(1, 2)
            k = a.k_proj(x).view(B, T, self.kv_heads, self.head_dim).transpose(1, 2)
            v = a.v_proj(x).view(B, T, self.kv_heads, self.head_dim).transpose(1, 2)
            q, k = apply_rotary_pos_emb(q, k, cos, sin)
            kc, vc = self.k[i][rows], self.v[i][rows]
            kc.index_copy_(2, write_at, k.to(kc.dtype))
            vc.index_copy_(2, write_at, v.to(vc.dtype))
            o = torch.nn.functional.scaled_dot_product_attention(q, kc, vc, attn_mask=mask, scale=a.scaling,
                                                                 enable_gqa=self.heads != self.kv_heads)
            h = h + a.o_proj(o.transpose(1, 2).reshape(B, T, self.heads * self.head_dim))
            h = h + layer.mlp(layer.post_attention_layernorm(h))
        return self.model.lm_head(m.norm(h[:, -1]))

    def _pick(self, logits: Any) -> tuple[Any, Any]:
        """The next token of each row and its log-probability (see the module docstring)."""
        if self.temperature == 0:
            nxt = logits.argmax(-1)
            return nxt, logits.float().log_softmax(-1).gather(1, nxt[:, None])[:, 0]
        x = logits.float() / self.temperature
        if 0 < self.top_k < x.shape[-1]:
            kth = x.topk(self.top_k, dim=-1).values[:, -1:]
            x = x.masked_fill(x < kth, float("-inf"))
        if self.top_p < 1:
            srt, idx = x.sort(-1, descending=True)
            p = srt.softmax(-1)
            cut = (p.cumsum(-1) - p) >= self.top_p        # the mass before a token reaches top_p: it goes
            cut[:, 0] = False                             # the likeliest token always stays
            x = x.scatter(-1, idx, srt.masked_fill(cut, float("-inf")))
        logp = x.log_softmax(-1)
        race = torch.empty_like(logp).exponential_(generator=self.gen).clamp_(min=1e-30)
        nxt = (logp.exp() / race).argmax(-1)
        return nxt, logp.gather(1, nxt[:, None])[:, 0]

    def _step(self) -> None:
        """The token at cache slot `slot` (in `tok`) goes into the cache; the next one into
        out[:, slot - P + 1] (rows that ended get padding, log-probability 0); slot + 1."""
        pos = (self.slot - self.pad).clamp(min=0)[:, None]
        mask = ((self.slots[None, :] <= self.slot) & (self.slots[None, :] >= self.pad[:, None]))[:, None, None, :]
        with self._ctx():
            logits = self._forward(self.tok, pos, self.slot.view(1), mask, slice(None))
        nxt, lp = self._pick(logits)
        nxt = torch.where(self.done, torch.full_like(nxt, self.pad_id), nxt)
        lp = torch.where(self.done, torch.zeros_like(lp), lp)
        at = (self.slot - (self.P - 1)).view(1)
        self.out.index_copy_(1, at, nxt[:, None])
        self.logp.index_copy_(1, at, lp[:, None])
        self.done |= torch.isin(nxt, self.eos)
        self.tok.copy_(nxt[:, None])
        self.slot.add_(1)

    def _capture(self) -> None:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side), torch.no_grad():
            for _ in range(2):          # warm-up (cuBLAS handles, kernel choices); prefill resets what it wrote
                self.slot.fill_(self.P)
                self._step()
        torch.cuda.current_stream().wait_stream(side)
        self.graph = torch.cuda.CUDAGraph()
        if self.temperature > 0:
            self.graph.register_generator_state(self.gen)   # each replay draws afresh from the generator
        self.slot.fill_(self.P)
        with torch.cuda.graph(self.graph), torch.no_grad():
            self._step()

    def _prefill(self, ids: Any, attn: Any) -> None:
        """The prompts into cache slots 0..P-1 (PREFILL_ROWS rows at a time); out[:, 0], `tok`, `done`
        and `slot` set for the first step."""
        pad = (attn == 0).sum(1)
        pos = (attn.long().cumsum(1) - 1).clamp(min=0)      # the positions `generate` gives left-padded rows
        q = self.slots[:self.P][None, :, None]
        s = self.slots[None, None, :]
        logits = []
        for lo in range(0, self.B, PREFILL_ROWS):
            hi = min(self.B, lo + PREFILL_ROWS)
            p = pad[lo:hi, None, None]
            # causal over real keys; a padding position attends to itself alone, so no row of the mask is
            # empty and no NaN reaches the cache
            mask = (s <= q) & ((s >= p) | (s == q))
            with self._ctx():
                logits.append(self._forward(ids[lo:hi], pos[lo:hi], self.slots[:self.P], mask[:, None],
                                            slice(lo, hi)))
        nxt, lp = self._pick(torch.cat(logits))
        self.pad.copy_(pad)
        self.out.fill_(self.pad_id)
        self.logp.zero_()
        self.out[:, 0] = nxt
        self.logp[:, 0] = lp
        self.done.copy_(torch.isin(nxt, self.eos))
        self.tok.copy_(nxt[:, None])
        self.slot.fill_(self.P)

    def run(self, input_ids: Any, attention_mask: Any, logprobs: bool = False) -> Any:
        """New tokens of each row, up to and including its first end token (or `max_new_tokens` of them);
        with `logprobs`, also each token's log-probability (lists of the same lengths)."""
        if tuple(input_ids.shape) != (self.B, self.P):
            raise ValueError(f"this decoder holds {self.B} prompts of {self.P} tokens, not {tuple(input_ids.shape)}")
        self.gen.manual_seed(self.seed)     # each run draws from the seed, whatever ran before (the warm-up)
        with torch.no_grad():
            self._prefill(input_ids, attention_mask)
            for step in range(1, self.new):
                if step % CHECK_EVERY == 1 and bool(self.done.all()):
                    break
                if self.graph is not None:
                    self.graph.replay()
                else:
                    self._step()
        rows, lps = self.out.tolist(), self.logp.tolist()
        ends = set(self.eos_ids)
        lens = [next((i + 1 for i, t in enumerate(r) if t in ends), len(r)) for r in rows]
        toks = [r[:n] for r, n in zip(rows, lens)]
        if not logprobs:
            return toks
        return toks, [lp[:n] for lp, n in zip(lps, lens)]
