"""Everything that talks to Nacos: the client, a group as a source of documents, the
factories that build agents from it (whole agents, prompts only, Spring AI Alibaba's
layout), ``dynagent publish`` and the ``--nacos`` flags."""
