import re
import time
from itertools import combinations
from pathlib import Path

import pytest

from treeqa.data.demo import (
    DEMO_EXAMPLES,
    NEGATIONS,
    SPLITS,
    demo_sentence,
    demo_splits,
    generate,
    is_negated,
    write_demo,
)
from treeqa.data.tree import Tree, parse_tree, read_trees

WORD = re.compile(r"[a-z]+|\.")


@pytest.fixture(scope="module")
def splits() -> dict[str, list[Tree]]:
    return demo_splits()


def test_generated_lines_are_strict_sst_trees_labelled_by_the_rules() -> None:
    lines = generate(400, seed=0)
    assert len(lines) == 400
    for number, line in enumerate(lines, start=1):
        tree = parse_tree(line, "<generated>", number)
        assert tree.to_ptb() == line
        assert all(0 <= label <= 4 for label in tree.labels)
        assert all(len(kids) in (0, 2) for kids in tree.children)  # binary, as SST
        assert all(WORD.fullmatch(word) for word in tree.leaves)
        assert demo_sentence(tree.text()) == tree  # every node carries its rule label


def test_generate_is_deterministic_and_distinct() -> None:
    first = generate(300, seed=1)
    assert first == generate(300, seed=1)
    assert first != generate(300, seed=2)
    assert len({parse_tree(line).text() for line in first}) == 300


@pytest.mark.parametrize(
    ("text", "label"),
    [
        ("the movie is good", 3),
        ("the movie is brilliant", 4),
        ("the movie is dull", 1),
        ("the movie is awful", 0),
        ("the movie is long", 2),
        ("the movie is very good", 4),
        ("the movie is really brilliant", 4),  # +2 stays +2
        ("the movie is extremely dull", 0),
        ("the movie is truly awful", 0),
        ("the movie is very long", 2),  # neutral stays neutral
        ("the movie is not good", 1),
        ("the movie is not brilliant", 1),  # negation caps the magnitude at 1
        ("the movie is never dull", 3),
        ("the movie is hardly awful", 3),
        ("the movie is not long", 2),
        ("the movie is not very good", 1),
        ("the movie is not very dull", 3),
        ("the plot is dull but the acting is superb", 4),  # the second clause wins
        ("the plot is superb but the acting is dull", 1),
        ("the plot is awful but the acting is french", 2),
        ("the plot is not good but the acting is not bad .", 3),
    ],
)
def test_composition_rules(text: str, label: int) -> None:
    assert demo_sentence(text).label == label


def test_constituent_labels() -> None:
    tree = demo_sentence("the plot is dull but the acting is very good")
    by_text = {}
    for i in range(len(tree)):
        leaves = [w for w in tree.words[i : i + int(tree.size[i])] if w is not None]
        by_text[" ".join(leaves)] = int(tree.labels[i])
    assert by_text["but the acting is very good"] == 4  # "but ..." carries the second clause
    assert by_text["the acting is very good"] == 4
    assert by_text["the plot is dull"] == 1
    assert by_text["the plot"] == by_text["the acting"] == 2  # an NP is neutral
    assert by_text["is dull"] == 1  # the VP takes the adjective phrase's label
    assert by_text["very good"] == 4
    assert by_text["but"] == by_text["very"] == by_text["is"] == 2
    assert tree.label == 4


def test_demo_sentence_accepts_case_and_a_final_full_stop() -> None:
    assert demo_sentence("The movie is good.") == demo_sentence("the movie is good .")
    assert demo_sentence("the movie is good .").to_ptb() == (
        "(3 (3 (2 (2 the) (2 movie)) (3 (2 is) (3 good))) (2 .))"
    )


@pytest.mark.parametrize(
    ("text", "culprit"),
    [
        ("", "expected a determiner"),
        ("the movie is rad", "'rad'"),
        ("the moive is good", "'moive'"),
        ("movie is good", "expected a determiner, found 'movie'"),
        ("the movie good", "expected a copula"),
        ("the movie is", "expected an adjective, found the end of the clause"),
        ("the movie is very not good", "expected an adjective, found 'not'"),
        ("the movie is good really", "'really' follows the adjective 'good'"),
        ("the movie is good but", "found the end of the clause"),
        ("the movie is good but the plot is dull but the cast is new", "at most one 'but'"),
        ("the movie is good . the plot is dull", "one final '.'"),
    ],
)
def test_demo_sentence_rejects_text_outside_the_grammar(text: str, culprit: str) -> None:
    with pytest.raises(ValueError, match="outside the demo grammar") as err:
        demo_sentence(text)
    assert culprit in str(err.value)


