"""A settings or options object printed (a log line, a debugger, a crash report) shows no credential:
not the Redis URL's password, the Redis password, a bearer token, the engine's key or the password of
an engine's basic-auth proxy in its URL."""

from __future__ import annotations

from pydantic import SecretStr

from service.settings import Settings
from service.sidecar.engine_client import EngineOptions
from service.sidecar.launch import SidecarOptions

SECRETS = ("url-password", "acl-password", "trainer-token", "worker-token", "engine-key", "proxy-password")
URL = "redis://scheduler:url-password@redis:6379/0"


def _shown(text: str) -> list[str]:
    return [secret for secret in SECRETS if secret in text]


def test_the_service_settings_show_no_credential_and_the_url_without_its_password() -> None:
    settings = Settings(
        redis_url=URL,
        redis_password=SecretStr("acl-password"),
        trainer_tokens=SecretStr("trainer-token"),
        worker_tokens=SecretStr("w0=worker-token"),
    )
    assert _shown(repr(settings)) == _shown(str(settings)) == []
    assert "redis://scheduler:***@redis:6379/0" in repr(settings)
    assert settings.redis_url == URL  # only its rendering is masked


def test_the_sidecar_options_show_no_credential_and_the_url_without_its_password() -> None:
    engine_url = "http://rollout:proxy-password@engine:8000"
    options = SidecarOptions(
        worker_id="w0",
        redis_url=URL,
        redis_password="acl-password",
        engine_url=engine_url,
        engine_api_key="engine-key",
    )
    engine = EngineOptions(base_url=engine_url, api_key="engine-key")
    assert _shown(repr(options)) == _shown(repr(engine)) == []
    assert "redis://scheduler:***@redis:6379/0" in repr(options)
    assert "engine_url='http://rollout:***@engine:8000'" in repr(options)
    assert "worker_id='w0'" in repr(options)
