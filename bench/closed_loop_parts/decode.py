"""Greedy decoding of the closed loop's student with a static KV cache, one step a CUDA graph on a GPU.

Why: transformers' `generate` decoded the 12-layer student at 72-82 ms a token on an H100 whatever the
batch (16 or 200): host-bound, ~6 ms a decoder layer of Python and launches, so one evaluation batch
of answers that run to 3,072 tokens took ~4 minutes (bench/RESULTS.md, 2026-11-26). Here the whole
batch's step (every layer, the argmax, the end-of-answer bookkeeping) is one graph replay, and the
host only checks every `CHECK_EVERY` steps whether every answer has ended.

What it keeps: the model's own modules and arithmetic (its embedding, RMSNorms, projections, rotary
embedding, MLPs and head are called as they are; only attention reads a preallocated cache), greedy
argmax, an answer ends at its first EOS, left-padded prompts with the positions `generate` gives them.
What it simplifies: Llama only, as `pipelines.grpo.tiny_model.build_llama` makes it; greedy only;
the cache is as long as the longest prompt plus `max_new_tokens`, and attention reads all of it under a
mask (at the student's sizes that is cheaper than the launches it saves). On the CPU the same step runs
without a graph: `tests/bench/test_closed_loop_decode.py` checks its tokens against `generate` there.
"""
from __future__ import annotations

from typing import Any

CHECK_EVERY = 32      # steps between the host's looks at whether every answer has ended (one sync each)
PREFILL_ROWS = 32     # prompts a prefill pass takes at once (its mask is rows x prompt x cache)


