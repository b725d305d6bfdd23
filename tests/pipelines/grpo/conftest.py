import pytest


@pytest.fixture(scope="session")
def tiny_llama(tmp_path_factory):
    from pipelines.grpo.tiny_model import build_tiny_llama

    return build_tiny_llama(tmp_path_factory.mktemp("grpo-tiny-llama"))


@pytest.fixture(scope="session")
def tokenizer(tiny_llama):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_llama)


@pytest.fixture(scope="session")
def shards(tmp_path_factory):
    from tests.pipelines.grpo.kit import write_shards

    return write_shards(tmp_path_factory.mktemp("grpo-shards"), {1: 4, 2: 4})
