"""The seeded-bug corpus: every finding code is caught in a small plain-PyTorch script that has
the bug (or, for the codes that explain, the behaviour), and clean scripts produce no warning-
or error-level findings.

Scripts run in this process through ``run_doctor`` (runpy), as ``treeqa doctor`` runs them;
``test_monitor.py`` runs the CLI itself in a subprocess once.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from treeqa.health import CODES, forks
from treeqa.health.heap import heap_mb

SCRIPTS = Path(__file__).parent / "scripts"

EXPECTED = {
    "bug_graph_retained.py": "graph-retained",
    "bug_ema_with_graph.py": "graph-retained",  # held by a dict entry
    "bug_loss_accumulated.py": "loss-accumulated-with-graph",
    "bug_val_losses_with_graphs.py": "loss-accumulated-with-graph",  # evaluation losses
    "bug_hand_updates_loss_accumulated.py": "loss-accumulated-with-graph",  # no optimiser
    "bug_retain_graph.py": "retain-graph-every-step",
    "bug_parameter_alias.py": "parameter-alias",
    "bug_tie_by_data.py": "parameter-alias",  # two parameters over one table
    "bug_best_weights_by_reference.py": "state-dict-not-copied",  # best = model.state_dict()
    "bug_sampler_class_weights.py": "sampler-weights-short",
    "bug_packed_lengths_sorted_apart.py": "packed-lengths-mismatch",
    "bug_rnn_state_after_padding.py": "rnn-state-after-padding",
    "bug_position_signal_by_batch.py": "position-signal-by-batch",
    "bug_batch_norm_momentum_inverted.py": "batch-norm-momentum-inverted",
    "bug_rnn_unpacked_output_last.py": "rnn-state-after-padding",
    "bug_multi_hot_into_cross_entropy.py": "multi-hot-into-cross-entropy",
    "bug_dropout_as_keep_probability.py": "dropout-as-keep-probability",
    "bug_outputs_constant.py": "outputs-constant",
    "bug_batch_norm_batch_of_one.py": "batch-norm-batch-of-one",
    "bug_same_batch_every_step.py": "same-batch-every-step",
    "bug_targets_shuffled_apart.py": "targets-shuffled-apart",
    "bug_kfold_model_reused.py": "evaluation-data-trained-on",
    "bug_dice_on_logits.py": "dice-on-logits",
    "bug_attention_mask_inverted.py": "attention-mask-inverted",
    "bug_attention_scores_filled_inverted.py": "attention-mask-inverted",  # masked_fill by hand
    "bug_causal_mask_missing.py": "causal-mask-missing",
    "bug_causal_convolution_padded.py": "causal-mask-missing",
    "bug_end_token_masked.py": "end-token-masked",
    "bug_end_token_missing.py": "end-token-missing",
    "bug_targets_not_shifted.py": "targets-not-shifted",
    "bug_targets_shifted_twice.py": "targets-shifted-twice",
    "bug_target_in_features.py": "target-in-features",
    "bug_units_identical.py": "units-identical",
    "bug_units_identical_functional.py": "units-identical",  # no module begins its steps
    "bug_eval_inputs_off_scale.py": "eval-inputs-off-scale",
    "bug_targets_outside_output_range.py": "targets-outside-output-range",
    "bug_unused_parameter.py": "unused-parameter",
    "bug_router_under_no_grad.py": "unused-parameter",  # its layer runs, under no_grad
    "bug_round_without_straight_through.py": "zero-derivative-op",  # QAT: weights never train
    "bug_probs_into_ce.py": "probabilities-into-cross-entropy",
    "bug_probs_into_ce_bf16.py": "probabilities-into-cross-entropy",  # a bfloat16 model
    "bug_probs_into_ce_raw_tensors.py": "probabilities-into-cross-entropy",  # no nn.Module
    "bug_sigmoid_into_bce_masked.py": "probabilities-into-cross-entropy",  # scores[valid]
    "bug_activation_growth.py": "activation-growth",
    "bug_loss_at_init.py": "loss-at-init",
    "bug_loss_at_chance.py": "loss-at-chance",
    "bug_loss_at_chance_nll.py": "loss-at-chance",  # nll_loss over a LogSoftmax
    "bug_loss_at_chance_scaled.py": "loss-at-chance",  # times 1, then divided by 1
    "bug_loss_at_chance_accumulated.py": "loss-at-chance",  # each loss divided by 4
    "bug_loss_at_chance_token_sum.py": "loss-at-chance",  # a sum over tokens / their count
    "bug_loss_diverged.py": "loss-diverged",  # Adam at lr=1.0: finite, far above log(C)
    "bug_loss_diverged_maximize.py": "loss-diverged",  # Adam(maximize=True) on a loss
    "bug_loss_diverged_maximize_mse.py": "loss-diverged",  # on a mean squared error
    "bug_loss_diverged_divided.py": "loss-diverged",  # divided by 1, as accelerate does
    "bug_loss_diverged_accumulated.py": "loss-diverged",  # each loss times 1/4
    "bug_non_finite.py": "non-finite",
    "bug_non_finite_fp16.py": "non-finite",  # NaN gradients the loss scaler takes for overflows
    "bug_step_time_regression.py": "step-time-regression",
    "bug_step_time_subnormal_weights.py": "step-time-regression",  # the cause named
    "bug_memory_growth.py": "memory-growth",
    "bug_input_bound.py": "input-bound",
    "bug_hand_updates_input_bound.py": "input-bound",  # the step ends as the next batch is drawn
    "bug_hot_op.py": "hot-op",
    "bug_hot_op_index_gather.py": "hot-op",  # h[src]: an accumulating index_put_ backward
    "bug_one_cycle_stepped_per_epoch.py": "lr-schedule-stalled",  # sized in steps
    "bug_one_cycle_never_stepped.py": "lr-schedule-stalled",  # built, never stepped
    "bug_pixels_not_scaled.py": "pixels-not-scaled",
    "bug_rnn_batch_first.py": "rnn-batch-first-mismatch",
    "bug_view_as_transpose.py": "view-as-transpose",  # h.view(B, E, T) of [B, T, E]
    "heap_sorted_lengths.py": "heap-retention",
    "bug_loader_restarted.py": "loader-restarted-every-step",
    "bug_loader_not_shuffled.py": "loader-not-shuffled",
    "bug_sorted_batches_by_hand.py": "loader-not-shuffled",  # sliced in order, no DataLoader
    "bug_sampler_epoch_not_set.py": "sampler-epoch-not-set",
    "bug_seed_every_step.py": "seed-reset-every-step",
    "bug_numpy_seed_every_step.py": "seed-reset-every-step",  # numpy.random.seed
    "bug_optimiser_made_every_step.py": "optimiser-made-every-step",
    "bug_gradients_not_zeroed.py": "gradients-not-zeroed",
    "bug_temperature_not_zeroed.py": "gradients-not-zeroed",  # outside the model
    "bug_gan_generator_not_zeroed.py": "gradients-not-zeroed",  # the second optimiser's
    "bug_zero_grad_head_only.py": "gradients-not-zeroed",  # the head's alone
    "bug_hand_updates_not_zeroed.py": "gradients-not-zeroed",  # updated by hand, no optimiser
    "bug_hand_grad_not_zeroed.py": "gradients-not-zeroed",  # autograd.grad added by hand
    "bug_func_ensemble_not_zeroed.py": "gradients-not-zeroed",  # vmap over functional_call
    "bug_second_run_not_zeroed.py": "gradients-not-zeroed",  # a second model, the first alive
    "bug_teacher_gradients_left.py": "gradients-not-zeroed",  # stepped again, no backward
    "bug_zero_grad_per_micro_batch.py": "zero-grad-per-micro-batch",
    "bug_step_without_gradients.py": "step-without-gradients",
    "bug_not_in_optimiser.py": "not-in-optimiser",
    "bug_frozen_in_train_mode.py": "frozen-in-train-mode",  # a teacher's dropout on
    "bug_frozen_norm_in_train_mode.py": "frozen-in-train-mode",  # model.train() undid eval()
    "bug_resumed_with_old_optimiser.py": "step-without-gradients",  # over the old model
    "bug_loose_parameter_not_in_optimiser.py": "not-in-optimiser",  # a temperature beside it
    "bug_second_model_not_in_optimiser.py": "not-in-optimiser",  # a domain classifier
    "bug_unfrozen_not_in_optimiser.py": "not-in-optimiser",  # unfrozen after the first steps
    "bug_prompt_not_in_optimiser.py": "step-without-gradients",  # all frozen, a prompt trains
    "bug_optimiser_over_teacher.py": "step-without-gradients",  # the student trains
    "bug_module_not_registered.py": "module-not-registered",
    "bug_token_as_plain_tensor.py": "module-not-registered",  # requires_grad=True, no Parameter
    "bug_second_optimiser_never_stepped.py": "not-in-optimiser",  # named: Adam never stepped
    "bug_swa_without_update_bn.py": "averaged-norm-not-updated",
    "bug_swa_evaluated_through_module.py": "averaged-norm-not-updated",
    "bug_ema_decay_too_slow.py": "evaluated-copy-at-init",  # decay 0.9999 over 470 steps
    "bug_best_copy_never_taken.py": "evaluated-copy-at-init",  # `val_loss > best_loss` from inf
    "bug_iterable_dataset_in_every_worker.py": "same-data-in-every-worker",  # no worker split
    "bug_plateau_mode_max_on_loss.py": "plateau-mode-reversed",
    "bug_moe_aux_loss_left_out.py": "returned-loss-unused",
    "bug_in_batch_targets_zero.py": "in-batch-targets-constant",
    "bug_kl_weight_integer_division.py": "loss-term-zeroed",
    "bug_bpr_sign_dropped.py": "log-likelihood-minimised",  # logsigmoid with no minus
    "bug_backbone_unfrozen_not_in_optimiser.py": "not-in-optimiser",  # a model beside the head
    "bug_gradient_penalty_without_graph.py": "penalty-without-graph",  # WGAN-GP, no create_graph
    "bug_loss_zero_anchor_as_positive.py": "loss-zero",  # a triplet's margin met from step 1
    "bug_frozen_weights_decayed.py": "frozen-weights-decayed",  # zeroed in place, AdamW
    "bug_train_in_eval_mode.py": "train-in-eval-mode",
    "bug_train_in_eval_new_optimiser.py": "train-in-eval-mode",  # a new optimiser each epoch
    "bug_train_after_baseline_eval.py": "train-in-eval-mode",  # eval mode from a baseline score
    "bug_train_in_eval_second_path.py": "train-in-eval-mode",  # a second eval path, no train()
    "bug_eval_in_train_mode.py": "eval-in-train-mode",
    "bug_mc_dropout_with_batch_norm.py": "eval-in-train-mode",  # its statistics moved by tests
    "bug_evaluation_with_gradients.py": "evaluation-with-gradients",
    "bug_fp16_without_scaler.py": "fp16-without-loss-scaling",
    "bug_fp16_autocast_in_forward.py": "fp16-without-loss-scaling",  # @autocast on forward
    "bug_updates_rounded_away.py": "updates-rounded-away",
    "bug_device_idle.py": "device-idle",  # a GPU script: runs with -m gpu on a CUDA device
    "bug_anomaly_detection_on.py": "anomaly-detection-on",
    "bug_lr_zero.py": "lr-zero",
    "bug_lr_collapsed.py": "lr-collapsed",
    "bug_lr_collapsed_late.py": "lr-collapsed",  # in the last quarter of the run
    "bug_cosine_past_end.py": "lr-schedule-past-end",
    "bug_lr_negative.py": "lr-negative",
    "bug_hand_updates_ascent.py": "lr-negative",  # p.data.add_(p.grad, alpha=lr), no optimiser
    "bug_hand_updates_lr_collapsed.py": "lr-collapsed",  # lr *= 0.97 every batch, by hand
    "bug_loss_broadcast.py": "loss-broadcast",
    "bug_loss_broadcast_by_hand.py": "loss-broadcast",  # ((pred - y) ** 2).mean()
    "bug_sigmoid_into_ce.py": "probabilities-into-cross-entropy",  # a sigmoid, rows not summing to 1
    "bug_relu_into_ce.py": "relu-into-cross-entropy",
    "bug_padding_in_loss.py": "padding-in-loss",
    "bug_padding_in_shifted_labels.py": "padding-in-loss",  # one -100 a row, pads left
    "bug_logits_into_nll.py": "logits-into-nll-loss",
    "bug_kl_div_logits.py": "logits-into-nll-loss",  # a distillation's kl_div over logits / T
    "bug_sigmoid_into_bce_with_logits.py": "probabilities-into-cross-entropy",
    "bug_kl_div_probabilities.py": "probabilities-into-cross-entropy",
    "bug_ctc_softmax.py": "probabilities-into-cross-entropy",  # classes last: [T, N, C]
    "bug_ctc_logits.py": "logits-into-nll-loss",  # ctc_loss without log_softmax
    "bug_ctc_blank_in_targets.py": "ctc-targets-invalid",  # padding counted as labels
    "bug_ctc_targets_too_long.py": "ctc-targets-invalid",  # most zeroed by zero_infinity
    "bug_dropout_in_eval.py": "dropout-in-eval",
    "bug_dropout_imported_by_name.py": "dropout-in-eval",  # from ...functional import dropout
    "bug_attention_dropout_in_eval.py": "dropout-in-eval",
    "bug_clip_before_backward.py": "clip-before-backward",
    "bug_clip_no_parameters.py": "clip-no-parameters",
    "bug_clip_before_unscale.py": "clip-before-unscale",
    "bug_clip_total_norm_before_backward.py": "clip-before-backward",  # get_total_norm + ...
    "bug_clip_total_norm_before_unscale.py": "clip-before-unscale",  # the norm taken scaled
    "bug_clip_by_weight_norm.py": "clip-by-weight-norm",  # get_total_norm(parameters)
    "bug_softmax_over_batch.py": "softmax-over-wrong-dim",
    "bug_softmax_over_batch_square.py": "softmax-over-wrong-dim",  # batch 10, 10 classes
    "bug_gcn_log_softmax_over_nodes.py": "softmax-over-wrong-dim",  # output[idx_train]
    "bug_ctc_log_softmax_over_time.py": "softmax-over-wrong-dim",  # ctc_loss, over the frames
    "bug_soft_targets_log_softmax_over_batch.py": "softmax-over-wrong-dim",  # mixup, by hand
    "bug_bce_targets_0_255.py": "targets-out-of-range",  # a mask of bytes into BCEWithLogitsLoss
    "bug_ddp_inner_module.py": "gradients-not-averaged",  # under torchrun, 2 processes
    "bug_ddp_same_data.py": "same-data-on-every-process",  # under torchrun, 2 processes
    "bug_spawn_not_wrapped.py": "gradients-not-averaged",  # torch.multiprocessing.spawn
    "bug_hogwild_probs_into_ce.py": "probabilities-into-cross-entropy",  # forked processes
    "bug_pool_probs_into_ce.py": "probabilities-into-cross-entropy",  # a Pool's, terminated
    "bug_hogwild_after_warmup.py": "probabilities-into-cross-entropy",  # the children's only
    "bug_hogwild_spawn_probs_into_ce.py": "probabilities-into-cross-entropy",  # spawned
    "bug_eval_on_one_shard.py": "evaluation-on-one-shard",  # under torchrun, 2 processes
    "bug_ddp_loss_times_processes.py": "loss-times-processes",  # under torchrun, 2 processes
    "bug_fsdp_optimiser_before_shard.py": "step-without-gradients",  # built before fully_shard
    "bug_fsdp_zero_grad_per_micro_batch.py": "zero-grad-per-micro-batch",  # fully_shard
    "bug_fsdp_gradients_not_zeroed.py": "gradients-not-zeroed",  # fully_shard
    "bug_fsdp1_gradients_not_zeroed.py": "gradients-not-zeroed",  # FullyShardedDataParallel
    "bug_loss_at_chance_checkpointed.py": "loss-at-chance",  # reentrant checkpoints' backwards
    "bug_loss_at_chance_imbalanced.py": "loss-at-chance",  # 80/15/5: at the classes' entropy
    "bug_loss_at_chance_symmetric.py": "loss-at-chance",  # CLIP's two directions, added up
    "bug_loss_at_chance_regression.py": "loss-at-chance",  # MSE at the targets' variance
    "bug_loss_at_chance_by_hand.py": "loss-at-chance",  # -log_softmax(...).gather(...).mean()
    "bug_evaluation_with_gradients_train_mode.py": "evaluation-with-gradients",  # neither
    "bug_evaluation_with_gradients_at_end.py": "evaluation-with-gradients",  # the last forwards
    "bug_train_in_eval_attack_helper.py": "train-in-eval-mode",  # train() undone before each step
    "bug_zero_grad_kept_zeros.py": "step-without-gradients",  # zeroed in place after backward
    "bug_loss_at_chance_regression_split.py": "loss-at-chance",  # same wrong pairs each epoch
    "bug_optimiser_state_not_loaded.py": "optimiser-state-not-loaded",
    "bug_weights_not_loaded.py": "weights-not-loaded",  # strict=False over module. keys
    "bug_loaded_weights_overwritten.py": "loaded-weights-not-trained",  # init after the load
    "bug_lr_lambda_returns_rate.py": "lr-lambda-returns-rate",  # lr * min(1, step / warmup)
    "bug_target_not_detached.py": "target-not-detached",  # r + gamma * V(s') with gradients
    "bug_sample_not_reparameterised.py": "sample-not-reparameterised",  # a VAE's q.sample()
    "bug_losses_not_backpropagated.py": "losses-not-backpropagated",  # backward after the loop
    "bug_splits_overlap.py": "splits-overlap",  # random_split called twice
    "bug_argmax_over_one_class.py": "argmax-over-one-class",  # one logit's argmax
    "bug_logits_rounded.py": "threshold-off-scale",  # torch.round of BCE-with-logits outputs
    "bug_logits_read_at_half.py": "threshold-off-scale",  # logits read at a probability's 0.5
    "bug_probabilities_read_at_zero.py": "threshold-off-scale",  # a sigmoid head read at 0
    "bug_accuracy_broadcast.py": "accuracy-broadcast",  # [N, 1] predictions eq [N] targets
    "bug_lr_not_applied.py": "lr-not-applied",  # a step decay written to optimizer.lr
    "bug_padding_not_masked.py": "padding-not-masked",  # an encoder without its padding mask
    "bug_loss_averaged_twice.py": "loss-averaged-twice",  # criterion(out, y) / len(x)
    "bug_class_weights_by_frequency.py": "class-weights-by-frequency",  # counts / counts.sum()
    "bug_evaluation_drops_examples.py": "evaluation-drops-examples",  # drop_last at evaluation
    "bug_batch_norm_shared.py": "batch-norm-shared",  # one norm after three layers
    "bug_evaluation_inputs_random.py": "evaluation-inputs-random",  # val augmented too
    "bug_evaluation_labels_permuted.py": "evaluation-labels-permuted",  # a vocabulary per split
    "bug_scheduler_given_val_accuracy.py": "scheduler-given-metric",  # MultiStepLR.step(val_acc)
    "bug_class_balanced_twice.py": "class-balanced-twice",  # a balancing sampler and 1 / counts
    "bug_group_rates_flattened.py": "group-rates-flattened",  # one warm-up rate into each group
    "bug_gradients_off_by_loss_scale.py": "gradients-off-by-loss-scale",  # optimizer.step() on it
    "bug_rnn_state_carried_over.py": "rnn-state-carried-over",  # h = h.data over shuffled batches
    "bug_worker_memory_copied.py": "worker-memory-copied",  # a list of dicts, two forked workers
    "bug_tokens_mostly_unknown.py": "tokens-mostly-unknown",  # built lower-cased, looked up raw
    "bug_metric_not_reset.py": "metric-not-reset",  # early stopping on an Accuracy never reset
    "bug_dataset_changed_in_place.py": "dataset-changed-in-place",  # x.sub_(m).div_(s) in __getitem__
    "bug_output_squashed_twice.py": "output-squashed-twice",  # sigmoid of a sigmoid into BCELoss
    "bug_attention_mask_not_additive.py": "attention-mask-not-additive",  # 0/1 float attn_mask
    "bug_layer_built_in_forward.py": "layer-built-in-forward",  # nn.Linear(n, 10)(x) in forward
    "bug_targets_not_scaled.py": "targets-not-scaled",  # an MSE on raw kelvin, about 300
    "bug_logits_bounded.py": "logits-bounded",  # cosines into cross_entropy, no scale
    "bug_features_not_scaled.py": "features-not-scaled",  # pascals and rpm into nn.Linear
    "bug_bidirectional_last_step.py": "bidirectional-last-step",  # a BiLSTM's out[:, -1, :]
    "bug_rows_mixed_across_batch.py": "rows-mixed-across-batch",  # batch_first=False, [B, T, d]
}
INFO = {"hot-op", "heap-retention", "device-idle"}  # findings that explain rather than warn
CLEAN = [
    "clean_mlp.py",
    "clean_weights_and_scaling.py",  # inverse weights, a sum over rows, a tail scored
    "clean_views_and_vocabulary.py",  # one encoder on two views, one vocabulary
    "clean_plateau_schedulers.py",  # mode="max" on an accuracy, mode="min" on a loss
    "clean_scheduler_fractional_epochs.py",  # a cosine given fractional epochs, a plateau a loss
    "clean_class_balance_once.py",  # sources balanced with pos_weight; classes, no weights
    "clean_group_rates_own.py",  # each group's own rate scaled; a frozen phase; lr_scale
    "clean_scaler_recipes.py",  # unscale_ and clip; a disabled scaler; accumulation; a GAN
    "clean_rnn_states_carried_right.py",  # a stream in order; chunks a step each; a decoder
    "clean_worker_memory_arrays.py",  # NumPy arrays; a small list; a list with no workers
    "clean_token_vocabularies.py",  # a capped vocabulary: 10% unknown, rows padded
    "clean_metrics_reset.py",  # a running metric read within the epoch, reset at its end
    "clean_soft_targets_updated.py",  # a Dataset's soft targets updated in place by design
    "clean_squashed_once.py",  # a softmax gate over experts' softmaxes, log into nll_loss
    "clean_additive_attention_mask.py",  # a float key padding mask of 0 and -1e9
    "clean_layer_built_once.py",  # a head built at the first forward, before the optimiser
    "clean_states_kept_as_copies.py",  # a deepcopy of the best; a checkpoint; a target's sync
    "clean_targets_at_their_scale.py",  # kelvin standardised; raw, a model started at them
    "clean_logits_scaled.py",  # cosines times 16; an NT-Xent at a temperature of 0.1
    "clean_features_scaled.py",  # sensors standardised; raw into a BatchNorm1d first
    "clean_bidirectional_readouts.py",  # both directions' ends, a mean, a tagger, one-way
    "clean_rows_scored_alone.py",  # centring, softmax, cumsum and norms over time, not dim 0
    "clean_returned_losses.py",  # loss terms a model returns, each used
    "clean_returned_losses_elsewhere.py",  # by a second optimiser, autograd.grad, a list
    "clean_cosine_head.py",  # NormFace: a first loss above log(C) by its scale
    "clean_finetune_new_head.py",  # a body loaded with strict=False beside a new head
    "clean_loaded_weights_trained.py",  # init then load, a new head, a teacher, a baseline
    "clean_lr_lambda_factors.py",  # factors; the rate itself over lr=1.0; a long warm-up
    "clean_targets_with_gradients.py",  # feature matching, a PINN, a target network
    "clean_draws_without_gradients.py",  # REINFORCE's actions, a frozen encoder's latents
    "clean_losses_backpropagated.py",  # summed micro-batches, hard example mining, TBPTT
    "clean_splits_apart.py",  # one random_split, training rows scored, k-fold
    "clean_predictions_scored.py",  # one logit by its sign, view_as, masks, one-hot, [B, 1, V]
    "clean_lr_written_to_groups.py",  # the groups' lr by hand, mirrors, a default before a group
    "clean_padding_masked.py",  # each way of masking the padding; causal over right padding
    "clean_block_coordinate.py",  # two optimisers over a model's halves, in turn
    "clean_two_optimisers_same_parameters.py",  # each its own objective: the first the clock
    "clean_two_optimisers_second_first.py",  # the every-4th one stepping first
    "clean_weighted_sampler.py",  # one weight per example, and over a Subset
    "clean_contrastive_targets.py",  # arange for in-batch negatives, zeros for MoCo's
    "clean_loss_weights_at_zero.py",  # a float warm-up from 0.0, a flag, DDP's 0.0 * sum
    "clean_embeddings_stepped_second.py",
    "clean_graph_network.py",
    "clean_lbfgs.py",
    "clean_loose_parameters.py",
    "clean_momentum_teacher.py",
    "clean_weights_loaded_on_second_try.py",  # strict=False, then the prefix stripped
    "clean_moco_momentum_encoder.py",  # the key encoder inside the model, moved through .data =
    "clean_byol_target_by_data.py",  # a target beside it, moved through .data.mul_().add_()
    "clean_symmetric_contrastive.py",
    "clean_token_accumulation.py",
    "clean_gru.py",
    "clean_ctc.py",  # log_softmax over the last dimension
    "clean_transformer.py",
    "clean_fp16_scaler.py",
    "clean_fp16_static_scale.py",  # (loss * 1024).backward(), gradients divided by hand
    "clean_half_precision_weights.py",  # bfloat16 Linear weights at a rate that moves them
    "clean_func_per_sample.py",  # torch.func: vmap'd losses, no backward (no loss seen)
    "clean_eval_mode_gradients.py",  # trained in eval mode; PGD with autograd.grad
    "clean_padded_sequences.py",  # ignore_index=PAD; a tag set whose "O" is id 0
    "clean_folds_and_phases.py",  # folds reset in place or made anew, phases, remade optimisers
    "clean_mc_dropout_batched.py",  # Monte Carlo dropout's samples as copies in one batch
    "clean_attention_masks.py",  # key padding, left-padded causal, additive, memory slots
    "clean_language_models.py",  # causal by mask, is_causal, LSTM; seq2seq, prefix LM, MLM
    "clean_causal_sequence_models.py",  # a trimmed TCN, batch norm, a mask after the softmax
    "clean_end_token_kept.py",  # padding masked by position, a padding token of its own
    "clean_initialisations.py",  # zero heads and branches, LoRA, one value before a random layer
    "clean_bounded_outputs.py",  # a sigmoid over pixels, 1 + 4 * sigmoid, tanh, masked targets
    "clean_evaluation_inputs.py",  # one Normalize for both; noise for training; a sampler; a grid
    "clean_label_inputs.py",  # a 98% verdict, ArcFace's one-hot, labels given, a forecast, an aux head
    "clean_unshifted_targets.py",  # a BOS put before the ids inside; reconstruction; a denoiser
    "clean_multi_token_heads.py",  # a head for token t + 2 summed with the next-token loss
    "clean_overlap_losses.py",  # Dice, IoU, V-Net, Tversky over probabilities; a weighted mean
    "clean_packed_sequences.py",  # sorted, unsorted, an EOS counted, a position signal, ...
    "clean_rnn_layouts.py",  # [T, B, F] to a time-first GRU, batch_first=True, packed
    "clean_batch_norm_momentum.py",  # 0.1, 0.01, None, no running statistics, frozen
    "clean_position_tables.py",  # time first, [1, L, D], transposed, learned, scaled
    "clean_rnn_padding_read.py",  # packed, gathered at the last word, padded at the start, ...
    "clean_multi_label.py",  # BCE, rows divided by their sums, a one-hot weighted by hand
    "clean_dropout_rates.py",  # 0.5, 0.7, 1 - keep_prob, between LSTM layers, Monte Carlo
    "clean_outputs_vary.py",  # a zero last layer warmed up, constant anchors, a large offset
    "clean_batch_norm_batches.py",  # 16 a batch, a last batch of 1, frozen, GroupNorm at 1
    "clean_loader_batches.py",  # a watched batch, validation, full-batch, a graph over every node
    "clean_paired_loaders.py",  # in order, seeded alike, domain adaptation, mixup of two passes
    "clean_images.py",  # scaled outside or inside the model, a 0/1 mask; convs are info
    "clean_optimiser_wrapper.py",  # Lookahead, plain SGD made each step, Adam each epoch
    "clean_two_runs.py",  # a second model and optimiser: its steps are counted too
    "clean_eval_between_steps.py",  # a summed eval loss before training: no loss-at-init
    "clean_partial_training.py",  # head-only optimiser, aux head on some steps, teacher
    "clean_grad_accumulation.py",  # zeroed every 4 backwards, to zeros (set_to_none=False)
    "clean_gan.py",  # the generator's backward adds to the critic's gradients
    "clean_pseudo_labels.py",  # no_grad forwards in train mode: guessed labels, update_bn
    "clean_loaders.py",  # next(it) remade on StopIteration, a step per epoch, one-batch loader
    "clean_resumed_with_optimiser_state.py",  # weights and optimiser state; a teacher loaded
    "clean_sorted_eval.py",  # sorted data: shuffled for training, in order for evaluation
    "clean_sam.py",  # two backwards a step from cleared gradients, the weights moved between
    "clean_sam_wrapper.py",  # SAM's first_step / second_step, in a function called twice
    "clean_frozen_bn.py",  # BN layers in eval mode, evaluations, OneCycle every batch
    "clean_bernoulli_policy_rloo.py",  # zero advantages: zero gradients through no op's fault
    "clean_targets_masked_and_densities.py",  # void pixels weighted 0, -1 labels masked, kl_div
    "clean_soft_targets_by_hand.py",  # mixup, smoothing over [B, T, V], distillation, BCE
    "clean_quantised_straight_through.py",  # round and sign, the gradient passed straight on
    "clean_losses.py",  # [N, 1] vs [N, 1], a scalar target, logits, log_softmax (also over
    # a sequence's last dim, [B, C, T] over dim 1, log of softmax), MC dropout
    "clean_clip.py",  # clip then step at the loop's top, after accumulation, a reused list
    "clean_clip_total_norm.py",  # get_total_norm + clip_grads_with_norm_, GradScaler on CPU
    "clean_hand_set_gradients.py",  # autograd.grad set by hand: accumulated and zeroed, fresh
    "clean_frozen_warmup.py",  # the first optimiser's backbone under no_grad in the second half
    "clean_aux_loss_later.py",  # a head's loss switched on at step 150: info, not a warning
    "clean_ddp.py",  # under torchrun: DDP, DistributedSamplers, sharded evaluation summed
    "clean_fsdp.py",  # under torchrun: fully_shard per layer, accumulation without reduction
    "clean_fsdp1.py",  # under torchrun: FullyShardedDataParallel wrapping each layer, no_sync
    "clean_copies.py",  # deepcopy, AveragedModel, torch.save and torch.jit.script of the model
    "clean_pairwise_loss.py",  # energy distance: every sample against every data sample
    "clean_wgan.py",  # the generator's no_grad fakes between the critic's steps, train mode
    "clean_fixed_val_batch.py",  # next(iter(val)) each step beside the training loader
    "clean_forked_seed.py",  # torch.manual_seed inside fork_rng each step: a fixed probe draw
    "clean_hessian.py",  # backward(create_graph=True) and a Hessian-vector product each step
    "clean_finetune_loaded.py",  # load_state_dict, then a high first loss on new labels
    "clean_finetune_pickled.py",  # torch.load of a whole pickled model, then the same
    "clean_second_model.py",  # a second model and optimiser first run after the clock's step
    "clean_freeze_mid_run.py",  # first layer frozen at step 100; an optimiser stepping every 4th
    "clean_forkserver_pool.py",  # a ProcessPoolExecutor's forkserver workers, a model per job
    "clean_reinforce.py",  # REINFORCE: episodes, and so steps, get longer as training goes
    "clean_torchscript.py",  # scripted losses, a pickled partial of one, an fx trace
    "clean_hand_updates.py",  # weights updated by hand, five ways; an attack on the input
    "clean_module_lists.py",  # ModuleList/Dict, handles on registered layers, a hidden teacher
    "clean_frozen_norm_second_phase.py",  # frozen with the gradients of the phase before
    "clean_zero_valued_surrogate.py",  # a loss of value 0 whose gradient trains
    "clean_swa_update_bn.py",  # update_bn before evaluating; an EMA with use_buffers=True
    "clean_model_copies_kept.py",  # a best-model copy taken at the best epoch, evaluated at the end
    "clean_untrained_baseline_beside.py",  # an untrained copy scored once beside the model
    "clean_thresholds_on_scale.py",  # a sigmoid head's probabilities rounded; MSE outputs at 0.5
    "clean_iterable_dataset_split.py",  # a stream split by worker, some examples given twice
    "clean_gradients_as_data.py",  # a penalty with create_graph; FGSM and a norm without it
    "clean_log_likelihoods.py",  # -logsigmoid; a log-likelihood maximised; a policy gradient
    "clean_hinge_gan.py",  # the critic's last bias's gradient exactly zero by chance
    "clean_backbone_unfrozen_beside_head.py",  # add_param_group; a frozen teacher beside
    "clean_own_profiler.py",  # the script's own torch.profiler session around the whole run
    "clean_sparse_outputs.py",  # a GCN whose adjacency module returns a sparse matrix
    "clean_staged_unfreezing.py",  # layers unfrozen into the optimiser; a prompt of its own
    "clean_hard_examples.py",  # trained on the hardest of a pool scored under no_grad: at log(C)
    "clean_margin_softmax.py",  # CosFace: a first loss far above log(C) by design
    "clean_margin_softmax_small.py",  # CosFace s=16, m=0.2: its loss above log(C) all run
    "clean_soft_targets.py",  # distillation at T = 4: near-uniform targets, a loss near log(C)
    "clean_frozen_beside_accumulation.py",  # the head's optimiser first steps at step 32
    "clean_maximize.py",  # maximize=True on a log-likelihood, which rises as it should
    "clean_multi_output_regression.py",  # MSE falls well below the targets' variance
    "clean_least_squares_gan.py",
    "clean_maml_vmap.py",
    "clean_cross_entropy_by_hand.py",  # -log_softmax(...).gather(...).mean(): learns
    "clean_finetune_second_optimiser.py",  # a new head's optimiser while the first lives on  # mse_loss inside grad inside vmap: its targets are not summed  # MSE against targets held at ones: no level of a mean
    "clean_maximize_mse.py",  # maximize=True on an input perturbation's squared error
    "clean_no_grad_backbone_beside_accumulation.py",  # its optimiser beside the head's
    "clean_weight_norm_logged.py",  # get_total_norm(model.parameters()) only logged
    "clean_ctc_padded_targets.py",  # padding past target_lengths; blank=C - 1, 1-D targets
    "clean_ctc_zero_infinity.py",  # zero_infinity=True dropping one target in eight
    "clean_teacher_trained_first.py",  # its gradients left, stepped by no optimiser
    "clean_optimiser_in_backward.py",  # an optimiser a parameter, stepped by a gradient hook
    "clean_eval_mode_dropout_on.py",  # batch norm frozen by eval(), dropout back in train mode
    "clean_layouts_moved.py",  # transpose/permute into convs and a GRU; views adding dims
    "clean_activation_checkpointing.py",  # torch.utils.checkpoint, non-reentrant then reentrant
    "clean_imbalanced_classes.py",  # 80/15/5, weak inputs: slowly below the classes' entropy
    "clean_pinn_by_hand.py",  # du/dx by torch.autograd.grad, then the weights' gradient by hand
    "clean_batch_size_warmup.py",  # 32 -> 256 a batch: slower steps, as much more work
    "clean_one_cycle_per_epoch.py",  # sized in epochs; sized in steps, stopped early
    "clean_frozen_decay.py",  # frozen before any backward, zeroed in place; decay on LayerNorm
    # pytorch/examples, shrunk to synthetic data, their training loops as they read
    "clean_example_mnist.py",  # Adadelta, StepLR, log_softmax into nll_loss, summed test loss
    "clean_example_mnist_rnn.py",  # a batch-first LSTM's last output, BatchNorm1d, Dropout2d
    "clean_example_dcgan.py",  # BCELoss on a sigmoid, D on fake.detach(), fixed-noise samples
    "clean_example_vae.py",  # summed BCE + KL: thousands at the start, no log(C)
    "clean_example_word_language_model.py",  # repackage_hidden, clip, SGD by hand at lr=20
    "clean_example_time_sequence_prediction.py",  # LBFGS with a closure, float64 LSTMCells
    "clean_example_super_resolution.py",  # PixelShuffle, MSELoss, no train()/eval() calls
    "clean_example_siamese_network.py",  # two images through one ResNet, BCELoss, unshuffled
    "clean_example_regression.py",  # SGD by hand on a quartic until the loss is under 1e-3
    "clean_example_reinforce.py",  # REINFORCE with dropout while acting, once per episode
    "clean_example_actor_critic.py",  # summed policy and smooth L1 value losses per episode
    "clean_example_fast_neural_style.py",  # pixels in [0, 255], a frozen loss network
    "clean_example_gcn.py",  # torch.spmm, NLLLoss over a mask, eval of two masks each epoch
    "clean_example_imagenet.py",  # zero_grad after the forward, top-k under no_grad, checkpoints
]

SLOW = {"clean_fsdp1.py", "bug_fsdp1_gradients_not_zeroed.py"}
"""Corpus scripts opt in with ``-m slow``: FSDP1 under torchrun, ~10-20 s each on 2 cores (its
fixes are covered by unit tests in the default run)."""


GPU = {"bug_device_idle.py"}
"""Corpus scripts that need a CUDA device (``-m gpu``)."""
NO_CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def _marked(names: list[str]) -> list[Any]:
    return [
        pytest.param(n, marks=pytest.mark.slow)
        if n in SLOW
        else pytest.param(n, marks=[pytest.mark.gpu, NO_CUDA])
        if n in GPU
        else n
        for n in names
    ]


def test_every_code_has_a_bug_script() -> None:
    assert set(EXPECTED.values()) == set(CODES)
    assert all((SCRIPTS / name).exists() for name in [*EXPECTED, *CLEAN])


def test_every_code_is_explained_in_the_docs_and_named_in_the_readme() -> None:
    root = Path(__file__).parents[2]
    docs = (root / "docs" / "health.md").read_text()
    readme = (root / "README.md").read_text()
    assert [c for c in CODES if f"### `{c}`" not in docs] == []
    assert [c for c in CODES if f"`{c}`" not in readme] == []


def test_every_health_module_is_in_the_docs_code_layout() -> None:
    """The README sends readers to docs/health.md's "Code layout" for every file."""
    root = Path(__file__).parents[2]
    layout = (root / "docs" / "health.md").read_text().split("## Code layout", 1)[1]
    layout = layout.split("\n## ", 1)[0]
    modules = sorted(p.name for p in (root / "src" / "treeqa" / "health").glob("[!_]*.py"))
    assert [m for m in modules if f"`{m}`" not in layout] == []


