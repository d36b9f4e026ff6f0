"""Hostile agent documents published in a real Nacos server, as an operator's console
edit would be: the service never crashes, never serves a refused definition, and keeps
the last good revision with the refusal in its status (a smaller batch than the
in-process run of tests/fuzz/test_config_fuzz.py)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings

from dynagent import AgentBuilder
from dynagent.config import NacosConfig
from dynagent.exceptions import ConfigError
from dynagent.http.app import create_app
from dynagent.http.state import SERVICE
from dynagent.registry.facade import AgentRegistry
from dynagent.spec.agent import AgentSpec, load_spec
from tests.fuzz.mutations import hostile_documents
from tests.fuzz.test_config_fuzz import ENVIRON, good_text
from tests.support.budget import budget
from tests.support.nacos import NacosAdmin, nacos_service_config
from tests.support.threaded import ServedApp, served_in_thread

DATA_ID = "bot.agent.yaml"


def predicted(text: str) -> AgentSpec | None:
    try:
        spec = load_spec(text)
        AgentBuilder(environ=ENVIRON).build(spec)
    except ConfigError:
        return None
    return spec


@dataclass
class Published:
    served: ServedApp
    admin: NacosAdmin
    group: str
    last: str = ""
    tried: list[str] = field(default_factory=list)
    normalized: int = 0
    """Documents Nacos stored differently from how they were sent."""

    @property
    def registry(self) -> AgentRegistry:
        return self.served.app[SERVICE].registry

    def publish(self, text: str) -> str:
        """Publish ``text``; returns what Nacos stored, which is what the service reads."""
        self.served.call(lambda: self.admin.publish(DATA_ID, self.group, text))
        self.last = text
        stored = self.served.call(lambda: self.admin.get(DATA_ID, self.group))
        assert stored is not None
        content: str = stored["content"]
        self.normalized += content != text
        return content

    def wait(self, done: Callable[[AgentRegistry], bool]) -> None:
        self.served.call(lambda: self.registry.wait_for(done, within=15))


def serves(name: str, revision: str | None = None) -> Callable[[AgentRegistry], bool]:
    def check(registry: AgentRegistry) -> bool:
        agent = registry.entry(name).stable if name in registry else None
        return agent is not None and revision in (None, agent.revision)

    return check


@pytest.fixture
def published(
    nacos_settings: NacosConfig, agents_dir: Path, state_dir: Path
) -> Iterator[Published]:
    config = nacos_service_config(nacos_settings, agents_dir, state_dir)
    with served_in_thread(lambda: create_app(config, environ=ENVIRON)) as served:
        admin = NacosAdmin(f"http://{nacos_settings.server_addr}/nacos")
        served.call(admin.__aenter__)
        state = Published(served, admin, nacos_settings.group)
        good = load_spec(good_text())
        state.publish(good_text())
        state.wait(serves("bot", good.revision))
        yield state
        served.call(lambda: admin.__aexit__(None, None, None))
    print(
        f"\nhypothesis: {len(state.tried)} hostile documents published in Nacos, "
        f"{state.normalized} stored differently from how they were sent"
    )


@pytest.mark.fuzz
def test_hostile_documents_published_in_nacos_never_replace_the_last_good_revision(
    request: pytest.FixtureRequest, published: Published
) -> None:
    registry = published.registry

    @settings(
        max_examples=budget(request.config, default=40, long=400),
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(document=hostile_documents())
    def check(document: tuple[str, str]) -> None:
        text, fmt = document
        if fmt != "yaml" or not text.strip() or text == published.last:
            return  # the dataId holds YAML; Nacos refuses blank content
        published.tried.append(text)
        before = registry.get("bot")
        since = time.time()
        # Predict from what Nacos stored: the server may normalize what it was sent.
        spec = predicted(published.publish(text))
        if spec is None:
            published.wait(
                lambda r: (error := r.entry("bot").last_error) is not None and error.at >= since
            )
            assert [entry.name for entry in registry] == ["bot"]
            assert registry.get("bot") is before
            status = registry.status("bot")
            assert status["last_error"]["source"].endswith(f"/{DATA_ID}")
            assert ENVIRON["SECRET"] not in str(status)
            return
        published.wait(serves(spec.name, spec.revision))
        assert [entry.name for entry in registry] == [spec.name]
        assert registry.status(spec.name)["last_error"] is None
        published.publish(good_text())  # back to the good definition
        # Its revision, not any "bot": a valid mutation may be named bot too.
        published.wait(serves("bot", load_spec(good_text()).revision))

    check()
