"""The DataLoaders iterated during the run: the most worker processes of any of them
(``input-bound``'s advice), a new iterator made on every step (``loader-restarted-every-
step``: ``next(iter(loader))`` inside the loop), a shuffling ``DistributedSampler`` whose
``set_epoch`` is never called (``sampler-epoch-not-set``: the same order every epoch), and a
training loader that does not shuffle data sorted by label (``loader-not-shuffled``: batches
of one class each, class after class), and a ``WeightedRandomSampler`` with fewer weights than
the dataset has examples (``sampler-weights-short``: weights per class, where one per example
belongs); and what they drew (``passes.py``): each pass's last batch, and the batches drawn
for a sampled step with the dataset indices they were drawn at, for ``same-batch-every-step``
(``repeats.py``) and ``targets-shuffled-apart`` (``pairing.py``).

A loader may be gone by the time a check runs (made inside a function per epoch, or the script
ends before the last check), so what matters is noted when its iterator is made:
``DataLoader.__iter__`` is wrapped for the run (once an epoch in a healthy loop). The newest
iterator's batches are counted as they are drawn (``__next__`` is wrapped too: a weak-reference
call and an addition a batch), so that an iterator given up after one batch is told from one
read to its end (a step per epoch, over every batch). While the newest iterator's loader does
not shuffle, the targets of the classification losses (``cross_entropy``, ``nll_loss``: a 1-D
tensor of class indices) with gradients on are read for the first ``SORTED_STEPS`` training
steps of its pass (``note_target``: one comparison and one host read each). An evaluation's
losses, under ``no_grad``, do not count: evaluation data need not be shuffled.
"""

from __future__ import annotations

import contextlib
import functools
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils.data import (
    BatchSampler,
    DataLoader,
    DistributedSampler,
    RandomSampler,
    SequentialSampler,
    Subset,
    SubsetRandomSampler,
    WeightedRandomSampler,
)
from torch.utils.data.dataloader import _BaseDataLoaderIter

from treeqa.health import checks, label_counts, sites, slips
from treeqa.health.augmented import AugmentedEvaluation
from treeqa.health.findings import Finding
from treeqa.health.passes import Drawn, Pass
from treeqa.health.replicas import WorkerReplicas
from treeqa.health.worker_memory import WorkerMemory
from treeqa.health.wrap import Wrappers, note_calls_and_results, note_function_results


@dataclass(slots=True)
class Dropped:
    """A pass over a loader that drops its last batch (``drop_last=True``): the examples it
    leaves out, of how many, in batches of what size, whether it shuffles, the line that
    iterated it, the loader's id, its dataset (``_base``: a Subset's own) and what it draws
    from (``_data``: the dataset, with a Subset's or a SubsetRandomSampler's indices); once an evaluation drew from it, held until the clock's next step, the examples it and
    the passes since have ``covered``, and whether it came ``early`` (before the clock's first
    step: of a model trained or not, not yet known)."""

    dropped: int
    examples: int
    size: int
    shuffled: bool
    where: str
    loader: int
    base: int
    dataset: int
    covered: int = 0
    early: bool = False


RESTART_STEPS = 20
"""Steps in a row that each made a new iterator and left it before its end."""
SORTED_STEPS = 20
"""Training steps at the start of a pass of a loader that does not shuffle whose loss targets
are read (a shorter pass's, and those of the loader's next passes until there are as many);
at least ``SORTED_SHARE`` of them of one class each (two classes or more in all) make
``loader-not-shuffled``."""
SORTED_SHARE = 0.5
"""(Small classes put a batch across each class boundary: 100 examples a class in batches of
32 leave 2 of 3 batches with one class. Unsorted data gives whole batches of one class only
where a class is nearly all of it, and then no second class comes that way.)"""
SAME_EPOCH_PASSES = 3
"""Passes over a loader whose shuffling DistributedSampler kept one epoch (two a epoch: a
statistics pass before the training one)."""