NODE_SHAPES = hasattr((torch.ones(1, requires_grad=True) * 2).grad_fn, "_input_metadata")
"""Autograd nodes give their inputs' shapes (not torch 2.4's): a loss broadcast by hand is read
off its graph."""


FULLY_SHARD = hasattr(importlib.import_module("torch.distributed.fsdp"), "fully_shard")
"""FSDP2's ``fully_shard`` is public (``torch.distributed.fsdp``) from torch 2.6; 2.4 and 2.5
have it in ``torch.distributed._composable.fsdp`` only, where the scripts do not look."""


def _skip_where_torch_lacks_the_api(name: str) -> None:
    """A script of get_total_norm and clip_grads_with_norm_, or of FSDP2's fully_shard, needs
    torch 2.6 or later; a loss broadcast by hand is found only where autograd nodes give their
    inputs' shapes."""
    script = (SCRIPTS / name).read_text()
    for api, here in (
        ("get_total_norm", hasattr(torch.nn.utils, "get_total_norm")),
        ("fully_shard", FULLY_SHARD),
    ):
        if api in script and not here:
            pytest.skip(f"{name} uses {api} (torch 2.6+), torch {torch.__version__} here")
    if name == "bug_loss_broadcast_by_hand.py" and not NODE_SHAPES:
        pytest.skip(f"autograd nodes give no input shapes in torch {torch.__version__}")
    if name == "bug_step_time_subnormal_weights.py" and not subnormals_slow():
        pytest.skip("this CPU multiplies subnormal floats as fast as normal ones: no slowdown")


