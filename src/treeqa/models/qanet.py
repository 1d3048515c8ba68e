"""QANet (Yu et al. 2018): reading comprehension from convolutions and self-attention only.

Shape letters: B batch, L context tokens, J question tokens, W characters per token, D model
width, E word-vector width, C character width, H attention heads. Leaf modules first, the
model last.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from treeqa.config import ConfigError, check_fields
from treeqa.data.qa_batch import QABatch
from treeqa.models.common import Dropout, Output

NEG = -1e30
"""Fill for masked scores: finite (unlike -inf) so a fully masked row never gives NaN, and
representable in float32 and bfloat16; scores are cast to float32 before it is applied."""


@dataclass(frozen=True)
class QANetConfig:
    name: str = "qanet"
    d_model: int = 128
    """Hidden size D of every encoder layer (paper: 128)."""
    heads: int = 8
    """Self-attention heads; D must divide by it (paper: 8)."""
    word_dim: int = 300
    """Width E of the fixed pretrained word vectors (paper: GloVe 300d); taken from the vectors.
    The table is a buffer, never a parameter, so ``train.emb_lr`` has no effect on QANet."""
    char_dim: int = 200
    """Width C of the trainable character embeddings and of the char-CNN output (paper: 200)."""
    char_kernel: int = 5
    """Kernel of the character convolution over the W characters of a word."""
    highway_layers: int = 2
    emb_blocks: int = 1
    emb_convs: int = 4
    emb_kernel: int = 7
    model_blocks: int = 7
    model_convs: int = 2
    model_kernel: int = 5
    model_passes: int = 3
    """Times the model-encoder stack is applied (shared weights), giving M0, M1, M2."""
    dropout: float = 0.1
    """Dropout between layers and on word embeddings (paper: 0.1)."""
    attention_dropout: float | None = None
    """Dropout on the self-attention weights; None = ``dropout``. The paper does not mention
    it; the reference TensorFlow implementation applies ``dropout`` there. 0 lets a CPU run use
    SDPA's fused kernel, which has no dropout (1.28x faster steps in a CPU run of the reduced
    model, the same F1 per step: benchmarks/results/qanet-cpu-curve.md)."""
    char_dropout: float = 0.05
    survival: float = 0.9
    """Stochastic depth: survival probability p_L of the last sublayer of a stack (sublayer l
    of L survives with 1 - l/L (1 - p_L)); 1 turns it off. Each of the model encoder's passes
    counts from l = 1 again, as the TensorFlow re-implementation does."""
    max_answer_len: int = 30
    """Longest span (tokens) considered when decoding."""
    no_answer: bool = False
    """SQuAD 2.0: add a learned no-answer slot at index L of both pointer distributions."""

    def __post_init__(self) -> None:  # checked when resolved, before any data is read
        sizes = ["d_model", "heads", "char_dim", "char_kernel", "emb_blocks", "emb_kernel"]
        sizes += ["model_blocks", "model_kernel", "max_answer_len", "emb_convs", "model_convs"]
        check_fields(
            self,
            "model",
            at_least=dict.fromkeys(sizes, 1)
            | {"dropout": 0, "char_dropout": 0, "highway_layers": 0},
            below={"dropout": 1, "char_dropout": 1},
        )
        for name in ("emb_kernel", "model_kernel"):  # "same" padding keeps the length if odd
            if getattr(self, name) % 2 == 0:
                raise ConfigError(f"model.{name}: expected an odd size, got {getattr(self, name)}")
        if not 0 < self.survival <= 1:  # the last layer's chance to be kept
            raise ConfigError(
                f"model.survival: expected more than 0, at most 1, got {self.survival}"
            )
        if self.d_model % self.heads or self.d_model % 2:
            raise ConfigError(
                f"model.d_model {self.d_model} must be even and divisible by model.heads "
                f"{self.heads}"
            )
        if self.model_passes < 2:
            raise ConfigError(
                "model.model_passes must be at least 2: the pointers read M0, M1 and the last M"
            )
        if not 0 <= (self.attention_dropout or 0) < 1:
            raise ConfigError(
                f"model.attention_dropout must be in [0, 1), got {self.attention_dropout}"
            )


def make_position_signal(
    length: int, dim: int, device: torch.device, dtype: torch.dtype
) -> torch.Tensor:
    """Sinusoidal timing signal [L, D] for any length."""
    with torch.inference_mode(False), torch.no_grad():
        half = dim // 2
        pos = torch.arange(length, device=device, dtype=torch.float32)[:, None]  # [L, 1]
        freq = torch.exp(-math.log(1e4) * torch.arange(half, device=device) / max(half - 1, 1))
        angles = pos * freq  # [L, D/2]
        return torch.cat([angles.sin(), angles.cos()], 1).to(dtype)  # [L, D]


position_signal = functools.lru_cache(maxsize=64)(make_position_signal)
"""``make_position_signal`` made once per (L, D, device, dtype): 23 blocks read it every
forward, and making it is 10 small operations (kernels on a GPU)."""


class PositionSignal(nn.Module):
    """Adds the timing signal once at a block's input. Never scales x by sqrt(D): inside a
    residual stack that multiplies activations by ~11 per block and the loss explodes."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x [B, L, D]
        # Compiled, the signal is part of the graph (Dynamo traces past an lru_cache, warning;
        # torch 2.4's cannot read the cache's __wrapped__ either).
        make = make_position_signal if torch.compiler.is_compiling() else position_signal
        return x + make(x.size(1), x.size(2), x.device, x.dtype)


