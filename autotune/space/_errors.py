"""The one error of the search-space package."""

from __future__ import annotations


class SpaceError(Exception):
    """A search space (or a model folder it is checked against) is unusable.

    The message is one line that names the file and the offending field, e.g.
    `search_spaces/bad.yaml: parameters[2].low: must be <= high (got 512 > 256)`.
    """
