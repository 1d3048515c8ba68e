"""A token vocabulary that saves and loads as JSON."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

PAD, UNK = "<pad>", "<unk>"


@dataclass(frozen=True)
class Vocab:
    """Tokens in index order; index 0 is padding and index 1 the unknown token."""

    tokens: tuple[str, ...]
    index: dict[str, int] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.tokens[:2] != (PAD, UNK):
            raise ValueError(f"a Vocab starts with {PAD!r}, {UNK!r}; got {self.tokens[:2]!r}")
        if len(set(self.tokens)) != len(self.tokens):
            raise ValueError("a Vocab cannot hold a token twice")
        object.__setattr__(self, "index", {t: i for i, t in enumerate(self.tokens)})

    @classmethod
    def build(cls, tokens: Iterable[str], min_count: int = 1) -> Vocab:
        """Tokens seen at least ``min_count`` times, most frequent first (ties by first sight)."""
        counts = Counter(tokens)
        kept = [t for t, c in counts.most_common() if c >= min_count and t not in (PAD, UNK)]
        return cls((PAD, UNK, *kept))

    def __len__(self) -> int:
        return len(self.tokens)

    def __contains__(self, token: object) -> bool:
        return token in self.index

    def id(self, token: str) -> int:
        return self.index.get(token, 1)

    def ids(self, tokens: Iterable[str]) -> list[int]:
        return [self.index.get(t, 1) for t in tokens]

    def to_json(self) -> str:
        return json.dumps({"tokens": list(self.tokens)}, ensure_ascii=False)

    @classmethod
    def from_json(cls, text: str) -> Vocab:
        data = json.loads(text)
        if not isinstance(data, dict) or not isinstance(data.get("tokens"), list):
            raise ValueError('a Vocab JSON is an object {"tokens": [...]}')
        return cls(tuple(data["tokens"]))

    def save(self, path: str | Path) -> None:
        Path(path).write_text(self.to_json(), encoding="utf-8")

    @classmethod
    def load(cls, path: str | Path) -> Vocab:
        try:
            return cls.from_json(Path(path).read_text(encoding="utf-8"))
        except ValueError as err:  # broken JSON or UTF-8, or not a vocabulary
            raise ValueError(f"{path}: {err}") from err
