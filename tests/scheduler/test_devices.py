"""Device names: the spellings GPU tooling reports for a profiled part resolve to its profile, and
a different part that shares a family name is refused rather than planned with another's figures."""

from __future__ import annotations

import pytest

from scheduler.devices import device_profile
from scheduler.errors import UnknownNameError


@pytest.mark.parametrize(
    ("reported", "profile"),
    [
        ("NVIDIA H100 80GB HBM3", "H100"),  # nvidia-smi --query-gpu=name on an H100 SXM5
        ("NVIDIA-H100-80GB-HBM3", "H100"),  # GPU feature discovery's nvidia.com/gpu.product label
        ("h100_sxm5_80gb", "H100"),
        ("NVIDIA H200", "H200"),
        ("NVIDIA-A100-SXM4-80GB", "A100-80GB"),
        ("Ascend910B3", "Ascend910B"),
        (" 910b ", "Ascend910B"),
    ],
)
def test_names_gpu_tooling_reports_resolve_to_the_profiled_part(reported: str, profile: str) -> None:
    assert device_profile(reported).name == profile


@pytest.mark.parametrize("other_part", ["NVIDIA H100 PCIe", "NVIDIA H100 NVL", "NVIDIA A100 80GB PCIe"])
def test_another_part_of_the_same_family_is_refused_by_name(other_part: str) -> None:
    with pytest.raises(UnknownNameError) as caught:
        device_profile(other_part)
    assert caught.value.value == other_part
    assert "H100" in caught.value.known
