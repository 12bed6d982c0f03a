"""The answer a user deploys, read from a study's stored trials: which trials are best (the
feasible Pareto front, the picks, the confirmed winner: `selection`), a config's repeated runs
merged and the noise they show (`repeats`), the best-config YAML for `vllm serve --config`
(`export`), the fewest devices that hold a rate (`sizing`), and the trials as plain data
(`trial_data`, for `show --format json|csv`).

Pure functions over stored records: the CLI, the dashboard, the confirm step and the search
read them by module (`from autotune.answer.selection import pareto_front`).
"""
