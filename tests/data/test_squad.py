"""SQuAD reading, tokenisation with offsets, preparation to arrays and batching, on tiny
fixtures written here (v1.1 and v2.0)."""

from __future__ import annotations

import errno
import gzip
import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from treeqa.data.squad import (
    ReadStats,
    SquadFormatError,
    answer_token_span,
    iter_articles,
)

C1 = "The U.S. Army's well-known base is in Fort Bragg. It opened in 1918."
C2 = "Fort Bragg  covers\n251 square miles of North Carolina."
C3 = "Paris is the capital of France. " * 4  # 28 tokens: over the test context limit
C4 = "Beyonce sang at the half-time show in 2016."


def qa(qid: str, question: str, context: str, *answers: str) -> dict[str, Any]:
    return {
        "id": qid,
        "question": question,
        "answers": [{"text": a, "answer_start": context.index(a)} for a in answers],
    }


def squad_v1() -> dict[str, Any]:
    return {
        "data": [
            {
                "title": "Fort_Bragg",
                "paragraphs": [
                    {
                        "context": C1,
                        "qas": [
                            qa("q1", "Where is the U.S. Army's base?", C1, "Fort Bragg"),
                            qa("q2", "When did it open?", C1, "1918", "in 1918"),
                            qa("q3", "What kind of base is it?", C1, "well-known"),
                            qa("q4", "What did it do in 1918?", C1, "ope"),  # part of a token
                        ],
                    },
                    {"context": C2, "qas": [qa("q5", "How big is it?", C2, "251 square miles")]},
                ],
            },
            {
                "title": "Paris",
                "paragraphs": [
                    {"context": C3, "qas": [qa("q6", "What is Paris?", C3, "the capital")]},
                    {"context": C4, "qas": [qa("q7", "When did she sing?", C4, "2016")]},
                ],
            },
        ],
        "version": "1.1",
    }


def squad_v2() -> dict[str, Any]:
    data = squad_v1()
    data["version"] = "v2.0"
    for article in data["data"]:
        for p in article["paragraphs"]:
            for q in p["qas"]:
                q["is_impossible"] = False
    data["data"][1]["paragraphs"][1]["qas"].append(
        {"id": "u1", "question": "Who sang in 2017?", "answers": [], "is_impossible": True,
         "plausible_answers": [{"text": "Beyonce", "answer_start": 0}]}
    )  # fmt: skip
    return data


def write(path: Path, data: Any) -> Path:
    text = json.dumps(data, indent=1)
    if path.suffix == ".gz":
        path.write_bytes(gzip.compress(text.encode()))
    else:
        path.write_text(text, encoding="utf-8")
    return path


def write_vectors(path: Path, words: list[str], dim: int = 4) -> Path:
    rng = np.random.default_rng(0)
    lines = [f"{w} " + " ".join(f"{x:.4f}" for x in rng.normal(size=dim)) for w in words]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


VECTOR_WORDS = ["the", "u.s.", "army", "fort", "bragg", "1918", "paris", "of", "is", "?", "."]


# --- reader ------------------------------------------------------------------------------


def test_reader_streams_articles_from_plain_and_gzip_files(tmp_path: Path) -> None:
    for name in ("a.json", "a.json.gz"):
        stats = ReadStats()
        articles = list(iter_articles(write(tmp_path / name, squad_v1()), stats=stats))
        assert [a.title for a in articles] == ["Fort_Bragg", "Paris"]
        q2 = articles[0].paragraphs[0].questions[1]
        assert q2.id == "q2" and [a.text for a in q2.answers] == ["1918", "in 1918"]
        assert (stats.articles, stats.paragraphs, stats.questions) == (2, 4, 7)
        assert stats.squad_version == "v1.1" and stats.version == "1.1"


def test_reader_reads_v2_and_version_before_data(tmp_path: Path) -> None:
    data = squad_v2()
    text = json.dumps({"version": data["version"], "data": data["data"]})  # v2.0 key order
    (tmp_path / "v2.json").write_text(text)
    stats = ReadStats()
    articles = list(iter_articles(tmp_path / "v2.json", stats=stats))
    u1 = articles[1].paragraphs[1].questions[-1]
    assert u1.is_impossible and u1.answers == ()
    assert stats.unanswerable == 1 and stats.squad_version == "v2.0"


