"""Programs that only view their input (issue 34): a list of view ops only (catalog `view`) is never
drawn, every other list is drawn exactly as before the rule, and the catalog's flag is what each op
returns alone (synth.check._not_a_view, the verifier's aliasing rule at sampling time)."""
import numpy as np
import pytest
import torch

import synth
import synth.check
import synth.sampler
from synth.check import VIEW
from synth.sampler import Attempts, SamplingError, build_problem, computes, resolve_ops
from tests.synth.views import VIEWS, beside_relu


def test_the_catalogs_view_ops_are_the_six_shape_ops_torch_returns_as_views():
    assert VIEWS == ["flatten", "narrow", "permute", "reshape", "select", "transpose"]


def test_each_view_op_alone_only_ever_returns_a_view_of_its_input():
    # the flag is right: every wiring and size of a view op alone fails the run check as a view
    config = synth.load_profile("cpu").config(max_attempts=6)
    catalog = {o.name: o for o in resolve_ops()}
    for op in VIEWS:
        stats = Attempts()
        with pytest.raises(SamplingError):
            build_problem([catalog[op]], np.random.default_rng(1), config, seed=1, stats=stats)
        assert stats.counts.get(VIEW, 0) >= 6 and set(stats.counts) <= {VIEW, "wiring", "constraints"}, (op, stats.counts)


def _outputs_alias_inputs(p) -> list[bool]:
    ns: dict = {}
    exec(p.source, ns)  # noqa: S102 - synth's own text
    torch.manual_seed(0)
    inputs = ns["get_inputs"]()
    out = ns["Model"](*ns["get_init_inputs"]())(*inputs)
    ptrs = {x.untyped_storage().data_ptr() for x in inputs if isinstance(x, torch.Tensor)}
    return [o.untyped_storage().data_ptr() in ptrs for o in (out if isinstance(out, tuple) else (out,))]


def test_no_drawn_program_only_views_its_input_and_views_still_compose():
    problems = synth.sample(120, level=1, seed=5)
    assert not {p.ops[0] for p in problems} & set(VIEWS)
    for p in problems[:40] + synth.sample(20, level=2, seed=5, ops=VIEWS + ["relu", "sum"]):
        assert not all(_outputs_alias_inputs(p)), p.ops
    for op in VIEWS:  # a view beside compute is drawn (a view of another input may stay an output beside it)
        p = beside_relu(op, seed=3)
        assert sorted(p.ops) == sorted([op, "relu"]) and not all(_outputs_alias_inputs(p)), p.source


def test_an_op_set_of_views_only_is_an_error_naming_them():
    with pytest.raises(ValueError, match="narrow, transpose only view their input"):
        synth.sample(1, level=3, ops=["transpose", "narrow"])
    assert computes(resolve_ops(["transpose", "exp"])) and not computes(resolve_ops(["transpose", "narrow"]))


def test_every_list_that_computes_is_drawn_byte_for_byte_as_before_the_rule(monkeypatch):
    new = synth.sample(300, levels=[1, 2, 3], seed=2026)
    with monkeypatch.context() as m:  # the sampler before issue 34: no list redrawn, no view check
        m.setattr(synth.sampler, "computes", lambda ops: True)
        m.setattr(synth.check, "_not_a_view", lambda *a: None)
        old = synth.sample(300, levels=[1, 2, 3], seed=2026)
    changed = [i for i, (a, b) in enumerate(zip(old, new)) if a.source != b.source]
    views_only = [i for i, p in enumerate(old) if set(p.ops) <= set(VIEWS)]
    assert changed == views_only and len(changed) >= 3, (changed, views_only)   # 4 of 300 at this seed
    assert all(all(_outputs_alias_inputs(old[i])) for i in views_only if old[i].level == 1)  # alone: a view