def test_demo_examples_match_the_rules() -> None:
    for line in DEMO_EXAMPLES:
        tree = parse_tree(line)
        assert demo_sentence(tree.text()).to_ptb() == line
    assert {parse_tree(line).label for line in DEMO_EXAMPLES} == {0, 1, 2, 3, 4}


def test_is_negated() -> None:
    assert is_negated(demo_sentence("the movie is not good"))
    assert is_negated(demo_sentence("the movie is good but the plot is never dull"))
    assert not is_negated(demo_sentence("the movie is very good"))


def test_splits_are_disjoint_and_cover_labels_negation_and_but(
    splits: dict[str, list[Tree]],
) -> None:
    assert [len(splits[s]) for s in SPLITS] == [2000, 300, 300]
    texts = {split: {t.text() for t in trees} for split, trees in splits.items()}
    assert [len(texts[s]) for s in SPLITS] == [2000, 300, 300]
    for a, b in combinations(SPLITS, 2):
        assert not texts[a] & texts[b]
    for trees in splits.values():
        assert {t.label for t in trees} == {0, 1, 2, 3, 4}
        assert any(is_negated(t) for t in trees)
        assert any("but" in t.leaves for t in trees)
    # the train split is the same stream `generate` gives for the same seed
    assert [t.to_ptb() for t in splits["train"]] == generate(2000, seed=13)


def test_tiny_splits_still_cover_every_label() -> None:
    for trees in demo_splits(seed=5, sizes=(5, 5, 5)).values():
        assert {t.label for t in trees} == {0, 1, 2, 3, 4}
        assert any(is_negated(t) for t in trees)
        assert any("but" in t.leaves for t in trees)


def _one_negation_fewer(text: str) -> set[str]:
    words = text.split()
    return {" ".join(words[:i] + words[i + 1 :]) for i, w in enumerate(words) if w in NEGATIONS}


def test_negated_sentences_come_with_their_twin(splits: dict[str, list[Tree]]) -> None:
    label = {t.text(): t.label for trees in splits.values() for t in trees}
    negated = [text for text in label if _one_negation_fewer(text)]
    # a twin of a sentence with two negations is itself negated: it is paired the other way
    twins_of_others = set().union(*(_one_negation_fewer(text) for text in negated))
    pairs = [(t, twin) for t in negated for twin in _one_negation_fewer(t) if twin in label]
    unpaired = {t for t in negated if t not in twins_of_others} - {t for t, _ in pairs}
    assert len(negated) > 300
    assert len(unpaired) <= len(SPLITS)  # only a split's last sentence may lose its twin
    # one word apart, different labels: what a bag-of-words model cannot fit
    assert any(label[t] != label[twin] for t, twin in pairs)


def test_write_demo_writes_sst_files(tmp_path: Path, splits: dict[str, list[Tree]]) -> None:
    paths = write_demo(tmp_path / "sst")
    assert sorted(p.name for p in paths.values()) == ["dev.txt", "test.txt", "train.txt"]
    for split, path in paths.items():
        raw = path.read_bytes()
        assert raw.endswith(b"\n") and b"\r" not in raw
        raw.decode("utf-8")
        assert read_trees(path) == splits[split]


def test_generation_is_fast() -> None:
    start = time.perf_counter()
    generate(2600, seed=3)
    assert time.perf_counter() - start < 1.0


def test_write_demo_never_replaces_another_treebank(tmp_path: Path) -> None:
    mine = tmp_path / "sst" / "train.txt"
    mine.parent.mkdir()
    mine.write_text("(4 (4 mine))\n")
    with pytest.raises(FileExistsError) as err:
        write_demo(mine.parent)
    assert str(err.value) == (
        f"{mine} exists and is not this demo treebank; write the demo into another folder"
    )
    assert mine.read_text() == "(4 (4 mine))\n" and not (mine.parent / "dev.txt").exists()
    first = write_demo(tmp_path / "demo")
    assert write_demo(tmp_path / "demo") == first  # the demo itself may be written again