def test_broken_json_names_file_line_and_column(tmp_path: Path) -> None:
    text = json.dumps(squad_v1(), indent=1).replace('"q5",', '"q5"', 1)
    line = text[: text.index('"q5"')].count("\n") + 2  # the error is on the next key
    (tmp_path / "bad.json").write_text(text)
    with pytest.raises(SquadFormatError, match=rf"bad\.json:{line}:\d+: Expecting ','"):
        list(iter_articles(tmp_path / "bad.json"))
    (tmp_path / "cut.json").write_text(text[:-200])
    with pytest.raises(SquadFormatError, match=r"cut\.json:\d+:\d+:"):
        list(iter_articles(tmp_path / "cut.json"))
    (tmp_path / "list.json").write_text("[]")
    with pytest.raises(SquadFormatError, match="expected '{'"):
        list(iter_articles(tmp_path / "list.json"))


@pytest.mark.parametrize("packed", [False, True])
def test_a_file_not_utf8_names_the_line_and_column_of_the_bad_byte(
    tmp_path: Path, packed: bool
) -> None:
    # Saved as Latin-1 by an editor: "é" is one byte, not UTF-8's two. A byte-order mark
    # before it moves no column; gzip moves no line.
    text = json.dumps(squad_v1(), indent=1).replace("Fort Bragg", "Fort Bragé", 1)
    line = text[: text.index("Bragé")].count("\n") + 1
    column = text.index("Bragé") - text.rfind("\n", 0, text.index("Bragé")) + 4
    data = b"\xef\xbb\xbf" + text.encode("latin-1")
    path = tmp_path / ("latin1.json.gz" if packed else "latin1.json")
    path.write_bytes(gzip.compress(data) if packed else data)
    with pytest.raises(SquadFormatError, match=rf"latin1\.json(\.gz)?:{line}:{column}: not UTF-8"):
        list(iter_articles(path))


def test_damaged_gzip_deep_nesting_and_huge_integers_are_format_errors(tmp_path: Path) -> None:
    packed = bytearray(gzip.compress(json.dumps(squad_v1()).encode()))
    packed[20:40] = bytes(b ^ 0x55 for b in packed[20:40])  # a damaged deflate stream
    (tmp_path / "damaged.json.gz").write_bytes(bytes(packed))
    with pytest.raises(SquadFormatError, match=r"damaged\.json\.gz: cannot read the file"):
        list(iter_articles(tmp_path / "damaged.json.gz"))
    text = json.dumps(squad_v1())
    (tmp_path / "deep.json").write_text(text.replace('"data": [', '"x": ' + "[" * 100_000
                                                     + "]" * 100_000 + ', "data": [', 1))  # fmt: skip
    with pytest.raises(SquadFormatError, match=r"deep\.json:1:\d+: JSON nested too deeply"):
        list(iter_articles(tmp_path / "deep.json"))
    start = '"answer_start": ' + str(C1.index("1918"))
    (tmp_path / "long.json").write_text(text.replace(start, '"answer_start": ' + "9" * 5000, 1))
    with pytest.raises(SquadFormatError, match=r"long\.json:1:\d+: .*digits"):
        list(iter_articles(tmp_path / "long.json"))


def test_a_field_given_twice_is_an_error_at_its_article(tmp_path: Path) -> None:
    # json.loads keeps the last value: this id would have replaced "q7", silently.
    text = json.dumps(squad_v1()).replace('"id": "q7"', '"id": "q7", "id": "q8"')
    (tmp_path / "twice.json").write_text(text)
    with pytest.raises(
        SquadFormatError, match=r"twice\.json:1:\d+: a field is given twice \('id'\)"
    ):
        list(iter_articles(tmp_path / "twice.json"))


def test_a_top_level_field_given_twice_or_not_a_string_is_an_error(tmp_path: Path) -> None:
    # Two files joined by hand: both "data" lists were read, where JSON keeps the last.
    text = json.dumps(squad_v1())
    (tmp_path / "twice.json").write_text(text[:-1] + ', "data": []}')
    with pytest.raises(SquadFormatError, match=r"twice\.json:1:\d+: .*twice \('data'\) at the top"):
        list(iter_articles(tmp_path / "twice.json"))
    (tmp_path / "key.json").write_text('{"data": [], 5: 1}')  # no JSON: it was read
    with pytest.raises(SquadFormatError, match=r"key\.json:1:14: expected a field name"):
        list(iter_articles(tmp_path / "key.json"))


