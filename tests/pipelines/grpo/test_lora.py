"""LoRA via peft: only adapters train, the KL reference is the adapter-free base, resume and export work."""
import torch

from pipelines.grpo.rollout import export_weights, restore_after_export
from pipelines.grpo.trainer import GRPOTrainer
from tests.pipelines.grpo.kit import config

LORA = {"path": None, "device": "cpu", "lora": {"r": 4, "alpha": 8, "target_modules": ["q_proj", "v_proj"]}}


def _lora_cfg(tiny_llama, shards, out, **kw):
    model = {**LORA, "path": str(tiny_llama)}
    return config(tiny_llama, shards, out, model=model, loss={"beta": 0.1}, optim={"lr": 5e-2, "micro_batch": 8},
                  **kw)


def test_lora_trains_adapters_only_and_resumes(tiny_llama, shards, tmp_path):
    t = GRPOTrainer(_lora_cfg(tiny_llama, shards, tmp_path / "a", steps=2), progress=False)
    trainable = [n for n, p in t.policy.model.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in n for n in trainable)
    frozen = {n: p.detach().clone() for n, p in t.policy.model.named_parameters() if not p.requires_grad}
    recs = t.train()
    assert all(r["kl"] >= 0 for r in recs) and recs[-1]["kl"] > 0    # the reference (adapters off) differs now
    for n, p in t.policy.model.named_parameters():
        if n in frozen:
            assert torch.equal(p, frozen[n]), n
    # the exported weights carry the base model's names with the adapters merged in, then unmerged
    names = [k for k, _ in export_weights(t.policy.model)]
    restore_after_export(t.policy.model)
    assert "model.layers.0.self_attn.q_proj.weight" in names and not any("lora_" in k for k in names)
    resumed = GRPOTrainer(_lora_cfg(tiny_llama, shards, tmp_path / "a", steps=3), progress=False)
    assert resumed.step == 2
    a = {n: p for n, p in t.policy.model.named_parameters() if "lora_" in n}
    b = {n: p for n, p in resumed.policy.model.named_parameters() if "lora_" in n}
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert resumed.train()[0]["step"] == 3


def test_export_merges_the_adapter(tiny_llama):
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(tiny_llama, dtype=torch.float32)
    want_names = set(base.state_dict())
    before = base.state_dict()["model.layers.0.self_attn.q_proj.weight"].clone()
    m = get_peft_model(base, LoraConfig(r=2, lora_alpha=4, target_modules=["q_proj"], task_type="CAUSAL_LM"))
    with torch.no_grad():
        for n, p in m.named_parameters():
            if "lora_B" in n:
                p.fill_(0.01)
    got = dict(export_weights(m))
    assert set(got) == want_names
    merged = got["model.layers.0.self_attn.q_proj.weight"].clone()
    restore_after_export(m)
    assert not torch.allclose(merged, before)
    assert torch.allclose(m.get_base_model().state_dict()["model.layers.0.self_attn.q_proj.base_layer.weight"], before)
