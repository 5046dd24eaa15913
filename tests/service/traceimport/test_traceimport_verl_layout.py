"""A rollout folder laid out exactly as veRL writes it imports as the trace its run generated.

The fixture mirrors ``RayPPOTrainer._dump_generations`` and its callers in
``verl/trainer/ppo/ray_trainer.py`` of volcengine/verl at commit
3d9df73353a546a98235b38653c2c163efb51420 (the older 00401103a8c8900774aba04b910de5b0af930b99 writes
the same lines):

- one file per call, ``{global_steps}.jsonl``, opened with ``"w"``; lines are
  ``json.dumps(entry, ensure_ascii=False)`` joined by ``"\\n"`` with one trailing ``"\\n"``;
- each line's keys in order ``input, output, gts, score, step``, then every
  ``reward_extra_infos_dict`` key whose list has one value per line (a key named ``score`` replaces
  the summed token-level score), then ``request_id`` when the batch carries one;
- ``input``/``output`` are ``tokenizer.batch_decode(..., skip_special_tokens=True)``: the chat
  template's text without its special tokens, padding and EOS gone;
- ``fit`` repeats each prompt ``rollout.n`` times interleaved, then ``_balance_batch`` (on by
  default) reorders the batch, so a prompt's samples are not consecutive;
- training ``global_steps`` start at 1; ``_validate`` before training dumps at step 0 (or at the
  resumed step), adding a ``reward`` key to every line.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from scheduler.errors import InvalidInputError
from service.traceimport.importers import import_verl, prompt_hash
from tests.service.traceimport.wordtokenizer import write_word_tokenizer

WORDS = ["[UNK]", "system", "user", "assistant", "what", "is", "two", "three", "plus", "four", "five", "so"]


@pytest.fixture
def tokenizer_json(tmp_path: Path) -> Path:
    """A word-level tokenizer.json: one token per whitespace-separated word, so counts are obvious."""
    return write_word_tokenizer(tmp_path / "tokenizer.json", WORDS)


def _templated(question: str) -> str:
    """A Qwen chat prompt as veRL decodes it: ``<|im_start|>`` / ``<|im_end|>`` skipped, roles kept."""
    return f"system\nYou are a helpful assistant\nuser\n{question}\nassistant\n"


def dump_generations(
    folder: Path,
    global_steps: int,
    inputs: list[str],
    outputs: list[str],
    gts: list[object],
    scores: list[float],
    extras: dict[str, list[object]],
) -> None:
    """veRL's ``_dump_generations``, restated: the same keys, order, encoding and line endings."""
    folder.mkdir(parents=True, exist_ok=True)
    n = len(inputs)
    base: dict[str, list[object]] = {
        "input": list(inputs),
        "output": list(outputs),
        "gts": gts,
        "score": list(scores),
        "step": [global_steps] * n,
    }
    base.update({k: v for k, v in extras.items() if len(v) == n})
    lines = [json.dumps({k: v[i] for k, v in base.items()}, ensure_ascii=False) for i in range(n)]
    (folder / f"{global_steps}.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")


Q1, Q2 = _templated("what is two plus two"), _templated("what is three plus five")
# rollout.n = 3, interleaved (Q1 Q1 Q1 Q2 Q2 Q2), then reordered by _balance_batch
ORDER = [
    (Q2, "so five"),
    (Q1, "four"),
    (Q2, "so so five\u2028five"),
    (Q1, "so four"),
    (Q1, "so so four"),
    (Q2, "five"),
]


def _training_step(folder: Path, step: int) -> None:
    dump_generations(
        folder,
        step,
        [q for q, _ in ORDER],
        [o for _, o in ORDER],
        [["8"] if q is Q2 else {"answer": "4"} for q, _ in ORDER],
        [1.0, 1.0, 0.0, 1.0, 1.0, 1.0],
        {
            "acc": [True, True, False, True, True, True],
            "pred": ["5", "4", "[INVALID]", "4", "4", "5"],
            "request_id": [f"req-{i}" for i in range(len(ORDER))],
            "per_token": [[0.0, 1.0]],  # a list of another length: veRL drops it from the line
        },
    )


def test_a_rollout_folder_as_verl_writes_it_imports_every_sample_under_its_prompt(
    tmp_path: Path, tokenizer_json: Path
) -> None:
    folder = tmp_path / "rollout_data_dir"
    _training_step(folder, 1)
    _training_step(folder, 2)
    trace = import_verl(folder, tokenizer_json, max_new_tokens=None).trace
    p1, p2 = prompt_hash(Q1), prompt_hash(Q2)
    assert trace.step.tolist() == [1] * 6 + [2] * 6
    assert trace.prompt_id.tolist() == [p2, p1, p2, p1, p1, p2] * 2
    assert trace.sample_idx.tolist() == [0, 0, 1, 1, 2, 2] * 2
    assert trace.prompt_tokens.tolist() == [len(q.split()) for q, _ in ORDER] * 2
    assert trace.output_tokens.tolist() == [2, 1, 4, 2, 3, 1] * 2  # U+2028 is no line break
    assert trace.reward.tolist() == [1.0, 1.0, 0.0, 1.0, 1.0, 1.0] * 2
    assert dict(trace.numeric) == {}
    assert dict(trace.categorical) == {}


def _validation_before_training(folder: Path) -> None:
    """``_validate`` at ``global_steps`` 0: val_kwargs.n = 1 greedy sample, a ``reward`` per line."""
    dump_generations(folder, 0, [Q1, Q2], ["four", "five"], ["4", "8"], [1.0, 0.0], {"reward": [1.0, 0.0]})


