"""A worker SPEC reads like the pool it describes; a malformed one is refused by name."""

from __future__ import annotations

import re

import pytest

from scheduler.errors import InvalidInputError, UnknownNameError
from service.api.schemas import InventorySpec
from service.workerspec import DEFAULT_MAX_NUM_SEQS, parse_workers


def test_a_mixed_pool_gives_one_single_device_engine_per_accelerator() -> None:
    inventory = parse_workers("8xH100,8xAscend910B", model="7b")
    kinds = [w.device.name for w in inventory.workers]
    assert kinds == ["H100"] * 8 + ["Ascend910B"] * 8
    assert len({w.worker_id for w in inventory.workers}) == 16
    assert all(w.num_gpus == 1 and w.max_num_seqs == DEFAULT_MAX_NUM_SEQS for w in inventory.workers)
    assert inventory.model.name == "7b"


def test_max_num_seqs_and_device_aliases_are_accepted() -> None:
    inventory = parse_workers(" 2x h100:64 , 910b:128 ,A100", model="1.5b")
    assert [(w.device.name, w.max_num_seqs) for w in inventory.workers] == [
        ("H100", 64),
        ("H100", 64),
        ("Ascend910B", 128),
        ("A100-80GB", DEFAULT_MAX_NUM_SEQS),
    ]


@pytest.mark.parametrize(
    "spec",
    [
        "",
        "8x",
        "x H100",
        "8xH100,,",
        "8xH100:0",
        "0xH100",
        "8xH100:abc",
        "8yH100z!",
        "\u0668xH100",
        "H100:\u0661",
    ],
)
def test_a_malformed_spec_is_refused_naming_the_field(spec: str) -> None:
    with pytest.raises(InvalidInputError, match=r"workers|device"):
        parse_workers(spec)


@pytest.mark.parametrize("seqs", ["65537", "99999999999999999999"])
def test_a_max_num_seqs_past_the_api_s_bound_is_refused(seqs: str) -> None:
    with pytest.raises(InvalidInputError, match=r"workers='8xH100:\d+': max_num_seqs must be 1\.\.65,536"):
        parse_workers(f"8xH100:{seqs}")
    assert parse_workers("8xH100:65536").workers[0].max_num_seqs == 65_536


def test_an_unknown_device_names_the_known_ones() -> None:
    with pytest.raises(UnknownNameError, match="H100"):
        parse_workers("4xTPUv5")


EXPECTED_FORM = "expected COUNTxDEVICE[:max_num_seqs], e.g. 8xH100,8xAscend910B"


@pytest.mark.parametrize(
    ("spec", "part"),
    [
        ("8x", "8x"),  # a count with no device: was "device='8x': unknown; expected one of ..."
        ("8X", "8X"),
        ("8", "8"),
        ("x", "x"),
        ("*", "*"),
        ("xH100", "xH100"),  # a separator with no count
        ("H100x8", "H100x8"),  # the count after the device
        ("H100*8", "H100*8"),
        ("8xH100:", "8xH100:"),
        (":64", ":64"),
        ("8*", "8*"),
        ("8x:64", "8x:64"),
        ("8xH100,8x", "8x"),
        ("8xH100,,", "8xH100,,"),  # an empty part: the whole spec shows where
        ("8xH100:abc", "8xH100:abc"),
    ],
)
def test_a_malformed_part_says_malformed_and_shows_the_expected_form(spec: str, part: str) -> None:
    # Issue 6: "Unknown device or malformed --workers: a clear one-line error". A count with no device
    # read as a device named "8x", unknown, which sent the user to the device list for a typo of form.
    with pytest.raises(InvalidInputError) as caught:
        parse_workers(spec)
    assert not isinstance(caught.value, UnknownNameError), caught.value
    assert (caught.value.field, caught.value.value) == ("workers", part)
    assert caught.value.reason.startswith("malformed"), caught.value.reason
    assert caught.value.reason.endswith(EXPECTED_FORM), caught.value.reason
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize("spec", ["8xH100x8", "8xxH100", "8xx"])
def test_a_part_with_a_count_and_a_slip_after_it_is_malformed_without_a_reason_it_does_not_have(
    spec: str,
) -> None:
    # "8xH100x8" was told "the count goes before the device" and "8xxH100" "an x with no count before
    # it", each holding a count before its device: the slip's reason read the device alone (review63)
    with pytest.raises(InvalidInputError) as caught:
        parse_workers(spec)
    assert caught.value.reason == f"malformed; {EXPECTED_FORM}"


@pytest.mark.parametrize("spec", ["4xTPUv5", "TPU", "8xB200:64", "x100", "8xH1OO"])
def test_a_well_formed_part_with_an_unknown_device_still_says_unknown_device(spec: str) -> None:
    with pytest.raises(UnknownNameError) as caught:
        parse_workers(spec)
    assert caught.value.field == "device"
    assert "unknown; expected one of A100-80GB, Ascend910B, H100, H200" in str(caught.value)


def test_an_empty_spec_shows_the_expected_form() -> None:
    with pytest.raises(InvalidInputError, match=re.escape(f"empty; {EXPECTED_FORM}")):
        parse_workers(" ")


def test_an_unknown_model_preset_is_refused() -> None:
    with pytest.raises(UnknownNameError, match="model"):
        parse_workers("4xH100", model="70b")


def _api_worker_limit() -> int:
    """The most workers ``POST /schedule`` accepts in one inventory, read off its schema."""
    metadata = InventorySpec.model_fields["workers"].metadata
    (limit,) = [m.max_length for m in metadata if hasattr(m, "max_length")]
    return int(limit)


def test_the_replay_takes_as_many_workers_as_the_service_and_no_more() -> None:
    # replay --workers 100000xH100 was accepted and ran for over ten minutes; POST /schedule takes 4,096
    limit = _api_worker_limit()
    assert len(parse_workers(f"{limit - 1}xH100,1xA100").workers) == limit
    for spec in (f"{limit + 1}xH100", f"{limit}xH100,1xA100", "100000xH100", "9" * 30 + "xH100"):
        with pytest.raises(InvalidInputError) as raised:
            parse_workers(spec)
        assert raised.value.field == "workers"
        assert f"the limit of {limit:,} workers" in raised.value.reason


@pytest.mark.parametrize(("spec", "model"), [("8xAscend910B", "32b"), ("2xH100,910B:64", "32b")])
def test_a_pool_part_whose_device_cannot_hold_the_model_is_refused_by_its_text(spec: str, model: str) -> None:
    with pytest.raises(InvalidInputError) as caught:
        parse_workers(spec, model)
    assert (caught.value.field, caught.value.value) == ("workers", spec.split(",")[-1])
    assert f"model {model}'s 61.1 GiB of weights" in caught.value.reason


def test_every_built_in_device_holds_every_preset_up_to_14b_and_the_large_ones_hold_32b() -> None:
    for model in ("1.5b", "7b", "14b"):
        parse_workers("H100,H200,A100,Ascend910B", model)
    parse_workers("H100,H200,A100", "32b")
