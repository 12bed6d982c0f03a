"""How a user's input is read and checked before anything is created: strict YAML (`yamlfile`),
files and folders checked before use (`userfiles`), every bound on a number (`limits`), and
pydantic's errors in plain words (`wording`).

Each module is its own small vocabulary and imports nothing of the package's others but
`wording`; they are imported by module (`from autotune.inputs.limits import MAX_RATE`), so that
a low layer (the load client, the search space) takes one without the rest.
"""
