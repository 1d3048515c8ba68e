"""The findings on the common slips of hand-written training loops: gradients never zeroed or
zeroed too often, steps given no gradients, train and eval mode mixed up, clips in the wrong
place, learning-rate schedules stepped wrong, loaders and seeds restarted every step.

Each is a plain function from what ``updates.py``, ``probes.py``, ``clipping.py``,
``loaders.py`` and ``seeds.py`` noted to a ``Finding`` (or None), so it can be tested alone.
"""

from __future__ import annotations

from collections.abc import Sequence

from treeqa.health.findings import Finding

HAND_ZERO_FIX = (
    "clear the gradients after each update made by hand (p.grad = None, or p.grad.zero_() under "
    "torch.no_grad()), so each step uses only its own gradients"
)
"""``gradients-not-zeroed``'s fix where the weights are updated by hand (no optimiser)."""


def gradients_not_zeroed(
    clean: Sequence[bool], whose: str = "", by_hand: bool = False, streak: int = 3
) -> Finding | None:
    """Gradients carried over from the previous optimiser step into every new one.

    ``clean``: one verdict per sampled step, oldest first: whether any backward of that step
    accumulated into a gradient that was None or zero. Gradient accumulation zeroes once per
    optimiser step, so its first micro-batch starts clean; a GAN's generator backward that
    runs through the critic adds to the critic's gradients, but the critic's own backward
    starts clean after its zero_grad. Only ``streak`` dirty sampled steps in a row (and none
    clean since) mean that nothing zeroes them. ``whose``: the gradients of what, when not
    the trained model's own parameters (a parameter outside the model, another optimiser's);
    ``by_hand``: the weights are updated by the script's hand, with no optimiser."""
    if len(clean) < streak or any(clean[-streak:]):
        return None
    of = f" of {whose}" if whose else ""
    between = "updates by hand" if by_hand else "optimiser steps"
    return Finding(
        "gradients-not-zeroed",
        "error",
        f"the gradients{of} were never zeroed between {between} on the last {streak} "
        "sampled steps: each step adds its gradient to all earlier ones",
        evidence={"sampled_steps": len(clean), "dirty_in_a_row": streak, "whose": whose},
        fix=HAND_ZERO_FIX if by_hand else "",
    )


def gradients_stepped_again(names: Sequence[str], values: int) -> Finding:
    """Parameters the clock steps whose gradients no backward wrote and nothing cleared since
    its step before (``names``; ``values``: their elements): the optimiser applies the same
    gradients on every step, so they keep moving (a teacher trained first, then run under
    ``no_grad`` with the gradients of its training left, while ``student.zero_grad()`` clears
    only the student's)."""
    shown = ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
    return Finding(
        "gradients-not-zeroed",
        "error",
        f"{len(names)} parameters the optimiser steps ({shown}) kept gradients that no backward "
        "wrote and nothing cleared since its step before, on the last 3 sampled steps: each "
        "step applies them again and moves those weights (a model run under no_grad, a teacher "
        "say, with the gradients of its own training left?)",
        evidence={"parameters": list(names[:20]), "values": values},
        fix="call optimizer.zero_grad() (not model.zero_grad() on the trained part alone), or "
        "set p.grad = None on the parameters that are not to change (or leave them out of "
        "the optimiser)",
    )


def zero_grad_per_micro_batch(
    discarded: Sequence[bool], backwards: int, streak: int = 3
) -> Finding | None:
    """Gradients cleared before every micro-batch of an accumulation.

    ``discarded``: one verdict per sampled step with two or more backwards, oldest first:
    whether each of them started from cleared gradients, the parameters unchanged between
    them, and the step used what the last one left. ``backwards``: the last such step's
    number of backwards.
    ``streak`` such steps in a row (an occasional skipped micro-batch, a NaN loss thrown
    away, is not) make the finding."""
    if len(discarded) < streak or not all(discarded[-streak:]):
        return None
    n = backwards
    return Finding(
        "zero-grad-per-micro-batch",
        "warning",
        f"each of the {n} backwards of a step started from cleared gradients on the last "
        f"{streak} sampled steps: zero_grad runs on every micro-batch, so the step uses the "
        f"last micro-batch's gradient only and the other {n - 1} are computed for nothing",
        evidence={"backwards_per_step": n, "sampled_steps_in_a_row": streak},
    )