class StaticDecoder:
    """Greedy answers of one left-padded batch: `run(input_ids, attention_mask)` -> new tokens per row."""

    def __init__(self, model: Any, batch: int, prompt_len: int, max_new_tokens: int, eos_token_id: int,
                 pad_token_id: int) -> None:
        import torch

        self.torch = torch
        self.model, self.eos, self.pad_id = model, eos_token_id, pad_token_id
        cfg = model.config
        self.heads, self.kv_heads = cfg.num_attention_heads, cfg.num_key_value_heads
        self.head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
        self.B, self.P, self.new = batch, prompt_len, max_new_tokens
        self.S = prompt_len + max_new_tokens
        dev, dt = model.device, model.dtype
        shape = (batch, self.kv_heads, self.S, self.head_dim)
        self.k = [torch.zeros(shape, device=dev, dtype=dt) for _ in range(cfg.num_hidden_layers)]
        self.v = [torch.zeros(shape, device=dev, dtype=dt) for _ in range(cfg.num_hidden_layers)]
        self.slots = torch.arange(self.S, device=dev)
        # the step's state, read and written in place so that a captured graph replays it
        self.tok = torch.full((batch, 1), pad_token_id, device=dev, dtype=torch.long)
        self.slot = torch.zeros((), device=dev, dtype=torch.long)        # the cache slot this step writes
        self.pad = torch.zeros(batch, device=dev, dtype=torch.long)      # left padding of each prompt
        self.done = torch.zeros(batch, device=dev, dtype=torch.bool)
        self.out = torch.full((batch, max_new_tokens), pad_token_id, device=dev, dtype=torch.long)
        self.graph = None
        if dev.type == "cuda":
            try:
                self._capture()
            except RuntimeError as exc:   # the same step runs without a graph: slower, the same tokens
                import sys

                print(f"decode: no CUDA graph ({type(exc).__name__}: {str(exc)[:200]}); stepping without one",
                      file=sys.stderr)
                self.graph = None

    def _forward(self, ids: Any, pos: Any, write_at: Any, mask: Any, rows: slice) -> Any:
        """Logits of each row's last position; the keys and values of `ids` go to cache slots `write_at`
        of the cache rows `rows`."""
        from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

        torch, m = self.torch, self.model.model
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
            kc.index_copy_(2, write_at, k)
            vc.index_copy_(2, write_at, v)
            o = torch.nn.functional.scaled_dot_product_attention(q, kc, vc, attn_mask=mask, scale=a.scaling,
                                                                 enable_gqa=self.heads != self.kv_heads)
            h = h + a.o_proj(o.transpose(1, 2).reshape(B, T, self.heads * self.head_dim))
            h = h + layer.mlp(layer.post_attention_layernorm(h))
        return self.model.lm_head(m.norm(h[:, -1]))

    def _step(self) -> None:
        """The token at cache slot `slot` (in `tok`) goes into the cache; the next one, argmax, into
        out[:, slot - P + 1] (rows that ended get padding); slot + 1."""
        torch = self.torch
        pos = (self.slot - self.pad).clamp(min=0)[:, None]
        mask = ((self.slots[None, :] <= self.slot) & (self.slots[None, :] >= self.pad[:, None]))[:, None, None, :]
        nxt = self._forward(self.tok, pos, self.slot.view(1), mask, slice(None)).argmax(-1)
        nxt = torch.where(self.done, torch.full_like(nxt, self.pad_id), nxt)
        self.out.index_copy_(1, (self.slot - (self.P - 1)).view(1), nxt[:, None])
        self.done |= nxt == self.eos
        self.tok.copy_(nxt[:, None])
        self.slot.add_(1)

    def _capture(self) -> None:
        torch = self.torch
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side), torch.no_grad():
            for _ in range(2):          # warm-up (cuBLAS handles, kernel choices); prefill resets what it wrote
                self.slot.fill_(self.P)
                self._step()
        torch.cuda.current_stream().wait_stream(side)
        self.graph = torch.cuda.CUDAGraph()
        self.slot.fill_(self.P)
        with torch.cuda.graph(self.graph), torch.no_grad():
            self._step()

    def _prefill(self, ids: Any, attn: Any) -> None:
        """The prompts into cache slots 0..P-1 (PREFILL_ROWS rows at a time); out[:, 0], `tok`, `done`
        and `slot` set for the first step."""
        torch = self.torch
        pad = (attn == 0).sum(1)
        pos = (attn.long().cumsum(1) - 1).clamp(min=0)      # the positions `generate` gives left-padded rows
        q = self.slots[:self.P][None, :, None]
        s = self.slots[None, None, :]
        first = []
        for lo in range(0, self.B, PREFILL_ROWS):
            hi = min(self.B, lo + PREFILL_ROWS)
            p = pad[lo:hi, None, None]
            # causal over real keys; a padding position attends to itself alone, so no row of the mask is
            # empty and no NaN reaches the cache
            mask = (s <= q) & ((s >= p) | (s == q))
            first.append(self._forward(ids[lo:hi], pos[lo:hi], self.slots[:self.P], mask[:, None],
                                       slice(lo, hi)).argmax(-1))
        nxt = torch.cat(first)
        self.pad.copy_(pad)
        self.out.fill_(self.pad_id)
        self.out[:, 0] = nxt
        self.done.copy_(nxt == self.eos)
        self.tok.copy_(nxt[:, None])
        self.slot.fill_(self.P)

    def run(self, input_ids: Any, attention_mask: Any) -> list[list[int]]:
        """New tokens of each row, up to and including its first EOS (or `max_new_tokens` of them)."""
        torch = self.torch
        if tuple(input_ids.shape) != (self.B, self.P):
            raise ValueError(f"this decoder holds {self.B} prompts of {self.P} tokens, not {tuple(input_ids.shape)}")
        with torch.no_grad():
            self._prefill(input_ids, attention_mask)
            for step in range(1, self.new):
                if step % CHECK_EVERY == 1 and bool(self.done.all()):
                    break
                if self.graph is not None:
                    self.graph.replay()
                else:
                    self._step()
        rows = self.out.tolist()
        return [r[:r.index(self.eos) + 1] if self.eos in r else r for r in rows]
