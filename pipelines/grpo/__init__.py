"""pipelines.grpo: train a policy with GRPO on the RL shards, the verifier as reward, stage by stage.

`tritonforge train-grpo CONFIG.toml [--out DIR]`; see docs/trainer.md. Heavy
imports (torch, transformers, vLLM) happen inside the modules that need them.
"""
