"""Rollout notices for people and systems outside the service: webhooks.

A version published, a gate's result, a step, a pause and its end, a promotion and a
rollback are told to each configured webhook as a JSON POST signed with HMAC-SHA256
(``X-Dynagent-Signature: sha256=<hex>``, as GitHub signs its webhooks), retried with
backoff, in order per webhook, and never on a run's path: a slow or down receiver
costs a queue slot, not a request.
"""

from dynagent.notifications.notices import Notice, notice_of, signature
from dynagent.notifications.webhooks import Webhooks

__all__ = ["Notice", "Webhooks", "notice_of", "signature"]