def step_without_gradients(
    steps: int,
    stale: bool,
    streak: int = 5,
    frozen: bool = False,
    no_grad: bool = False,
    empty: bool = False,
    zeros: bool = False,
) -> Finding | None:
    """The optimiser stepped ``steps`` steps in a row after a backward, and none of its
    parameters had a gradient (``zeros``: sampled steps on which every gradient it holds
    was zero: zeroed in place between backward and step). ``empty``: it holds no parameter at all (parameter groups
    given a generator that was read up before); ``stale``: no model that ran a forward holds
    its parameters (it was built over a model that was replaced); ``no_grad``: the models
    that hold them ran their forwards only under ``no_grad`` while the backward, with no
    other optimiser stepping, went through another model's graph (built over the teacher,
    not the student); ``frozen``: every parameter it holds is frozen while the backward, with
    no other optimiser stepping, trains something else (it was built over a frozen model, not
    the prompt or adapter that trains); else the gradients were cleared between backward and
    step."""
    if steps < streak:
        return None
    cause = (
        "every gradient it holds was zero at its step: zeroed in place between backward() and "
        "step() (zero_grad(set_to_none=False), or zero_grad() in the wrong place?)"
        if zeros
        else "it holds no parameter at all: its parameter groups are empty (given a generator, "
        "such as model.parameters(), that was read up before the optimiser was built?)"
        if empty
        else "its parameters belong to no model that runs (was the model re-created, a new one "
        "made to load a checkpoint into, or sharded by fully_shard or "
        "FullyShardedDataParallel, after the optimiser was built?)"
        if stale
        else "the models that hold its parameters ran only under torch.no_grad() while the "
        "backward went through another model's graph, whose gradients no optimiser applies "
        "(was it built over the teacher or a copy instead of the model that trains?)"
        if no_grad
        else "every parameter it holds is frozen (requires_grad=False) while the backward "
        "computes gradients that no optimiser applies (was it built over the frozen model "
        "instead of the parameters that train: a prompt, an adapter, a new head?)"
        if frozen
        else "the backward reached none of them: gradients cleared between backward() and "
        "step() (zero_grad in the wrong place?), or a forward under torch.no_grad() or detached"
    )
    said = (
        f"the optimiser stepped {steps} sampled steps in a row after a backward with only "
        "zero gradients, so only weight decay and momentum move what it holds"
        if zeros
        else f"the optimiser stepped {steps} steps in a row after a backward with no gradient "
        "on any of its parameters, so nothing it holds changes"
    )
    return Finding(
        "step-without-gradients",
        "error",
        f"{said}: {cause}",
        evidence={
            "steps_in_a_row": steps,
            "stale_parameters": stale,
            "all_frozen": frozen,
            "only_under_no_grad": no_grad,
            "no_parameters": empty,
            "zero_gradients": zeros,
        },
    )


def loss_zero(steps: int) -> Finding:
    """On every one of the clock's ``steps`` sampled steps, from its first, the loss was
    exactly 0 and the gradients its optimiser holds zero: nothing trained."""
    return Finding(
        "loss-zero",
        "warning",
        f"the loss was exactly 0 on all {steps} sampled steps of the run, with every gradient "
        "zero, so the optimiser changed nothing but by weight decay and momentum: a loss that "
        "is 0 from the first step measures nothing (a margin met by construction: an anchor "
        "given as its own positive; a term multiplied by an all-zero mask; a cross-entropy "
        "saturated by logits grown without bound)",
        evidence={"sampled_steps": steps},
    )


def not_in_optimiser(
    names: Sequence[str], values: int, outside: bool = False, idle: str = ""
) -> Finding:
    """Parameters of a model being trained that get gradients which no optimiser applies;
    ``outside``: ``nn.Parameter``s the loss uses outside the trained models (``loose.py``);
    ``idle``: the class of an optimiser that holds them and has never stepped."""
    if idle:
        return Finding(
            "not-in-optimiser",
            "warning",
            f"{len(names)} parameter tensors ({values} values) of the trained model get "
            f"gradients, but the optimiser that holds them ({idle}) has never stepped, so they "
            f"never change: {', '.join(names[:5])} (its step() left out of the loop?)",
            fix=f"call the {idle}'s step() (and zero_grad()) in the loop, beside the other "
            "optimiser's",
            where=names[0],
            evidence={"parameters": list(names[:20]), "values": values, "idle_optimiser": idle},
        )
    if outside:
        return Finding(
            "not-in-optimiser",
            "warning",
            f"{len(names)} nn.Parameter tensors ({values} values) that the loss reaches get "
            f"gradients at every step but no optimiser that steps holds them, and they have "
            f"not changed over the steps read (a copy loaded now and then, a target network, "
            f"changes only then): {', '.join(names[:5])}",
            fix="give them to the optimiser with the model's parameters (e.g. "
            "AdamW([*model.parameters(), logit_scale])), or make them attributes of the model; "
            "if they are meant to stay as they are (a target network, a frozen model), compute "
            "through them under torch.no_grad() or set requires_grad_(False), so that backward "
            "skips them",
            evidence={"parameters": list(names[:20]), "values": values, "outside": True},
        )
    return Finding(
        "not-in-optimiser",
        "warning",
        f"{len(names)} parameter tensors ({values} values) of the trained model get gradients "
        f"but no optimiser that steps holds them, so they never change: {', '.join(names[:5])} "
        "(left out when the optimiser was built, or a layer added after it?)",
        where=names[0],
        evidence={"parameters": list(names[:20]), "values": values},
    )