class Loaders:
    """``most``: the most ``num_workers`` of a DataLoader iterated while installed; ``add``:
    where findings go (``HealthMonitor.add``)."""

    def __init__(self, add: Callable[[Finding], None]) -> None:
        self.add = add
        self.most = 0
        self.replicas = WorkerReplicas(add)  # a stream read whole by each of its workers
        self.memory = WorkerMemory(add)  # workers copying a dataset of Python objects
        # Each shuffling DistributedSampler's epoch at its loader's last pass, and the passes
        # in a row at that epoch (weak: a finished run's).
        self.epochs: weakref.WeakKeyDictionary[DistributedSampler[Any], tuple[int, int]] = (
            weakref.WeakKeyDictionary()
        )
        self.wrappers = Wrappers()
        self.made = 0  # iterators made since the last step
        self.draws = 0  # batches drawn from any loader, ever
        self.drawn_pass: Pass | None = None  # the pass the latest batch was drawn from
        self.newest: weakref.ref[Any] | None = None  # the last iterator made
        self.drawn = 0  # batches it has given
        self.drawn_elsewhere = 0  # batches other iterators gave since the last step
        self.length: int | None = None  # batches its loader has (None: an iterable dataset)
        self.loader = ""  # the loader, in words, and where its iterator was made
        self.where = ""
        self.sequential, self.workers, self.persistent = False, 0, False
        self.restarts = 0  # steps in a row that made a new iterator and left it early
        # The newest iterator's loader does not shuffle: the training losses' targets are read.
        self.unshuffled = False
        self.label: int | None = None  # the class of this step's targets, if one
        self.pending = False  # a training loss's targets were read this step
        self.labelled = 0  # steps of the newest iterator's pass whose targets were read
        self.single: list[int] = []  # the class of each that held one class
        # Those two of each loader that does not shuffle (weak: a finished run's): a pass of
        # fewer than SORTED_STEPS batches goes on counting where the loader's last one stopped.
        self.counts: weakref.WeakKeyDictionary[Any, tuple[int, list[int]]] = (
            weakref.WeakKeyDictionary()
        )
        self.counting: weakref.ref[Any] | None = None  # the newest iterator's loader, if counted
        self.reads = 0  # targets read in this pass
        self.batch_size: int | None = None  # the newest iterator's loader's
        self.shard = 1  # its DistributedSampler's num_replicas: this process reads 1/shard of it
        self.shard_where = ""  # where that iterator was made
        self.reported: set[str] = set()
        # the newest iterator's pass, where its loader drops its last batch, for
        # ``evaluation-drops-examples``; and such a pass an evaluation drew from, held until
        # the clock's next step
        self.dropping: Dropped | None = None
        self.dropped: Dropped | None = None
        self.drawn_dataset = 0  # the dataset of the iterator drawn from last, with gradients
        self.trained_pass: Pass | None = None  # and that iterator's pass
        # the one drawn from last before a forward with gradients of a trained model (the
        # doctor sets it there: a training batch; an evaluation's forwards between do not)
        self.fed_dataset = 0
        self.trained_on: set[int] = set()  # datasets that fed a clock's steps so
        # evaluation passes hashed, for ``evaluation-inputs-random`` (the doctor's: it tells
        # which datasets trained, ``end_step``)
        self.augmented: AugmentedEvaluation | None = None
        self.on_draw: Callable[[], None] | None = None  # told of each batch, before it is drawn
        self.on_made: Callable[[DataLoader[Any]], None] | None = None  # told of each iterator
        # Each iterator's pass (weak: a finished pass's), and what the loaders gave.
        self.iterators: weakref.WeakKeyDictionary[Any, Pass] = weakref.WeakKeyDictionary()
        self.drawn_batches = Drawn()
        self.keep = True  # the step to come is sampled: its batches are kept, with indices

    def install(self) -> None:
        self.wrappers.add(note_function_results(DataLoader, "__iter__", self._made))
        self.wrappers.add(
            note_calls_and_results(_BaseDataLoaderIter, "__next__", self._drawn, self._batch)
        )

    def uninstall(self) -> None:
        self.wrappers.undo()

    def _made(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any], it: Any) -> None:
        loader = args[0]
        self.most = max(self.most, int(loader.num_workers))
        if self.on_made is not None:
            self.on_made(loader)
        if isinstance(loader.sampler, DistributedSampler) and loader.sampler.shuffle:
            self._note_epoch(loader.sampler)
        self.made += 1
        self.replicas.made(loader, it)
        self.memory.made(loader, it)
        try:
            self.newest = weakref.ref(it)
            self.length = len(loader)
        except TypeError:  # an iterable dataset without a length
            self.newest, self.length = None, None
        self.drawn = 0
        self.batch_size = loader.batch_size  # None with a batch sampler of the script's own
        sampler = getattr(loader.batch_sampler, "sampler", loader.sampler)
        with contextlib.suppress(TypeError):  # an iterator that takes no weak reference
            self.iterators[it] = _pass(loader, sampler, self.length)
        if isinstance(sampler, WeightedRandomSampler):
            self._weights_short(sampler, loader)
        dropping = _dropping(loader, sampler)
        self._cover(loader, sampler, dropping)
        self.dropping = dropping if "evaluation-drops-examples" not in self.reported else None
        sequential = isinstance(sampler, SequentialSampler)
        self.shard = int(sampler.num_replicas) if isinstance(sampler, DistributedSampler) else 1
        self.shard_where = sites.user_site() if self.shard > 1 else ""
        self.unshuffled = sequential and "loader-not-shuffled" not in self.reported
        self.label, self.pending = None, False
        counted = self.counts.get(loader, (0, [])) if sequential else (0, [])
        self.labelled, self.single = counted if counted[0] < SORTED_STEPS else (0, [])
        self.counting = weakref.ref(loader) if sequential else None
        self.reads = 0  # targets read in this pass
        if self.restarts + 1 >= RESTART_STEPS or self.unshuffled:  # read only when needed
            self.sequential = sequential
            self.workers = int(loader.num_workers)
            self.persistent = bool(loader.persistent_workers) and self.workers > 0
            self.loader = _described(loader)
            self.where = sites.user_site()

    def watch_batches_by_hand(self) -> None:
        """Until a DataLoader iterator is made, the training batches are the script's own
        (slices of tensors): their targets are judged as a loader's that does not shuffle
        (``treeqa doctor`` calls this; a script with loaders makes its first before its
        first batch)."""
        if self.newest is None and not self.made:
            self.unshuffled, self.loader = True, ""

    def _note_epoch(self, sampler: DistributedSampler[Any]) -> None:
        epoch = int(sampler.epoch)
        last, passes = self.epochs.get(sampler, (None, 0))
        passes = passes + 1 if epoch == last else 1
        self.epochs[sampler] = (epoch, passes)
        if passes == SAME_EPOCH_PASSES:
            found = slips.sampler_epoch_not_set(epoch, passes)
            found.where = sites.user_site()
            self._report(found)

    def _weights_short(self, sampler: WeightedRandomSampler, loader: DataLoader[Any]) -> None:
        """``sampler-weights-short``: a WeightedRandomSampler with fewer weights than its
        loader's dataset has examples draws only from the first ones (weights given per
        class, where one per example belongs)."""
        try:
            size = len(loader.dataset)  # type: ignore[arg-type]
        except TypeError:  # an iterable dataset without a length
            return
        if len(sampler.weights) < size:
            found = slips.sampler_weights_short(len(sampler.weights), size)
            found.where = sites.user_site()
            self._report(found)

    def evaluated(self, early: bool = False) -> None:
        """A forward of a trained model without gradients (an evaluation's; ``early``: of a
        model in eval mode before the clock's first step, which says whether it trains): where
        an iterator was made since the clock's last step, the evaluation's, and its loader
        drops its last batch, the evaluation is held until the next step (``judge_dropped``)."""
        held = self.dropping
        if self.made and held is not None and self.dropped is None:
            held.covered, held.early = held.examples - held.dropped, early
            self.dropped = held
        self.dropping = None

    def first_step(self, evaluated: bool) -> None:
        """The clock's first step: a model it trains was ``evaluated`` before it (a baseline
        score), or the evaluation held since was another model's (a teacher's labels)."""
        if self.dropped is not None and self.dropped.early and not evaluated:
            self.dropped = None

    def _cover(self, loader: DataLoader[Any], sampler: Any, dropping: Dropped | None) -> None:
        """A new pass over ``loader`` (``dropping``: what it leaves out): what it draws counts
        toward the held evaluation's examples, where it draws from the same dataset (a Subset's
        own) or as many examples as the evaluation left out (a loader over the tail scores what
        the first left out). The same loader again leaves out the same ones (or, shuffled,
        others in their place)."""
        held = self.dropped
        if held is None or id(loader) == held.loader:
            return
        with contextlib.suppress(TypeError):  # an iterable dataset without a length
            drawn = len(sampler) - (dropping.dropped if dropping is not None else 0)
            if _base(loader.dataset) == held.base or drawn == held.dropped:
                held.covered += drawn

    def judge_dropped(self) -> None:
        """The clock stepped, or the run ended: ``evaluation-drops-examples`` for the held
        evaluation, unless passes since covered every example, or its dataset is one the
        clock's steps trained on (features or targets computed over the training set without
        gradients, batch-norm statistics recomputed: no score of the model)."""
        held, self.dropped = self.dropped, None
        if held is None or held.covered >= held.examples or held.dataset in self.trained_on:
            return
        found = slips.evaluation_drops_examples(
            held.dropped, held.examples, held.size, held.shuffled
        )
        found.where = held.where
        self._report(found)

    def _report(self, found: Finding) -> None:
        if found.code not in self.reported:
            self.reported.add(found.code)
            self.add(found)

    def _drawn(self, it: Any) -> None:
        self.draws += 1
        if self.on_draw is not None:
            self.on_draw()
        if self.replicas.watching is not None:
            self.replicas.asking(it)
        if self.newest is not None and self.newest() is it:
            self.drawn += 1
        else:
            self.drawn_elsewhere += 1
        drawn_from = self.drawn_pass = self.iterators.get(it)
        if drawn_from is not None:  # a training batch with gradients (validation without)
            # (a batch drawn without gradients is no training batch: an evaluation's loop)
            trained = torch.is_grad_enabled()
            self.drawn_dataset = drawn_from.dataset if trained else 0
            if trained:
                self.trained_pass = drawn_from
            self.drawn_batches.note(drawn_from, trained)
            if self.keep and drawn_from.indexed:  # the indices it fetches now, for this batch
                it._next_index = functools.partial(_fetching, it, drawn_from)

    def _batch(self, it: Any, batch: Any) -> None:
        """``it`` gave ``batch``: held as its pass's last, and kept where it is a training
        batch for a sampled step to come."""
        if self.replicas.watching is not None:
            self.replicas.batch(it, batch)
        drawn_from = self.iterators.get(it)
        if drawn_from is not None:
            if drawn_from.held:
                drawn_from.last = batch
            if drawn_from.whole and self.augmented is not None:  # an evaluation's, it may be
                self.augmented.drawn(drawn_from, batch)
            if self.keep:
                vars(it).pop("_next_index", None)  # (its own again)
                indices, drawn_from.indices = drawn_from.indices, None
                if torch.is_grad_enabled():
                    self.drawn_batches.keep(drawn_from, batch, indices)

    def note_target(
        self, target: Any, loss: Any = None, ignore_index: Any = -100, input: Any = None
    ) -> None:
        """A classification loss got ``target`` (and made ``loss`` of ``input``, with
        ``ignore_index``: not read): while the newest loader does not shuffle, on the first
        steps of its pass, note whether it is all one class (with gradients on: a training
        loss)."""
        if not self.unshuffled or self.labelled >= SORTED_STEPS or not torch.is_grad_enabled():
            return
        # Bounded without the doctor's end_step too (a Lightning run reads a few and stops).
        if checks.untraceable(target) or self.reads >= 4 * SORTED_STEPS:
            return  # (and no host read inside a compiled graph or vmap)
        self.reads += 1
        if not self.loader and not self.where:  # batches by hand: where the loss is taken
            self.where = sites.user_site()
        single = _single_class(target)
        if not self.pending or single is None:  # the step's first loss, or a mixed one
            self.label = single
        self.pending = True

    def _note_sorted(self) -> None:
        """The clock stepped after a training loss whose targets were read: count them."""
        self.labelled += 1
        if self.label is not None:
            self.single.append(self.label)
        self.label, self.pending = None, False
        loader = self.counting() if self.counting is not None else None
        if loader is not None:
            self.counts[loader] = (self.labelled, self.single)
        if self.labelled != SORTED_STEPS or len(self.single) < SORTED_SHARE * SORTED_STEPS:
            return
        classes = list(dict.fromkeys(self.single))  # in the order they came
        if len(classes) >= 2:
            found = slips.loader_not_shuffled(self.loader, len(self.single), self.labelled, classes)
            found.where = self.where
            self._report(found)

    def trained_labels(self) -> torch.Tensor | None:
        """The labels of the dataset the latest batch with gradients was drawn from, each
        example once (``label_counts.labels``); None where unknown."""
        drawn = self.trained_pass
        if drawn is None:
            return None
        dataset = drawn.data() if drawn.data is not None else None
        if dataset is None and drawn.loader is not None:
            loader = drawn.loader()  # (a plain list of examples takes no weak reference)
            dataset = None if loader is None else loader.dataset
        return None if dataset is None else label_counts.labels(dataset)

    def end_step(self) -> None:
        """The clock stepped (under ``treeqa doctor``): a new iterator this step, left before
        its end, makes one more step in a row; ``RESTART_STEPS`` of them make the finding."""
        if self.memory.watching is not None:
            self.memory.end_step()
        self.trained_on.add(self.fed_dataset)
        if self.dropped is not None:
            self.judge_dropped()
        if not self.made and not self.pending:  # no iterator made this step: no restart
            self.restarts = self.drawn_elsewhere = 0
            return
        made, self.made = self.made, 0
        elsewhere, self.drawn_elsewhere = self.drawn_elsewhere, 0
        if self.pending:
            self._note_sorted()
        # Another loader's iterator gave this step's batches: the one remade each step feeds
        # something else (a fixed batch to watch the validation loss by), not the training.
        left = self.length is not None and self.length > 1 and 0 < self.drawn < self.length
        left = left and not elsewhere
        self.restarts = self.restarts + 1 if made and left else 0
        if self.restarts < RESTART_STEPS:
            return
        if not self.sequential and self.workers == 0:  # a random batch each step, cheaply
            return
        found = slips.loader_restarted_every_step(
            self.loader,
            self.restarts,
            self.length or 0,
            self.sequential,
            self.workers,
            self.persistent,
        )
        found.where = self.where
        self._report(found)


