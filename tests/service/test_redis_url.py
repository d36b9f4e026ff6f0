"""``sessions.url``: one Redis server, or the Sentinels of a replicated one
(``redis+sentinel://[[user]:password@]host:port[,host:port…]/name[/db][?sentinel_password=…]``),
checked when the
config is read, with or without the ``redis`` extra; a bad URL names the field and the
accepted forms, and never echoes the password."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from dynagent.config import SessionsConfig
from dynagent.sessions.redis_url import SentinelUrl, parse_sentinel_url


@pytest.mark.parametrize(
    ("url", "parsed"),
    [
        (
            "redis+sentinel://127.0.0.1:26379/mymaster",
            SentinelUrl((("127.0.0.1", 26379),), "mymaster"),
        ),
        (
            "redis+sentinel://:s%40cret@a:1,b.internal:2,[::1]:3/cache/4",
            SentinelUrl((("a", 1), ("b.internal", 2), ("::1", 3)), "cache", 4, "s@cret"),
        ),
        ("redis+sentinel://user:pw@a:1/m/", SentinelUrl((("a", 1),), "m", 0, "pw", "user")),
        (
            "redis+sentinel://:pw@a:1/m?sentinel_password=s%26p%3Dq",
            SentinelUrl((("a", 1),), "m", 0, "pw", sentinel_password="s&p=q"),
        ),
        (
            "redis+sentinel://a:1/m/2?sentinel_username=watch&sentinel_password=w",
            SentinelUrl((("a", 1),), "m", 2, sentinel_password="w", sentinel_username="watch"),
        ),
    ],
)
def test_a_sentinel_url_names_its_sentinels_primary_db_and_password(
    url: str, parsed: SentinelUrl
) -> None:
    assert parse_sentinel_url(url) == parsed
    assert SessionsConfig(store="redis", url=url).url == url


@pytest.mark.parametrize(
    "url", ["redis://127.0.0.1:6379/0", "rediss://:pw@cache:6380/1", "unix:///run/redis.sock"]
)
def test_one_server_urls_are_accepted_as_before(url: str) -> None:
    assert SessionsConfig(store="redis", url=url).url == url


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("http://127.0.0.1:6379", "starts with redis://"),
        ("127.0.0.1:6379", "starts with redis://"),
        ("redis+sentinel://:hunter2@127.0.0.1:26379", "names the primary's name"),
        ("redis+sentinel://:hunter2@127.0.0.1:26379/", "names the primary's name"),
        ("redis+sentinel://:hunter2@127.0.0.1/m", "host:port"),
        ("redis+sentinel://:hunter2@a:1,,b:2/m", "host:port"),
        ("redis+sentinel://:hunter2@a:99999/m", "host:port"),
        ("redis+sentinel://:hunter2@a:1/m/zero", "database of a Sentinel URL is a number"),
        ("redis+sentinel://:hunter2@a:1/m/0/extra", "names the primary's name"),
        ("redis+sentinel://:hunter2@a:1/m?password=hunter2", "takes the options"),
        (
            "redis+sentinel://a:1/m?sentinel_password=hunter2&sentinel_password=hunter2",
            "sentinel_password once",
        ),
    ],
)
def test_a_bad_url_is_refused_with_the_accepted_forms(url: str, reason: str) -> None:
    with pytest.raises(ValidationError) as caught:
        SessionsConfig(store="redis", url=url)
    (error,) = caught.value.errors(include_input=False, include_url=False)
    assert error["loc"] == ("url",) and reason in error["msg"]
    assert "redis+sentinel://[[user]:password@]host:port" in error["msg"]
    assert "hunter2" not in error["msg"]