def frozen_weights_decayed(
    names: Sequence[str], values: int, weight_decay: float, optimizer: str
) -> Finding:
    """Frozen parameters (``requires_grad=False``) that the optimiser still steps, with weight
    decay, because their gradients were zeroed in place instead of cleared."""
    return Finding(
        "frozen-weights-decayed",
        "warning",
        f"{len(names)} frozen parameter tensors ({values} values, requires_grad=False) still "
        f"have a gradient (zeroed in place, zero_grad(set_to_none=False), rather than set to "
        f"None?), so {optimizer} steps them with weight_decay={weight_decay:g}: the weights "
        f"meant to stay fixed shrink on every step (and move with any momentum left): "
        f"{', '.join(names[:5])}",
        where=names[0],
        evidence={"parameters": list(names[:20]), "values": values, "weight_decay": weight_decay},
    )


def train_in_eval_mode(
    train_steps: int,
    eval_steps: int,
    since: int,
    modules: Sequence[str],
    streak: int = 20,
    evaluated_first: bool = False,
    undone: bool = False,
) -> Finding | None:
    """A model that trained in train mode went on training in eval mode (``model.eval()`` for
    a validation, no ``model.train()`` after it) for ``eval_steps`` steps in a row since step
    ``since``. ``modules``: its layers that behave differently in eval mode (dropout,
    batch norm); without them the mode changes nothing. A model in eval mode from its first
    step (fine-tuning with dropout off on purpose) has no ``train_steps`` and is not judged,
    unless ``evaluated_first``: it was evaluated before its first step (a baseline score
    taken with ``model.eval()``, and no ``model.train()`` after it), or ``undone``: the
    script called ``model.train()`` and an ``eval()`` after it put the model back before its
    training forwards (an adversarial attack's helper that evaluates the model)."""
    if not (train_steps or evaluated_first or undone) or eval_steps < streak or not modules:
        return None
    after = (
        f"after {train_steps} steps in train mode"
        if train_steps and not undone
        else "though model.train() is called: an eval() after it puts the model back in eval "
        "mode before its training forwards"
        if undone
        else "after an evaluation before its first step, with no model.train() after it"
    )
    return Finding(
        "train-in-eval-mode",
        "warning",
        f"the model trains in eval mode since step {since} ({eval_steps} steps), {after}: "
        f"{', '.join(modules[:3])} run as in evaluation (dropout off, batch norm frozen at its "
        "running statistics)",
        evidence={
            "evaluated_before_training": evaluated_first,
            "train_undone": undone,
            "train_mode_steps": train_steps,
            "eval_mode_steps": eval_steps,
            "since_step": since,
            "mode_dependent": list(modules[:10]),
        },
    )


def evaluation_with_gradients(forwards: int, modules: Sequence[str] | None = None) -> Finding:
    """A model the optimiser trains ran ``forwards`` forwards in a row in eval mode with
    gradients on and no backward: an evaluation outside ``torch.no_grad()``. ``modules``: given
    where they ran in train mode and no backward used their graphs (an evaluation with neither
    ``model.eval()`` nor ``no_grad``, or actions chosen with gradients on): its layers that
    compute differently in eval mode."""
    if modules is None:
        return Finding(
            "evaluation-with-gradients",
            "warning",
            f"the model being trained ran {forwards} forwards in a row in eval mode with "
            "gradients on and no backward, an evaluation outside torch.no_grad(): autograd "
            "records every evaluation forward and keeps its activations while the outputs "
            "live, for nothing",
            evidence={"forwards_in_a_row": forwards},
        )
    effects = _train_mode_effects(
        modules, "dropout on", "batch norm taking the evaluation's batches into its statistics"
    )
    return Finding(
        "evaluation-with-gradients",
        "warning",
        f"the model being trained ran {forwards} forwards in a row in train mode with gradients "
        "on whose graphs no backward used: an evaluation (or actions chosen) outside "
        "torch.no_grad(), autograd recording every forward for nothing"
        + (
            f", and without model.eval(): {', '.join(modules[:3])} run as in training "
            f"({', '.join(effects)})"
            if modules
            else ""
        ),
        evidence={
            "forwards_in_a_row": forwards,
            "train_mode": True,
            "mode_dependent": list(modules[:10]),
        },
        fix="wrap the evaluation in with torch.no_grad(): (or torch.inference_mode()), after "
        "model.eval(), and call model.train() before training again",
    )