def _fetching(it: _BaseDataLoaderIter, drawn_from: Pass) -> Any:
    """``it``'s own ``_next_index`` (the indices of the batch it is drawing, in the script's
    process), noted in ``drawn_from`` on the way."""
    drawn_from.indices = _BaseDataLoaderIter._next_index(it)
    return drawn_from.indices


def _base(dataset: Any) -> int:
    """The identity of the dataset ``dataset`` draws from (a ``Subset``'s, any depth)."""
    while isinstance(dataset, Subset):
        dataset = dataset.dataset
    return id(dataset)


def _dropping(loader: DataLoader[Any], sampler: Any) -> Dropped | None:
    """The pass ``loader`` (drawing by ``sampler``) is starting, where it drops a last batch
    smaller than the others (``drop_last=True``, of the loader or of its ``BatchSampler``) and
    so leaves examples out; None where it leaves none (or its length is unknown)."""
    batch_sampler = loader.batch_sampler
    drop = bool(getattr(batch_sampler, "drop_last", False))
    size = getattr(batch_sampler, "batch_size", None)
    if not drop or not isinstance(size, int) or size < 2:
        return None
    try:
        examples = len(sampler)
    except TypeError:  # an iterable dataset without a length
        return None
    dropped = examples % size
    if not dropped:
        return None
    shuffled = isinstance(sampler, RandomSampler)
    dataset = loader.dataset
    where = sites.user_site()
    return Dropped(
        dropped, examples, size, shuffled, where, id(loader), _base(dataset), _data(loader, sampler)
    )


