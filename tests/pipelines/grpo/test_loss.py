"""Advantages, the clipped surrogate, KL and token-level normalisation against hand-computed values."""
import copy
import math

import pytest
import torch

from pipelines.grpo.loss import (completion_logprobs, group_advantages, hrd_token_advantages, policy_loss,
                                 token_advantages, zero_std_groups)


def test_group_advantages_by_hand():
    r = torch.tensor([[1.0, 0.0, 0.0, 1.0], [0.0, 0.0, 0.0, 0.0], [3.0, 1.0, 2.0, 2.0]])
    a = group_advantages(r, scale_std=True, eps=1e-4)
    s1 = math.sqrt((4 * 0.25) / 3)            # sample std (ddof 1) of [1, 0, 0, 1]
    h = 0.5 / (s1 + 1e-4)
    assert a[0].tolist() == pytest.approx([h, -h, -h, h])
    assert a[1].tolist() == [0.0, 0.0, 0.0, 0.0]   # no spread, no signal, no NaN
    s3 = math.sqrt((1 + 1 + 0 + 0) / 3)       # [3, 1, 2, 2], mean 2
    assert a[2].tolist() == pytest.approx([1 / (s3 + 1e-4), -1 / (s3 + 1e-4), 0.0, 0.0])
    assert group_advantages(r, scale_std=False)[2].tolist() == [1.0, -1.0, 0.0, 0.0]
    assert zero_std_groups(r).tolist() == [False, True, False]


def test_policy_loss_by_hand():
    # four real tokens and one padding token; ratios 1.5, 0.5, 0.5, 1.5 against advantages +1, +1, -1, -1
    old = torch.zeros(1, 5)
    logp = torch.log(torch.tensor([[1.5, 0.5, 0.5, 1.5, 9.0]]))
    adv = torch.tensor([[1.0, 1.0, -1.0, -1.0, 5.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0, 1.0, 0.0]])
    loss, st = policy_loss(logp, old, adv, mask, n_tokens=4, clip_low=0.2, clip_high=0.2)
    # per token: -min(1.5, 1.2) = -1.2; -min(0.5, 0.8) = -0.5; -min(-0.5, -0.8) = 0.8; -min(-1.5, -1.2) = 1.5
    assert loss.item() == pytest.approx((-1.2 - 0.5 + 0.8 + 1.5) / 4)
    assert st.clipped == 2                     # tokens 1 and 3 take the clipped branch
    assert st.ratio == pytest.approx(4.0)
    # token-level normalisation divides by the count it is given (the whole step's), not the batch's
    loss8, _ = policy_loss(logp, old, adv, mask, n_tokens=8)
    assert loss8.item() == pytest.approx(loss.item() / 2)


def test_clip_higher_and_kl_by_hand():
    old = torch.zeros(1, 2)
    logp = torch.log(torch.tensor([[1.5, 1.0]]))
    adv = torch.tensor([[1.0, 1.0]])
    mask = torch.ones(1, 2)
    ref = torch.log(torch.tensor([[1.0, 2.0]]))
    loss, st = policy_loss(logp, old, adv, mask, 2, clip_low=0.2, clip_high=0.28, beta=0.1, ref_logp=ref)
    d = torch.log(torch.tensor([1 / 1.5, 2.0]))
    k3 = (torch.exp(d) - d - 1).tolist()        # [0.0721.., 0.3068..]
    expect = ((-1.28 + 0.1 * k3[0]) + (-1.0 + 0.1 * k3[1])) / 2
    assert loss.item() == pytest.approx(expect, rel=1e-6)
    assert st.kl == pytest.approx(sum(k3), rel=1e-6)


def test_hrd_token_advantages_by_hand():
    mask = torch.tensor([[1.0, 1.0, 1.0, 1.0, 0.0]])
    code = torch.tensor([[0.0, 1.0, 1.0, 0.0, 1.0]])   # padding position flagged on purpose: still 0
    a = hrd_token_advantages(torch.tensor([2.0]), torch.tensor([-1.0]), code, mask, alpha=0.1)
    assert a.tolist() == [[pytest.approx(0.2), -1.0, -1.0, pytest.approx(0.2), 0.0]]
    assert token_advantages(torch.tensor([0.5]), mask).tolist() == [[0.5, 0.5, 0.5, 0.5, 0.0]]


