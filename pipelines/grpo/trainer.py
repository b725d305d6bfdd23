"""The GRPO loop: roll out G samples per prompt, score them with the verifier, update, evaluate, promote.

A step: take `prompts_per_step` tasks from the current stage; sample G completions each (seeds
derived from run seed, step, slot, sample and resample round); score; measure the share of groups
whose rewards are all equal (`frac_zero_std`) and keep, drop or resample them; turn rewards into
per-token advantages (HRD: separate plan and code advantages); update; every `eval_every` steps on a
stage, measure held-out pass@1 and promote past the bar. Metrics go to OUT/metrics.jsonl, weights
and state to OUT/ckpt; `train()` resumes from the latest checkpoint when there is one.
"""
from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from pipelines.grpo import checkpoint, metrics
from pipelines.grpo.config import GRPOConfig
from pipelines.grpo.curriculum import Curriculum, CurriculumState
from pipelines.grpo.data import Task, load_heldout, load_stages, write_synth
from pipelines.grpo.hrd import code_mask
from pipelines.grpo.loss import group_advantages, hrd_token_advantages, zero_std_groups
from pipelines.grpo.policy import load_policy, make_optimizer
from pipelines.grpo.rewards import Rewarder, RewardResult
from pipelines.grpo.rollout import HFSampler, Sample, VLLMSampler, derive_seed, encode_prompt, vllm_available
from pipelines.grpo.update import Row, update

_RESUME_IGNORES = ("steps", "save_every", "plot", "out")


def config_digest(cfg: GRPOConfig) -> str:
    """What must match for a resume: everything but run length and bookkeeping."""
    d = {k: v for k, v in cfg.to_dict().items() if k not in _RESUME_IGNORES}
    return hashlib.sha256(json.dumps(d, sort_keys=True, default=str).encode()).hexdigest()[:16]


@dataclass
class Group:
    task: Task
    samples: list[Sample]
    results: list[RewardResult]


