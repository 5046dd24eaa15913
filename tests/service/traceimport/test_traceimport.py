"""Importing veRL rollout dumps yields a valid trace, or one clear error (renamed generic files:
test_traceimport_generic.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tokenizers import Tokenizer

from scheduler.errors import InvalidInputError
from scheduler.trace import TraceFormatError
from service.traceimport.importers import import_verl, prompt_hash
from service.traceimport.tokenizer import ENCODE_CHUNK, count_tokens
from tests.service.traceimport.wordtokenizer import write_word_tokenizer

VOCAB = ["[UNK]", "what", "is", "two", "plus", "three", "four", "five", "the", "answer", "think", "so"]


@pytest.fixture
def tokenizer_json(tmp_path: Path) -> Path:
    """A word-level tokenizer.json: one token per whitespace-separated word, so counts are obvious."""
    return write_word_tokenizer(tmp_path / "tokenizer.json", VOCAB)


def _dump(directory: Path, step: int, records: list[dict[str, object]]) -> None:
    directory.mkdir(exist_ok=True)
    with (directory / f"{step}.jsonl").open("w") as handle:
        for record in records:
            handle.write(json.dumps(record) + "\n")


def _verl(directory: Path) -> None:
    q1, q2 = "what is two plus two", "what is three plus five"
    _dump(
        directory,
        1,
        [
            {"input": q1, "output": "think so four", "score": 1.0, "step": 1, "acc": True, "pred": "4"},
            {"input": q2, "output": "think think think so the answer is five", "score": 0.0, "step": 1},
            {"input": q1, "output": "four", "score": 1.0, "step": 1, "acc": True, "pred": "4"},
        ],
    )
    _dump(directory, 2, [{"input": q1, "output": "so four", "score": 1.0, "step": 2}])


def test_a_verl_dump_becomes_a_trace_with_hashed_prompts_and_counted_tokens(
    tmp_path: Path, tokenizer_json: Path
) -> None:
    _verl(tmp_path / "dumps")
    result = import_verl(tmp_path / "dumps", tokenizer_json, max_new_tokens=None)
    trace = result.trace
    assert result.files == 2
    assert result.tokenizer.startswith(f"{tokenizer_json.resolve()} (WordLevel, vocabulary ")
    assert trace.step.tolist() == [1, 1, 1, 2]
    q1 = prompt_hash("what is two plus two")
    assert trace.prompt_id.tolist() == [q1, prompt_hash("what is three plus five"), q1, q1]
    assert trace.sample_idx.tolist() == [0, 0, 1, 0]  # a prompt's samples are numbered per step
    assert trace.prompt_tokens.tolist() == [5, 5, 5, 5]
    assert trace.output_tokens.tolist() == [3, 8, 1, 2]
    assert trace.reward.tolist() == [1.0, 0.0, 1.0, 1.0]


@pytest.mark.parametrize("setting", ["padding", "truncation"])
def test_a_tokenizer_saved_with_padding_or_truncation_still_counts_each_whole_text(
    tmp_path: Path, tokenizer_json: Path, setting: str
) -> None:
    # tokenizer.json files may carry these, and encode_batch applied them: each text of a batch
    # counted as its longest (padding: outputs [8, 8, 8, 2]) or stopped at the limit (truncation:
    # prompts [2, 2, 2, 2]).
    saved = Tokenizer.from_file(str(tokenizer_json))
    if setting == "padding":
        saved.enable_padding(pad_id=0, pad_token=VOCAB[0])
    else:
        saved.enable_truncation(max_length=2)
    saved.save(str(tmp_path / "saved.json"))
    _verl(tmp_path / "dumps")
    trace = import_verl(tmp_path / "dumps", tmp_path / "saved.json", max_new_tokens=None).trace
    assert trace.prompt_tokens.tolist() == [5, 5, 5, 5]
    assert trace.output_tokens.tolist() == [3, 8, 1, 2]


def test_the_prompt_id_is_stable_and_differs_between_prompts() -> None:
    assert prompt_hash("a") == prompt_hash("a")
    assert prompt_hash("a") != prompt_hash("b")


def test_a_cap_marks_truncation_and_clamps_a_retokenized_overshoot(
    tmp_path: Path, tokenizer_json: Path
) -> None:
    _verl(tmp_path / "dumps")
    result = import_verl(tmp_path / "dumps", tokenizer_json, max_new_tokens=3, count_eos=False)
    assert result.trace.output_tokens.tolist() == [3, 3, 1, 2]
    assert result.trace.truncated.tolist() == [True, True, False, False]
    assert result.clamped == 1


def test_a_stopped_output_gets_back_the_eos_verl_counted_and_decoded_away(
    tmp_path: Path, tokenizer_json: Path
) -> None:
    """veRL's response length counts the EOS a response stopped on; its dump, decoded without special
    tokens, lacks it. Below the cap an output stopped, so it counts one more (reaching the cap at
    most, and still a stop); at or past the cap it was truncated and had no EOS."""
    _verl(tmp_path / "dumps")  # re-encoded outputs: 3, 8, 1, 2 tokens
    result = import_verl(tmp_path / "dumps", tokenizer_json, max_new_tokens=3)
    assert result.trace.output_tokens.tolist() == [3, 3, 2, 3]
    assert result.trace.truncated.tolist() == [True, True, False, False]
    assert result.clamped == 1


def test_without_a_cap_no_line_says_which_output_stopped_so_counts_stay_as_encoded(
    tmp_path: Path, tokenizer_json: Path
) -> None:
    _verl(tmp_path / "dumps")
    result = import_verl(tmp_path / "dumps", tokenizer_json, max_new_tokens=None)
    assert result.trace.output_tokens.tolist() == [3, 8, 1, 2]


@pytest.mark.parametrize(("cap", "count_eos"), [(None, True), (3, True), (3, False)])
def test_an_empty_output_is_its_eos_alone_one_token_whatever_the_flags(
    tmp_path: Path, tokenizer_json: Path, cap: int | None, count_eos: bool
) -> None:
    """An empty response stopped on the one token it generated (its EOS, decoded away, or a stop
    string left out of the text); imported as 0 without a cap or with ``--no-count-eos``, it made a
    trace ``POST /actuals`` refuses and ``trace push`` left out (learn53)."""
    _dump(tmp_path / "d", 1, [{"input": "what is two", "output": "", "score": 0.0, "step": 1}])
    result = import_verl(tmp_path / "d", tokenizer_json, max_new_tokens=cap, count_eos=count_eos)
    assert result.trace.output_tokens.tolist() == [1]
    assert result.trace.truncated.tolist() == [False]


def test_a_dump_folder_without_step_files_is_refused(tmp_path: Path, tokenizer_json: Path) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(InvalidInputError, match="dump"):
        import_verl(tmp_path / "empty", tokenizer_json, max_new_tokens=None)


def test_a_missing_tokenizer_is_refused_before_reading(tmp_path: Path) -> None:
    _verl(tmp_path / "dumps")
    with pytest.raises(InvalidInputError, match="tokenizer"):
        import_verl(tmp_path / "dumps", tmp_path / "nope.json", max_new_tokens=None)


def test_a_line_without_decoded_text_is_located(tmp_path: Path, tokenizer_json: Path) -> None:
    _dump(
        tmp_path / "d",
        0,
        [{"input": "what", "output": "so", "score": 1, "step": 0}, {"input": "x", "score": 0}],
    )
    with pytest.raises(TraceFormatError, match=r"0\.jsonl:2:output"):
        import_verl(tmp_path / "d", tokenizer_json, max_new_tokens=None)


def test_dumps_that_hold_no_rows_are_refused(tmp_path: Path, tokenizer_json: Path) -> None:
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "0.jsonl").write_text("")
    with pytest.raises(InvalidInputError, match="no rows"):
        import_verl(tmp_path / "d", tokenizer_json, max_new_tokens=None)


def test_a_verl_step_written_as_a_float_reads_as_the_trace_format_reads_it(
    tmp_path: Path, tokenizer_json: Path
) -> None:
    _dump(tmp_path / "d", 3, [{"input": "what", "output": "so", "score": 1, "step": 3.0}])
    assert import_verl(tmp_path / "d", tokenizer_json, max_new_tokens=None).trace.step.tolist() == [3]


def _dapo(directory: Path) -> None:
    """A DAPO-style dump: the reward manager adds fields computed from the finished response."""
    _dump(
        directory,
        1,
        [
            {"input": "what is two", "output": "so four", "score": 1.0, "step": 1, "acc": 1.0,
             "overlong_reward": -0.2, "overlong": False, "level": "easy"},
            {"input": "what is five", "output": "think so five", "score": 0.0, "step": 1, "acc": 0.0,
             "overlong_reward": -0.3, "overlong": False, "level": "hard"},
        ],
    )  # fmt: skip


def test_a_verl_dumps_extra_fields_are_not_features_unless_kept(tmp_path: Path, tokenizer_json: Path) -> None:
    _dapo(tmp_path / "d")
    trace = import_verl(tmp_path / "d", tokenizer_json, max_new_tokens=None).trace
    assert dict(trace.numeric) == {}
    assert dict(trace.categorical) == {}


def test_a_verl_field_the_user_keeps_becomes_a_column_and_no_other_does(
    tmp_path: Path, tokenizer_json: Path
) -> None:
    _dapo(tmp_path / "d")
    trace = import_verl(tmp_path / "d", tokenizer_json, max_new_tokens=None, keep=["level"]).trace
    assert dict(trace.numeric) == {}
    assert list(trace.categorical) == ["level"]
    assert trace.categorical["level"].tolist() == ["easy", "hard"]


@pytest.mark.parametrize("name", ["levle", "output", "reward"])
def test_keeping_a_field_no_dump_line_holds_or_one_already_read_is_refused(
    tmp_path: Path, tokenizer_json: Path, name: str
) -> None:
    _dapo(tmp_path / "d")
    with pytest.raises(InvalidInputError, match=f"keep-field.*{name}"):
        import_verl(tmp_path / "d", tokenizer_json, max_new_tokens=None, keep=[name])


@pytest.mark.parametrize(("value", "kind"), [([1, 2], "a list"), ({"src": "gsm8k"}, "an object")])
def test_a_kept_field_holding_a_list_or_object_is_refused_at_its_line(
    tmp_path: Path, tokenizer_json: Path, value: object, kind: str
) -> None:
    # It was left out of that row without a word: a missing value beside the other lines' numbers.
    q = "what is two plus two"
    _dump(
        tmp_path / "d",
        1,
        [
            {"input": q, "output": "four", "score": 1.0, "level": 3},
            {"input": q, "output": "so four", "score": 1.0, "level": value},
        ],
    )
    with pytest.raises(TraceFormatError, match=rf"1\.jsonl:2:level=.*: {kind}, not a number or text"):
        import_verl(tmp_path / "d", tokenizer_json, max_new_tokens=None, keep=["level"])


class _RecordingTokenizer:
    """Wraps a tokenizer, recording how many texts each ``encode_batch`` call was given."""

    def __init__(self, inner: Tokenizer) -> None:
        self.inner = inner
        self.batches: list[int] = []

    def encode_batch(self, texts: list[str], add_special_tokens: bool) -> list[object]:
        self.batches.append(len(texts))
        return list(self.inner.encode_batch(texts, add_special_tokens=add_special_tokens))


def _texts(count: int) -> list[object]:
    return [" ".join(VOCAB[1 + i % 5 : 2 + i % 11]) for i in range(count)]


def test_token_counting_holds_at_most_a_chunk_of_encodings_at_once(tokenizer_json: Path) -> None:
    recording = _RecordingTokenizer(Tokenizer.from_file(str(tokenizer_json)))
    texts = _texts(3 * ENCODE_CHUNK + 5)
    count_tokens(recording, texts, texts)
    assert max(recording.batches) <= ENCODE_CHUNK
    assert sum(recording.batches) == 2 * len(texts)


def test_chunked_token_counts_equal_those_of_one_whole_batch(tokenizer_json: Path) -> None:
    tokenizer = Tokenizer.from_file(str(tokenizer_json))
    inputs, outputs = _texts(2 * ENCODE_CHUNK + 7), _texts(2 * ENCODE_CHUNK + 7)[::-1]
    whole = zip(
        tokenizer.encode_batch(inputs, add_special_tokens=False),
        tokenizer.encode_batch(outputs, add_special_tokens=False),
        strict=True,
    )
    assert count_tokens(tokenizer, inputs, outputs) == [(len(p.ids), len(o.ids)) for p, o in whole]


@pytest.mark.parametrize("stem", ["²", "\u0661", "3²"])
def test_a_dump_named_with_a_non_ascii_digit_is_skipped_like_any_non_step_file(
    tmp_path: Path, tokenizer_json: Path, stem: str
) -> None:
    _dump(tmp_path / "d", 1, [{"input": "what", "output": "so", "score": 1, "step": 1}])
    (tmp_path / "d" / f"{stem}.jsonl").write_text(
        json.dumps({"input": "what", "output": "so four", "score": 0, "step": 1}) + "\n"
    )
    result = import_verl(tmp_path / "d", tokenizer_json, max_new_tokens=None)
    assert result.files == 1
    assert result.trace.output_tokens.tolist() == [1]


def test_a_dump_line_with_an_unpaired_surrogate_escape_is_located_not_a_traceback(
    tmp_path: Path, tokenizer_json: Path
) -> None:
    """The tokenizer raised a bare TypeError on such text (and the prompt hash a UnicodeEncodeError)."""
    directory = tmp_path / "d"
    directory.mkdir()
    (directory / "0.jsonl").write_text('{"input": "what\\ud800", "output": "so", "score": 1, "step": 0}\n')
    with pytest.raises(TraceFormatError, match=r"0\.jsonl:1:input.*not UTF-8"):
        import_verl(directory, tokenizer_json, max_new_tokens=None)


def test_a_dump_with_a_byte_order_mark_crlf_and_blank_lines_imports_like_a_plain_one(
    tmp_path: Path, tokenizer_json: Path
) -> None:
    directory = tmp_path / "d"
    directory.mkdir()
    line = '{"input": "what is two", "output": "so four", "score": 1, "step": 1}'
    (directory / "1.jsonl").write_bytes(f"\ufeff{line}\r\n\r\n{line.replace('so ', '')}\r\n".encode())
    trace = import_verl(directory, tokenizer_json, max_new_tokens=None).trace
    assert trace.output_tokens.tolist() == [2, 1]
    assert trace.sample_idx.tolist() == [0, 1]


@pytest.mark.parametrize("step", ['"step": null, ', '"step": " ", ', ""])
def test_a_dump_line_without_a_step_takes_its_files_step(
    tmp_path: Path, tokenizer_json: Path, step: str
) -> None:
    """A null step read as the text 'None' ("could not convert string to float")."""
    directory = tmp_path / "d"
    directory.mkdir()
    (directory / "7.jsonl").write_text(f'{{{step}"input": "what", "output": "so", "score": 1}}\n')
    assert import_verl(directory, tokenizer_json, max_new_tokens=None).trace.step.tolist() == [7]


def test_two_files_naming_one_step_are_refused_not_merged_into_one_steps_groups(
    tmp_path: Path, tokenizer_json: Path
) -> None:
    """veRL writes one ``{step}.jsonl`` per step: a second file of that step is another run's or a
    copy, and its samples would have been numbered on after the first file's as one group."""
    _dump(tmp_path / "d", 3, [{"input": "what is two", "output": "so four", "score": 1, "step": 3}])
    line = json.dumps({"input": "what is five", "output": "five", "score": 1, "step": 3})
    (tmp_path / "d" / "03.jsonl").write_text(line + "\n")
    with pytest.raises(InvalidInputError, match=r"3\.jsonl.*names step 3 as 03\.jsonl does"):
        import_verl(tmp_path / "d", tokenizer_json, max_new_tokens=None)


