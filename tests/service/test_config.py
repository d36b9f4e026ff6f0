"""The service config: YAML, ``${VAR}``, ``DYNAGENT_*`` overrides, paths relative to the file."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from dynagent.config import ServiceConfig, load_config
from dynagent.exceptions import ConfigError, FieldIssue

SAMPLES = Path(__file__).parents[2] / "config-samples"


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "conf" / "service.yaml"
    path.parent.mkdir(exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def test_a_file_with_variables_and_relative_paths(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
listen: {host: "${HOST}", port: "${PORT:-9100}", max_body_bytes: 4096}
factories:
  default: {directory: agents}
  nacos: true
  nacos_prompt: {directory: ../prompted}
nacos: {server_addr: "${NACOS:-nacos:8848}", password: "${NACOS_PW}", snapshot_dir: snap}
sessions: {store: sqlite, path: state/sessions.db}
auth: {keys_file: /run/secrets/keys.yaml}
logging: {level: DEBUG, json: true}
traces: {max_traces: 5}
""",
    )
    config = load_config(path, {"HOST": "0.0.0.0", "NACOS_PW": "pw"})
    base = path.parent
    assert config.model_dump(by_alias=True) == {
        "listen": {
            "host": "0.0.0.0",
            "port": 9100,
            "max_body_bytes": 4096,
            "lame_duck_seconds": 0,
            "drain_seconds": 30,
            "max_watch_streams": 128,
            "max_watch_streams_per_key": 8,
            "event_loop": "asyncio",
        },
        "insecure": False,
        "factories": {
            "default": {"directory": base / "agents"},
            "nacos": True,
            "nacos_prompt": {"directory": base / "../prompted"},
            "spring_ai_alibaba": False,
        },
        "nacos": {
            "server_addr": "nacos:8848",
            "namespace": "",
            "group": "AGENTS",
            "username": "",
            "password": "pw",
            "snapshot_dir": base / "snap",
            "poll_seconds": 30.0,
            "delete_grace_seconds": 0.0,
            "prompt_group": "PROMPTS",
            "gray_tag": "",
        },
        "a2a": {"register": False, "public_url": ""},
        "sessions": {
            "store": "sqlite",
            "path": base / "state/sessions.db",
            "url": "redis://127.0.0.1:6379/0",
            "key_prefix": "dynagent:session:",
            "lock_ttl": 15.0,
            "timeout": 2.0,
            "max_history_bytes": 4 * 1024 * 1024,
            "ttl": 30 * 24 * 3600.0,
        },
        "auth": {
            "keys_env": "DYNAGENT_API_KEYS",
            "admin_keys_env": "DYNAGENT_ADMIN_KEYS",
            "metrics_keys_env": "DYNAGENT_METRICS_KEYS",
            "keys_file": Path("/run/secrets/keys.yaml"),
        },
        "logging": {"level": "DEBUG", "json": True},
        "traces": {"max_traces": 5, "max_bytes": 256 * 1024 * 1024},
        "cors": {"allow_origins": []},
        "metrics": {"public": False},
        "environment": {"allow": ["OPENAI_*", "DASHSCOPE_*", "DYNAGENT_MODEL_*"]},
        "mcp_servers": {},
        "notifications": {"webhooks": [], "queue": 1000},
        "models": {"prices": {}},
    }


def test_environment_overrides_win_over_the_file(tmp_path: Path) -> None:
    path = write(tmp_path, "listen: {port: 1000, host: 127.0.0.1}\nlogging: {json: true}\n")
    environ = {
        "DYNAGENT_PORT": "9999",
        "DYNAGENT_HOST": "::1",
        "DYNAGENT_AGENTS_DIR": "/srv/agents",
        "DYNAGENT_SESSIONS_PATH": "/var/lib/dynagent/s.db",
        "DYNAGENT_LOG_LEVEL": "WARNING",
        "DYNAGENT_LOG_JSON": "false",
        "DYNAGENT_KEYS_FILE": "/etc/keys.yaml",
        "NACOS_SERVER_ADDR": "10.0.0.1:8848",
        "NACOS_NAMESPACE": "prod",
        "NACOS_GROUP": "TEAM",
        "NACOS_USERNAME": "nacos",
        "NACOS_PASSWORD": "secret",
        "NACOS_GRAY_TAG": "canary-pods",
    }
    config = load_config(path, environ)
    assert (config.listen.port, config.listen.host) == (9999, "::1")
    assert config.factories.default.directory == Path("/srv/agents")
    assert config.sessions.path == Path("/var/lib/dynagent/s.db")
    assert (config.logging.level, config.logging.json_lines) == ("WARNING", False)
    assert config.auth.keys_file == Path("/etc/keys.yaml")
    assert config.nacos.model_dump(exclude={"snapshot_dir"}) == {
        "server_addr": "10.0.0.1:8848",
        "namespace": "prod",
        "group": "TEAM",
        "username": "nacos",
        "password": "secret",
        "poll_seconds": 30.0,
        "delete_grace_seconds": 0.0,
        "prompt_group": "PROMPTS",
        "gray_tag": "canary-pods",
    }


