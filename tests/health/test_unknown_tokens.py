"""``tokens-mostly-unknown``: a text model whose token ids are mostly one id (a vocabulary and
a lookup that disagree), in training or in the evaluation alone; and batches whose commonest id
is padding, a frequent word, or a vocabulary too small to read."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch

from treeqa.health.unknown_tokens import dominant, special

Doctor = Callable[[str, str], list[dict[str, Any]]]
CODE = "tokens-mostly-unknown"
SCRIPT = """
import random
import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset

random.seed(0)
torch.manual_seed(0)
words = [f"w{i}" for i in range(1500)]


def sentence():
    label = random.random() < 0.5
    said = [random.choice(words[100:]) for _ in range(random.randint(6, 20))]
    for _ in range(2):
        said.insert(random.randrange(len(said)), random.choice(words[:50] if label else words[50:100]))
    return " ".join(said), int(label)


data = [sentence() for _ in range(1200)]
vocab = {"<pad>": 0, "<unk>": 1}
for text, _ in data[:1000]:
    for w in text.split():
        vocab.setdefault(BUILT, len(vocab))


def encode(text, table, length=24):
    ids = [table.get(w, 1) for w in text.split()][:length]
    return ids + [0] * (length - len(ids))


x = torch.tensor([encode(t, vocab) for t, _ in data[:1000]])
y = torch.tensor([label for _, label in data[:1000]])
held = torch.tensor([encode(t, HELD_VOCAB) for t, _ in data[1000:]])
loader = DataLoader(TensorDataset(x, y), batch_size=32, shuffle=True)
model = nn.Sequential(nn.Embedding(len(vocab), 16, padding_idx=0), nn.Flatten(), nn.Linear(16 * 24, 2))
opt = torch.optim.Adam(model.parameters(), 1e-3)
for epoch in range(2):
    for xb, yb in loader:
        loss = F.cross_entropy(model(xb), yb)
        opt.zero_grad()
        loss.backward()
        opt.step()
model.eval()
with torch.no_grad():
    for batch in held.split(50):
        model(batch)
"""


def _script(built: str = "w", held_vocab: str = "vocab") -> str:
    return SCRIPT.replace("BUILT", built).replace("HELD_VOCAB", held_vocab)


def test_a_vocabulary_built_one_way_and_looked_up_another_is_named(doctor: Doctor) -> None:
    script = _script(built="w.upper()")  # looked up with the words as they are
    found = doctor(script, CODE)
    assert len(found) == 1 and found[0]["severity"] == "warning"
    assert found[0]["evidence"]["id"] == 1 and found[0]["evidence"]["share"] >= 0.9
    assert "training batches" in found[0]["message"]
    line = script.splitlines().index("        loss = F.cross_entropy(model(xb), yb)") + 1
    assert found[0]["where"].endswith(f":{line}")


def test_an_evaluation_mapped_through_another_vocabulary_is_named(doctor: Doctor) -> None:
    found = doctor(_script(held_vocab="{w: i + 2 for i, w in enumerate(words[:300])}"), CODE)
    assert len(found) == 1 and "evaluation batches" in found[0]["message"]


def test_a_vocabulary_that_holds_the_words_is_not_named(doctor: Doctor) -> None:
    assert not doctor(_script(), CODE)


def test_only_an_id_where_vocabularies_keep_the_unknown_one_is_read() -> None:
    """The first four ids and the last: an image's background code, an item id, elsewhere."""
    assert special(0, 5000) and special(3, 5000) and special(4999, 5000)
    assert not special(4, 5000) and not special(377, 1024)


def test_padding_at_the_rows_ends_is_left_out() -> None:
    ids = torch.randint(2, 2000, (8, 30))
    ids[:, 10:] = 0  # padding, two thirds of every row
    top, share, tokens = dominant(ids, padding_idx=None)  # type: ignore[misc]
    assert tokens == 80 and share < 0.2
    left = torch.randint(2, 2000, (8, 30))
    left[:, :20] = 5  # padded on the left, with an id no padding_idx declares
    assert dominant(left, padding_idx=None)[2] == 80  # type: ignore[index]


def test_an_id_between_words_counts_even_where_it_pads_too() -> None:
    ids = torch.zeros(8, 30, dtype=torch.long)  # unknown and padding both 0
    ids[:, 0], ids[:, 5], ids[:, 12] = torch.arange(100, 108), 9, 11
    top, share, tokens = dominant(ids, padding_idx=0)  # type: ignore[misc]
    assert top == 0 and tokens == 8 * 13 and share == pytest.approx(10 / 13)
    unknown = torch.ones(8, 30, dtype=torch.long)  # unknown words at the start, padded with 0
    unknown[:, 6], unknown[:, 20:] = torch.arange(100, 108), 0
    assert dominant(unknown, padding_idx=0)[:2] == (1, 19 / 20)  # type: ignore[index]


def test_rows_all_padding_count_as_their_id() -> None:
    ids = torch.ones(8, 30, dtype=torch.long)
    ids[:2, :5] = 42
    assert dominant(ids, padding_idx=None)[:2] == (1, 1.0)  # type: ignore[index]


def test_too_few_tokens_or_short_rows_tell_nothing() -> None:
    assert dominant(torch.randint(0, 2000, (8, 4)), padding_idx=None) is None
    few = torch.zeros(4, 16, dtype=torch.long)
    few[:, :3] = torch.tensor([9, 10, 11])
    assert dominant(few, padding_idx=0) is None


@pytest.fixture
def doctor(doctor_script: Doctor) -> Doctor:
    return doctor_script