@functools.cache
def subnormals_slow() -> bool:
    """Whether this CPU computes with subnormal floats markedly slower (the slowdown the script
    makes, 1.7x an epoch on the CPU it was seen on). Some do not: on an AMD EPYC host a
    [64, 150] x [150, 150] product took 37 us with subnormal weights, 38 with normal ones, and
    the script's steps stayed at 2.7 ms from first to last. Medians of 30 products each, one
    thread."""
    x = torch.randn(64, 150)
    times = {}
    with _one_thread():
        for kind, w in (
            ("normal", torch.randn(150, 150)),
            ("subnormal", torch.full((150, 150), 1e-40)),
        ):
            took = []
            for _ in range(30):
                start = time.perf_counter()
                for _ in range(10):
                    x @ w
                took.append(time.perf_counter() - start)
            times[kind] = statistics.median(took)
    return times["subnormal"] > 1.5 * times["normal"]


@contextlib.contextmanager
def _one_thread() -> Iterator[None]:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


@pytest.mark.parametrize("name", _marked(list(EXPECTED)))
def test_bug_script_is_named(name: str, doctor_report) -> None:
    _skip_where_torch_lacks_the_api(name)
    if EXPECTED[name] == "heap-retention" and heap_mb() is None:
        pytest.skip("no glibc mallinfo2 here: the monitor judges host RSS alone")
    code, report, _ = doctor_report(name)
    assert code == 0
    found = {
        f["code"]: f for f in report["findings"] if f["severity"] != "info" or f["code"] in INFO
    }
    assert EXPECTED[name] in found, report["findings"]
    finding = found[EXPECTED[name]]
    assert finding["fix"] and finding["evidence"]
    if EXPECTED[name] not in INFO:
        assert finding["severity"] in ("warning", "error")


