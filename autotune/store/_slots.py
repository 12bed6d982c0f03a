"""The trial budget as numbered slots, so that many workers run exactly the budget between them.

A launched trial holds one slot (1..budget) in a table of ours beside Optuna's
(`autotune_trial_slots`: study, slot, trial). A slot is taken by an INSERT that the table's
primary key lets only one worker win, in any database, so two workers that both see one slot
left cannot both launch. A trial that ends without a measurement (interrupted, its worker dead)
gives its slot back; a measured one keeps it for good.
"""

from __future__ import annotations

from collections.abc import Iterable

import sqlalchemy as sa
from sqlalchemy.engine import Engine

TABLE = "autotune_trial_slots"

_metadata = sa.MetaData()
_slots = sa.Table(
    TABLE,
    _metadata,
    sa.Column("study_id", sa.Integer, primary_key=True),
    sa.Column("slot", sa.Integer, primary_key=True),
    sa.Column("trial_number", sa.Integer, nullable=False),
    sa.UniqueConstraint("study_id", "trial_number", name="autotune_slot_per_trial"),
)


def lowest_free(held: Iterable[int], budget: int) -> int | None:
    """The lowest slot of 1..budget not in `held`, or None; in the time of the slots held,
    whatever the budget."""
    slot = 1
    for taken in sorted(held):
        if taken == slot:
            slot += 1
        elif taken > slot:
            break
    return slot if slot <= budget else None


class TrialSlots:
    """The slots of one study. Safe to share between threads; each call is one transaction."""

    def __init__(self, engine: Engine, study_id: int) -> None:
        self._engine = engine
        self._study_id = study_id
        try:
            _metadata.create_all(engine, checkfirst=True)
        except sa.exc.DBAPIError:
            # Workers starting together race to create the table; the loser finds it made.
            if not sa.inspect(engine).has_table(TABLE):
                raise

    def held(self) -> dict[int, int]:
        """slot -> trial number, for every slot taken now."""
        query = sa.select(_slots.c.slot, _slots.c.trial_number).where(
            _slots.c.study_id == self._study_id
        )
        with self._engine.connect() as conn:
            return {int(slot): int(number) for slot, number in conn.execute(query)}

    def claim(self, trial_number: int, budget: int) -> int | None:
        """Give `trial_number` the lowest free slot of 1..budget; None when all are taken.

        A trial that holds a slot already keeps it (the same slot is returned).
        """
        while True:
            held = self.held()
            for slot, number in held.items():
                if number == trial_number:
                    return slot
            free = lowest_free(held, budget)
            if free is None:
                return None
            try:
                with self._engine.begin() as conn:
                    conn.execute(
                        sa.insert(_slots).values(
                            study_id=self._study_id, slot=free, trial_number=trial_number
                        )
                    )
                return free
            except sa.exc.IntegrityError:
                continue  # another worker took it first: look again

    def release(self, trial_number: int) -> None:
        """Give back the slot of `trial_number` (none held: nothing to do)."""
        with self._engine.begin() as conn:
            conn.execute(
                sa.delete(_slots).where(
                    _slots.c.study_id == self._study_id, _slots.c.trial_number == trial_number
                )
            )

    def adopt(self, numbers: Iterable[int]) -> None:
        """Give slots to trials measured before slots were kept (a study of an older version),
        in their order, unless the study has slots already."""
        if self.held():
            return
        rows = [
            {"study_id": self._study_id, "slot": slot, "trial_number": number}
            for slot, number in enumerate(sorted(numbers), start=1)
        ]
        if not rows:
            return
        try:
            with self._engine.begin() as conn:
                conn.execute(sa.insert(_slots), rows)
        except sa.exc.IntegrityError:
            pass  # another worker adopted them at the same time