def test_a_lone_surrogate_names_its_question_or_article_or_is_counted(tmp_path: Path) -> None:
    # Decoded from "\ud800", it is no character and cannot be written out as UTF-8.
    data = squad_v1()
    data["data"][0]["paragraphs"][0]["qas"][1]["question"] = "When did it \ud800 open?"
    (tmp_path / "q.json").write_text(json.dumps(data))
    with pytest.raises(
        SquadFormatError, match=r"question 'q2': a lone surrogate .* in the question"
    ):
        list(iter_articles(tmp_path / "q.json"))
    data = squad_v1()
    data["data"][1]["paragraphs"][1]["context"] += " \udfff"
    (tmp_path / "c.json").write_text(json.dumps(data))
    with pytest.raises(SquadFormatError, match=r"Paris.*a lone surrogate .* in the context"):
        list(iter_articles(tmp_path / "c.json"))
    stats = ReadStats()
    kept = list(iter_articles(tmp_path / "c.json", skip_bad=True, stats=stats))
    assert sum(len(p.questions) for a in kept for p in a.paragraphs) == 6
    assert stats.skipped == {r"a lone surrogate (\ud800-\udfff) in the context": 1}


def test_answer_not_in_context_names_article_and_question_or_is_counted(tmp_path: Path) -> None:
    data = squad_v1()
    data["data"][1]["paragraphs"][1]["qas"][0]["answers"][0]["text"] = "2017"
    path = write(tmp_path / "bad.json", data)
    with pytest.raises(SquadFormatError) as err:
        list(iter_articles(path))
    assert "bad.json: data[1] ('Paris'): question 'q7': answer not in its context" in str(err.value)
    stats = ReadStats()
    articles = list(iter_articles(path, skip_bad=True, stats=stats))
    assert stats.skipped == {"answer not in its context at answer_start": 1}
    assert articles[1].paragraphs[1].questions == () and stats.questions == 6


def test_an_answer_start_that_misses_says_where_the_answer_is(tmp_path: Path) -> None:
    # Was only "answer not in its context at answer_start": an answer_start off by a few
    # characters (the common fault of hand-made data) had to be searched for by hand.
    data = squad_v1()
    answer = data["data"][1]["paragraphs"][1]["qas"][0]["answers"][0]
    context = data["data"][1]["paragraphs"][1]["context"]
    at = context.index(answer["text"])
    answer["answer_start"] = at + 2
    with pytest.raises(SquadFormatError) as err:
        list(iter_articles(write(tmp_path / "off.json", data)))
    said = f"answer not in its context at answer_start {at + 2} ({answer['text']!r} is at {at}, -2"
    assert said in str(err.value)
    answer["text"] = "nowhere in it"
    with pytest.raises(SquadFormatError, match="'nowhere in it' does not occur in the context"):
        list(iter_articles(write(tmp_path / "none.json", data)))


def test_unreadable_articles_and_paragraphs_are_not_counted_as_questions(tmp_path: Path) -> None:
    # Their questions cannot be counted: they are said apart, not added to "questions read".
    data = squad_v1()
    data["data"] += [{"title": "bad"}, "not an article"]
    data["data"][1]["paragraphs"].append({"context": "x", "qas": "not a list"})
    stats = ReadStats()
    list(iter_articles(write(tmp_path / "m.json", data), skip_bad=True, stats=stats))
    assert stats.questions == 7 and not stats.skipped
    assert stats.unreadable == {
        'malformed article (needs a "paragraphs" list)': 2,
        'malformed paragraph (needs "context" text and a "qas" list)': 1,
    }


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        (lambda q: q.pop("question"), "malformed question"),
        (lambda q: q.update(question=""), "question 'q7': empty question"),
        (lambda q: q.update(question=" \n\u3000"), "question 'q7': empty question"),
        (lambda q: q.update(question="\u200b\ufeff\x00"), "question 'q7': empty question"),
        (lambda q: q.update(id="q1"), "duplicate question id"),
        (lambda q: q.update(answers=[]), "no answers"),
        (lambda q: q["answers"][0].update(answer_start="3"), "malformed answer"),
    ],
)
def test_malformed_questions_are_errors(tmp_path: Path, change: Any, reason: str) -> None:
    data = squad_v1()
    change(data["data"][1]["paragraphs"][1]["qas"][0])
    with pytest.raises(SquadFormatError, match=reason):
        list(iter_articles(write(tmp_path / "m.json", data)))


