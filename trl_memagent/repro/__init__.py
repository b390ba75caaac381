"""A CPU-sized reproduction of MemAgent's RL-vs-no-RL ablation (see docs/micro_repro.md)."""
