import os

# Triton kernels run on the CPU through the interpreter in this suite.
os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest


@pytest.fixture(scope="session")
def built_dataset(tmp_path_factory):
    """One small real build (LocalCluster, real verifier, replayed honest kernels) with its card."""
    from pipelines.build.config import load_config
    from pipelines.build.run import build
    from pipelines.publish.card import write_card
    from tests.pipelines.buildkit import write_config

    tmp = tmp_path_factory.mktemp("built")
    out = tmp / "out"
    manifest = build(load_config(write_config(tmp, size=4, shard_size=2)), out, progress=False)
    write_card(out, manifest)
    return out


@pytest.fixture
def umask():
    """`umask(0o022)` sets the process umask for the rest of the test; the old one is restored after."""
    old = os.umask(0o022)
    os.umask(old)
    yield os.umask
    os.umask(old)
