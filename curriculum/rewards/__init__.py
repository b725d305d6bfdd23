"""curriculum.rewards: the verifier as a reward for other trainers, over the rows `export` writes.

- `curriculum.rewards.trl.VerifierReward`: a TRL `reward_funcs` callable over the `trl` export's columns.
- `curriculum.rewards.verl.compute_score`: verl's custom reward function
  (`reward.custom_reward_function.path=pkg://curriculum.rewards.verl`).

Both score through `scorer.score`: the teacher's extractor finds the code, one verifier pool per
process verifies a batch at once (on a multi-GPU host, only the rank's LOCAL_RANK GPU), and
`scheme.verdict_reward` turns each verdict into the reward. Nothing they do raises into the trainer:
whatever goes wrong scores that completion 0 and says why.
"""
