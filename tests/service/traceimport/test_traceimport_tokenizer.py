"""``trace import --tokenizer`` takes a tokenizer.json or the model folder holding one, and refuses a
folder without one in one line naming the folder (``service.traceimport.tokenizer``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import typer

from scheduler.errors import InvalidInputError
from service.traceimport.importers import import_verl
from tests.service.replay.clirun import run
from tests.service.traceimport.wordtokenizer import write_word_tokenizer

WORDS = ["[UNK]", "what", "is", "two", "so", "four"]


def _dumps(folder: Path) -> Path:
    folder.mkdir()
    line = {"input": "what is two", "output": "so four", "score": 1.0, "step": 1}
    (folder / "1.jsonl").write_text(json.dumps(line) + "\n")
    return folder


def _model_folder(folder: Path, tokenizer_json: bool) -> Path:
    """A Hugging Face model folder as downloaded: config files beside the tokenizer."""
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    (folder / "tokenizer_config.json").write_text("{}")
    if tokenizer_json:
        write_word_tokenizer(folder / "tokenizer.json", WORDS)
    else:  # a sentencepiece-only model (a slow tokenizer): Llama 2's, T5's
        (folder / "tokenizer.model").write_bytes(b"\x0a\x03spm")
    return folder


def test_a_model_folder_holding_tokenizer_json_counts_with_it_and_names_the_file(tmp_path: Path) -> None:
    model = _model_folder(tmp_path / "Qwen2.5-7B-Instruct", tokenizer_json=True)
    result = import_verl(_dumps(tmp_path / "rollouts"), model, max_new_tokens=None)
    assert result.trace.prompt_tokens.tolist() == [3]
    assert result.trace.output_tokens.tolist() == [2]
    assert result.tokenizer.startswith(f"{model / 'tokenizer.json'} (WordLevel, vocabulary 6)")


def test_the_summary_names_the_tokenizer_json_a_model_folder_gave(cli: typer.Typer, tmp_path: Path) -> None:
    model = _model_folder(tmp_path / "Qwen2.5-7B-Instruct", tokenizer_json=True)
    args = ["trace", "import", str(_dumps(tmp_path / "rollouts")), "--tokenizer", str(model)]
    code, stdout, _ = run(cli, [*args, "--out", str(tmp_path / "t.csv")])
    assert code == 0
    assert f"token counts: tokenizer {model / 'tokenizer.json'} (WordLevel, vocabulary 6)" in stdout


def test_a_folder_with_only_a_sentencepiece_model_is_refused_saying_only_tokenizer_json_is_read(
    cli: typer.Typer, tmp_path: Path
) -> None:
    model = _model_folder(tmp_path / "llama-2-7b", tokenizer_json=False)
    args = ["trace", "import", str(_dumps(tmp_path / "rollouts")), "--tokenizer", str(model)]
    code, _, err = run(cli, [*args, "--out", str(tmp_path / "t.csv")])
    assert code == 2
    assert err.startswith(f"trace: tokenizer='{model}': holds tokenizer.model (sentencepiece) but no ")
    assert "only tokenizer.json is supported" in err
    assert len(err.splitlines()) == 1
    assert not (tmp_path / "t.csv").exists()


SIX = [f"shard-{i}.safetensors" for i in range(6)]


@pytest.mark.parametrize(
    ("held", "said"),
    [
        ([], "it is empty"),
        (["config.json", "snapshots/"], "it holds config.json, snapshots/"),
        (SIX, f"it holds {', '.join(SIX)}"),  # six are all shown
        ([*SIX, "z.json"], f"it holds {', '.join(SIX)}, and 1 more"),
    ],
    ids=["empty", "hub-cache-top", "six", "seven"],
)
def test_a_folder_without_a_tokenizer_json_says_what_it_holds(
    tmp_path: Path, held: list[str], said: str
) -> None:
    folder = tmp_path / "models--Qwen--Qwen2.5-7B"
    folder.mkdir()
    for name in held:
        if name.endswith("/"):
            (folder / name.rstrip("/")).mkdir()
        else:
            (folder / name).write_text("{}")
    with pytest.raises(InvalidInputError, match=rf"holds no tokenizer\.json \({said}\)$"):
        import_verl(_dumps(tmp_path / "rollouts"), folder, max_new_tokens=None)


def test_a_tokenizer_json_that_does_not_parse_is_refused_naming_it(tmp_path: Path) -> None:
    broken = tmp_path / "tokenizer.json"
    broken.write_text('{"model": ')
    with pytest.raises(InvalidInputError, match=r"not a readable tokenizer\.json") as err:
        import_verl(_dumps(tmp_path / "rollouts"), broken, max_new_tokens=None)
    assert (err.value.field, err.value.value) == ("tokenizer", str(broken))