def _described(loader: DataLoader[Any]) -> str:
    return f"a DataLoader over {type(loader.dataset).__name__}"


def _pass(loader: DataLoader[Any], sampler: Any, batches: int | None) -> Pass:
    """A new pass over ``loader`` (drawn by ``sampler``, of ``batches``). Worker processes
    fetch ahead as the iterator is made, before it is noted: their indices are not followed."""
    size = loader.batch_size or getattr(loader.batch_sampler, "batch_size", None)
    try:
        examples: int | None = len(loader.dataset)  # type: ignore[arg-type]
    except TypeError:  # an iterable dataset without a length
        examples = None
    return Pass(
        id(loader),
        _data(loader, sampler),
        size if isinstance(size, int) else None,
        batches,
        examples,
        _described(loader),
        loader.num_workers == 0,
        type(sampler) is RandomSampler and sampler.generator is None,
        _whole(loader, sampler),
        _weakly(loader.dataset),
        _weakly(loader),
        shuffled=_shuffles(sampler),
    )


def _shuffles(sampler: Any) -> bool:
    """``sampler`` draws at random: consecutive batches are of unrelated examples."""
    if isinstance(sampler, DistributedSampler):
        return bool(sampler.shuffle)
    return isinstance(sampler, RandomSampler | SubsetRandomSampler | WeightedRandomSampler)