@pytest.mark.parametrize("context", [" \n ", "\u200b\u200c \u2060"])  # nothing visible
def test_an_empty_context_is_an_error_or_skips_its_questions(tmp_path: Path, context: str) -> None:
    data = squad_v1()
    paragraph = data["data"][1]["paragraphs"][1]
    paragraph["context"] = context
    path = write(tmp_path / "blank.json", data)
    # (located as in the JSON, from 0, with the questions it holds)
    found = (
        r"blank.json: data\[1\] \('Paris'\): paragraphs\[1\]: empty context \(1 question: 'q7'\)"
    )
    with pytest.raises(SquadFormatError, match=found):
        list(iter_articles(path))
    stats = ReadStats()
    articles = list(iter_articles(path, skip_bad=True, stats=stats))
    assert stats.skipped == {"empty context": len(paragraph["qas"])}
    assert len(articles[1].paragraphs) == 1


# --- tokenisation ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tokenizer() -> Any:
    pytest.importorskip("spacy")
    from treeqa.data.squad import Tokenizer

    return Tokenizer()


def test_tokens_keep_offsets_abbreviations_and_split_hyphens(tokenizer: Any) -> None:
    tokens, spans = tokenizer.tokenize(C1)
    assert tokens[:6] == ["The", "U.S.", "Army", "'s", "well", "-"]
    assert tokens[-2:] == ["1918", "."]
    assert all(C1[s:e] == t for t, (s, e) in zip(tokens, spans.tolist(), strict=True))
    tokens, spans = tokenizer.tokenize(C2)  # a double space and a newline: no space tokens
    assert tokens[:4] == ["Fort", "Bragg", "covers", "251"]
    assert spans.dtype == np.int32 and spans.shape == (len(tokens), 2)


def test_answer_token_span_flags_partial_tokens(tokenizer: Any) -> None:
    _, spans = tokenizer.tokenize(C1)
    start = C1.index("Fort Bragg")
    assert answer_token_span(spans, C1, start, start + 10) == (10, 11, True)
    assert answer_token_span(spans, C1, start - 1, start + 10) == (10, 11, True)  # " Fort Bragg"
    start = C1.index("ope")
    assert answer_token_span(spans, C1, start, start + 3) == (14, 14, False)
    assert answer_token_span(spans, C1, 3, 4) is None  # one space


# --- preparation -------------------------------------------------------------------------


def prepare(tmp_path: Path, train: dict[str, Any], dev: dict[str, Any], **options: Any) -> Path:
    from treeqa.data.squad_prepare import Limits, prepare_squad

    tmp_path.mkdir(exist_ok=True)
    out = tmp_path / "prepared"
    options.setdefault("limits", Limits(context=20, question=9, answer=3))
    prepare_squad(
        write(tmp_path / "train.json.gz", train),
        write(tmp_path / "dev.json", dev),
        write_vectors(tmp_path / "vectors.txt", VECTOR_WORDS),
        out,
        vectors_cache=tmp_path / "cache",
        **options,
    )
    return out


def test_prepare_drops_long_train_examples_but_keeps_every_dev_question(tmp_path: Path) -> None:
    pytest.importorskip("spacy")
    from treeqa.data.squad_prepared import PreparedSplit, load_meta

    out = prepare(tmp_path, squad_v1(), squad_v1())
    meta = load_meta(out)
    train, dev = meta["splits"]["train"], meta["splits"]["dev"]
    # q6: 28-token context > 20; q5: answer of 3 tokens fits; q3 "well-known" is 3 tokens.
    assert train["dropped"] == {"context_too_long": 1}
    assert (train["examples"], train["paragraphs"]) == (6, 3)
    assert (dev["examples"], dev["paragraphs"], dev["dropped"]) == (7, 4, {})
    assert train["answers_not_whole_tokens"] == 1 and dev["max_context_tokens"] == 28
    d = PreparedSplit(out, "dev")
    gold = {
        q["id"]: q["answers"] for p in squad_v1()["data"] for g in p["paragraphs"] for q in g["qas"]
    }
    for row in range(len(d)):
        start, end = int(d.arrays["starts"][row]), int(d.arrays["ends"][row])
        text = d.answer_text(row, start, end)
        want = gold[d.question_id(row)][0]["text"]
        assert text == ("opened" if want == "ope" else want)
    assert d.context(4) == C2 and d.question_id(5) == "q6"