TIMED = {"step-time-regression"}
"""Findings read off step times alone. Run in the suite's own process, late in it, a clean
script's later steps have read slower once in a few suite runs (clean_contrastive_targets.py:
quarter medians 0.77, 0.74, 0.95, 1.18 ms, the machine's reference as fast as before; flat in
every run on its own): such a finding must come again in a second run to count."""


@pytest.mark.parametrize("name", _marked(CLEAN))
def test_clean_script_has_no_warnings(name: str, doctor_report) -> None:
    _skip_where_torch_lacks_the_api(name)
    code, report, _ = doctor_report(name)
    assert code == 0
    assert report["steps"] >= 80  # enough steps for the timing and memory checks to run
    warned = [f for f in report["findings"] if f["severity"] != "info"]
    if warned and {f["code"] for f in warned} <= TIMED:
        code, report, _ = doctor_report(name, again=True)
        warned = [f for f in report["findings"] if f["severity"] != "info"]
    assert warned == []


def test_a_loss_climbed_by_maximize_names_it_as_the_cause(doctor_report) -> None:
    """The loss diverges at Adam's lr=1e-2 because the optimiser has maximize=True: the
    finding says so, and its fix is to drop it, not to lower the learning rate."""
    _, report, _ = doctor_report("bug_loss_diverged_maximize.py")
    found = [f for f in report["findings"] if f["code"] == "loss-diverged"]
    assert found and found[0]["evidence"]["maximize"] == "Adam"
    assert "Adam has maximize=True set" in found[0]["message"]
    assert "learning rate" not in found[0]["message"]
    assert found[0]["fix"].startswith("drop maximize=True")
    # A regression loss has no chance level, but the same climb, with maximize=True, is said.
    _, report, _ = doctor_report("bug_loss_diverged_maximize_mse.py")
    found = [f for f in report["findings"] if f["code"] == "loss-diverged"]
    assert found and found[0]["evidence"]["function"] == "mse_loss"
    assert "Adam has maximize=True set" in found[0]["message"]
    assert found[0]["fix"].startswith("drop maximize=True")
    _, report, _ = doctor_report("bug_loss_diverged.py")  # lr=1.0, no maximize: the lr hint
    found = [f for f in report["findings"] if f["code"] == "loss-diverged"]
    assert "maximize" not in found[0]["evidence"]
    assert found[0]["fix"].startswith("lower the learning rate")


