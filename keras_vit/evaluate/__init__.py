"""The paper's ways of judging a model: few-shot linear probes (`fewshot`), a VTAB-style
transfer suite (`transfer_suite`), and its cost: FLOPs, GEMM roofs and timed steps
(`benchmarking`)."""
