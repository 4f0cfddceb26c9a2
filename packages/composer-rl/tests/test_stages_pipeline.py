"""The whole stage one through the command line, at a tiny size: every phase writes its run
directory, the final model loads into the inference engine, a second run reuses the result,
and `composer-rl eval` scores the SFT checkpoint on held-out tasks."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from _stage_helpers import tiny_config, write_corpus

from composer_model import ComposerTokenizer, InferenceEngine, SamplingParams, load_pretrained
from composer_rl.cli import main
from composer_rl.tasks import BUILTIN_TEMPLATES, Category


@pytest.mark.slow
def test_stage1_then_eval(tmp_path: Path) -> None:
    corpus = write_corpus(tmp_path / "corpus.jsonl")
    run = tmp_path / "run"
    config = tmp_path / "config.json"
    config.write_text(json.dumps(tiny_config(run, corpus)))
    assert main(["stage1", "--config", str(config), "--run-dir", str(run), "--no-progress"]) == 0
    for phase in ("pretrain", "long_context", "sft"):
        d = run / phase
        assert (d / "final" / "config.json").is_file() and (d / "loss.png").is_file()
        assert any((d / "tensorboard").iterdir())
        kinds = {json.loads(x)["kind"] for x in (d / "metrics.jsonl").read_text().splitlines()}
        assert kinds == {"train", "eval"}
    summary = json.loads((run / "stage1.json").read_text())
    assert summary[0]["mtp_joined_at"] == 4  # the pretrain phase's join step
    lc = summary[1]
    assert set(lc["position_ce"]) == {
        "before (no scaling)",
        "before (YaRN, untrained)",
        "after long-context phase",
    }
    assert (run / "long_context" / "position_loss.png").is_file()
    assert summary[2]["mtp_acceptance"] is not None

    final = run / "sft" / "final"
    model = load_pretrained(final)
    tokenizer = ComposerTokenizer.from_file(final / "tokenizer.json")
    (out,) = InferenceEngine(model, tokenizer).generate(
        ["<|user|>hi<|end_of_turn|><|assistant|>"], SamplingParams(max_new_tokens=4)
    )
    assert 1 <= len(out.token_ids) <= 4

    # A second run finds every phase finished and reuses it.
    mtime = (run / "sft" / "final" / "model.safetensors").stat().st_mtime
    assert main(["stage1", "--config", str(config), "--run-dir", str(run), "--no-progress"]) == 0
    assert (run / "sft" / "final" / "model.safetensors").stat().st_mtime == mtime

    report = tmp_path / "eval.json"
    args = ["eval", "--checkpoint", str(final), "--per-template", "1", "--max-turns", "1"]
    assert main([*args, "--max-new-tokens", "8", "--out", str(report)]) == 0
    data = json.loads(report.read_text())
    assert data["summary"]["tasks"] == len(BUILTIN_TEMPLATES)  # one per template
    assert set(data["summary"]["by_category"]) == {c.value for c in Category}
    assert len(data["episodes"]) == len(BUILTIN_TEMPLATES)