def test_an_optimiser_built_before_fully_shard_is_named_as_the_cause(doctor_report) -> None:
    """fully_shard replaces the parameters the optimiser was given: it steps tensors no model
    uses, and the finding says that sharding after it is the likely cause."""
    _skip_where_torch_lacks_the_api("bug_fsdp_optimiser_before_shard.py")
    _, report, _ = doctor_report("bug_fsdp_optimiser_before_shard.py")
    found = next(f for f in report["findings"] if f["code"] == "step-without-gradients")
    assert found["evidence"]["stale_parameters"] and found["evidence"]["ranks"] == [0, 1]
    assert "fully_shard" in found["message"] and "fully_shard" in found["fix"]


def test_gradients_never_zeroed_under_fully_shard_are_said_as_added_to(doctor_report) -> None:
    """FSDP2's backward adds into the part of a DTensor gradient each process holds, not into
    the DTensor: its gradients were written each step, not left from the step before."""
    _skip_where_torch_lacks_the_api("bug_fsdp_gradients_not_zeroed.py")
    _, report, _ = doctor_report("bug_fsdp_gradients_not_zeroed.py")
    found = next(f for f in report["findings"] if f["code"] == "gradients-not-zeroed")
    assert "never zeroed between optimiser steps" in found["message"], found
    assert found["evidence"]["dirty_in_a_row"] == 3


