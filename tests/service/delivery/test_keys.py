"""Key prefixes and delivery defaults: the rule key_prefix.py states, the defaults operations.md promises."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from service.delivery import key_prefix, keys

ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize("prefix", ["", "a{b}", "rs*", "r s", "rs?", "x" * 65])
def test_a_prefix_that_would_move_the_hash_tag_or_glob_other_keys_is_refused_by_rule(prefix: str) -> None:
    with pytest.raises(key_prefix.PrefixError) as caught:
        key_prefix.check_prefix(prefix)
    assert caught.value.reason == "must be 1-64 of A-Z a-z 0-9 _ . : -"
    assert repr(prefix) in str(caught.value)


@pytest.mark.parametrize("prefix", ["rs", "a", "team_a.rl:prod-1", "x" * 64])
def test_a_prefix_of_the_allowed_characters_is_kept(prefix: str) -> None:
    assert key_prefix.check_prefix(prefix) == prefix


def test_the_delivery_defaults_are_the_ones_the_operations_guide_states() -> None:
    line = next(
        row
        for row in (ROOT / "docs" / "operations.md").read_text().splitlines()
        if row.startswith("| `ROLLOUT_LEASE_TTL_MS`, `ROLLOUT_MAX_ATTEMPTS`")
    )
    ttl_s = re.search(r"default (\d+) s after its last heartbeat", line)
    attempts = re.search(r"dead-lettered \((\d+)\)", line)
    assert ttl_s is not None, line
    assert attempts is not None, line
    assert int(ttl_s.group(1)) * 1000 == keys.DEFAULT_LEASE_TTL_MS
    assert int(attempts.group(1)) == keys.DEFAULT_MAX_ATTEMPTS


def test_a_schedule_s_keys_are_kept_for_the_retention_the_operations_guide_states() -> None:
    text = (ROOT / "docs" / "operations.md").read_text()
    hours = re.search(r"`ROLLOUT_RETENTION_S`,\s+(\d+) h by default", text)
    assert hours is not None
    assert int(hours.group(1)) * 3600 == keys.DEFAULT_RETENTION_S
