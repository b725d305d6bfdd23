"""pipelines.grpo: train a policy with GRPO on the RL shards, the verifier as reward, stage by stage.

`tritonforge train-grpo CONFIG.toml [--out DIR]`; see README's "GRPO trainer" section. Heavy
imports (torch, transformers, vLLM) happen inside the modules that need them.
"""
