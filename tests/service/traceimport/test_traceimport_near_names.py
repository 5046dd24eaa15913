"""Where ``trace import --map`` draws the line between a trace column misspelt (refused) and a feature's
own name (renamed): a name is a misspelling only when nearly the whole of it is a trace column's
(``difflib``'s ratio of 0.85: ``rewards``, ``max_new_token``). A feature named after the column it
describes, ``prompt_text``, ``prompt_len`` or ``reward_std`` (ratio 0.75-0.8), is no typo of it and is
imported as the feature it names."""

from __future__ import annotations

from pathlib import Path

from service.traceimport.importers import import_generic, parse_mapping

HEADER = "step,prompt_id,sample_idx,prompt_tokens,output_tokens,text,plen,std\n"


def test_a_feature_named_after_a_trace_column_is_renamed_not_refused(tmp_path: Path) -> None:
    path = tmp_path / "runs.csv"
    path.write_text(HEADER + "0,a,0,5,3,hello,5,0.25\n")
    mapping = parse_mapping(["prompt_text=text", "prompt_len=plen", "reward_std=std"])
    trace = import_generic(path, "csv", mapping).trace
    assert trace.categorical["prompt_text"].tolist() == ["hello"]
    assert (trace.numeric["prompt_len"].tolist(), trace.numeric["reward_std"].tolist()) == ([5.0], [0.25])
