"""A training run: the paper's recipes (`training`), the plan of a run from its arguments
(`run_plan`), the run itself and its directory (`runs`, `run_lock`, `callbacks`,
`learning_curves`, `worker_restart`), and which split a run tests on (`selection`)."""