def _weakly(obj: Any) -> Any:
    """A weak reference to ``obj``, or None where it takes none."""
    try:
        return weakref.ref(obj)
    except TypeError:
        return None


def _data(loader: DataLoader[Any], sampler: Any) -> int:
    """What ``loader`` draws from: its dataset, with the indices that pick its examples where
    it is a ``Subset`` or its sampler a ``SubsetRandomSampler`` (a training and a validation
    split of one dataset by two samplers are two sets; a Subset given new indices, another)."""
    dataset = loader.dataset
    if isinstance(sampler, SubsetRandomSampler):
        return hash((id(dataset), id(sampler.indices)))
    if isinstance(dataset, Subset):
        return hash((id(dataset), id(dataset.indices)))
    return id(dataset)


def _whole(loader: DataLoader[Any], sampler: Any) -> bool:
    """Whether ``loader`` draws each of its examples once a pass, in batches of torch's
    ``BatchSampler`` (in order, or shuffled without replacement, over all of them)."""
    if type(loader.batch_sampler) is not BatchSampler:
        return False
    if isinstance(sampler, RandomSampler):
        return not sampler.replacement and sampler._num_samples is None
    return isinstance(sampler, SequentialSampler | SubsetRandomSampler)


def _single_class(target: Any) -> int | None:
    """The class of every example of ``target`` (a 1-D tensor of 4 or more class indices)
    when all are one class; None otherwise."""
    integer = isinstance(target, torch.Tensor) and not target.is_floating_point()
    if not integer or target.dim() != 1 or target.numel() < 4 or target.is_complex():
        return None
    first = target[0]
    return int(first) if bool((target == first).all()) else None
