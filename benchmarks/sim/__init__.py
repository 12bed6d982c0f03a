"""A simulated vLLM engine with a structured tuning landscape (see model.py, scheduler.py).

Import it as the top-level package `sim` with `benchmarks/` on sys.path (the modules import
each other relatively, and `benchmarks` inside tests/ names tests/benchmarks):
`sys.path.insert(0, "benchmarks"); from sim.simulate import simulate`. `server.py` and
`report.py` also run as scripts: `python benchmarks/sim/server.py --config engine.yaml`.
"""