def frozen_in_train_mode(model: str, steps: int, modules: Sequence[str]) -> Finding | None:
    """A model nothing trains (its weights fixed, no stepping optimiser holding them) ran
    without gradients in train mode on ``steps`` sampled steps in a row: a frozen teacher left
    in train mode. ``modules``: its layers in train mode that compute differently in eval mode;
    without them the mode changes nothing."""
    if not modules:
        return None
    effects = _train_mode_effects(
        modules,
        "dropout drops units from the outputs it gives",
        "batch norm normalises with each batch's statistics and moves its running ones",
    )
    return Finding(
        "frozen-in-train-mode",
        "warning",
        f"a {model} that nothing trains (its weights never change) ran without gradients in "
        f"train mode on {steps} sampled steps in a row, as a frozen teacher, reference model or "
        f"feature extractor left as built or loaded does: {', '.join(modules[:3])} run as in "
        f"training ({'; '.join(effects)})",
        evidence={"model": model, "sampled_steps": steps, "mode_dependent": list(modules[:10])},
    )


def frozen_norm_in_train_mode(modules: Sequence[str]) -> Finding:
    """Batch norms whose weights are frozen ran in train mode inside a model being trained,
    moving their running statistics on every sampled step: a frozen backbone that
    ``model.train()`` put back in train mode."""
    return Finding(
        "frozen-in-train-mode",
        "warning",
        f"{len(modules)} batch norm layers whose weights are frozen (requires_grad=False) ran in "
        f"train mode inside the model being trained, each batch moving the running statistics "
        f"the frozen weights were trained with: {', '.join(modules[:3])} (model.train(), as "
        "Lightning's fit and each epoch of a loop call it, puts a frozen backbone put in eval "
        "mode back in train mode)",
        fix="put the frozen part back in eval mode after every model.train() (in Lightning, in "
        "on_train_epoch_start: self.backbone.eval()), or replace its batch norms with frozen ones "
        "(torchvision.ops.FrozenBatchNorm2d)",
        evidence={"mode_dependent": list(modules[:10]), "frozen_batch_norm": True},
    )


def _train_mode_effects(modules: Sequence[str], dropout: str, norm: str) -> list[str]:
    """What train mode changes in ``modules`` (``_mode_dependent``'s names), said so."""
    return [dropout] * any("ropout" in m for m in modules) + [norm] * any(
        "Norm" in m for m in modules
    )


def eval_in_train_mode(forwards: int, modules: Sequence[str]) -> Finding | None:
    """A model the optimiser trains ran ``forwards`` forwards in a row without gradients in
    train mode: an evaluation without ``model.eval()``. ``modules``: its layers in train mode
    that compute differently in eval mode; without them the mode changes nothing."""
    if not modules:
        return None
    effects = _train_mode_effects(
        modules,
        "dropout on",
        "batch norm normalising with each batch's statistics and updating its running ones "
        "from the evaluation data",
    )
    return Finding(
        "eval-in-train-mode",
        "warning",
        f"the model being trained ran {forwards} forwards in a row without gradients in train "
        f"mode, an evaluation without model.eval(): {', '.join(modules[:3])} run as in "
        f"training ({', '.join(effects) or 'not as in evaluation'})",
        evidence={"forwards_in_a_row": forwards, "mode_dependent": list(modules[:10])},
    )


