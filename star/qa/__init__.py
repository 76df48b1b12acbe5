"""Multi-hop question answering with a Search tool (Agent-R1's search agent)."""