def test_prepared_arrays_vocab_and_vectors(tmp_path: Path) -> None:
    pytest.importorskip("spacy")
    from treeqa.data.squad_prepared import PreparedSplit
    from treeqa.data.vocab import Vocab

    out = prepare(tmp_path, squad_v1(), squad_v1())
    t = PreparedSplit(out, "train")
    a = t.arrays
    n, tc = len(t), int(a["context_offsets"][-1])
    assert a["context_words"].dtype == np.int32 and a["context_words"].shape == (tc,)
    assert a["context_chars"].dtype == np.uint16 and a["context_chars"].shape == (tc, 16)
    assert a["context_spans"].shape == (tc, 2) and a["question_offsets"].shape == (n + 1,)
    assert a["question_chars"].shape == (int(a["question_offsets"][-1]), 16)
    words, chars = Vocab.load(out / "word_vocab.json"), Vocab.load(out / "char_vocab.json")
    # only tokens with a vector (exact or lower-cased) are words; "Army" finds "army"
    assert {"The", "the", "U.S.", "Army", "Fort", "?"} <= set(words.tokens)
    assert "known" not in words and "Beyonce" not in words
    vectors = np.load(out / "word_vectors.npy")
    assert vectors.shape == (len(words), 4) and not vectors[:2].any()
    table = {
        line.split()[0]: line.split()[1:]
        for line in (tmp_path / "vectors.txt").read_text().splitlines()
    }
    np.testing.assert_allclose(vectors[words.id("Army")], np.float32(table["army"]), rtol=1e-6)
    first = [words.tokens[i] for i in a["context_words"][:4]]
    assert first == ["The", "U.S.", "Army", "<unk>"]  # "'s" has no vector
    u_chars = [chars.tokens[i] for i in a["context_chars"][1] if i]
    assert u_chars == list("U.S.")
    assert "B" in chars and "P" not in chars  # only "Paris" has a "P"; its example was dropped


def test_v2_unanswerable_and_same_article_negatives(tmp_path: Path) -> None:
    pytest.importorskip("spacy")
    from treeqa.data.squad_prepared import PreparedSplit, load_meta

    out = prepare(tmp_path, squad_v2(), squad_v2(), negatives="same_article", negative_fraction=1.0)
    meta = load_meta(out)
    assert meta["version"] == "v2.0" and meta["splits"]["dev"]["unanswerable_examples"] == 1
    t, d = PreparedSplit(out, "train"), PreparedSplit(out, "dev")
    negatives = [r for r in range(len(t)) if t.question_id(r).endswith("#neg")]
    # q1-q5 pair with the other Fort_Bragg paragraph; q7's only partner (C3) is too long.
    assert meta["splits"]["train"]["negatives"] == len(negatives) == 5
    assert meta["splits"]["train"]["negatives_not_made"] == {"dropped_context_too_long": 1}
    for r in negatives:
        twin = [s for s in range(len(t)) if t.question_id(s) == t.question_id(r)[:-4]][0]
        assert t.arrays["starts"][r] == t.arrays["ends"][r] == -1
        assert t.context(r) != t.context(twin) and t.question(r) == t.question(twin)
    u1 = [r for r in range(len(d)) if d.question_id(r) == "u1"][0]
    assert d.arrays["starts"][u1] == -1 and d.answer_text(u1, -1, -1) == ""
    gold = d.gold()
    assert gold["version"] == "v2.0"
    assert gold["data"][1]["paragraphs"][0]["qas"][-1] == {
        "id": "u1",
        "answers": [],
        "is_impossible": True,
    }
    again = prepare(
        tmp_path / "again", squad_v2(), squad_v2(), negatives="same_article", negative_fraction=1.0
    )
    assert np.array_equal(np.load(again / "train" / "paragraph.npy"), t.arrays["paragraph"])