def clip_before_backward(steps: int, streak: int = 20) -> Finding | None:
    """``steps`` optimiser steps in a row clipped the gradients of the parameters being
    trained only while no backward had run since the last step (before the backward, or
    after the step) and never between backward and step: each clip met the previous step's
    gradients (or none, after zero_grad), and the step applied unclipped ones."""
    if steps < streak:
        return None
    return Finding(
        "clip-before-backward",
        "warning",
        f"on {steps} optimiser steps in a row the gradients were clipped (or their norm for "
        "clip_grads_with_norm_ taken) only while no backward() had run since the last step "
        "(before backward(), or after step()), never "
        "between backward() and step(): each clip acts on the last step's gradients (or "
        "none), and the optimiser steps with unclipped ones",
        evidence={"steps_in_a_row": steps},
    )


def clip_before_unscale(scale: float) -> Finding:
    """Gradients clipped while a loss scaler had scaled them: the limit applied to gradients
    times ``scale``, so each step is cut to about limit / (scale x norm) of its size."""
    return Finding(
        "clip-before-unscale",
        "warning",
        f"the gradients were clipped (or their norm for clip_grads_with_norm_ taken) before "
        "scaler.unscale_(optimizer): the limit applied to "
        f"the gradients times the loss scale ({scale:g}), so the steps are cut far below it",
        evidence={"loss_scale": scale},
    )


def clip_no_parameters(function: str, generator: bool) -> Finding:
    """A clip given no parameters: nothing is clipped, and it returns a total norm of 0."""
    cause = (
        "an empty generator (model.parameters() already used up, e.g. given to the optimiser first)"
        if generator
        else "an empty iterable"
    )
    return Finding(
        "clip-no-parameters",
        "warning",
        f"{function} was given {cause}: no gradient is clipped",
        evidence={"function": function, "generator": generator},
    )


def clip_by_weight_norm() -> Finding:
    """``clip_grads_with_norm_`` given a norm ``get_total_norm`` took of the parameters: the
    weights' norm, not the gradients'."""
    return Finding(
        "clip-by-weight-norm",
        "warning",
        "clip_grads_with_norm_ was given the norm get_total_norm took of the parameters, not of "
        "their gradients: whenever the weights' norm is above max_norm, each step's gradients "
        "are scaled by max_norm / (the weights' norm), whatever their own norm",
        evidence={"function": "get_total_norm", "given": "parameters"},
    )


LR_FLOOR = 1e-4
"""The learning rate counts as collapsed below this share of its peak so far: a cosine or
linear schedule to zero gets there only in the last ~0.6% of its steps; StepLR(step_size=30,
gamma=0.1) stepped every batch after 120 batches."""
LOW_SHARE = 4
"""``lr-collapsed`` needs at least 1 / LOW_SHARE as many steps below the floor as above it."""


def fp16_without_loss_scaling(steps: int) -> Finding:
    """Float16 autocast on ``steps`` sampled steps with no enabled GradScaler scaling a loss."""
    return Finding(
        "fp16-without-loss-scaling",
        "warning",
        f"the model trains under float16 autocast ({steps} sampled steps) and no GradScaler "
        "scales its loss: gradients smaller than float16's smallest step (6e-8) flush to zero "
        "in the backward, so small gradients are lost",
        evidence={"sampled_steps": steps},
    )


def loader_restarted_every_step(
    loader: str, steps: int, batches: int, sequential: bool, workers: int, persistent: bool = False
) -> Finding:
    """``steps`` steps in a row each made a new iterator of ``loader`` (``batches`` long) and
    left it before its end: ``next(iter(loader))`` inside the loop. ``sequential``: its
    sampler does not shuffle, so every step gets its first batch; ``workers``: processes
    started anew with each iterator, or, ``persistent`` (``persistent_workers=True``), kept
    and reset: the batches they had loaded ahead are thrown away and loaded again."""
    costs = []
    if sequential:
        costs.append("it does not shuffle, so every step gets the same first batch")
    if workers and persistent:
        costs.append(
            f"its {workers} persistent worker processes are reset every step, the batches "
            "they had loaded ahead thrown away"
        )
    elif workers:
        costs.append(f"its {workers} worker processes start anew every step")
    return Finding(
        "loader-restarted-every-step",
        "warning",
        f"{loader} ({batches} batches) got a new iterator on each of the last {steps} steps, "
        f"each left after its first batches (next(iter(loader)) inside the loop): "
        + "; ".join(costs),
        evidence={
            "steps": steps,
            "batches": batches,
            "sequential": sequential,
            "workers": workers,
            "persistent_workers": persistent,
        },
    )


