"""bench/closed_loop_parts/decode.py: the static-cache greedy decoder gives transformers' `generate` tokens
(left-padded prompts of several lengths, an answer that ends early), on the CPU where it runs without a graph."""
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "bench"))

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


def _generate(model, enc, new, eos, pad):
    with torch.no_grad():
        seqs = model.generate(**enc, max_new_tokens=new, do_sample=False, eos_token_id=eos, pad_token_id=pad)
    rows = seqs[:, enc["input_ids"].shape[1]:].tolist()
    return [r[:r.index(eos) + 1] if eos in r else r for r in rows]


def test_static_decoder_gives_generates_tokens(student):
    from closed_loop_parts.decode import StaticDecoder

    model, tok = student
    prompts = ["def forward(self, x):", "return torch.relu(x) + y", "@triton.jit\ndef k(x_ptr, n):\n    return y * 2"]
    enc = tok(prompts, return_tensors="pt", padding=True, add_special_tokens=False)
    assert (enc["attention_mask"] == 0).any()                 # the batch is left-padded
    new = 40
    want = _generate(model, enc, new, tok.eos_token_id, tok.pad_token_id)
    dec = StaticDecoder(model, enc["input_ids"].shape[0], enc["input_ids"].shape[1], new, tok.eos_token_id,
                        tok.pad_token_id)
    got = dec.run(enc["input_ids"], enc["attention_mask"])
    assert got == want and all(len(r) == new for r in got)

    # an "end" token the model does produce: the second row's 5th token. Its answer stops there, the
    # others go on, as generate's do.
    eos = want[1][4]
    want = _generate(model, enc, new, eos, tok.pad_token_id)
    assert len(want[1]) <= 5 and max(map(len, want)) == new
    got = StaticDecoder(model, *enc["input_ids"].shape, new, eos, tok.pad_token_id).run(enc["input_ids"],
                                                                                        enc["attention_mask"])
    assert got == want


def test_static_decoder_refuses_another_batch_shape(student):
    from closed_loop_parts.decode import StaticDecoder

    model, tok = student
    enc = tok(["a b", "c"], return_tensors="pt", padding=True, add_special_tokens=False)
    dec = StaticDecoder(model, 3, enc["input_ids"].shape[1], 4, tok.eos_token_id, tok.pad_token_id)
    with pytest.raises(ValueError, match="holds 3 prompts"):
        dec.run(enc["input_ids"], enc["attention_mask"])


@pytest.mark.gpu
def test_static_decoder_on_a_gpu_replays_one_graph_a_step(student):
    """On a GPU the step is a captured graph; in float32 its tokens are generate's there too."""
    from closed_loop_parts.decode import StaticDecoder

    if not torch.cuda.is_available():
        pytest.skip("no GPU")
    model, tok = student
    model = model.to("cuda")
    enc = tok(["def forward(self, x):", "@triton.jit\ndef k(x_ptr, n):\n    return y * 2"], return_tensors="pt",
              padding=True, add_special_tokens=False).to("cuda")
    want = _generate(model, enc, 64, tok.eos_token_id, tok.pad_token_id)
    dec = StaticDecoder(model, *enc["input_ids"].shape, 64, tok.eos_token_id, tok.pad_token_id)
    assert dec.graph is not None
    assert dec.run(enc["input_ids"], enc["attention_mask"]) == want
    model.to("cpu")
