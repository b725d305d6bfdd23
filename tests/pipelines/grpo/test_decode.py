"""pipelines/grpo/decode.py on the CPU, where the step runs without a graph: greedy tokens are transformers'
`generate`'s (left-padded prompts of several lengths, an answer that ends early), a temperature near 0
samples them too, and sampled draws follow the softmax of the model's own logits (chi-square, first and
second step, temperature/top-k/top-p as transformers' own logit warpers make them), reproducibly from the
seed, with end tokens and padding in their place."""
import copy
import math
from collections import Counter

import pytest

torch = pytest.importorskip("torch")


@pytest.fixture(scope="module")
def student(tmp_path_factory):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from pipelines.grpo.tiny_model import build_llama

    texts = ["def forward(self, x):\n    return torch.relu(x) + y * 2\n"] * 20 + ["@triton.jit\ndef k(x_ptr, n):\n"] * 20
    out = build_llama(tmp_path_factory.mktemp("student"), texts, vocab_size=300, seed=3, hidden_size=64,
                      num_layers=2, num_heads=2, intermediate_size=128)
    tok = AutoTokenizer.from_pretrained(out)
    tok.padding_side = "left"
    model = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32).eval()
    return model, tok


@pytest.fixture(scope="module")
def sharp(student):
    """The student with its head scaled: the random model's logits are near uniform (std 0.16), which
    no sampling test could tell from a uniform draw; x30 spreads them over a few tokens."""
    model, tok = student
    model = copy.deepcopy(model)
    with torch.no_grad():
        model.lm_head.weight.mul_(30)
    return model, tok


def _generate(model, enc, new, eos, pad):
    with torch.no_grad():
        seqs = model.generate(**enc, max_new_tokens=new, do_sample=False, eos_token_id=eos, pad_token_id=pad)
    rows = seqs[:, enc["input_ids"].shape[1]:].tolist()
    return [r[:r.index(eos) + 1] if eos in r else r for r in rows]


def _decoder(model, enc, new, eos, pad, **kw):
    from pipelines.grpo.decode import StaticDecoder

    return StaticDecoder(model, *enc["input_ids"].shape, new, eos, pad, **kw)


PROMPTS = ["def forward(self, x):", "return torch.relu(x) + y", "@triton.jit\ndef k(x_ptr, n):\n    return y * 2"]


def test_static_decoder_gives_generates_tokens(student):
    model, tok = student
    enc = tok(PROMPTS, return_tensors="pt", padding=True, add_special_tokens=False)
    assert (enc["attention_mask"] == 0).any()                 # the batch is left-padded
    new = 40
    want = _generate(model, enc, new, tok.eos_token_id, tok.pad_token_id)
    got = _decoder(model, enc, new, tok.eos_token_id, tok.pad_token_id).run(enc["input_ids"], enc["attention_mask"])
    assert got == want and all(len(r) == new for r in got)

    # an "end" token the model does produce: the second row's 5th token. Its answer stops there, the
    # others go on, as generate's do.
    eos = want[1][4]
    want = _generate(model, enc, new, eos, tok.pad_token_id)
    assert len(want[1]) <= 5 and max(map(len, want)) == new
    got = _decoder(model, enc, new, eos, tok.pad_token_id).run(enc["input_ids"], enc["attention_mask"])
    assert got == want

    # temperature -> 0: the sampling path (its warpers, its exponential race) draws the greedy tokens
    for kw in ({"temperature": 1e-4}, {"temperature": 1e-4, "top_k": 5, "top_p": 0.9}):
        got = _decoder(model, enc, new, eos, tok.pad_token_id, seed=11, **kw).run(enc["input_ids"],
                                                                                enc["attention_mask"])
        assert got == want, kw


