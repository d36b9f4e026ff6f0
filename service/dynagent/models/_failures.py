"""What went wrong on the way to a model endpoint, read from the transport's own error.

The ``openai`` client's aiohttp transport reports every failure to connect as a
``ConnectTimeout`` (so the client raises ``APITimeoutError``): a refused connection
answered in milliseconds as "did not answer within model.timeout". The real cause is
further down the exception chain (aiohttp's, then the operating system's), and each
cause gets its own message here, one that says what to check:

- refused connection, DNS failure, TLS failure, a connection closed or reset before the
  whole answer arrived: 502 ``model_error``;
- a real timeout (connecting, reading, or the whole answer past ``model.timeout``): 504
  ``timeout``;
- a request longer than the model's context window (a 400 saying so): 400
  ``input_too_long``, the caller's to shorten;
- an HTTP error status: 502 ``model_error`` naming the status, with a hint for the
  statuses that mean the definition is wrong (401, 403, 404).
"""

from __future__ import annotations

import socket
import ssl
from collections.abc import Iterator

import aiohttp
import openai

from dynagent.exceptions import InputTooLong, ModelError, ModelTimeout

_CHAIN_DEPTH = 12
"""Causes looked at: the transport's chains are four or five long."""

_HINTS = {
    401: " (check model.api_key)",
    403: " (check model.api_key and what the key may use)",
    404: " (check model.name and model.base_url)",
}


_TRANSIENT = frozenset({408, 409, 429})
"""The 4xx statuses worth another try, as the ``openai`` SDK has them: the endpoint's
request timeout, a conflict (a lock it timed out on) and its rate limit."""


def timeout_error(seconds: float | None) -> ModelTimeout:
    within = f" within model.timeout = {seconds:g} s" if seconds is not None else ""
    return ModelTimeout(f"the model endpoint did not answer{within}", retryable=True)


_TOO_LONG = ("context_length_exceeded", "maximum context length", "context length exceeded")
"""How endpoints say a request is longer than the model's context window: OpenAI's error
``code``, and the messages of OpenAI, vLLM and the servers that copy them (lowercase)."""


def model_error(exc: openai.APIError, timeout: float | None = None) -> ModelError:
    """The ``ModelError`` for what the ``openai`` client raised."""
    if isinstance(exc, openai.APIStatusError):
        status = exc.status_code
        if status == 400 and _too_long(exc):
            return InputTooLong(
                "the input is longer than the model's context window; shorten it (the model "
                f"endpoint answered 400: {short(exc.message)})",
                status=status,
            )
        return ModelError(
            f"the model endpoint answered {status}: {short(exc.message)}{_HINTS.get(status, '')}",
            status=status,
            retryable=status in _TRANSIENT or status >= 500,
        )
    if isinstance(exc, openai.APIConnectionError):  # APITimeoutError among them
        return transport_error(exc, timeout)
    return ModelError(f"model endpoint error: {short(str(exc))}")


def _too_long(exc: openai.APIStatusError) -> bool:
    said = f"{exc.code or ''} {exc.message}".lower()
    return any(phrase in said for phrase in _TOO_LONG)


def transport_error(exc: openai.APIConnectionError, timeout: float | None) -> ModelError:
    """A failure below HTTP, by its first cause that says what happened."""
    where = _address(exc)
    for cause in _causes(exc):
        error = _described(cause, where)
        if error is not None:
            return error
    if isinstance(exc, openai.APITimeoutError):
        return timeout_error(timeout)
    return ModelError(f"could not reach the model endpoint at {where}", retryable=True)


def _described(cause: BaseException, where: str) -> ModelError | None:
    if isinstance(cause, ConnectionRefusedError):
        return ModelError(
            f"the model endpoint at {where} refused the connection "
            "(nothing listens there: check model.base_url)",
            retryable=True,
        )
    if isinstance(cause, (aiohttp.ClientConnectorDNSError, socket.gaierror)):
        reason = _reason(cause.__cause__ or cause.__context__ or cause)
        return ModelError(
            f"could not resolve the host of the model endpoint at {where}: {reason} "
            "(check model.base_url)",
            retryable=True,
        )
    if isinstance(cause, (aiohttp.ClientSSLError, ssl.SSLError)):
        return _tls(cause, where)
    if isinstance(cause, (aiohttp.ServerDisconnectedError, aiohttp.ClientPayloadError)):
        return _broken(where)
    if isinstance(cause, (ConnectionResetError, BrokenPipeError, ConnectionAbortedError)):
        return _broken(where)
    return None  # a timeout is one only when nothing below it says more


def _tls(cause: BaseException, where: str) -> ModelError:
    for inner in _causes(cause):
        if isinstance(inner, ssl.SSLCertVerificationError) and inner.verify_message:
            reason = inner.verify_message
            return ModelError(
                f"the TLS certificate of the model endpoint at {where} was refused: {reason}"
            )
        if isinstance(inner, ssl.SSLError) and getattr(inner, "reason", None):
            return ModelError(
                f"the TLS handshake with the model endpoint at {where} failed: "
                f"{inner.reason} (does it speak https?)"
            )
    return ModelError(f"the TLS handshake with the model endpoint at {where} failed")


def _broken(where: str) -> ModelError:
    return ModelError(
        f"the connection to the model endpoint at {where} broke before the answer was complete",
        retryable=True,
    )


def _causes(exc: BaseException) -> Iterator[BaseException]:
    seen: BaseException | None = exc
    for _ in range(_CHAIN_DEPTH):
        if seen is None:
            return
        yield seen
        seen = seen.__cause__ or seen.__context__


def _address(exc: openai.APIConnectionError) -> str:
    """``host:port`` of the request: never its path, query or credentials."""
    try:
        url = exc.request.url
    except (AttributeError, RuntimeError):
        return "its address"
    port = url.port or (443 if url.scheme == "https" else 80)
    return f"{url.host}:{port}"


def _reason(exc: BaseException) -> str:
    text = getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
    return short(str(text), 200)


def short(text: str, limit: int = 300) -> str:
    return text if len(text) <= limit else text[:limit] + "…"