@pytest.mark.parametrize("shared", [True, False], ids=["shared-with-rollouts", "validation-dir"])
def test_a_step_0_dump_is_refused_as_verls_validation_not_imported_as_training(
    tmp_path: Path, tokenizer_json: Path, shared: bool
) -> None:
    """Training steps start at 1; only validation writes step 0, so its file would have posed as a
    step of greedy samples of held-out prompts."""
    folder = tmp_path / "dumps"
    _validation_before_training(folder)
    if shared:
        _training_step(folder, 1)
    with pytest.raises(InvalidInputError, match=r"0\.jsonl.*step 0.*validation_data_dir"):
        import_verl(folder, tokenizer_json, max_new_tokens=None)


@pytest.mark.parametrize("mixed", [False, True], ids=["overwritten-step", "line-mixed-in"])
def test_validation_at_a_test_freq_step_is_refused_by_the_reward_key_it_adds(
    tmp_path: Path, tokenizer_json: Path, mixed: bool
) -> None:
    """``_validate`` also dumps at every ``test_freq`` step, under that step's name: in a folder shared
    with the rollouts it overwrites them, and its step number is a training one. The ``reward`` key it
    adds to each line, which ``fit`` never writes, is what tells."""
    folder = tmp_path / "dumps"
    _training_step(folder, 1)
    _training_step(folder, 2)
    validation: dict[str, list[object]] = {"reward": [1.0, 0.0]}
    dump_generations(folder, 2, [Q1, Q2], ["four", "five"], ["4", "8"], [1.0, 0.0], validation)
    if mixed:  # the validation lines appended to a rollout file rather than written over it
        (folder / "2.jsonl").unlink()
        _training_step(folder, 2)
        dump_generations(tmp_path / "val", 2, [Q1], ["four"], ["4"], [1.0], {"reward": [1.0]})
        with (folder / "2.jsonl").open("a", encoding="utf-8") as handle:
            handle.write((tmp_path / "val" / "2.jsonl").read_text(encoding="utf-8"))
    line = 7 if mixed else 1
    with pytest.raises(InvalidInputError, match=rf"2\.jsonl:{line}.*'reward' key.*validation_data_dir"):
        import_verl(folder, tokenizer_json, max_new_tokens=None)


def test_two_dataset_rows_of_identical_text_share_an_id_and_their_samples_stay_distinct(
    tmp_path: Path, tokenizer_json: Path
) -> None:
    """The id is the text's hash: two dataset rows with the same text are one prompt to the predictor,
    and their 2 x rollout.n samples of a step are numbered 0 .. 2n-1 as one group, never twice 0 .. n-1
    (a (step, prompt_id, sample_idx) twice would be refused by every reader of the trace)."""
    folder = tmp_path / "dumps"
    inputs = [Q1] * 6 + [Q2] * 3  # rollout.n = 3; Q1 twice in the batch
    outputs = ["four", "so four", "four", "so so four", "four", "so four", "five", "five", "so five"]
    for step in (1, 2):
        dump_generations(folder, step, inputs, outputs, ["4"] * 9, [1.0] * 9, {})
    trace = import_verl(folder, tokenizer_json, max_new_tokens=None).trace
    assert trace.prompt_id.tolist() == ([prompt_hash(Q1)] * 6 + [prompt_hash(Q2)] * 3) * 2
    assert trace.sample_idx.tolist() == [0, 1, 2, 3, 4, 5, 0, 1, 2] * 2


def test_a_folder_without_dumps_says_what_it_holds_so_a_parent_folder_shows(
    tmp_path: Path, tokenizer_json: Path
) -> None:
    # Pointed at the experiment's folder, which holds rollout_data_dir and validation_data_dir, the
    # import said only "holds no {step}.jsonl rollout dumps".
    _training_step(tmp_path / "run" / "rollout", 1)
    _validation_before_training(tmp_path / "run" / "validation")
    (tmp_path / "run" / "val_1.jsonl").write_text("")
    held = r"it holds rollout/, val_1\.jsonl, validation/\); veRL names each dump by its step alone"
    with pytest.raises(InvalidInputError, match=held):
        import_verl(tmp_path / "run", tokenizer_json, max_new_tokens=None)


def test_an_empty_folder_is_called_empty(tmp_path: Path, tokenizer_json: Path) -> None:
    (tmp_path / "rollouts").mkdir()
    with pytest.raises(InvalidInputError, match=r"holds no \{step\}\.jsonl rollout dumps \(it is empty\)$"):
        import_verl(tmp_path / "rollouts", tokenizer_json, max_new_tokens=None)


def test_the_tokenizer_is_named_by_the_path_given_not_the_blob_a_hub_cache_links_it_to(
    tmp_path: Path, tokenizer_json: Path
) -> None:
    # The Hugging Face cache links snapshots/<rev>/tokenizer.json to blobs/<sha256>: resolved, the
    # name said no model at all.
    snapshot = tmp_path / "models--Qwen--Qwen2.5-7B" / "snapshots" / "a09a354"
    snapshot.mkdir(parents=True)
    (snapshot / "tokenizer.json").symlink_to(tokenizer_json)
    _training_step(tmp_path / "rollouts", 1)
    given = snapshot / ".." / "a09a354" / "tokenizer.json"
    result = import_verl(tmp_path / "rollouts", given, max_new_tokens=None)
    assert result.tokenizer.startswith(f"{snapshot / 'tokenizer.json'} (WordLevel, vocabulary ")
