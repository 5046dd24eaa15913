"""Fixtures of the deployment tests: the 3-master cluster (tests/cluster.py) and the repo's paths."""

from __future__ import annotations

from tests.cluster import cluster_client, redis_cluster

__all__ = ["cluster_client", "redis_cluster"]