def test_a_line_whose_step_is_not_its_files_is_refused(tmp_path: Path, tokenizer_json: Path) -> None:
    """veRL writes a file's step into each of its lines; a line of another step was moved or merged
    in, and would have joined that step's groups behind its own file's back."""
    _dump(tmp_path / "d", 2, [{"input": "what is two", "output": "so four", "score": 1, "step": 2}])
    _dump(tmp_path / "d", 5, [{"input": "what is two", "output": "four", "score": 1, "step": 2}])
    with pytest.raises(InvalidInputError, match=r"5\.jsonl:1.*step 2 is not its file's"):
        import_verl(tmp_path / "d", tokenizer_json, max_new_tokens=None)


@pytest.mark.parametrize("kind", ["folder", "dangling link"])
def test_a_dump_name_that_is_no_readable_file_is_refused_by_name(
    tmp_path: Path, tokenizer_json: Path, kind: str
) -> None:
    """A folder called ``2.jsonl``, or a link to a file on a volume not mounted, failed with the OS's
    ``[Errno 2] No such file or directory`` for a name ``ls`` lists, naming no option."""
    _verl(tmp_path / "dumps")
    second = tmp_path / "dumps" / "9.jsonl"
    if kind == "folder":
        second.mkdir()
    else:
        second.symlink_to(tmp_path / "unmounted" / "9.jsonl")
    with pytest.raises(
        InvalidInputError,
        match=r"dump='.*9\.jsonl': cannot be read \((Is a directory|a link to a missing file)\)",
    ):
        import_verl(tmp_path / "dumps", tokenizer_json, max_new_tokens=None)