class GRPOTrainer:
    def __init__(self, cfg: GRPOConfig, progress: bool = True) -> None:
        self.cfg = cfg
        self.out = Path(cfg.out)
        self.out.mkdir(parents=True, exist_ok=True)
        self.progress = progress
        data_root = cfg.data.dir or str(write_synth(cfg.data.synth, self.out / "data"))
        self.stages = load_stages(data_root)
        if not self.stages:
            raise FileNotFoundError(f"data.dir: no RL rows under {Path(data_root) / 'rl'} (expected rl/stage=K/*.parquet)")
        self.heldout = load_heldout(data_root)
        self.digest = config_digest(cfg)
        ckpt = checkpoint.latest(self.out)
        state = checkpoint.read_state(ckpt) if ckpt else None
        if state is not None and state.config_digest != self.digest:
            raise ValueError(f"{self.out} holds a checkpoint of a different config (digest {state.config_digest}, "
                             f"this config {self.digest}); use another --out or remove {self.out / 'ckpt'}")
        torch.manual_seed(cfg.seed)
        self.policy = load_policy(cfg.model, cfg.loss.beta, ckpt)
        self.optimizer = make_optimizer(self.policy.model, cfg.optim.lr, cfg.optim.weight_decay)
        self.step = 0
        cur_state = None
        if state is not None:
            checkpoint.restore(ckpt, self.optimizer)
            self.step = state.step
            cur_state = CurriculumState.from_dict(state.curriculum)
        self.curriculum = Curriculum(cfg.curriculum, self.stages, self.heldout, cfg.seed, cur_state)
        vdev = cfg.reward.device if cfg.reward.device != "auto" else self.policy.device.type
        self.rewarder = Rewarder(cfg.reward, vdev, self.policy.tokenizer)
        self.sampler = self._sampler()
        self._prompt_ids: dict[tuple, list[int]] = {}
        self.skipped_long = 0

    def _sampler(self) -> Any:
        want = self.cfg.rollout.backend
        if want == "vllm" or (want == "auto" and vllm_available()):
            # the engine loads the configured weights; refresh() copies the live ones in before each use
            return VLLMSampler(self.cfg.model.path, self.policy.tokenizer, self.cfg.seed, self.cfg.rollout.vllm_memory)
        return HFSampler(self.policy.model, self.policy.tokenizer, self.policy.autocast)

    # -- pieces of a step --------------------------------------------------------------------------
    def _encode(self, task: Task) -> list[int]:
        ids = self._prompt_ids.get(task.prompt)
        if ids is None:
            ids = encode_prompt(self.policy.tokenizer, task.messages)
            self._prompt_ids[task.prompt] = ids
        return ids

    def _tasks(self, n: int) -> list[Task]:
        """`n` tasks whose prompts fit; too-long prompts are skipped and counted, never truncated."""
        out: list[Task] = []
        for _ in range(50):
            for t in self.curriculum.next_tasks(n - len(out)):
                if len(self._encode(t)) <= self.cfg.data.max_prompt_tokens:
                    out.append(t)
                else:
                    self.skipped_long += 1
            if len(out) == n:
                return out
        raise RuntimeError(f"data.max_prompt_tokens ({self.cfg.data.max_prompt_tokens}) is shorter than "
                           f"almost every prompt of stage {self.curriculum.stage.index}")

    def _roll(self, tasks: list[Task], step: int, rnd: int) -> list[Group]:
        r = self.cfg.rollout
        prompts, seeds = [], []
        for slot, t in enumerate(tasks):
            for g in range(r.group_size):
                prompts.append(self._encode(t))
                seeds.append(derive_seed(self.cfg.seed, 0, step, rnd, slot, g))
        samples = self.sampler.generate(prompts, seeds, r.max_new_tokens, r.temperature, r.top_p)
        self.t_roll += time.perf_counter() - self._t
        self._t = time.perf_counter()
        results = self.rewarder.score([(tasks[i // r.group_size].reference, s) for i, s in enumerate(samples)])
        self.t_reward += time.perf_counter() - self._t
        self._t = time.perf_counter()
        G = r.group_size
        return [Group(t, samples[i * G:(i + 1) * G], results[i * G:(i + 1) * G]) for i, t in enumerate(tasks)]

    def _rewards(self, groups: list[Group]) -> tuple[torch.Tensor, torch.Tensor]:
        plan = torch.tensor([[x.plan_reward for x in g.results] for g in groups], dtype=torch.float32)
        code = torch.tensor([[x.code_reward for x in g.results] for g in groups], dtype=torch.float32)
        return plan, code

    def _zero(self, groups: list[Group]) -> torch.Tensor:
        plan, code = self._rewards(groups)
        return zero_std_groups(plan) & zero_std_groups(code)

    def _rows(self, groups: list[Group]) -> list[Row]:
        lc = self.cfg.loss
        plan, code = self._rewards(groups)
        a_plan = group_advantages(plan, lc.scale_std, lc.std_eps)
        a_code = group_advantages(code, lc.scale_std, lc.std_eps)
        rows = []
        for gi, g in enumerate(groups):
            for si, s in enumerate(g.samples):
                n = len(s.completion_ids)
                if self.cfg.reward.scheme == "hrd":
                    cm = torch.tensor(code_mask(self.policy.tokenizer, s.completion_ids, s.text, s.finish_reason),
                                      dtype=torch.float32).reshape(1, n)
                    adv = hrd_token_advantages(a_plan[gi, si:si + 1], a_code[gi, si:si + 1], cm, torch.ones(1, n),
                                               self.cfg.reward.alpha)[0].tolist()
                else:
                    adv = [float(a_code[gi, si])] * n
                rows.append(Row(s.prompt_ids, s.completion_ids, adv))
        return rows

    # -- a step ---------------------------------------------------------------------------------------
    def train_step(self) -> dict[str, Any]:
        cfg, step = self.cfg, self.step + 1
        self.t_roll = self.t_reward = 0.0
        self._t = t0 = time.perf_counter()
        stage = self.curriculum.stage
        if self.sampler.name == "vllm":
            self.sampler.refresh(self.policy.model)
        groups = self._roll(self._tasks(cfg.rollout.prompts_per_step), step, 0)
        first = list(groups)  # the first draw, for the metrics; resampling replaces entries of `groups`
        zero = self._zero(groups)
        frac_zero = float(zero.float().mean())
        resampled = 0
        policy = cfg.curriculum.zero_std
        if policy == "resample":
            for rnd in range(1, cfg.curriculum.max_resample + 1):
                bad = [i for i, z in enumerate(self._zero(groups).tolist()) if z]
                if not bad:
                    break
                fresh = self._roll(self._tasks(len(bad)), step, rnd)
                resampled += len(bad)
                for i, g in zip(bad, fresh):
                    groups[i] = g
        if policy in ("drop", "resample"):
            groups = [g for g, z in zip(groups, self._zero(groups).tolist()) if not z]
        t_upd = time.perf_counter()
        u = None
        if groups:
            u = update(self.policy, self.optimizer, self._rows(groups), micro_batch=cfg.optim.micro_batch,
                       updates=cfg.optim.updates_per_batch, clip_low=cfg.loss.clip_low, clip_high=cfg.loss.clip_high,
                       beta=cfg.loss.beta, max_grad_norm=cfg.optim.max_grad_norm, temperature=cfg.rollout.temperature)
        t_update = time.perf_counter() - t_upd
        self.step = step
        flat = [x for g in first for x in g.results]
        statuses: dict[str, int] = {}
        for x in flat:
            statuses[x.status] = statuses.get(x.status, 0) + 1
        lens = [len(s.completion_ids) for g in first for s in g.samples]
        speedups = sorted(x.speedup for x in flat if x.passed and x.speedup is not None)
        rec: dict[str, Any] = {
            "step": step, "stage": stage.index, "levels": list(stage.levels), "scheme": cfg.reward.scheme,
            "reward_mean": sum(x.reward for x in flat) / len(flat),
            "plan_reward_mean": sum(x.plan_reward for x in flat) / len(flat),
            "pass_rate": sum(x.passed for x in flat) / len(flat),
            "frac_zero_std": frac_zero, "zero_std_policy": policy, "resampled_groups": resampled,
            "groups_used": len(groups), "update_skipped": u is None,
            "loss": u.loss if u else 0.0, "tokens": u.n_tokens if u else 0, "clip_frac": u.clip_frac if u else 0.0,
            "kl": u.kl if u else 0.0, "ratio_mean": u.ratio_mean if u else 1.0, "grad_norm": u.grad_norm if u else 0.0,
            "completion_len_mean": sum(lens) / len(lens), "statuses": statuses,
            "speedup_median": speedups[len(speedups) // 2] if speedups else None,
            "speed_term": self.rewarder.speed_term, "skipped_long_prompts": self.skipped_long,
            "rollout_backend": self.sampler.name,
            "time_rollout_s": self.t_roll, "time_reward_s": self.t_reward, "time_update_s": t_update,
        }
        t_eval = time.perf_counter()
        if self.curriculum.end_step():
            rec.update(self.evaluate(step))
        rec["time_eval_s"] = time.perf_counter() - t_eval
        rec["time_step_s"] = time.perf_counter() - t0
        return rec

    def evaluate(self, step: int) -> dict[str, Any]:
        """Held-out pass@1 at the current stage's levels (one sample each), then the promotion decision."""
        tasks = [t for t in self.curriculum.eval_tasks() if len(self._encode(t)) <= self.cfg.data.max_prompt_tokens]
        pass_at_1 = None
        if tasks:
            if self.sampler.name == "vllm":
                self.sampler.refresh(self.policy.model)
            c = self.cfg.curriculum
            samples = self.sampler.generate([self._encode(t) for t in tasks],
                                            [derive_seed(self.cfg.seed, 1, step, i) for i in range(len(tasks))],
                                            self.cfg.rollout.max_new_tokens, c.eval_temperature, 1.0)
            results = self.rewarder.score([(t.reference, s) for t, s in zip(tasks, samples)])
            pass_at_1 = sum(r.passed for r in results) / len(results)
        rec = self.curriculum.decide(step, pass_at_1, len(tasks))
        return {"eval_pass_at_1": pass_at_1, "eval_n": len(tasks), "promoted": rec["promoted"],
                "promotion_reason": rec["reason"]}

    # -- the run ----------------------------------------------------------------------------------------
    def close(self) -> None:
        """Stop the rollout engine (vLLM); the trainer cannot generate afterwards."""
        if hasattr(self.sampler, "close"):
            self.sampler.close()

    def save(self) -> Path:
        st = checkpoint.TrainerState(self.step, self.curriculum.state.to_dict(), self.digest,
                                     self.rewarder.speed_term)
        return checkpoint.save(self.out, st, self.policy.model, self.policy.tokenizer, self.optimizer)

    def train(self, steps: int | None = None, time_budget_s: float | None = None) -> list[dict[str, Any]]:
        """Run up to `steps` (default: the config's) total steps; returns this call's step records.

        With `time_budget_s`, no new step starts once that much time has passed (the last step is
        checkpointed as usual).
        """
        total = steps or self.cfg.steps
        started = time.perf_counter()
        log = metrics.MetricsLog(self.out / "metrics.jsonl", resume_step=self.step)
        bar = metrics.Progress(total, self.step, self.progress)
        (self.out / "config.json").write_text(json.dumps(self.cfg.to_dict(), indent=2, default=str))
        records = []
        try:
            with self.rewarder:
                while self.step < total:
                    rec = self.train_step()
                    log.write(rec)
                    bar.update(rec)
                    records.append(rec)
                    out_of_time = time_budget_s is not None and time.perf_counter() - started > time_budget_s
                    if self.step % self.cfg.save_every == 0 or self.step == total or out_of_time:
                        self.save()
                    if out_of_time:
                        break
        finally:
            bar.close()
            log.close()
        if self.cfg.plot:
            metrics.plot(self.out / "metrics.jsonl", self.out / "reward.png")
        return records