def optimiser_made_every_step(name: str, steps: int) -> Finding:
    """A new ``name`` optimiser over the same parameters made for each of the last ``steps``
    steps: the state it keeps from step to step is thrown away every time."""
    return Finding(
        "optimiser-made-every-step",
        "warning",
        f"a new {name} over the same parameters made for each of the last {steps} steps: the "
        "state it keeps across steps (Adam's moment estimates, a momentum buffer) starts from "
        "zero every step, so every step is its first (for Adam about lr x sign(gradient))",
        evidence={"optimizer": name, "steps": steps},
    )


def loader_not_shuffled(loader: str, single: int, steps: int, classes: list[int]) -> Finding:
    """``single`` of the first ``steps`` training batches of ``loader``, which does not
    shuffle ("": batches the script slices itself, in order), held one class each, and at
    least two ``classes`` came that way: the data is sorted by label (an ``ImageFolder``, a
    file written class by class)."""
    shown = ", ".join(str(c) for c in classes[:5]) + (", ..." if len(classes) > 5 else "")
    batches = (
        f"{loader} does not shuffle, and {single} of its first {steps} training batches each"
        if loader
        else f"the batches are made without a DataLoader, in order, and {single} of the "
        f"first {steps} each"
    )
    return Finding(
        "loader-not-shuffled",
        "warning",
        f"{batches} held a single class (classes {shown} in turn): the data is sorted by "
        "label, so each run of steps pulls the model toward one class and it forgets the others",
        evidence={"single_class_batches": single, "steps": steps, "classes": classes[:20]},
    )


def sampler_epoch_not_set(epoch: int, passes: int) -> Finding:
    """A shuffling DistributedSampler's loader went over its data ``passes`` times in a row at
    one ``epoch``: ``set_epoch`` is never called, so every epoch has the same order."""
    return Finding(
        "sampler-epoch-not-set",
        "warning",
        f"a DataLoader's DistributedSampler (shuffle=True) stayed at epoch {epoch} over {passes} "
        "passes: its shuffle is seeded by the epoch, so without set_epoch() every epoch visits "
        "the data in the same order",
        evidence={"epoch": epoch, "passes": passes},
    )


def sampler_weights_short(weights: int, examples: int) -> Finding:
    """A WeightedRandomSampler with ``weights`` weights over a dataset of ``examples``: it
    draws indices below ``weights`` only."""
    return Finding(
        "sampler-weights-short",
        "error",
        f"a DataLoader's WeightedRandomSampler has {weights} weights for a dataset of "
        f"{examples} examples: it draws indices 0-{weights - 1} only, so the rest of the data "
        "is never seen (weights given per class, where one per example belongs?)",
        evidence={"weights": weights, "examples": examples},
    )


def seed_reset_every_step(function: str, seed: object, steps: int) -> Finding:
    """``function(seed)`` (``torch.manual_seed``, ``random.seed``...) on each of the last
    ``steps`` steps."""
    return Finding(
        "seed-reset-every-step",
        "warning",
        f"{function}({seed!r}) runs on every step ({steps} steps in a row): each step "
        "draws the same random numbers, so dropout masks, noise, random augmentations and "
        "sampled batches repeat step after step",
        evidence={"function": function, "seed": str(seed), "steps": steps},
    )


HAND_ASCENT_FIX = (
    "subtract the gradient in an update by hand: p -= lr * p.grad, or "
    "p.data.add_(p.grad, alpha=-lr)"
)
"""``lr-negative``'s fix where the weights are updated by hand."""
HAND_DECAY_FIX = (
    "decay a learning rate kept by hand where it is meant to (once an epoch: outside the batch "
    "loop), or by a factor sized for the number of batches"
)
"""``lr-collapsed``'s fix where the weights are updated by hand."""


def lr_negative(lr: float, step: int, by_hand: bool = False) -> Finding:
    """A learning rate below zero: each step moves up the gradient, raising the loss.
    ``by_hand``: the weights are updated by the script (``lr`` is the step size estimated
    from how they moved), adding their gradient where it should be subtracted."""
    if by_hand:
        message = (
            f"the weights updated by hand move along their gradients (step {lr:.3g} x the "
            f"gradient) at step {step}: each update climbs the loss"
        )
    else:
        message = (
            f"the learning rate is negative ({lr:.3g}) at step {step}: the optimiser climbs the "
            "loss (a linear decay such as LambdaLR(lambda e: 1 - e / epochs) stepped past its "
            "end, e.g. every batch)"
        )
    evidence: dict[str, object] = {"lr": lr, "by_hand": True} if by_hand else {"lr": lr}
    return Finding(
        "lr-negative", "error", message, evidence=evidence, fix=HAND_ASCENT_FIX if by_hand else ""
    )