def test_without_a_file_the_defaults_and_the_environment_apply() -> None:
    config = load_config(None, {"DYNAGENT_PORT": "7000", "UNRELATED": "x"})
    assert config == ServiceConfig.model_validate({"listen": {"port": 7000}})


@pytest.mark.parametrize("empty", ["listen:", "listen: {}", "listen: null"])
def test_an_override_fills_an_empty_section(tmp_path: Path, empty: str) -> None:
    path = write(tmp_path, f"{empty}\nfactories:\n  default:\n")
    config = load_config(path, {"DYNAGENT_PORT": "9001", "DYNAGENT_AGENTS_DIR": "/a"})
    assert (config.listen.port, config.factories.default.directory) == (9001, Path("/a"))


def test_empty_sections_take_their_defaults(tmp_path: Path) -> None:
    path = write(tmp_path, "listen:\nsessions:\nauth:\nfactories:\n  default:\n")
    assert load_config(path, {}) == ServiceConfig()


def issues(text: str, tmp_path: Path, environ: dict[str, str] | None = None) -> list[FieldIssue]:
    with pytest.raises(ConfigError) as caught:
        load_config(write(tmp_path, text), environ or {})
    assert caught.value.source == str(tmp_path / "conf" / "service.yaml")
    return list(caught.value.issues)


def test_a_bad_value_names_its_field(tmp_path: Path) -> None:
    assert issues("listen: {port: 70000}\nsessions: {store: postgres}\n", tmp_path) == [
        FieldIssue("listen.port", "Input should be less than or equal to 65535"),
        FieldIssue("sessions.store", "Input should be 'sqlite', 'memory' or 'redis'"),
    ]


def test_an_unknown_field_is_refused(tmp_path: Path) -> None:
    assert issues("listen: {prot: 1}\n", tmp_path) == [
        FieldIssue("listen.prot", "unknown field 'prot' in listen; did you mean 'port'?")
    ]


def test_a_section_of_the_wrong_type_is_refused(tmp_path: Path) -> None:
    found = issues("sessions: sqlite\nfactories: {default: agents}\n", tmp_path)
    assert [issue.path for issue in found] == ["factories.default", "sessions"]


def test_a_bad_override_names_the_field(tmp_path: Path) -> None:
    assert issues("{}", tmp_path, {"DYNAGENT_PORT": "http"}) == [
        FieldIssue(
            "listen.port", "Input should be a valid integer, unable to parse string as an integer"
        )
    ]


def test_a_missing_variable_names_the_field(tmp_path: Path) -> None:
    assert issues("nacos: {password: '${NACOS_PW}'}\n", tmp_path) == [
        FieldIssue("nacos.password", "environment variable NACOS_PW is not set")
    ]


@pytest.mark.parametrize(
    "text,reason",
    [("listen: [\n", "cannot read the service config: "), ("- a\n- b\n", "must be a mapping")],
)
def test_a_file_that_is_not_a_config(tmp_path: Path, text: str, reason: str) -> None:
    with pytest.raises(ConfigError, match=reason):
        load_config(write(tmp_path, text), {})


def test_a_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read the service config"):
        load_config(tmp_path / "nope.yaml", {})


def test_the_sample_config_serves_the_sample_agents() -> None:
    config = load_config(SAMPLES / "service.yaml", {})
    assert config.factories.default.directory == SAMPLES / "agents"
    assert config.sessions.path == SAMPLES / "../var/sessions.db"
    assert (config.listen.host, config.listen.port) == ("127.0.0.1", 8090)
    assert load_config(SAMPLES / "service.yaml", {"DYNAGENT_PORT": "8111"}).listen.port == 8111


@pytest.mark.parametrize(
    ("given", "addresses"),
    [
        ("n1:8848", ("n1:8848",)),
        (" n1:8848 , n2:8849,n3:8850 ", ("n1:8848", "n2:8849", "n3:8850")),
        (["n1:8848", "n2:8849"], ("n1:8848", "n2:8849")),
        (["n1:8848,n2:8849", "http://n3:8850"], ("n1:8848", "n2:8849", "http://n3:8850")),
    ],
)
def test_nacos_server_addr_takes_every_node_as_text_or_a_list(
    tmp_path: Path, given: str | list[str], addresses: tuple[str, ...]
) -> None:
    path = write(tmp_path, yaml.safe_dump({"nacos": {"server_addr": given}}))
    nacos = load_config(path, {}).nacos
    # The Nacos SDK takes the nodes as one comma-separated text.
    assert (nacos.addresses, nacos.server_addr) == (addresses, ",".join(addresses))


@pytest.mark.parametrize(
    "given",
    [
        "",
        "n1:8848,,n2:8849",
        "n1",
        "n1:",
        "n1:99999",
        "n1 :8848",
        "n1:8848/nacos",
        [],
        ["n1:8848", 7],
    ],
)
def test_a_nacos_node_without_host_and_port_is_refused_by_name(
    tmp_path: Path, given: str | list[object]
) -> None:
    path = write(tmp_path, yaml.safe_dump({"nacos": {"server_addr": given}}))
    with pytest.raises(ConfigError) as caught:
        load_config(path, {})
    assert [issue.path for issue in caught.value.issues] == ["nacos.server_addr"]