def test_a_finding_seen_again_keeps_the_step_it_was_first_seen_at(doctor_report) -> None:
    """The broadcast is seen on every sampled step: the report's step is the last, and
    first_step the one its warning named."""
    _, report, _ = doctor_report("bug_loss_broadcast.py")
    found = next(f for f in report["findings"] if f["code"] == "loss-broadcast")
    assert found["first_step"] == 1 and found["step"] > 1


@pytest.mark.parametrize(
    ("name", "assigned"),
    [
        ("bug_loose_parameter_not_in_optimiser.py", "logit_scale = nn.Parameter("),
        ("bug_second_model_not_in_optimiser.py", "domains = nn.Sequential("),
    ],
)
def test_a_parameter_outside_the_models_points_at_its_assignment(
    name: str, assigned: str, doctor_report
) -> None:
    """Where the parameter left out of the optimiser is made is where the fix starts."""
    _, report, _ = doctor_report(name)
    found = next(f for f in report["findings"] if f["code"] == "not-in-optimiser")
    path, line = found["where"].rsplit(":", 1)
    assert Path(path).read_text().splitlines()[int(line) - 1].startswith(assigned), found


def test_a_collapsed_learning_rate_points_at_its_schedulers_step(doctor_report) -> None:
    """The scheduler stepped every batch is where the fix goes, not the optimiser's step."""
    _, report, _ = doctor_report("bug_lr_collapsed.py")
    found = next(f for f in report["findings"] if f["code"] == "lr-collapsed")
    line = (
        Path(found["where"].rsplit(":", 1)[0])
        .read_text()
        .splitlines()[int(found["where"].rsplit(":", 1)[1]) - 1]
    )
    assert line.strip() == "scheduler.step()", found["where"]


