"""Container health check: exit 0 when ``HEALTHCHECK_URL`` answers 2xx within the timeout, else 1.

One image runs three processes with different health endpoints (the service's ``/healthz``, the
simulated engine's, the sidecar's), so the image's ``HEALTHCHECK`` reads the URL from the environment
that each compose service or pod sets. It uses only the standard library, so a health check never
depends on an import of the application that might itself be what is broken.
"""

from __future__ import annotations

import os
import sys
import urllib.error
import urllib.request

DEFAULT_URL = "http://127.0.0.1:8000/healthz"  # the service's liveness endpoint, the image's default command


def check(url: str, timeout_s: float) -> bool:
    """True when ``url`` answers with a 2xx status before ``timeout_s``."""
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:
            return 200 <= int(response.status) < 300
    except (urllib.error.URLError, OSError, ValueError):
        return False


def main() -> int:
    """Probe the configured URL; the exit status is what Docker's HEALTHCHECK reads."""
    url = os.environ.get("HEALTHCHECK_URL", DEFAULT_URL)
    healthy = check(url, float(os.environ.get("HEALTHCHECK_TIMEOUT_S", "2.5")))
    if not healthy:
        print(f"unhealthy: {url}", file=sys.stderr)
    return 0 if healthy else 1


if __name__ == "__main__":
    sys.exit(main())