def test_completion_logprobs_line_up_with_padding(tiny_llama):
    """Left-padded prompts and right-padded completions give each row's own unpadded log-probs."""
    from transformers import AutoModelForCausalLM

    from pipelines.grpo.update import Row, pad_batch

    model = AutoModelForCausalLM.from_pretrained(tiny_llama, dtype=torch.float32).eval()
    rows = [Row([5, 6, 7, 8, 9], [10, 11, 12], [0.0] * 3), Row([5, 6], [13, 14, 15, 16, 17], [0.0] * 5)]
    b = pad_batch(rows, 0, torch.device("cpu"))
    with torch.no_grad():
        got = completion_logprobs(model, b["input_ids"], b["attention_mask"], b["n_completion"])
        for i, r in enumerate(rows):
            ids = torch.tensor([r.prompt_ids + r.completion_ids])
            logits = model(input_ids=ids).logits[0].float()
            lp = torch.log_softmax(logits, -1)
            n = len(r.completion_ids)
            want = [lp[len(r.prompt_ids) - 1 + t, r.completion_ids[t]].item() for t in range(n)]
            assert got[i, :n].tolist() == pytest.approx(want, abs=1e-4)


def test_gradient_accumulation_gives_the_full_batch_gradient(tiny_llama):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from pipelines.grpo.policy import Policy
    from pipelines.grpo.update import Row, update

    tok = AutoTokenizer.from_pretrained(tiny_llama)
    base = AutoModelForCausalLM.from_pretrained(tiny_llama, dtype=torch.float32)
    g = torch.Generator().manual_seed(0)
    rows = [Row(torch.randint(10, 500, (int(torch.randint(3, 9, (1,), generator=g)),), generator=g).tolist(),
                torch.randint(10, 500, (int(torch.randint(1, 7, (1,), generator=g)),), generator=g).tolist(), [])
            for _ in range(6)]
    for r in rows:
        r.advantages = torch.randn(len(r.completion_ids), generator=g).tolist()
    weights = []
    for micro in (6, 4, 1):
        m = copy.deepcopy(base)
        opt = torch.optim.SGD(m.parameters(), lr=1.0)
        stats = update(Policy(m, tok, torch.device("cpu"), None), opt, rows, micro_batch=micro, updates=1,
                       clip_low=0.2, clip_high=0.2, beta=0.0, max_grad_norm=0.0, temperature=1.0)
        assert stats.n_tokens == sum(len(r.completion_ids) for r in rows)
        weights.append(torch.cat([p.detach().flatten() for p in m.parameters()]))
    moved = (weights[0] - torch.cat([p.detach().flatten() for p in base.parameters()])).abs().max()
    assert moved > 1e-6
    for w in weights[1:]:
        assert torch.allclose(w, weights[0], atol=1e-6, rtol=1e-4)


def test_second_update_on_one_batch_moves_the_ratio(tiny_llama):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from pipelines.grpo.policy import Policy
    from pipelines.grpo.update import Row, update

    tok = AutoTokenizer.from_pretrained(tiny_llama)
    m = AutoModelForCausalLM.from_pretrained(tiny_llama, dtype=torch.float32)
    rows = [Row([5, 6, 7], [8, 9, 10, 11], [1.0] * 4), Row([5, 6, 7], [12, 13, 14], [-1.0] * 3)]
    opt = torch.optim.AdamW(m.parameters(), lr=1e-2)
    one = update(Policy(m, tok, torch.device("cpu"), None), opt, rows, micro_batch=2, updates=1,
                 clip_low=0.2, clip_high=0.2, beta=0.0, max_grad_norm=1.0, temperature=1.0)
    assert one.ratio_mean == pytest.approx(1.0)
    two = update(Policy(m, tok, torch.device("cpu"), None), opt, rows, micro_batch=2, updates=3,
                 clip_low=0.2, clip_high=0.2, beta=0.0, max_grad_norm=1.0, temperature=1.0)
    assert two.ratio_mean != pytest.approx(1.0, abs=1e-4)