class BlockMask(NamedTuple):
    """A sequence's padding in the two forms the encoder blocks read, made once per stack
    rather than in each of its sublayers (on a GPU each is a kernel)."""

    padding: torch.Tensor  # [B, L, 1] True at padding: zeroed before each convolution
    keys: torch.Tensor  # [B, 1, 1, L] True at real tokens: the attention's key mask

    @classmethod
    def of(cls, mask: torch.Tensor) -> BlockMask:  # mask [B, L], True = real token
        return cls(~mask[..., None], mask[:, None, None, :])


class DepthwiseSeparableConv(nn.Module):
    """A per-channel conv over the sequence, then a pointwise (1x1) mix: k*D + D*D weights
    instead of k*D*D, which is why QANet's convolutions are cheap."""

    def __init__(self, dim: int, out: int, kernel: int):
        super().__init__()
        self.depthwise = nn.Conv1d(dim, dim, kernel, padding=kernel // 2, groups=dim, bias=False)
        self.pointwise = nn.Linear(dim, out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x [B, L, D] -> [B, L, out]
        return self.pointwise(self.depthwise(x.transpose(1, 2)).transpose(1, 2))


class CharCNN(nn.Module):
    """Character embeddings [B, L, W, C] -> one vector per word [B, L, C]: a depthwise-separable
    1-D conv over the W characters, then max-pooling over them. The paper does not say which
    conv; the TensorFlow re-implementation's is dense (k*C*C weights, 4.9x these at C = 200)."""

    def __init__(self, dim: int, kernel: int):
        super().__init__()
        self.conv = DepthwiseSeparableConv(dim, dim, kernel)

    def forward(self, chars: torch.Tensor) -> torch.Tensor:
        b, n, w, c = chars.shape
        h = F.relu(self.conv(chars.reshape(b * n, w, c)))  # [B*L, W, C]
        return h.max(1).values.view(b, n, c)  # [B, L, C]


class Highway(nn.Module):
    def __init__(self, dim: int, layers: int, dropout: float):
        super().__init__()
        self.gates = nn.ModuleList(nn.Linear(dim, dim) for _ in range(layers))
        self.transforms = nn.ModuleList(nn.Linear(dim, dim) for _ in range(layers))
        self.drop = Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x [B, L, E+C]
        for gate, transform in zip(self.gates, self.transforms, strict=True):
            g = torch.sigmoid(gate(x))
            x = g * self.drop(F.relu(transform(x))) + (1 - g) * x
        return x


class Embedding(nn.Module):
    """Fixed word vectors (+ one trainable OOV row) and char-CNN vectors -> highway -> D: the
    highway on E+C, then the projection, as in the paper (the TF re-implementation projects first)."""

    word_vectors: torch.Tensor

    def __init__(self, config: QANetConfig, vocab_size: int, num_chars: int, vectors: torch.Tensor):
        super().__init__()
        # A buffer, not a parameter: the optimiser and EMA never see it, whatever emb_lr says.
        self.register_buffer("word_vectors", vectors)  # [V, E]
        self.word_oov = nn.Parameter(torch.empty(config.word_dim).uniform_(-0.05, 0.05))  # [E]
        self.char_emb = nn.Embedding(num_chars, config.char_dim, padding_idx=0)
        self.char_cnn: nn.Module = CharCNN(config.char_dim, config.char_kernel)
        self.highway = Highway(
            config.word_dim + config.char_dim, config.highway_layers, config.dropout
        )
        self.project = nn.Linear(config.word_dim + config.char_dim, config.d_model)
        self.word_drop, self.char_drop = Dropout(config.dropout), Dropout(config.char_dropout)

    def forward(self, words: torch.Tensor, chars: torch.Tensor) -> torch.Tensor:
        w = F.embedding(words, self.word_vectors)  # [B, L, E]
        w = torch.where((words == 1)[..., None], self.word_oov, w)  # index 1 = out of vocabulary
        c = self.char_cnn(self.char_drop(self.char_emb(chars)))  # [B, L, C]
        x = torch.cat([self.word_drop(w), c], 2)  # [B, L, E+C]
        return self.project(self.highway(x))  # [B, L, D]


class EncoderBlock(nn.Module):
    """Position signal, then [conv]*n, self-attention, feed-forward; each as
    x + dropout(f(layernorm(x))) with stochastic depth. ``first``/``total`` place the block's
    sublayers in the stack for their survival probabilities. (The TF re-implementation drops
    f's input instead, every other conv, and a kept f's output at its layer-drop rate.)"""

    def __init__(self, config: QANetConfig, convs: int, kernel: int, first: int, total: int):
        super().__init__()
        d = config.d_model
        self.position = PositionSignal()
        self.convs = nn.ModuleList(DepthwiseSeparableConv(d, d, kernel) for _ in range(convs))
        self.norms = nn.ModuleList(nn.LayerNorm(d) for _ in range(convs + 2))
        self.qkv, self.out = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.ffn = nn.Sequential(nn.Linear(d, d), nn.ReLU(), nn.Linear(d, d))
        self.heads = config.heads
        p = config.attention_dropout
        self.attn_dropout = config.dropout if p is None else p
        self.drop = Dropout(config.dropout)
        p_last = config.survival
        self.survival = [1 - (first + i + 1) / total * (1 - p_last) for i in range(convs + 2)]

    def attend(self, x: torch.Tensor, mask: BlockMask) -> torch.Tensor:
        b, n, d = x.shape
        qkv = self.qkv(x).view(b, n, 3, self.heads, d // self.heads)  # [B, L, 3, H, D/H]
        q, k, v = qkv.permute(2, 0, 3, 1, 4)  # [B, H, L, D/H] each
        p = self.attn_dropout if self.training else 0.0
        # Key padding mask [B, 1, 1, L]: SDPA picks a fused kernel where the device has one.
        h = F.scaled_dot_product_attention(q, k, v, attn_mask=mask.keys, dropout_p=p)
        return self.out(h.transpose(1, 2).reshape(b, n, d))  # [B, L, D]

    def sublayer(self, i: int, x: torch.Tensor, mask: BlockMask) -> torch.Tensor:
        h = self.norms[i](x)
        if i < len(self.convs):
            # Zero padding first so it never leaks into real tokens through the kernel:
            # batched outputs then equal one-at-a-time outputs.
            return F.relu(self.convs[i](h.masked_fill(mask.padding, 0.0)))
        return self.attend(h, mask) if i == len(self.convs) else self.ffn(h)

    def forward(self, x: torch.Tensor, mask: BlockMask) -> torch.Tensor:  # x [B, L, D]
        x = self.position(x)
        for i, p in enumerate(self.survival):
            if not self.training or p >= 1:
                x = x + self.drop(self.sublayer(i, x, mask))
            elif torch.compiler.is_compiling():
                # Under torch.compile a host-side branch would split the graph (and recompile
                # for every pattern of kept layers): the same draw as a 0/1 factor, work not saved.
                keep = (torch.rand((), device=x.device) < p).to(x.dtype)
                x = x + self.drop(self.sublayer(i, x, mask)) * (keep / p)
            elif float(torch.rand(())) < p:  # one draw per batch (paper); skipped work is saved
                # Scaled by 1/p in training so evaluation uses the full residual unchanged.
                x = x + self.drop(self.sublayer(i, x, mask)) / p
        return x


def encoder_stack(config: QANetConfig, blocks: int, convs: int, kernel: int) -> nn.ModuleList:
    total = blocks * (convs + 2)
    return nn.ModuleList(
        EncoderBlock(config, convs, kernel, b * (convs + 2), total) for b in range(blocks)
    )


class ContextQueryAttention(nn.Module):
    """Trilinear similarity S = w . [c; q; c*q] + b, then C2Q (A) and Q2C (B) attention.

    S is computed as (c @ w_c) + (q @ w_q)^T + (c * w_cq) @ q^T, never materialising the
    [B, L, J, 3D] tensor of the formula; ``w`` keeps that tensor's layout [w_c; w_q; w_cq].
    """

    def __init__(self, dim: int, dropout: float):
        super().__init__()
        self.w = nn.Parameter(
            torch.empty(3 * dim).uniform_(-1 / math.sqrt(dim), 1 / math.sqrt(dim))
        )
        self.bias = nn.Parameter(torch.zeros(()))
        self.drop = Dropout(dropout)

    def similarity(self, c: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
        w_c, w_q, w_cq = self.w.chunk(3)  # [D] each
        s = (c @ w_c)[:, :, None] + (q @ w_q)[:, None, :]  # [B, L, 1] + [B, 1, J]
        return s + (c * w_cq) @ q.transpose(1, 2) + self.bias  # [B, L, J]

    def forward(
        self, c: torch.Tensor, q: torch.Tensor, c_mask: torch.Tensor, q_mask: torch.Tensor
    ) -> torch.Tensor:  # c [B, L, D], q [B, J, D] -> [B, L, 4D]
        c, q = self.drop(c), self.drop(q)  # for the whole layer (TF re-implementation: S only)
        s = self.similarity(c, q).float()  # [B, L, J]; softmax in float32 under bf16 autocast
        c2q = s.masked_fill(~q_mask[:, None, :], NEG).softmax(2)  # [B, L, J] over the question
        q2c = s.masked_fill(~c_mask[:, :, None], NEG).softmax(1)  # [B, L, J] over the context
        c2q, q2c = c2q.to(q.dtype), q2c.to(q.dtype)
        a = c2q @ q  # [B, L, D]
        # (S1 S2^T) c evaluated as S1 (S2^T c): [B, J, D] in between instead of [B, L, L].
        b = c2q @ (q2c.transpose(1, 2) @ c)  # [B, L, D]
        return torch.cat([c, a, c * a, c * b], 2)


class Pointer(nn.Module):
    """Start logits from [M0; M1], end logits from [M0; M2]: raw scores, never probabilities."""

    def __init__(self, dim: int):
        super().__init__()
        self.start, self.end = nn.Linear(2 * dim, 1), nn.Linear(2 * dim, 1)

    def forward(self, m0: torch.Tensor, m1: torch.Tensor, m2: torch.Tensor) -> torch.Tensor:
        start = self.start(torch.cat([m0, m1], 2)).squeeze(2)  # [B, L]
        end = self.end(torch.cat([m0, m2], 2)).squeeze(2)  # [B, L]
        return torch.stack([start, end], 1)  # [B, 2, L]


def span_loss(
    logits: torch.Tensor, starts: torch.Tensor, ends: torch.Tensor, no_answer: bool
) -> torch.Tensor | None:
    """Mean CE(start) + mean CE(end) over labelled rows; None if no row is labelled.

    logits [B, 2, L] (or [B, 2, L+1] with the no-answer slot at L), starts/ends [B] with -1
    = no answer: the slot's target with ``no_answer``, otherwise ignored.
    """
    length = logits.size(2) - int(no_answer)
    bad = (starts < 0) | (ends < 0) | (starts >= length) | (ends >= length)
    fill = length if no_answer else -1
    starts, ends = starts.masked_fill(bad, fill), ends.masked_fill(bad, fill)
    # (Not checked under torch.compile, where reading it back would split the graph.)
    if not torch.compiler.is_compiling() and not bool((starts >= 0).any()):
        return None
    return F.cross_entropy(logits[:, 0], starts, ignore_index=-1) + F.cross_entropy(
        logits[:, 1], ends, ignore_index=-1
    )


class QANet(nn.Module):
    """``forward(batch) -> Output(logits [B, 2, L], loss)``: start and end logits stacked;
    with ``config.no_answer`` the logits are [B, 2, L+1], index L being the no-answer slot.
    Padded positions hold NEG. Loss is CE(start) + CE(end), each averaged over the batch."""

    def __init__(
        self,
        config: QANetConfig,
        vocab_size: int,
        num_chars: int,
        vectors: np.ndarray | torch.Tensor | None = None,
    ):
        super().__init__()
        table = torch.zeros(vocab_size, config.word_dim)
        if vectors is not None:
            if tuple(vectors.shape) != tuple(table.shape):
                raise ValueError(
                    f"vectors have shape {list(vectors.shape)}, expected [{vocab_size}, "
                    f"{config.word_dim}] (vocab_size, model.word_dim): set word_dim to the "
                    "vectors' width"
                )
            table.copy_(torch.as_tensor(vectors, dtype=torch.float32))
        table[0] = 0.0  # padding
        self.config = config
        # Stochastic depth leaves some sublayers' weights unused at a step (data-parallel
        # training must then look for them: ``train/distributed.py``).
        self.skips_weights = config.survival < 1
        d = config.d_model
        self.embedding = Embedding(config, vocab_size, num_chars, table)
        self.embedding_encoder = encoder_stack(
            config, config.emb_blocks, config.emb_convs, config.emb_kernel
        )
        self.cq_attention = ContextQueryAttention(d, config.dropout)
        self.resize = nn.Linear(4 * d, d)
        self.model_encoder = encoder_stack(
            config, config.model_blocks, config.model_convs, config.model_kernel
        )
        self.pointer = Pointer(d)
        self.no_answer_head = nn.Linear(3 * d, 2) if config.no_answer else None
        self.drop = Dropout(config.dropout)

    def encode(self, words: torch.Tensor, chars: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        x = self.embedding(words, chars)  # [B, L, D]; context and question share these weights
        masks = BlockMask.of(mask)
        for block in self.embedding_encoder:
            x = block(x, masks)
        return x

    def forward(self, batch: QABatch) -> Output:
        c_mask, q_mask = batch.context_words != 0, batch.question_words != 0  # [B, L], [B, J]
        c = self.encode(batch.context_words, batch.context_chars, c_mask)  # [B, L, D]
        q = self.encode(batch.question_words, batch.question_chars, q_mask)  # [B, J, D]
        x = self.resize(self.cq_attention(c, q, c_mask, q_mask))  # [B, L, D]
        m, masks = [], BlockMask.of(c_mask)
        for _ in range(self.config.model_passes):  # one stack, shared weights (paper)
            x = self.drop(x)  # before every pass (the TF re-implementation: every other one)
            for block in self.model_encoder:
                x = block(x, masks)
            m.append(x)
        logits = self.pointer(m[0], m[1], m[-1]).float()  # [B, 2, L]
        mask = c_mask
        if self.no_answer_head is not None:
            pooled = (
                torch.cat([m[0], m[1], m[-1]], 2)
                .float()
                .masked_fill(~c_mask[..., None], NEG)
                .max(1)
                .values
            )
            none = self.no_answer_head(pooled).float()  # [B, 2]: start and end slot scores
            logits = torch.cat([logits, none[:, :, None]], 2)  # [B, 2, L+1]
            mask = F.pad(c_mask, (0, 1), value=True)  # [B, L+1]
        logits = logits.masked_fill(~mask[:, None, :], NEG)
        return Output(
            logits, span_loss(logits, batch.starts, batch.ends, self.no_answer_head is not None)
        )