def test_made_negatives_never_take_an_id_of_the_files_questions(tmp_path: Path) -> None:
    pytest.importorskip("spacy")
    from treeqa.data.squad_prepared import PreparedSplit

    def ids(data: dict[str, Any], folder: str) -> list[str]:
        out = prepare(tmp_path / folder, data, squad_v2(), negatives="same_article",
                      negative_fraction=1.0)  # fmt: skip
        t = PreparedSplit(out, "train")
        return [t.question_id(r) for r in range(len(t))]

    plain = ids(squad_v2(), "plain")
    assert plain == ["q1", "q2", "q3", "q4", "q5", "q1#neg", "q2#neg", "q3#neg", "q4#neg",
                     "q5#neg", "q7", "u1"]  # fmt: skip
    data = squad_v2()
    fort_bragg, paris = (a["paragraphs"] for a in data["data"])
    fort_bragg[0]["qas"][2]["id"] = "q2#neg"  # q3, in q2's own article
    paris[1]["qas"][0]["id"] = "q1#neg"  # q7, read after q1's negative was made
    paris[1]["qas"][1]["id"] = "q1#neg2"  # u1: the next name is taken too
    # Each question's negative used to be named "ID#neg" whatever the file held: two rows
    # answered under one id, and --split train scored the negative's answer as q7's.
    renamed = ids(data, "renamed")
    assert renamed == ["q1", "q2", "q2#neg", "q4", "q5", "q1#neg3", "q2#neg2", "q2#neg#neg",
                       "q4#neg", "q5#neg", "q1#neg", "q1#neg2"]  # fmt: skip
    assert len(set(renamed)) == len(renamed)


def test_same_article_negatives_of_an_article_of_many_paragraphs_take_linear_time(
    tmp_path: Path,
) -> None:
    # Each question listed its article's other paragraphs: 20,000 short paragraphs in one
    # article (a data set of many small passages) took ~20 s here, 100,000 ten minutes.
    import time

    from treeqa.data.squad_features import Limits, SplitWriter

    def negatives(folder: str, paragraphs: int) -> list[tuple[int, int, int, int, str]]:
        writer = SplitWriter(tmp_path / folder, "train", Limits(), "same_article", 1.0, 0)
        examples = [(p, p, 0, 0, f"q{p}") for p in range(paragraphs)]
        return writer._negatives(7, examples, [10] * paragraphs)

    start = time.perf_counter()
    made = negatives("many", 20_000)
    assert time.perf_counter() - start < 2.0
    assert len(made) == 20_000 and all(other != int(qid[1:-4]) for other, *_, qid in made)
    assert len({other for other, *_ in made}) > 10_000  # drawn across the whole article
    # The same draws as listing the others and picking one of them by index.
    rng = np.random.default_rng([0, 7])
    listed = []
    for p in range(6):
        rng.random()
        others = [o for o in range(6) if o != p]
        listed.append(others[int(rng.integers(len(others)))])
    assert [other for other, *_ in negatives("few", 6)] == listed


def test_prepare_refuses_a_full_out_and_leaves_nothing_on_error(tmp_path: Path) -> None:
    pytest.importorskip("spacy")
    users = tmp_path / "prepared.partial"  # a folder of the user's, named like a work folder
    users.mkdir()
    (users / "notes.txt").write_text("kept")
    out = prepare(tmp_path, squad_v1(), squad_v1())
    assert (users / "notes.txt").read_text() == "kept"
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        ["prepared", "prepared.partial", "train.json.gz", "dev.json", "vectors.txt", "cache"]
    )
    with pytest.raises(FileExistsError):
        prepare(tmp_path, squad_v1(), squad_v1())
    bad = squad_v1()
    bad["data"][0]["paragraphs"][0]["qas"][0]["answers"][0]["answer_start"] += 1
    with pytest.raises(SquadFormatError, match="question 'q1'"):
        prepare(tmp_path, squad_v1(), bad, overwrite=True)
    assert (out / "meta.json").is_file() and not list(tmp_path.glob(".prepared.*"))
    said: list[str] = []
    prepare(tmp_path, squad_v1(), bad, overwrite=True, skip_bad=True, log=said.append)
    assert json.loads((out / "meta.json").read_text())["splits"]["dev"]["examples"] == 6
    assert "dev: 7 questions read (1 skipped), 6 examples kept" in said


