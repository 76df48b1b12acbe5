"""The travel domain's own flows: plans formatted and scored, the argument probe (its stages: format, evaluate, probe)."""
