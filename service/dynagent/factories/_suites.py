"""``{name}.evals.yaml`` from a folder or a Nacos group: the agent's evaluation suite.

Applied apart from the agent's own documents: a suite never changes what the agent
serves, and a broken one is refused on its own (the last good suite stays).
"""

from __future__ import annotations

from loguru import logger

from dynagent.evals.record import KIND, SuiteRecord
from dynagent.evals.spec import load_suite, suite_agent
from dynagent.exceptions import ConfigError
from dynagent.registry.facade import AgentRegistry
from dynagent.sources.base import Document


def apply_suite(registry: AgentRegistry, document: Document) -> bool:
    """Keep ``document`` as its agent's suite; True when accepted (or its removal done)."""
    name = suite_agent(document.key)
    where = document.info.location or document.key
    attachments = registry.attachments
    if document.text is None and document.error is None:
        attachments.remove(name, KIND)
        return True
    held = attachments.get(name, KIND)
    previous = held if isinstance(held, SuiteRecord) else SuiteRecord(None, "", 0.0)
    try:
        if document.error is not None:
            raise ConfigError(document.error, source=where, agent=name)
        assert document.text is not None
        suite = load_suite(document.text, fmt=document.fmt, source=where, agent=name)
    except ConfigError as exc:
        attachments.put(name, KIND, previous.refused(exc))
        logger.error("agent {}: evaluation suite refused: {}", name, exc)
        return False
    attachments.put(name, KIND, SuiteRecord.accepted(suite, where))
    logger.info("agent {}: evaluation suite revision {} loaded", name, suite.revision)
    return True