def lr_schedule_past_end(name: str, t_max: int, steps: int) -> Finding | None:
    """A cosine schedule stepped ``steps`` times, past its ``T_max`` by more than a tenth of it
    (one extra epoch at the end is harmless): from T_max on, its learning rate climbs back to
    the peak (at 2 x T_max) and cycles. ``T_max`` counts ``scheduler.step()`` calls, so one
    meant per epoch and stepped every batch ends after T_max batches."""
    if t_max <= 0 or steps <= t_max + max(1, t_max // 10):
        return None
    return Finding(
        "lr-schedule-past-end",
        "warning",
        f"{name}(T_max={t_max}) has been stepped {steps} times: past T_max its learning rate "
        f"climbs back to its peak (after {2 * t_max} steps) and cycles every "
        f"{2 * t_max} steps; T_max counts scheduler.step() calls",
        evidence={"scheduler": name, "T_max": t_max, "scheduler_steps": steps},
    )


def lr_schedule_stalled(
    name: str, total: int, steps: int, optimizer_steps: int, lr: float, peak: float
) -> Finding | None:
    """A schedule sized in optimiser steps (``OneCycleLR(total_steps=total)``) stepped only
    ``steps`` times in the run's ``optimizer_steps`` (once an epoch, say: Lightning steps a
    scheduler once an epoch unless told ``interval="step"``): it never left its warm-up, and
    the run trained at its starting rate. Judged at the run's end, where the run took about
    the steps the schedule was sized for (half to twice ``total``), at least 50, while the
    schedule went through under a quarter of them, at most one in 8 optimiser steps; a
    schedule sized in epochs and stepped once an epoch (``total`` = epochs, each of many
    optimiser steps) runs far past twice its ``total`` in optimiser steps."""
    if optimizer_steps < max(50, total / 2) or optimizer_steps > 2 * total:
        return None
    if steps > total / 4 or 8 * steps > optimizer_steps:
        return None
    how = (
        "built and never stepped (scheduler.step() missing from the loop?)"
        if steps == 0
        else f"sized in optimiser steps but stepped about once every {optimizer_steps // steps}"
    )
    return Finding(
        "lr-schedule-stalled",
        "warning",
        f"{name}(total_steps={total}) was stepped {steps} times in the run's {optimizer_steps} "
        f"optimiser steps: {how}, it never left its warm-up, so the run trained at "
        f"lr {lr:.3g} where the schedule peaks at {peak:.3g}",
        evidence={
            "scheduler": name,
            "total_steps": total,
            "scheduler_steps": steps,
            "optimizer_steps": optimizer_steps,
            "lr": lr,
            "peak_lr": peak,
        },
    )


PLATEAU_MARGIN = 0.05
"""How far (a share of the first value) a ReduceLROnPlateau's metric must have moved the other
way from its first value by its first cut, for ``plateau-mode-reversed``."""


def plateau_mode_reversed(
    mode: str, values: Sequence[float], losses: Sequence[float], kind: str = ""
) -> Finding | None:
    """A ``ReduceLROnPlateau`` has just cut the learning rate for the first time, given
    ``values`` so far (the metric), which by its ``mode`` never improved on the first and went
    the other way, while the training losses of the run so far (``losses``) fell. ``kind``:
    what the script's words say the metric is ("lower" is better: a loss; "higher": an
    accuracy; "": unsaid). A metric of the mode's own kind that went the other way is the
    model getting worse from the first evaluation (overfitting: the cut is meant), and not
    judged. Otherwise, a warning where the kind says the mode is wrong, or where it is unsaid
    and the mode is "max" (a value that falls as the training loss falls is a loss); with
    "min" and nothing said, information: an accuracy given to it rises, and so does a
    validation loss of a model that overfits from the first evaluation."""
    if kind == ("higher" if mode == "max" else "lower"):
        return None
    if len(values) < 3 or not _fell(losses):
        return None
    first, last = values[0], values[-1]
    moved = (first - last) if mode == "max" else (last - first)
    rising = sum(b > a for a, b in zip(values, values[1:], strict=False))
    went = rising if mode == "min" else len(values) - 1 - rising
    if moved <= PLATEAU_MARGIN * abs(first) or 3 * went < 2 * (len(values) - 1):
        return None
    trail = ", ".join(f"{v:.4g}" for v in values[:6]) + (", ..." if len(values) > 6 else "")
    said = (
        f"ReduceLROnPlateau(mode={mode!r}) cut the learning rate after {len(values)} steps "
        f"whose values ({trail}) {'fell' if mode == 'max' else 'rose'} from the first while the "
        "training loss fell: by its mode none was an improvement"
    )
    evidence = {"mode": mode, "values": list(values[:20]), "scheduler_steps": len(values)}
    named = {"lower": "a loss", "higher": "an accuracy or score"}.get(kind, "")
    if named or mode == "max":
        given = named or "a loss"
        return Finding(
            "plateau-mode-reversed",
            "warning",
            f"{said}, so it cuts the rate while the model gets better ({given} given to "
            f"mode={mode!r}{'' if named else '?'})",
            evidence={**evidence, "metric": kind},
        )
    return Finding(
        "plateau-mode-reversed",
        "info",
        said + ": an accuracy or score given to mode='min' cuts the rate while the model gets "
        "better; a validation loss rising from its first value is overfitting, and the cut "
        "is meant",
        evidence=evidence,
        fix="give ReduceLROnPlateau mode='max' for a metric that rises as the model improves "
        "(accuracy, F1, reward); if it is a validation loss, it has risen since the first "
        "evaluation",
    )


def _fell(losses: Sequence[float]) -> bool:
    """The median of the last quarter of ``losses`` (NaN left out) is below 0.9 x the
    first quarter's."""
    values = [v for v in losses if v == v]
    if len(values) < 8:
        return False
    quarter = len(values) // 4
    head, tail = sorted(values[:quarter]), sorted(values[-quarter:])
    return tail[quarter // 2] < 0.9 * head[quarter // 2]


def lr_zero(steps: int) -> Finding:
    """Every parameter group's learning rate was 0 on each of the first ``steps`` steps."""
    return Finding(
        "lr-zero",
        "error",
        f"the learning rate has been 0 in every parameter group since the first step ({steps} "
        "steps): the optimiser changes nothing (lr=0 given, or a warm-up that starts at 0 "
        "whose scheduler.step() is never called)",
        evidence={"steps": steps},
    )


def lr_collapsed(
    peak: float,
    low_since: int | None,
    step: int,
    first: int = 1,
    plateau_steps: int = 0,
    by_hand: bool = False,
) -> Finding | None:
    """The learning rate stayed below ``LR_FLOOR`` x its peak from step ``low_since`` on, for at
    least a quarter as many steps as it was above (a fifth of the run so far, and >= 50): a
    per-epoch scheduler stepped every batch. A polynomial decay to zero of power 4 spends its
    last tenth that low, a cosine its last 0.6%.
    ``first``: the first step counted (a later run in one script starts later);
    ``plateau_steps``: calls of a ReduceLROnPlateau on this optimiser (stepped every batch,
    its patience counts batches); ``by_hand``: the rate is the step size of weights updated
    by hand, estimated from how they moved (a decay written in the loop)."""
    if low_since is None or peak <= 0:
        return None
    low, before = step - low_since + 1, low_since - first
    if low < max(50, before / LOW_SHARE):
        return None
    plateau = (
        f"; a ReduceLROnPlateau was stepped {plateau_steps} times in {step - first + 1} "
        "optimiser steps, so its patience counts batches, not epochs"
        if plateau_steps
        else ""
    )
    return Finding(
        "lr-collapsed",
        "warning",
        f"the learning rate has been below {LR_FLOOR:g} x its peak ({peak:.3g}) since step "
        f"{low_since}: {low} of {step - first + 1} steps train with almost no step size" + plateau,
        evidence={
            "peak_lr": peak,
            "low_since_step": low_since,
            "low_steps": low,
            "plateau_steps": plateau_steps,
        },
        fix=HAND_DECAY_FIX if by_hand else "",
    )


def evaluation_drops_examples(dropped: int, examples: int, size: int, shuffled: bool) -> Finding:
    """An evaluation drew its batches from a loader that drops its last batch: ``dropped`` of
    its ``examples`` are never scored, in batches of ``size``."""
    which = (
        "a different subset each evaluation, since it shuffles"
        if shuffled
        else "the same ones each time, the set's last"
    )
    return Finding(
        "evaluation-drops-examples",
        "warning",
        f"an evaluation drew its batches from a DataLoader with drop_last=True: {dropped} of "
        f"its {examples} examples ({dropped / examples:.0%}) do not fill a last batch of "
        f"{size} and are never scored ({which}), so the score is over part of the set",
        evidence={"dropped": dropped, "examples": examples, "batch_size": size},
    )