def test_train_in_eval_mode_counts_every_step_in_train_mode_before_it(doctor_report) -> None:
    """40 steps in train mode, the first among them (before any forward was seen), then eval
    mode from step 41."""
    _, report, _ = doctor_report("bug_train_in_eval_mode.py")
    found = next(f for f in report["findings"] if f["code"] == "train-in-eval-mode")
    assert found["evidence"]["train_mode_steps"] == 40 and found["evidence"]["since_step"] == 41


def test_an_evaluation_between_steps_is_neither_compute_nor_data_wait(doctor_report) -> None:
    """The model the clock trains, in eval mode under no_grad, runs between two steps."""
    _, report, _ = doctor_report("clean_eval_between_steps.py")
    series = report["series"]
    for step in (41, 81):  # each comes right after an evaluation of 2 x 0.15 s
        i = series["step"].index(step)
        assert series["step_time"][i] + series["data_time"][i] < 0.15, (step, series)


def test_a_step_ended_inside_a_backward_waits_for_data_from_its_return(doctor_report) -> None:
    """One optimiser a parameter, stepped by a hook as its gradient is accumulated: the clock's
    step ends inside the backward. The rest of that backward is no wait for data, and the
    profiler window stopped there is off once the backward returns (the engine puts the
    thread's profiler state back as it was when the backward began)."""
    _, report, _ = doctor_report("clean_optimiser_in_backward.py")
    assert not torch._C._autograd._profiler_enabled()
    series = report["series"]
    data, compute = sorted(series["data_time"]), sorted(series["step_time"])
    assert data[len(data) // 2] < 0.5 * compute[len(compute) // 2], series


def test_forked_processes_that_train_make_the_report(doctor_report) -> None:
    """Hogwild: two forked processes step the shared model (128 steps each), each with a
    DataLoader worker forked in turn, which trains nothing and reports nothing."""
    _, report, _ = doctor_report("bug_hogwild_probs_into_ce.py")
    assert report["steps"] == 128
    assert [(p["rank"], p["steps"]) for p in report["processes"]] == [(1, 128), (2, 128)]
    found = [f for f in report["findings"] if f["code"] == "probabilities-into-cross-entropy"]
    assert found[0]["evidence"]["ranks"] == [1, 2]
    # A Pool's workers, ended by terminate() as the `with` block closes: every one reports
    # (a SIGTERM that reached one while it wrote its report lost it), 4 tasks of 60 steps.
    _, report, _ = doctor_report("bug_pool_probs_into_ce.py")
    assert [p["rank"] for p in report["processes"]] == [1, 2]
    assert sum(p["steps"] for p in report["processes"]) == 240


def test_spawned_processes_that_train_make_the_report(doctor_report) -> None:
    """Hogwild with processes started by ``spawn`` (a fresh interpreter each, no doctor of the
    script's to copy): each is handed one with its target, 50 steps each."""
    _, report, _ = doctor_report("bug_hogwild_spawn_probs_into_ce.py")
    assert [(p["rank"], p["steps"]) for p in report["processes"]] == [(1, 50), (2, 50)]
    found = [f for f in report["findings"] if f["code"] == "probabilities-into-cross-entropy"]
    assert found[0]["evidence"]["ranks"] == [1, 2]
    # forkserver: the after-fork callbacks run there too, and the doctor is readied once
    _, report, out = doctor_report("clean_forkserver_pool.py")
    assert "losses" in out
    assert sum(p["steps"] for p in report["processes"]) == 200


def test_forked_processes_report_their_own_steps_after_the_parents(doctor_report) -> None:
    """Forked after the script's 60 clean steps: the children's finding is theirs alone, their
    first steps sampled; a child lingering after its target returned still ends on SIGTERM."""
    _, report, out = doctor_report("bug_hogwild_after_warmup.py")
    steps = [(p["rank"], p["steps"]) for p in report["processes"]]
    assert steps == [(0, 60), (1, 30), (2, 30), (3, 5)]
    found = [f for f in report["findings"] if f["code"] == "probabilities-into-cross-entropy"]
    assert found[0]["evidence"]["ranks"] == [1, 2]
    assert "lingering child ended: True" in out


KILLED = """
import os, signal, sys, torch, torch.multiprocessing as mp
from torch import nn

def train(rank, model):
    torch.set_num_threads(1)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    for _ in range(40):
        x = torch.randn(16, 8)
        loss = nn.functional.cross_entropy(model(x), (x[:, 0] > 0).long())
        opt.zero_grad(); loss.backward(); opt.step()
    if rank == 1 and sys.argv[2] == "kill":  # as the out-of-memory killer ends a process
        os.kill(os.getpid(), signal.SIGKILL)
    if rank == 1:  # ending at once, skipping every finally
        os._exit(0)

if __name__ == "__main__":
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))
    model.share_memory()
    context = mp.get_context(sys.argv[1])
    ps = [context.Process(target=train, args=(rank, model)) for rank in range(2)]
    [p.start() for p in ps]; [p.join() for p in ps]
"""

CHILD_RUNS = {
    "strict fork": ["--strict", "--", "python", str(SCRIPTS / "bug_hogwild_probs_into_ce.py")],
    "strict spawn": [
        "--strict",
        "--",
        "python",
        str(SCRIPTS / "bug_hogwild_spawn_probs_into_ce.py"),
    ],
    "killed fork": ["--", "python", "train.py", "fork", "kill"],
    "killed spawn": ["--", "python", "train.py", "spawn", "kill"],
    "os._exit": ["--", "python", "train.py", "fork", "exit"],
}
"""``treeqa doctor`` runs whose children stop the run, are killed or end with ``os._exit``."""


@pytest.fixture(scope="module")
def child_runs(
    tmp_path_factory: pytest.TempPathFactory,
    side_by_side: Callable[..., list[subprocess.CompletedProcess[str]]],
) -> dict[str, subprocess.CompletedProcess[str]]:
    """The ``CHILD_RUNS``, side by side (each starts interpreters that import torch: run
    apart, the second core idles through them)."""
    folder = tmp_path_factory.mktemp("children")
    (folder / "train.py").write_text(KILLED)
    doctor = [sys.executable, "-m", "treeqa", "doctor"]
    runs = side_by_side(*([*doctor, *a] for a in CHILD_RUNS.values()), timeout=300, cwd=folder)
    return dict(zip(CHILD_RUNS, runs, strict=True))


@pytest.mark.parametrize("run", ["strict fork", "strict spawn"])
def test_a_strict_stop_in_a_child_process_is_the_doctors_exit_code(
    run: str, child_runs: dict[str, subprocess.CompletedProcess[str]]
) -> None:
    proc = child_runs[run]
    assert proc.returncode == 3, proc.stderr
    assert proc.stderr.count("treeqa doctor: strict mode: stopping on an error finding") == 2
    # One child printed its finding, the other kept quiet and names it as it stops.
    assert proc.stderr.count("(see above)") == 1
    assert proc.stderr.count("finding (probabilities-into-cross-entropy: ") == 1
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize("run", ["killed fork", "killed spawn"])
def test_a_child_process_killed_before_its_report_is_named(
    run: str, child_runs: dict[str, subprocess.CompletedProcess[str]]
) -> None:
    proc = child_runs[run]
    assert proc.returncode == 0, proc.stderr
    assert "treeqa health: 1 process watched" in proc.stderr
    assert "1 child process ended before it could report (pid " in proc.stderr
    assert "by signal 9): what it trained is not in this report" in proc.stderr


def test_a_child_process_ending_with_os_exit_reports_first(
    child_runs: dict[str, subprocess.CompletedProcess[str]],
) -> None:
    proc = child_runs["os._exit"]
    assert proc.returncode == 0, proc.stderr
    assert "treeqa health: 2 processes watched" in proc.stderr


def test_a_forked_process_reports_its_own_steps_and_findings() -> None:
    """A child forked after the parent's 60 steps holds the parent's counts: its report is
    of what it did after the fork."""
    watched = forks.Forks()
    watched.steps_before = 60
    made = {"code": "hot-op", "step": 53}
    again = {"code": "probabilities-into-cross-entropy", "step": 61}
    own = watched.own({"steps": 90, "findings": [made, again], "series": {}})
    assert (own["steps"], own["findings"]) == (30, [again])


def test_rows_gathered_by_advanced_indexing_are_told_to_use_index_select(doctor_report) -> None:
    _, report, _ = doctor_report("bug_hot_op_index_gather.py")
    [found] = [f for f in report["findings"] if f["code"] == "hot-op"]
    assert (found["severity"], found["evidence"]["family"]) == ("warning", "indexing")
    assert "x.index_select(0, idx)" in found["fix"]


def test_unused_parameters_say_whether_their_layers_run_and_how(doctor_report) -> None:
    _, report, _ = doctor_report("bug_router_under_no_grad.py")
    [found] = [f for f in report["findings"] if f["code"] == "unused-parameter"]
    assert found["evidence"]["parameters"] == ["router.bias", "router.weight"]
    assert "do run in the forward, but under torch.no_grad()" in found["message"]
    assert "use_reentrant=False" in found["fix"]
    _, report, _ = doctor_report("bug_unused_parameter.py")  # a layer the forward never calls
    [found] = [f for f in report["findings"] if f["code"] == "unused-parameter"]
    assert "layers_run" not in found["evidence"] and "run in the forward" not in found["message"]


def test_a_slowdown_from_subnormal_weights_names_them_and_flushing(doctor_report) -> None:
    if not subnormals_slow():
        pytest.skip("this CPU multiplies subnormal floats as fast as normal ones: no slowdown")
    _, report, _ = doctor_report("bug_step_time_subnormal_weights.py")
    (found,) = [f for f in report["findings"] if f["code"] == "step-time-regression"]
    assert "weights are subnormal floats" in found["message"]
    # (counted when the slowdown was last judged: most of the forget gate's input weights)
    assert found["evidence"]["subnormal_parameters"]["x_f.weight"] > 0.5 * 150 * 150
    assert "torch.set_flush_denormal(True)" in found["fix"]


def test_a_dominant_2d_char_cnn_is_a_warning_read_in_two_windows(doctor_report) -> None:
    """The first window's warning is held for a second, 20 steps on, that reads it again."""
    _, report, _ = doctor_report("bug_hot_op.py")
    [found] = [f for f in report["findings"] if f["code"] == "hot-op"]
    assert (found["severity"], found["evidence"]["family"]) == ("warning", "convolution")
    assert found["evidence"]["windows"] == [[11, 13], [33, 35]] and found["step"] == 35


@pytest.mark.parametrize(
    "name",
    [
        "clean_activation_checkpointing.py",
        "clean_pinn_by_hand.py",
        "clean_grad_accumulation.py",
        "clean_token_accumulation.py",
        "clean_lbfgs.py",
        "clean_finetune_second_optimiser.py",
    ],
)
def test_the_loss_of_a_step_is_the_one_the_script_trains_on(name: str, doctor_report) -> None:
    """A reentrant checkpoint's backward calls torch.autograd.backward on its recomputed
    outputs, inside the script's backward: those were read as the step's loss (~0 from step 101
    on, where the script's losses were 0.01-0.3). A physics-informed loss fitted by hand takes
    torch.autograd.grad of ``u.sum()`` before its own: that sum was read (2.0, 9.8, -3.6 where
    the loss read 0.001). Accumulation over 4 micro-batches, each divided by 4: the last one's
    quarter was read (a masked language model's step read 1.05 where it printed 4.34). L-BFGS's
    step evaluates its closure several times: the last was read, the next step's loss. The
    transformers ``Trainer`` divides each micro-batch's summed token loss by the step's token
    count: its logged losses read 3.34, the series 0.83. A second optimiser that takes over
    while the first lives on: its first 9 steps were missing."""
    _, report, out = doctor_report(name)
    printed = [float(v) for v in out.split("losses ")[1].split()]
    series = report["series"]
    read = {int(st): v for st, v in zip(series["step"], series["loss"], strict=True)}
    assert len(read) == len(printed) == (100 if "accumulation" in name or "lbfgs" in name else 200)
    assert all(abs(read[i + 1] - v) < 1e-3 * max(1.0, abs(v)) for i, v in enumerate(printed))


def test_a_model_replaced_on_resuming_is_the_cause_named(doctor_report) -> None:
    """The optimiser built over the model a resumed run replaced: that model runs no more. It
    was said to have run only under no_grad, a teacher's cause."""
    _, report, _ = doctor_report("bug_resumed_with_old_optimiser.py")
    [found] = [f for f in report["findings"] if f["code"] == "step-without-gradients"]
    assert found["evidence"]["stale_parameters"] and not found["evidence"]["only_under_no_grad"]


def test_a_second_run_in_one_script_is_counted(doctor_report) -> None:
    _, report, _ = doctor_report("clean_two_runs.py")
    # 60 + 60 steps: the second optimiser takes over as the clock at its first step, the
    # first run's optimiser being freed when its function returned, and that step counts
    assert report["steps"] == 120


@pytest.mark.parametrize(("name", "steps"), [("clean_sam.py", 150), ("clean_sam_wrapper.py", 120)])
def test_sams_move_uphill_and_back_before_its_first_step_is_no_extra_step(
    name: str, steps: int, doctor_report
) -> None:
    """SAM moves the weights uphill before its optimiser's first step, read as a step by hand,
    and puts them back as that step begins: no second step by hand, and the optimiser's step
    is the one read at the move (a wrapper's second run counts from its first step)."""
    _, report, _ = doctor_report(name)
    assert report["steps"] == steps