def test_a_full_disk_while_the_arrays_are_written_is_an_error_not_a_crash(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Was SIGBUS: the arrays were memory-mapped into files whose disk space was never taken,
    # so a full disk killed the process at the first page it could not store.
    pytest.importorskip("spacy")
    out = prepare(tmp_path / "free", squad_v1(), squad_v2())
    arrays = {p.relative_to(out): p.read_bytes() for p in sorted(out.rglob("*.npy"))}

    def refuse(code: int) -> Any:
        def posix_fallocate(fd: int, offset: int, length: int) -> None:
            raise OSError(code, os.strerror(code))

        return posix_fallocate

    monkeypatch.setattr(os, "posix_fallocate", refuse(errno.ENOSPC), raising=False)
    with pytest.raises(OSError) as caught:
        prepare(tmp_path / "full", squad_v1(), squad_v2())
    assert str(caught.value) == (
        f"{(tmp_path / 'full' / 'prepared').resolve()}: could not be written "
        "(No space left on device); none was written"
    )
    assert caught.value.errno == errno.ENOSPC
    assert not list((tmp_path / "full").glob("*prepared*"))
    # A file system that cannot reserve space, or a system without the call, writes as before.
    for code in (errno.EOPNOTSUPP, errno.EINVAL, None):
        if code is None:
            monkeypatch.delattr(os, "posix_fallocate")
        else:
            monkeypatch.setattr(os, "posix_fallocate", refuse(code))
        again = prepare(tmp_path / f"refused-{code}", squad_v1(), squad_v2())
        assert {p.relative_to(again): p.read_bytes() for p in again.rglob("*.npy")} == arrays


def test_a_file_labelled_v2_with_no_unanswerable_question_gets_a_note(tmp_path: Path) -> None:
    pytest.importorskip("spacy")
    said: list[str] = []
    labelled = {**squad_v1(), "version": "v2.0"}
    prepare(tmp_path, squad_v1(), labelled, log=said.append)
    assert any('says version v2.0 but no question has "is_impossible"' in line for line in said)


def test_a_file_labelled_v1_with_unanswerable_questions_gets_a_note(tmp_path: Path) -> None:
    pytest.importorskip("spacy")
    said: list[str] = []
    labelled = {**squad_v2(), "version": "1.1"}
    prepare(tmp_path, squad_v1(), labelled, log=said.append)
    assert any('says version 1.1 but has questions marked "is_impossible"' in x for x in said)


def test_overwrite_deletes_nothing_the_user_put_in_out(tmp_path: Path) -> None:
    pytest.importorskip("spacy")
    from treeqa.data.squad_prepare import Limits, prepare_squad

    out = prepare(tmp_path, squad_v1(), squad_v1())
    before = {p.name for p in out.iterdir()}
    mine = write(out / "mytrain.json", squad_v1())  # an input kept inside the folder replaced
    with pytest.raises(FileExistsError, match=r"mytrain\.json is an input of this command"):
        prepare_squad(
            mine,
            tmp_path / "dev.json",
            tmp_path / "vectors.txt",
            out,
            limits=Limits(context=20, question=9, answer=3),
            vectors_cache=tmp_path / "cache",
            overwrite=True,
        )
    mine.rename(tmp_path / "mytrain.json")
    (out / "notes.txt").write_text("kept", encoding="utf-8")  # a file of the user's
    with pytest.raises(FileExistsError, match=r"also holds what .* did not write \(notes\.txt\)"):
        prepare(tmp_path, squad_v1(), squad_v1(), overwrite=True)
    assert (out / "notes.txt").read_text(encoding="utf-8") == "kept"
    (out / "notes.txt").unlink()
    prepare(tmp_path, squad_v1(), squad_v1(), overwrite=True)  # only its own files: replaced
    assert {p.name for p in out.iterdir()} == before


def test_a_split_being_read_keeps_its_data_when_the_folder_is_prepared_again(
    tmp_path: Path,
) -> None:
    # `prepare --overwrite` while `train qa` reads the folder: the memory-mapped arrays kept
    # the old files, but the texts, read at the first evaluation, came from the new folder:
    # another preparation's contexts and gold answers scored against the old arrays.
    pytest.importorskip("spacy")
    from treeqa.data.squad_prepared import PreparedSplit

    out = prepare(tmp_path, squad_v1(), squad_v1())
    dev = PreparedSplit(out, "dev")
    other = squad_v1()
    for article in other["data"]:
        for paragraph in article["paragraphs"]:
            paragraph["context"] = paragraph["context"].replace("Fort Bragg", "Fort Dixie")
            for q in paragraph["qas"]:
                for answer in q["answers"]:
                    answer["text"] = answer["text"].replace("Fort Bragg", "Fort Dixie")
    prepare(tmp_path, squad_v1(), other, overwrite=True)
    assert dev.context(0) == C1 and dev.answer_text(0, 10, 11) == "Fort Bragg"
    golds = [a["text"] for a in dev.gold()["data"][0]["paragraphs"][0]["qas"][0]["answers"]]
    assert golds == ["Fort Bragg"]
    assert PreparedSplit(out, "dev").context(0) == C1.replace("Fort Bragg", "Fort Dixie")
    with pytest.raises(ValueError, match=f"{out} was prepared again .* while it was being opened"):
        dev.check_unchanged()


def test_a_killed_preparations_work_folder_is_removed_by_the_next(tmp_path: Path) -> None:
    pytest.importorskip("spacy")
    import subprocess
    import sys

    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    left = tmp_path / f".prepared.{dead}.0a1b2c3d.partial"  # as a SIGKILL'd run leaves it
    running = tmp_path / f".prepared.{os.getpid()}.0a1b2c3d.partial"  # a run still going
    for work in (left, running):
        (work / "train").mkdir(parents=True)
    prepare(tmp_path, squad_v1(), squad_v1())
    assert not left.exists() and running.is_dir()


def test_batches_of_contexts_past_the_training_limit_hold_fewer_rows(tmp_path: Path) -> None:
    # Was 32 rows whatever their length: dev keeps every context, and a data set of long
    # documents ran out of memory in evaluation (attention's memory grows with B x L^2).
    pytest.importorskip("spacy")
    from treeqa.data.squad_prepared import PreparedSplit

    d = PreparedSplit(prepare(tmp_path, squad_v1(), squad_v1()), "dev")
    lengths = d.context_lengths
    d.meta["limits"]["context"] = int(lengths.max())
    assert len(d.batches(4)) == -(-len(d) // 4)  # every context within the limit: as before
    limit = int(lengths.min())  # now the shortest context is as long as one may be
    d.meta["limits"]["context"] = limit
    batches = d.batches(4)
    rows = batches.groups
    assert np.concatenate(rows).tolist() == np.argsort(lengths, kind="stable").tolist()
    for group in rows:
        longest = int(lengths[group].max())
        allowed = 4 if longest <= limit else max(1, 4 * limit * limit // longest**2)
        assert len(group) <= allowed
    assert any(len(group) < 4 for group in rows[:-1]) and int(lengths.max()) > limit


def test_batches_bucket_pad_to_their_own_length_and_match_one_at_a_time(tmp_path: Path) -> None:
    pytest.importorskip("spacy")
    from treeqa.data.squad_prepared import PreparedSplit

    d = PreparedSplit(prepare(tmp_path, squad_v1(), squad_v1()), "dev")
    batches = list(d.batches(3, shuffle=True, seed=4))
    rows = np.concatenate([b.index.numpy() for b in batches])
    assert sorted(rows.tolist()) == list(range(len(d)))
    again = np.concatenate([b.index.numpy() for b in d.batches(3, shuffle=True, seed=4)])
    assert np.array_equal(rows, again)
    for b in batches:
        lengths = d.context_lengths[b.index.numpy()]
        assert b.context_words.shape[1] == lengths.max()
        assert b.question_chars.shape[:2] == b.question_words.shape
        for i, row in enumerate(b.index.tolist()):
            one = d.batch([row])
            n = int(lengths[i])
            assert (b.context_words[i, :n] == one.context_words[0]).all()
            assert (b.context_words[i, n:] == 0).all() and (b.context_chars[i, n:] == 0).all()
            assert (b.context_chars[i, :n] == one.context_chars[0]).all()
            assert int(b.starts[i]) == int(d.arrays["starts"][row])
    for b in d.batches(3, shuffle=True, seed=4, pad_multiple=8):  # fixed shapes: multiples of 8
        same = d.batch(b.index.numpy())
        width, qwidth = same.context_words.shape[1], same.question_words.shape[1]
        assert b.context_words.shape[1] == -(-width // 8) * 8
        assert b.question_chars.shape[:2] == (len(b.index), -(-qwidth // 8) * 8)
        assert (b.context_words[:, :width] == same.context_words).all()
        assert (b.context_words[:, width:] == 0).all() and (b.question_chars[:, qwidth:] == 0).all()
    plain = list(d.batches(3, bucket=False))
    assert np.concatenate([b.index.numpy() for b in plain]).tolist() == list(range(len(d)))
