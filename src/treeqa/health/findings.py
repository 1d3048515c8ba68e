"""What the monitor reports: a finding's code, severity, message, place, evidence and fix.

Every code the monitor, the doctor and their checks can report is here with its one-line fix
(``docs/health.md`` explains each).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

SEVERITIES = ("info", "warning", "error")

FIXES: dict[str, str] = {
    "graph-retained": "store state with .detach() (or recompute it each step) so no graph outlives its step",
    "loss-accumulated-with-graph": "accumulate loss.item() (or loss.detach()), never the loss tensor itself",
    "retain-graph-every-step": "drop retain_graph=True; detach whatever carries over from one step to the next",
    "parameter-alias": "give each attribute its own layer (a new module or copy.deepcopy), or declare the tie",
    "unused-parameter": "wire the parameters into forward (look for a typo or a branch never taken) or remove them",
    "targets-out-of-range": "scale a binary cross-entropy's targets into [0, 1]: a mask stored as 0/255 divided by 255, labels of -1/+1 mapped by (y + 1) / 2",
    "targets-outside-output-range": "drop the bounded activation after the last layer (a regression head ends in a Linear layer), or scale the targets into its range (min-max into [0, 1] for a sigmoid, [-1, 1] for a tanh), or scale its output to theirs (1 + 4 * torch.sigmoid(x) for ratings from 1 to 5)",
    "units-identical": "initialise weights randomly (a layer's own reset_parameters(), or nn.init.kaiming_uniform_ / xavier_uniform_); a constant (zero) initialisation belongs to biases and a final layer, not to every layer",
    "eval-inputs-off-scale": "give the evaluation data the training data's preprocessing: the same transforms (ToTensor, then Normalize with the training set's mean and std), the scaler fitted on the training set applied with transform() to the validation and test sets",
    "zero-derivative-op": "pass the gradient straight through the op (a straight-through estimator: x + (torch.round(x) - x).detach()), or sample with the reparameterisation trick (mu + std * torch.randn_like(std))",
    "probabilities-into-cross-entropy": "pass raw logits to cross_entropy/CrossEntropyLoss; use log_softmax with NLLLoss",
    "activation-growth": "remove the per-block scaling (e.g. x * sqrt(d) inside each block); scale once or normalise",
    "loss-at-chance": "check that each batch's labels stay paired with its inputs (shuffled together), that the forward keeps the graph to the weights (no .detach(), .data, .item(), argmax or torch.round on the way) and that the learning rate is not tiny; a model should first be able to overfit one batch",
    "loss-at-init": "initialise the output layer small (or zero) so that the first loss is near log(C)",
    "loss-times-processes": "leave a mean loss as it is under DDP, or divide a sum over the targets by every process's count (all-reduced) before multiplying by the processes; under the transformers Trainer, for a model whose loss is a mean (BERT's classification head), set TrainingArguments(average_tokens_across_devices=False) or model.accepts_loss_kwargs = False",
    "outputs-constant": "find where the rows stop differing (the layer named): dead ReLUs want a learning rate often 10x lower, a warm-up or gradient clipping (and LeakyReLU or a fresh initialisation to recover); saturated sigmoids or tanh want inputs standardised ((x - mean) / std); layers initialised to zero want a random initialisation; a self-supervised pair wants a stop-gradient (.detach()) on its target branch",
    "same-batch-every-step": "draw a new batch each step: for x, y in loader (or it = iter(loader) once, next(it) each step), and give the model the loop's own batch, not a tensor from before the loop",
    "targets-shuffled-apart": "keep each input with its target in one Dataset (TensorDataset(x, y), or a Dataset whose __getitem__ returns both) and one DataLoader (two generators seeded alike do not keep two zipped loaders in step: the loader zip stops on draws its next order, the other not)",
    "loss-diverged": "lower the learning rate (often by 10x; Adam rarely wants more than 1e-3 here), or warm it up and clip the gradients",
    "non-finite": "guard the operation (eps in log/sqrt/division), lower the lr or clip gradients",
    "step-time-regression": "look for state that grows with steps: retained graphs, caches, lists of tensors",
    "memory-growth": "keep .item() or .detach().cpu() summaries, not tensors, in anything that lives across steps",
    "heap-retention": "nothing leaks; to keep RSS lower, run with MALLOC_MMAP_THRESHOLD_=1048576 (a few % slower) or preload jemalloc/tcmalloc",
    "input-bound": "load data in DataLoader workers (num_workers>0, pin_memory) and cache preprocessing",
    "hot-op": "make the dominating operator family cheaper (each family has its own advice)",
    "device-idle": 'give the GPU more work per launch: a larger batch; torch.compile (mode="reduce-overhead" replays the step as CUDA graphs, one launch for thousands); fused optimisers (fused=True); no .item() or other host reads inside the step',
    "gradients-not-zeroed": "call optimizer.zero_grad() once per optimiser step (before backward), so each step uses only its own gradients",
    "zero-grad-per-micro-batch": "zero the gradients once per optimiser step, before the first micro-batch (if i % accumulate == 0: optimizer.zero_grad()); read a gradient you only log with torch.autograd.grad",
    "optimiser-state-not-loaded": "when resuming, load every state the checkpoint holds into the objects built anew: optimizer.load_state_dict(checkpoint['optimizer']) after building the optimiser over the loaded model, and scheduler.load_state_dict(checkpoint['scheduler']) likewise (an optimiser's state in a file of its own: optimizer.load_state_dict(torch.load(that file)); a transformers Trainer's checkpoint folder: trainer.train(resume_from_checkpoint=that folder))",
    "loaded-weights-not-trained": "initialise the model before loading the weights (model.apply(init_weights), then model.load_state_dict(...)), or initialise only the layers the checkpoint does not hold (a new head); load into the model the optimiser trains",
    "losses-not-backpropagated": "call loss.backward() on every batch's loss, inside the loop over batches, with optimizer.step() after it (or every k batches for gradient accumulation, each loss divided by k); a loss computed only for the log under torch.no_grad()",
    "sample-not-reparameterised": "draw with rsample() (the reparameterised sample, loc + scale * eps), whose gradient reaches the distribution's parameters; sample() is for draws no gradient should pass through, or for a score-function gradient through log_prob(draw) (REINFORCE)",
    "argmax-over-one-class": "predict a single logit's class by its sign: pred = (out.squeeze(1) > 0).long() (the same as sigmoid(out) > 0.5), or give the model two outputs and train it with cross_entropy if argmax is wanted",
    "accuracy-broadcast": "compare tensors of one shape: (pred.squeeze(1) == y) or pred.eq(y.view_as(pred)), so each prediction meets its own target",
    "threshold-off-scale": "read logits at 0 (pred = (out > 0).float()), or take torch.sigmoid(out) once and read that at 0.5 (never round raw logits); a model that ends in a sigmoid already gives probabilities: read them at 0.5, with no second sigmoid",
    "lr-not-applied": "write the rate into every param group: for g in optimizer.param_groups: g['lr'] = new_lr (or use a torch.optim.lr_scheduler), which is what the optimiser reads at each step",
    "padding-not-masked": "pass the padding mask to every attention: src_key_padding_mask=(ids == pad_id) to nn.TransformerEncoder (key_padding_mask to nn.MultiheadAttention), a boolean attn_mask True where a key is a token to scaled_dot_product_attention ((ids != pad_id)[:, None, None, :]), scores.masked_fill((ids == pad_id)[:, None, None, :], float('-inf')) before a softmax by hand; and pool over the tokens only",
    "loss-averaged-twice": "leave a mean loss as it is (criterion(out, y), not criterion(out, y) / len(x)); divide by the batch size only a sum (reduction='sum'), and by k only to accumulate k micro-batches",
    "class-weights-by-frequency": "weight each class by the inverse of its frequency (weight = counts.sum() / (len(counts) * counts), or 1 / counts), and give BCEWithLogitsLoss pos_weight = negatives / positives, so that the rare class weighs more, not less",
    "evaluation-labels-permuted": "build the label vocabulary once, from the training split (or from every split together, sorted), save it beside the model, and map every split through it: label_to_index = {c: i for i, c in enumerate(sorted(set(train_labels)))}; use one zero-based convention for every file (y - 1 for labels counted from 1, applied to every split)",
    "evaluation-inputs-random": "give the evaluation data a transform without randomness (resize, centre crop, to-tensor, normalise), not the training one: after random_split, wrap each Subset in a dataset that applies its own transform (or split the indices and build two datasets over the files, one per transform); random test-time augmentation wants a fixed seed or several draws averaged",
    "evaluation-drops-examples": "build evaluation loaders with drop_last=False (the default) so the last, smaller batch is scored too; drop_last is for training batches only",
    "splits-overlap": "split the dataset once and keep both parts: train_set, val_set = random_split(dataset, [0.8, 0.2], generator=torch.Generator().manual_seed(0)) (or one permutation: idx = torch.randperm(n); train_idx, val_idx = idx[:k], idx[k:]), each loader built from its own part",
    "target-not-detached": "compute the target without gradients: with torch.no_grad(): target = r + gamma * net(s2).max(1).values * (1 - done) (or .detach() it; a target network's forward likewise); a consistency target softmax(model(x_weak)).detach()",
    "weights-not-loaded": "give load_state_dict keys named as the model's own (strip or add the prefix they differ by, e.g. {k.removeprefix('module.'): v for k, v in state.items()}), and leave strict=True, which raises where keys do not match",
    "evaluation-data-trained-on": "start each fold from fresh weights: build the model inside the fold loop (or load a copy of its initial state_dict, or call reset_parameters() on its layers) before the fold's optimiser",
    "averaged-norm-not-updated": "call torch.optim.swa_utils.update_bn(train_loader, swa_model) after the last update_parameters() and before evaluating the average (or make it with use_buffers=True, which averages the statistics too)",
    "evaluated-copy-at-init": "update the copy in place every step (under torch.no_grad(): e.mul_(d).add_(p, alpha=1 - d), or AveragedModel.update_parameters(model)) with a decay the run can move (d = 0.99 averages about 100 steps, 0.9999 about 10,000), or warm it up (d = min(d, (1 + n) / (10 + n))); take a best-model copy when the score improves (check the comparison's direction: a loss improves when it falls)",
    "penalty-without-graph": "pass create_graph=True (and retain_graph=True) to torch.autograd.grad for gradients that a loss term penalises, so that the term's own gradient reaches the weights",
    "log-likelihood-minimised": "negate the log-likelihood: loss = -F.logsigmoid(x).mean() (or F.softplus(-x).mean()), loss = -log_softmax(x, d).gather(d, y).mean() (or F.cross_entropy)",
    "loss-zero": "print the loss and its terms on the first batch: each must depend on the model's output and be above 0 there (a margin against a distance that is 0 by construction, an anchor given as its own positive, a loss multiplied by an all-zero mask, logits saturated by a missing scale)",
    "step-without-gradients": "build the optimiser over the parameters of the model that trains (after fully_shard or FullyShardedDataParallel wraps it), and zero gradients before backward(), not between backward() and step()",
    "module-not-registered": "hold layers in nn.ModuleList / nn.ModuleDict (parameters in nn.ParameterList / nn.ParameterDict), and make weights nn.Parameter(tensor), not tensors with requires_grad=True, so that the model registers them",
    "not-in-optimiser": "build the optimiser after the whole model, or add the layer with optimizer.add_param_group; if it is frozen on purpose, set requires_grad_(False) so that backward skips it",
    "frozen-weights-decayed": "clear the gradients with zero_grad() (set_to_none=True, the default) so the optimiser skips frozen parameters, or leave them out of its parameter groups (or give their group weight_decay=0)",
    "train-in-eval-mode": "call model.train() after each evaluation, before the next training step",
    "evaluation-with-gradients": "wrap the evaluation in with torch.no_grad(): (or torch.inference_mode()), after model.eval()",
    "eval-in-train-mode": "call model.eval() before evaluating (and model.train() after it, before the next training step)",
    "frozen-in-train-mode": "call teacher.eval() once, after building or loading it (student.train() does not reach it); a momentum teacher updated from the student (BYOL, DINO) is not this",
    "fp16-without-loss-scaling": "scale the loss with torch.amp.GradScaler (scaler.scale(loss).backward(); scaler.step(opt); scaler.update()), or autocast to bfloat16, which needs no scaling",
    "updates-rounded-away": "keep the weights in float32 and autocast the forward to bfloat16 (model.float(); with torch.autocast(device_type, dtype=torch.bfloat16): loss = ...), or have the optimiser step a float32 master copy that is copied into the half-precision model, or use an optimiser that rounds stochastically or compensates (Kahan summation); a larger learning rate only moves the limit",
    "loader-restarted-every-step": "make the iterator once (it = iter(loader)) and call next(it) each step, starting a new one when it raises StopIteration (or loop over the loader once an epoch)",
    "optimiser-made-every-step": "make the optimiser once, before the training loop (and its scheduler with it), and only zero_grad/step it inside",
    "loader-not-shuffled": "shuffle the training data: DataLoader(dataset, batch_size=..., shuffle=True) (or sampler=RandomSampler(dataset)); for batches sliced by hand, index them with torch.randperm(n) each epoch; keep evaluation in order",
    "sampler-epoch-not-set": "call loader.sampler.set_epoch(epoch) at the start of each epoch, before iterating the loader",
    "pixels-not-scaled": "scale the images to [0, 1] (x.float() / 255, as torchvision's ToTensor does) and normalise them (transforms.Normalize(mean, std))",
    "rnn-state-carried-over": "start each batch's state afresh: pass no state (the layer starts from zeros), or make h0 for each batch inside the loop (init_hidden(batch_size) there, not once an epoch); carry a state from batch to batch only over a stream read in order, row i of each batch going on from row i of the one before",
    "rows-mixed-across-batch": "score each example by itself: build nn.TransformerEncoderLayer / nn.MultiheadAttention (and nn.LSTM/GRU) with batch_first=True for [batch, time, features] input (or transpose it to [time, batch, features]); pool, normalise and softmax over the time or feature dims (x.mean(1), F.normalize(h, dim=-1)), never dim 0; a norm layer that should score examples alone keeps running statistics (track_running_stats=True) or is a LayerNorm",
    "metric-not-reset": "call metric.reset() after reading each pass's value (metric.compute() at the epoch's end, then metric.reset()), or make the metric anew each epoch; under Lightning, log the metric object itself (self.log('val_acc', self.val_acc)), which Lightning resets, or reset it in the hook that computes it",
    "tokens-mostly-unknown": "build the vocabulary and look words up with one tokenizer and one normalisation (the same lower-casing and splitting on both sides), from the training text, with a minimum count that keeps most of its tokens; map every split through that one vocabulary (saved beside the model); print the share of unknown ids per split before training",
    "attention-mask-not-additive": "give attention a boolean mask (key_padding_mask=(ids == pad_id), attn_mask=(ids != pad_id)[:, None, None, :] for scaled_dot_product_attention, True where a key takes part), or an additive one of 0 and -inf ((1 - mask) * torch.finfo(scores.dtype).min, nn.Transformer.generate_square_subsequent_mask(T)); never a float mask of 0s and 1s",
    "output-squashed-twice": "squash once: a model that ends in nn.Sigmoid() goes to BCELoss as it is (or drop its Sigmoid and give the logits to BCEWithLogitsLoss); one that ends in nn.Softmax goes to nll_loss through torch.log(probs + 1e-8) (or drop its Softmax and give the logits to cross_entropy)",
    "dataset-changed-in-place": "transform a copy, never the stored example: x = (self.data[i] - mean) / std (out of place) or x = self.data[i].clone() before in-place ops in __getitem__; in a loop over slices, xb = (X[i:i + bs] - mean) / std, or preprocess the whole array once before training",
    "rnn-batch-first-mismatch": "build the layer with batch_first=True for [batch, time, features] input (or give it input.transpose(0, 1))",
    "packed-lengths-mismatch": "give pack_padded_sequence each row's own length, in the rows' order (sort the rows and their lengths together, or pass enforce_sorted=False and leave both unsorted)",
    "rnn-state-after-padding": "pack the rows before the recurrent layer (pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)), whose h_n is then each row's state at its last word, or read each row's output at its own last word (out[torch.arange(B), lengths - 1]); or pad at the rows' start",
    "position-signal-by-batch": "add the table along the positions' dim: a [max_len, 1, D] table over batch-first input as x + pe[: x.size(1)].transpose(0, 1), a [1, max_len, D] one over time-first input as x + pe[:, : x.size(0)].transpose(0, 1); or give the module the layout its table expects",
    "batch-norm-momentum-inverted": "leave the layer at PyTorch's default momentum=0.1, or give momentum=None for an exact average over the batches seen; Keras's 0.99 is PyTorch's 0.01, whose statistics take thousands of steps to settle",
    "batch-norm-shared": "give each place its own batch norm (self.bn2 = nn.BatchNorm2d(c); self.bn3 = nn.BatchNorm2d(c)), and build a list of them with a new module each: nn.ModuleList(nn.BatchNorm1d(h) for _ in range(n)), not [nn.BatchNorm1d(h)] * n; a norm shared across places on purpose wants track_running_stats=False or a norm with no running statistics (nn.LayerNorm, nn.GroupNorm)",
    "batch-norm-batch-of-one": "give the batch norm several examples a batch (8 or more), or use a norm that treats each example alike in training and evaluation: nn.GroupNorm(groups, channels), or nn.InstanceNorm2d(channels, affine=True) where each image is to be normalised by its own statistics (pix2pix evaluated in train mode on purpose); under DDP with one example a process, nn.SyncBatchNorm.convert_sync_batchnorm(model)",
    "dropout-as-keep-probability": "give PyTorch the share to drop, p = 1 - keep_prob (TensorFlow's keep_prob=0.8 is nn.Dropout(0.2), 0.9 is nn.Dropout(0.1), and keep_prob=1.0 no dropout at all)",
    "view-as-transpose": "move dims with transpose or permute (x.transpose(1, 2), x.permute(0, 3, 1, 2)), not view or reshape; add .contiguous() where a layer needs it",
    "anomaly-detection-on": "remove torch.autograd.set_detect_anomaly(True) (or detect_anomaly()) once the NaN it was for is found",
    "seed-reset-every-step": "seed once, before the loop (or give each step its own seed, seed + step, if steps must be reproducible one by one)",
    "lr-negative": "step the schedule as it was meant (a per-epoch LambdaLR once an epoch), or keep its factor at or above 0 (max(0.0, 1 - t / T))",
    "lr-zero": "give the optimiser a learning rate above 0; a warm-up that starts at 0 needs scheduler.step() after each optimizer.step()",
    "plateau-mode-reversed": "give ReduceLROnPlateau the mode of its metric: mode='min' for a loss, mode='max' for an accuracy or score",
    "returned-loss-unused": "add the term to the loss that is backpropagated (loss = task_loss + weight * aux_loss); a value returned only for the log is computed under torch.no_grad() or returned detached",
    "in-batch-targets-constant": "targets = torch.arange(len(logits)) for in-batch negatives (each row's positive on the diagonal); a constant 0 belongs to logits whose column 0 is the positive (MoCo's cat([l_pos, l_neg], 1))",
    "loss-term-zeroed": "compute the weight as a float (min(1.0, step / warmup)); a term left out on purpose is better not computed at all",
    "sampler-weights-short": "give WeightedRandomSampler one weight per example: weights = class_weight[labels] (the weight of each example's class), not the class weights themselves",
    "lr-lambda-returns-rate": "return a factor from lr_lambda (min(1.0, step / warmup), a cosine from 1 down), the optimiser keeping the rate (Adam(params, lr=1e-3)); or give the optimiser lr=1.0 so that what the lambda returns is the rate",
    "lr-collapsed": "step a per-epoch scheduler once per epoch (outside the batch loop), or give its step_size / T_max in batches",
    "lr-schedule-past-end": "step the scheduler once per epoch with T_max=epochs, or give T_max in batches (epochs x batches per epoch); for restarts on purpose, CosineAnnealingWarmRestarts",
    "class-balanced-twice": "balance the classes once: keep the balancing sampler (or oversampling) and drop the loss's class weights, or keep the weights and draw the data as it is (shuffle=True)",
    "group-rates-flattened": "scale each group's own rate by the schedule: keep it (g.setdefault('base_lr', g['lr'])) and write g['lr'] = g['base_lr'] * factor, or use LambdaLR, which scales every group; give OneCycleLR and CyclicLR a list of max_lr, one per group",
    "scheduler-given-metric": "call scheduler.step() with no argument; to cut the rate when a metric stops improving, use ReduceLROnPlateau and give it the metric",
    "lr-schedule-stalled": "step a schedule sized in optimiser steps after every optimizer.step() (under Lightning: {'scheduler': ..., 'interval': 'step'}), or size it in epochs",
    "loss-broadcast": "give prediction and target the same shape (pred.squeeze(-1) or target.unsqueeze(-1)) before the loss",
    "multi-hot-into-cross-entropy": "train a multi-label model with binary_cross_entropy_with_logits (nn.BCEWithLogitsLoss()(logits, targets.float())), one independent probability per label, and predict sigmoid(logits) > 0.5; to keep the softmax and rank the labels, divide each row of targets by its sum so that it is a distribution",
    "relu-into-cross-entropy": "drop the ReLU after the last layer: cross_entropy takes raw logits, negative ones included",
    "padding-in-loss": "pass ignore_index=<padding id> to cross_entropy/CrossEntropyLoss (or mask the padded positions out of the loss)",
    "logits-into-nll-loss": "apply log_softmax over the class dimension before nll_loss/NLLLoss, or pass the logits to cross_entropy",
    "attention-mask-inverted": "mark padding the way the attention reads it: key_padding_mask (nn.MultiheadAttention, nn.Transformer*) = ids == pad; scaled_dot_product_attention's boolean attn_mask = ids != pad (True takes part); a Hugging Face attention_mask = 1 for tokens; scores.masked_fill(m, -inf) fills where m is True, so m = ids == pad (mask == 0 of a mask that is 1 for tokens)",
    "causal-mask-missing": "hide later positions from each query: scaled_dot_product_attention(q, k, v, is_causal=True); nn.TransformerEncoder(x, mask=nn.Transformer.generate_square_subsequent_mask(T), is_causal=True); by hand, scores.masked_fill(torch.ones(T, T).tril() == 0, float('-inf')) before the softmax; a language model's RNN runs one way; a convolution pads on the left only (F.pad(x, ((k - 1) * dilation, 0)) with padding=0, or trims the right end of a symmetric padding: out[..., :-(k - 1) * dilation])",
    "target-in-features": "drop the target from the features (X = data[:, :-1], y = data[:, -1]; a window over a series ends before the value it predicts); score the model on inputs built without it",
    "targets-not-shifted": "train position i on token i + 1: logits[:, :-1] against ids[:, 1:] (or inputs chunk[:-1] and targets chunk[1:]); a transformers causal LM shifts labels=ids itself",
    "end-token-missing": "end each text with the end-of-text token before padding it (text + tokenizer.eos_token, or add_eos_token=True for Llama's tokenizer; attended, with its label kept), so the model learns where a text ends",
    "end-token-masked": "mask the padding by position, not by id: labels[attention_mask == 0] = -100 keeps each text's end token a target (or give the tokenizer a padding token of its own, tokenizer.add_special_tokens({'pad_token': '<pad>'}) with the embeddings resized)",
    "targets-shifted-twice": "shift the ids once: a loss that shifts them itself (a transformers causal LM's labels=, logits[:, :-1] against targets[:, 1:]) is given the input ids unshifted (labels=input_ids, targets=x); targets shifted in the data go with logits compared position for position",
    "dice-on-logits": "apply the sigmoid (softmax over the classes, for several) to the logits before the Dice or IoU ratio: p = torch.sigmoid(logits); dice = (2 * (p * t).sum() + s) / (p.sum() + t.sum() + s)",
    "dropout-in-eval": "pass training=self.training to F.dropout (or use an nn.Dropout module), so model.eval() turns it off",
    "ctc-targets-invalid": "number the labels from 1, keeping 0 for CTC's blank (or pass blank= the index it has), give target_lengths each target's own length, so padding past it is not read, and keep every label below C",
    "softmax-over-wrong-dim": "normalise over the classes: log_softmax(logits, dim=-1) (dim=1 for [N, C, ...]); a softmax without dim= on 3-D input normalises over dim 0",
    "clip-before-backward": "clip after loss.backward() and before optimizer.step(), so the step applies the clipped gradients",
    "gradients-off-by-loss-scale": "go through the scaler both ways: scaler.scale(loss).backward(), then scaler.step(optimizer) (after scaler.unscale_(optimizer) where the gradients are clipped) and scaler.update(); never optimizer.step() on a scaled loss's gradients, nor scaler.step on an unscaled loss's",
    "clip-before-unscale": "call scaler.unscale_(optimizer) before clipping, so the limit applies to the true gradients",
    "clip-no-parameters": "give the clip a list (params = list(model.parameters())) or call model.parameters() anew at each clip",
    "clip-by-weight-norm": "give get_total_norm the gradients, [p.grad for p in params if p.grad is not None], not the parameters (or clip with clip_grad_norm_(params, max_norm), which takes their gradients' norm itself)",
    "gradients-not-averaged": "wrap the model once, model = DistributedDataParallel(model, device_ids=[local_rank]), and call the wrapper in the loop (not model.module); or all_reduce the gradients before each step",
    "evaluation-on-one-shard": "evaluate the whole set: on process 0 over a loader without a DistributedSampler, or on every process over its share, all_reduce-ing the sums (correct, total) before the score",
    "same-data-on-every-process": "give each process its part of the data: DataLoader(dataset, sampler=DistributedSampler(dataset), ...) and sampler.set_epoch(epoch) each epoch (or shard the dataset by rank)",
    "worker-memory-copied": "keep the dataset in a few large objects that reading does not write to: NumPy arrays or tensors of its numbers (np.array of fixed-width strings, or one byte buffer and its offsets, for text; records pickled into one np.uint8 array with an offsets array), a memory-mapped file, or an Arrow table, in place of a list or dict of Python objects",
    "layer-built-in-forward": "build each layer once, in __init__ (self.fc = nn.Linear(320, 10)), and call it in forward (self.fc(x)); for a size known only from the first batch, nn.LazyLinear(10) (or build the layer from one batch run through the model before the optimiser is made); functions without weights (F.relu, F.dropout(x, p, self.training)) stay in forward",
    "state-dict-not-copied": "keep a copy: best = copy.deepcopy(model.state_dict()) (or {k: v.clone() for k, v in model.state_dict().items()}), then model.load_state_dict(best) at the end; or save the weights when they are best (torch.save(model.state_dict(), path)) and load that file",
    "targets-not-scaled": "standardise the targets with the training set's mean and standard deviation (y = (y - mean) / std) and map the predictions back for evaluation (pred * std + mean); or start the model at their scale: its last bias at their mean (model.head.bias.data.fill_(mean)), its output times their standard deviation",
    "logits-bounded": "scale bounded logits before cross_entropy: cosine similarities by a temperature (cos / 0.07, or a scale s of 16-64 as NormFace, CosFace and ArcFace use), or by a learned scale that starts there (CLIP's logit_scale at log(1 / 0.07), in the optimiser); drop a tanh, hardtanh or clamp after the last layer",
    "features-not-scaled": "standardise the features with the training set's mean and standard deviation (x = (x - mean) / std, the statistics kept for evaluation and serving), log1p first for counts and amounts with long tails; or put nn.BatchNorm1d(in_features) before the first layer",
    "bidirectional-last-step": "summarise a bidirectional RNN by both directions' final states, torch.cat([h_n[-2], h_n[-1]], dim=1) (the last layer's forward and backward), or out[:, -1, :H] with out[:, 0, H:], or pool over every step (a masked mean or max); not out[:, -1]",
    "same-data-in-every-worker": "split the stream between the workers in the dataset's __iter__: info = torch.utils.data.get_worker_info(), and where it is not None, rows = itertools.islice(rows, info.id, None, info.num_workers) (or give each worker its own files), as torch.utils.data's IterableDataset documentation shows",
}
CODES = tuple(FIXES)


@dataclass
class Finding:
    """One problem: a stable code, how bad it is, the numbers behind it, where, and the fix."""

    code: str
    severity: str
    message: str
    where: str = ""
    evidence: dict[str, Any] = field(default_factory=dict)
    fix: str = ""
    step: int = 0  # the step it was last seen at (its evidence that step's)
    first_step: int = 0  # the step it was first seen at

    def __post_init__(self) -> None:
        if self.code not in FIXES or self.severity not in SEVERITIES:
            raise ValueError(f"bad finding {self.code!r}/{self.severity!r}")
        self.fix = self.fix or FIXES[self.code]

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


RUN_WIDE = (
    "step-time-regression",
    "memory-growth",
    "heap-retention",
    "input-bound",
    "hot-op",
    "device-idle",
    "loss-at-init",
)
"""Findings on the whole run (timings, memory, profiles): one each, updated as it grows."""


def key_of(code: str, where: str, message: str, evidence: dict[str, Any]) -> tuple[str, str]:
    """What makes a finding another one: a run-wide finding's kind (the operator family of a
    ``hot-op``), another finding's place (or its message's head, where it has none)."""
    if code in RUN_WIDE:
        return code, str(evidence.get("family", evidence.get("kind", "")))
    return code, where or message.split(":")[0]
