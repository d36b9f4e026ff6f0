"""Named interceptors a definition may refer to: built-ins and plugins.

Plugins are installed packages exposing, in the entry-point group
``dynagent.interceptors``, a callable ``(config: dict) -> Interceptor``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from loguru import logger
from pydantic import BaseModel, ValidationError

from dynagent.exceptions import ConfigError, FieldIssue
from dynagent.interceptors.base import Interceptor
from dynagent.interceptors.context_editing import ContextEditing, ContextEditingConfig
from dynagent.interceptors.limits import (
    CallLimitConfig,
    ModelCallLimit,
    ToolCallLimit,
    ToolLimitConfig,
)
from dynagent.interceptors.pii import PiiConfig, PiiRedaction
from dynagent.interceptors.retry import Retry, RetryConfig
from dynagent.spec._plugins import plugin_points
from dynagent.spec.agent import InterceptorRef

InterceptorFactory = Callable[[dict[str, Any]], Interceptor]


def _typed(config_model: type[BaseModel], make: Callable[[Any], Interceptor]) -> InterceptorFactory:
    def factory(config: dict[str, Any]) -> Interceptor:
        return make(config_model.model_validate(config))

    return factory


BUILTIN_INTERCEPTORS: dict[str, InterceptorFactory] = {
    "model_call_limit": _typed(CallLimitConfig, ModelCallLimit),
    "tool_call_limit": _typed(ToolLimitConfig, ToolCallLimit),
    "context_editing": _typed(ContextEditingConfig, ContextEditing),
    "retry": _typed(RetryConfig, Retry),
    "pii_redaction": _typed(PiiConfig, PiiRedaction),
}


@dataclass
class InterceptorRegistry:
    _factories: dict[str, InterceptorFactory] = field(default_factory=dict)

    def register(self, name: str, factory: InterceptorFactory) -> None:
        self._factories[name] = factory

    def names(self) -> list[str]:
        return sorted(self._factories)

    def create(self, ref: InterceptorRef, index: int) -> Interceptor:
        """Instantiate ``ref``; a bad name or setting is a ``ConfigError`` naming the field."""
        path = f"interceptors[{ref.name}]"
        factory = self._factories.get(ref.name)
        if factory is None:
            known = ", ".join(self.names())
            raise ConfigError(
                "unknown interceptor",
                issues=[FieldIssue(path, f"no interceptor {ref.name!r}; known: {known}")],
            )
        try:
            return factory(dict(ref.config))
        except ValidationError as exc:
            issues = [
                FieldIssue(".".join([path, *map(str, e["loc"])]), _message(e, path))
                for e in exc.errors(include_url=False)
            ]
            raise ConfigError("invalid interceptor settings", issues=issues) from None
        except (TypeError, ValueError) as exc:
            raise ConfigError(
                "invalid interceptor settings", issues=[FieldIssue(path, str(exc))]
            ) from None

    def load_plugins(self, group: str = "dynagent.interceptors") -> None:
        for point in plugin_points(group):
            try:
                self.register(point.name, point.load())
            except Exception as exc:  # a broken plugin must not stop the service
                logger.error("interceptor plugin {} failed to load: {}", point.name, exc)

    @classmethod
    def default(cls) -> InterceptorRegistry:
        registry = cls(dict(BUILTIN_INTERCEPTORS))
        registry.load_plugins()
        return registry


def _message(error: Any, path: str) -> str:
    if error["type"] == "extra_forbidden" and error["loc"]:
        where = ".".join([path, *map(str, error["loc"][:-1])])
        return f"unknown field {str(error['loc'][-1])!r} in {where}"
    return str(error["msg"])