def test_static_decoder_refuses_another_batch_shape_and_other_models(student):
    from transformers import GPT2Config, GPT2LMHeadModel

    from pipelines.grpo.decode import StaticDecoder, supports

    model, tok = student
    enc = tok(["a b", "c"], return_tensors="pt", padding=True, add_special_tokens=False)
    dec = StaticDecoder(model, 3, enc["input_ids"].shape[1], 4, tok.eos_token_id, tok.pad_token_id)
    with pytest.raises(ValueError, match="holds 3 prompts"):
        dec.run(enc["input_ids"], enc["attention_mask"])
    gpt2 = GPT2LMHeadModel(GPT2Config(vocab_size=50, n_positions=32, n_embd=16, n_layer=1, n_head=2))
    assert supports(model) and not supports(gpt2)
    with pytest.raises(TypeError, match="LlamaForCausalLM only"):
        StaticDecoder(gpt2, 1, 2, 2, 0, 0)


def _chi2_limit(df: int, z: float = 4.75) -> float:
    """The chi-square quantile at normal deviate z (p ~ 1e-6 at 4.75), Wilson-Hilferty's approximation."""
    return df * (1 - 2 / (9 * df) + z * math.sqrt(2 / (9 * df))) ** 3


def _chi2(counts: Counter, probs, n: int) -> tuple[float, int]:
    """Pearson's statistic of `counts` (n draws) against `probs`, tokens expected fewer than 5 times
    pooled into one bin; a draw of a token of probability 0 is infinitely unlikely."""
    exp = probs * n
    if any(exp[t] == 0 for t in counts):
        return math.inf, 1
    big = [t for t in range(len(probs)) if exp[t] >= 5]
    small = [t for t in range(len(probs)) if exp[t] < 5]
    stat = sum((counts.get(t, 0) - exp[t].item()) ** 2 / exp[t].item() for t in big)
    rest_exp = exp[small].sum().item()
    if rest_exp > 0:
        rest = sum(counts.get(t, 0) for t in small)
        stat += (rest - rest_exp) ** 2 / rest_exp
    return stat, len(big) + (rest_exp > 0) - 1


def _warped(logits, temperature=1.0, top_k=0, top_p=1.0):
    """The sampling distribution transformers' own warpers make of `logits` (its order: T, top-k, top-p)."""
    from transformers.generation.logits_process import (TemperatureLogitsWarper, TopKLogitsWarper,
                                                        TopPLogitsWarper)

    x = TemperatureLogitsWarper(temperature)(None, logits[None].clone())
    if top_k:
        x = TopKLogitsWarper(top_k)(None, x)
    if top_p < 1:
        x = TopPLogitsWarper(top_p)(None, x)
    return x[0].softmax(-1)


N = 3000


@pytest.mark.parametrize("kw", [{"temperature": 1.0}, {"temperature": 0.7, "top_k": 6}, {"temperature": 1.0, "top_p": 0.8}])
def test_first_and_second_draws_follow_the_models_softmax(sharp, kw):
    model, tok = sharp
    enc = tok(["def forward(self, x):"] * N, return_tensors="pt", add_special_tokens=False)
    rows, lps = _decoder(model, enc, 2, -1, tok.pad_token_id, seed=5, **kw).run(enc["input_ids"],
                                                                              enc["attention_mask"], logprobs=True)
    assert all(len(r) == 2 for r in rows)
    with torch.no_grad():
        logits = model(input_ids=enc["input_ids"][:1]).logits[0, -1]
    want = _warped(logits, **kw)
    first = Counter(r[0] for r in rows)
    stat, df = _chi2(first, want, N)
    assert stat < _chi2_limit(df), (stat, df, first.most_common(8))
    # the test can fail: the same draws against the untempered / unfiltered softmax or a uniform draw
    for other in (_warped(logits, 2.0), torch.full_like(want, 1 / len(want))):
        stat, df = _chi2(first, other, N)
        assert stat > _chi2_limit(df)
    # each kept log-probability is the token's under the sampling distribution
    assert all(abs(lp[0] - want[r[0]].log().item()) < 1e-4 for r, lp in zip(rows[:50], lps[:50]))

    # the second token (a decode step: cache, rotary position, mask) given the likeliest first one
    t1 = first.most_common(1)[0][0]
    second = Counter(r[1] for r in rows if r[0] == t1)
    n2 = sum(second.values())
    with torch.no_grad():
        logits2 = model(input_ids=torch.cat([enc["input_ids"][:1], torch.tensor([[t1]])], 1)).logits[0, -1]
    stat, df = _chi2(second, _warped(logits2, **kw), n2)
    assert n2 > 300 and stat < _chi2_limit(df), (stat, df, n2)


