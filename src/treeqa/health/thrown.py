"""``losses-not-backpropagated``: a loop that computes a loss for every batch and backpropagates
only a few of them, so the optimiser trains on a fraction of the data.

``loss.backward(); optimizer.step()`` indented one level too little runs once, after the loop
over batches, on the last batch's loss: one step an epoch, each on one batch. A gradient
accumulation written ``if (i + 1) % k == 0: loss.backward(); ...`` backpropagates every k-th
batch's loss and throws the others away. Nothing fails; the model trains on one batch in N.

``updates.py`` counts the forwards in a row, in train mode with gradients on, of a model the
clock trains, and those a training loss followed (a wrapped loss whose value has gradients: one
call a loss, on every step), and walks the graph of the backward that ends them for whether it
reaches the forwards before its latest. A backward that
reaches none of ``FORWARDS`` or more such forwards before its latest threw their losses away;
``BACKWARDS`` in a row make the finding, at the backward's line. Fewer in a row, then a backward
that throws nothing away, were a validation with its loss (neither ``model.eval()`` nor
``no_grad``), said as ``evaluation-with-gradients`` then (or when the run ends) where its
forwards were five or more. Losses of one forward's parts logged beside the trained one follow
one forward, and actions chosen with gradients on have no loss: neither is this.
"""

from __future__ import annotations

from treeqa.health.findings import Finding

FORWARDS = 3
"""Forwards before a backward's latest, each with a training loss, whose graphs it does not
reach, for it to have thrown losses away (a gradient accumulation that backpropagates one batch
in 4)."""
BACKWARDS = 3
"""Backwards in a row that throw losses away."""


class ThrownLosses:
    def __init__(self) -> None:
        # backwards in a row that threw losses away: (forwards before the latest, those with a
        # loss, where the fifth forward was run)
        self.thrown: list[tuple[int, int, str]] = []
        self.said = False

    def threw(self, before: int, lost: int, where: str) -> Finding | None:
        """A backward reached none of the ``before`` forwards before its latest, ``lost`` of
        which had a training loss (``FORWARDS`` or more); ``where``: the fifth's line."""
        if self.said:
            return None
        self.thrown.append((before, lost, where))
        if len(self.thrown) < BACKWARDS:
            return None
        self.said = True
        return _finding(self.thrown)

    def kept(self) -> tuple[int, str] | None:
        """A backward threw no losses away (or the run ended): the first of those before it
        that did (fewer than ``BACKWARDS`` in a row), a validation's (its forwards, the fifth's
        line), if any."""
        thrown, self.thrown = self.thrown, []
        return (thrown[0][0], thrown[0][2]) if thrown and not self.said else None


def _finding(thrown: list[tuple[int, int, str]]) -> Finding:
    lost = [n for _, n, _ in thrown]
    return Finding(
        "losses-not-backpropagated",
        "warning",
        f"{len(thrown)} backwards in a row each backpropagated the last batch's loss alone: the "
        f"losses computed after {lost} forwards of the model being trained before it (in train "
        "mode, with gradients on) reached no backward, so the optimiser trains on a few of the "
        "batches the loop runs the model on and throws the rest away (loss.backward() and "
        "optimizer.step() indented one level too little, after the loop over batches, train "
        "on its last batch alone; a gradient accumulation that backpropagates every k-th "
        "batch's loss only, on one batch in k)",
        evidence={"backwards": len(thrown), "losses_left_out": lost},
    )
