"""``glowc generate`` and ``glowc dump --generate`` on a LLaMA-style decoder (interpreter), tokens checked against
an onnxruntime greedy loop."""
from __future__ import annotations

import onnx
import pytest

from glow_conformance.llm_models import llama_decoder
from glow_tools import cli
from tests.core.test_llm import PROMPT, OrtDecoder


@pytest.fixture(scope="module")
def decoder(tmp_path_factory):
    path = tmp_path_factory.mktemp("llm") / "llama.onnx"
    onnx.save(llama_decoder(), path)
    return path


def test_generate_prints_tokens_and_rates(decoder, capsys):
    ids = ",".join(str(t) for t in PROMPT[0])
    assert cli.main(["generate", str(decoder), "--backend", "interpreter", "--prompt-ids", ids,
                     "--max-new-tokens", "6", "--max-seq-len", "32", "--prefill-block", "4"]) == 0
    lines = capsys.readouterr().out.splitlines()
    want = OrtDecoder(decoder.read_bytes()).greedy(PROMPT, 6)[0]
    assert lines[0] == "tokens: " + " ".join(str(t) for t in want[0])
    assert lines[1].startswith("prefill: 10 tokens, ") and "decode: 5 steps, " in lines[1]


def test_generate_errors_are_one_line(decoder, capsys):
    assert cli.main(["generate", str(decoder), "--backend", "interpreter", "--prompt-ids", "1,x",
                     "--max-seq-len", "32", "--prefill-block", "4"]) == 1
    assert "--prompt-ids '1,x': give token ids separated by commas" in capsys.readouterr().err
    assert cli.main(["generate", str(decoder), "--backend", "interpreter", "--prompt-ids", "1,2",
                     "--max-new-tokens", "40", "--max-seq-len", "32", "--prefill-block", "4"]) == 1
    assert "need 42 positions; the generator's cache holds max_seq_len=32" in capsys.readouterr().err


def test_dump_generate_shows_the_cache_once_as_state(decoder, capsys):
    assert cli.main(["dump", str(decoder), "--generate", "--ir", "--max-seq-len", "32", "--prefill-block", "4"]) == 0
    out = capsys.readouterr().out
    for layer in range(2):
        for kind in ("key", "value"):
            nm = f"past_key_values.{layer}.{kind}"
            assert out.count(f"%{nm} = WeightVar float32<1 x 2 x 32 x 16> state") == 1
            assert f"scatter_nd @inout %{nm}," in out
    assert "; memory: constant " in out and ", state 16384 B, activations " in out
