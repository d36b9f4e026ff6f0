"""The A2A feature: an agent's card, a remote A2A agent called as a tool (``type: agent``
with ``a2a``), and the Nacos A2A registry (cards registered, agents found). The A2A
server itself is a protocol adapter: ``dynagent.http.a2a``."""