def test_sampling_is_reproducible_and_ends_rows_at_their_end_tokens(sharp):
    model, tok = sharp
    enc = tok(PROMPTS * 8, return_tensors="pt", padding=True, add_special_tokens=False)
    new, pad = 24, tok.pad_token_id
    probe = _decoder(model, enc, new, -1, pad, temperature=1.0, seed=1).run(enc["input_ids"], enc["attention_mask"])
    # two "end" tokens the model draws often, so that rows end at different steps
    common = [t for t, _ in Counter(t for r in probe for t in r[1:]).most_common(2)]

    def run(seed):
        dec = _decoder(model, enc, new, common, pad, temperature=1.0, seed=seed)
        return dec, *dec.run(enc["input_ids"], enc["attention_mask"], logprobs=True)

    dec, rows, lps = run(7)
    _, again, again_lps = run(7)
    assert rows == again and lps == again_lps                           # the same seed, the same answers
    assert run(8)[1] != rows                                            # another seed, others
    ended = [r for r in rows if r[-1] in common]
    assert 0 < len(ended) < len(rows), "every row should not end, nor none"
    for i, (r, lp) in enumerate(zip(rows, lps)):
        assert len(lp) == len(r) and all(x <= 0 for x in lp)
        assert not any(t in common for t in r[:-1])                     # an answer stops at its first end token
        if r[-1] in common:
            assert dec.out[i, len(r):].eq(pad).all() and dec.logp[i, len(r):].eq(0).all()   # padding after it
        else:
            assert len(r) == new


@pytest.mark.gpu
def test_static_decoder_on_a_gpu_replays_one_graph_a_step(student, sharp):
    """On a GPU the step is a captured graph; in float32 its greedy tokens are generate's there too, and
    its draws are reproducible from the seed and follow the softmax."""
    if not torch.cuda.is_available():
        pytest.skip("no GPU")
    model, tok = student
    model = model.to("cuda")
    enc = tok(["def forward(self, x):", "@triton.jit\ndef k(x_ptr, n):\n    return y * 2"], return_tensors="pt",
              padding=True, add_special_tokens=False).to("cuda")
    want = _generate(model, enc, 64, tok.eos_token_id, tok.pad_token_id)
    dec = _decoder(model, enc, 64, tok.eos_token_id, tok.pad_token_id)
    assert dec.graph is not None
    assert dec.run(enc["input_ids"], enc["attention_mask"]) == want
    model.to("cpu")

    model, tok = sharp
    model = model.to("cuda")
    enc = tok(["def forward(self, x):"] * N, return_tensors="pt", add_special_tokens=False).to("cuda")
    dec = _decoder(model, enc, 3, -1, tok.pad_token_id, temperature=1.0, seed=3)
    assert dec.graph is not None
    rows = dec.run(enc["input_ids"], enc["attention_mask"])
    assert rows == dec.run(enc["input_ids"], enc["attention_mask"]) == \
        _decoder(model, enc, 3, -1, tok.pad_token_id, temperature=1.0, seed=3).run(enc["input_ids"], enc["attention_mask"])
    with torch.no_grad():
        logits = model(input_ids=enc["input_ids"][:1]).logits[0, -1].float().cpu()
    t1 = Counter(r[0] for r in rows).most_common(1)[0][0]
    ids2 = torch.cat([enc["input_ids"][:1], torch.tensor([[t1]], device="cuda")], 1)
    with torch.no_grad():
        logits2 = model(input_ids=ids2).logits[0, -1].float().cpu()
    for counts, lg in ((Counter(r[0] for r in rows), logits), (Counter(r[1] for r in rows if r[0] == t1), logits2)):
        stat, df = _chi2(counts, lg.softmax(-1), sum(counts.values()))
        assert stat < _chi2_limit(df), (stat, df)
    model.to("cpu")
