"""The shared vocabularies, each defined once: a trial's statuses (`status`), a study folder's
files (`layout`), numbers as people read them (`numbers`), the SLO type (`slo`), the
objectives a study optimizes (`objectives`) and the platform a host or space is for
(`platform`).

Imported by module (`from autotune.vocab.status import TrialStatus`): every layer reads them,
and a package that loaded all of them at once would tie the load client (which `objectives`
reads its metric names from) into a cycle.
"""
