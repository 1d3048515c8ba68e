"""Damage every reader of user input at random and sort what each failure looks like.

Each reader gets a small valid input written here (SST trees, dependency JSONL, SQuAD JSON
plain and gzipped, word vectors plain, gzipped and as a spaCy pair, the vectors cache, TOML
configs, predict inputs, serve requests, checkpoints, a prepared SQuAD folder), then ``--cases`` seeded mutations of it: byte
flips, truncation at a random offset, a line duplicated or deleted, garbage inserted (NUL, a
byte-order mark, CR, a lone UTF-8 lead byte, a bracket, a huge line, ...). The reader runs in
this process and each outcome is one of

  ok     read without complaint
  clean  refused by a ValueError/OSError (or the CLI's one-line ``error:`` with exit code 2)
         whose message names the file (or, for serve, a 4xx JSON error)
  BAD    any other exception (a traceback), a message without the file's name, a 5xx or no
         answer from the server, or more than --timeout seconds

BAD outcomes are grouped by exception type and the innermost treeqa frame, and one mutation
of each group is printed to reproduce it.

    python benchmarks/fuzz_readers.py --cases 200 --seed 0
    python benchmarks/fuzz_readers.py --readers sst,vectors --cases 50
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import io
import json
import random
import shutil
import signal
import socket
import sys
import tempfile
import threading
import time
import traceback
import warnings
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from treeqa.cli.main import main
from treeqa.config import shipped_configs

GARBAGE = [
    b"\x00", b"\xef\xbb\xbf", b"\r\n", b"\r", b"\xff\xfe", b"\xc3", b"\xe2\x80\xa8", b"(", b")",
    b"((", b"))", b'"', b"{", b"}", b"[", b"]", b",", b":", b"=", b"nan", b"inf", b"1e999", b"-",
    b" ", b"\t", b"\n\n", b"\\", b"99999999999999999999", b"-1", b"0x10", b"\x0c", b"\xa0",
    b"x" * 200_000,
]  # fmt: skip


class Hang(BaseException):
    """Raised by the alarm: a reader ran past --timeout (not an Exception, so none catches it)."""


def mutate(data: bytes, rng: random.Random) -> tuple[bytes, str]:
    """``data`` damaged one random way, and the way in words."""
    kind = rng.choice(["flip", "truncate", "dup_line", "del_line", "insert", "insert"])
    if kind == "flip" and data:
        out = bytearray(data)
        spots = [rng.randrange(len(out)) for _ in range(rng.randint(1, 3))]
        for at in spots:
            out[at] ^= rng.randint(1, 255)
        return bytes(out), f"flip at {spots}"
    if kind == "truncate":
        at = rng.randrange(len(data) + 1)
        return data[:at], f"truncate at {at}"
    lines = data.splitlines(keepends=True)
    if kind in ("dup_line", "del_line") and lines:
        i = rng.randrange(len(lines))
        if kind == "dup_line":
            return b"".join(lines[: i + 1] + lines[i:]), f"duplicate line {i + 1}"
        return b"".join(lines[:i] + lines[i + 1 :]), f"delete line {i + 1}"
    at = rng.randrange(len(data) + 1)
    junk = rng.choice(GARBAGE) if rng.random() < 0.8 else rng.randbytes(rng.randint(1, 8))
    return data[:at] + junk + data[
        at:
    ], f"insert {junk[:12]!r}{'...' if len(junk) > 12 else ''} at {at}"


def mutate_gz(data: bytes, rng: random.Random) -> tuple[bytes, str]:
    """``data`` gzipped and damaged, as ``mutate`` damages: half the time the compressed bytes,
    else the plain bytes, then gzipped."""
    if rng.random() < 0.5:
        return mutate(gzip.compress(data, mtime=0), rng)
    damaged, how = mutate(data, rng)
    return gzip.compress(damaged, mtime=0), how + " (then gzipped)"


@contextlib.contextmanager
def deadline(seconds: float) -> Iterator[None]:
    def ring(signum: int, frame: Any) -> None:
        raise Hang(f"over {seconds} s")

    old = signal.signal(signal.SIGALRM, ring)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def where(err: BaseException) -> str:
    """The innermost frame of treeqa's own code in ``err``'s traceback."""
    frames = [f for f in traceback.extract_tb(err.__traceback__) if "/treeqa/" in f.filename]
    if not frames:
        return "?"
    f = frames[-1]
    return f"{f.filename.split('/treeqa/', 1)[1]}:{f.lineno}"


def cli(argv: list[str], names: list[str], timeout: float) -> tuple[str, str]:
    """Run ``treeqa argv`` in this process: (outcome, detail). A refusal is clean when its
    message is one ``error:`` line naming one of ``names``."""
    out, err = io.StringIO(), io.StringIO()
    try:
        with deadline(timeout), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(argv)
    except Hang as hang:
        return "BAD", f"hang {hang} at {where(hang)}"
    except (Exception, SystemExit) as exc:
        return "BAD", f"{type(exc).__name__} at {where(exc)}: {str(exc)[:160]}"
    if code == 0:
        return "ok", ""
    message = err.getvalue().strip()
    lines = [line for line in message.splitlines() if "error:" in line]
    if code != 2 or not lines:
        return "BAD", f"exit {code}: {message[-200:]}"
    if not any(name in lines[-1] for name in names):
        return "BAD", f"no file named: {lines[-1][:200]}"
    return "clean", lines[-1][:200]


def call(fn: Callable[[], Any], names: list[str], timeout: float) -> tuple[str, str]:
    """Run a library reader: (outcome, detail)."""
    try:
        with deadline(timeout), contextlib.redirect_stdout(io.StringIO()):
            fn()
    except Hang as hang:
        return "BAD", f"hang {hang} at {where(hang)}"
    except (ValueError, OSError) as exc:
        if any(name in str(exc) for name in names):
            return "clean", str(exc)[:200]
        return "BAD", f"no file named: {type(exc).__name__} at {where(exc)}: {str(exc)[:160]}"
    except Exception as exc:
        return "BAD", f"{type(exc).__name__} at {where(exc)}: {str(exc)[:160]}"
    return "ok", ""


# ---------------------------------------------------------------------------------------------
# Fixtures: small valid inputs, and the tiny models that predict, evaluate and serve read.


def sentiment_run(root: Path, demo: Path) -> Path:
    argv = ["train", f"--data={demo}", "--model=tree_lstm", "--epochs=1", f"--out={root / 'tl'}"]
    argv += ["--model.embed_dim=8", "--model.hidden_dim=8", "--train.health=off"]
    with contextlib.redirect_stdout(io.StringIO()):
        assert main(argv) == 0
    return root / "tl"


QA = [
    ("Paris is the capital of France. The Seine flows through Paris.", "What river?", "Seine"),
    ("The cat sat on the mat in 1999. The dog slept in the garden.", "When?", "1999"),
    ("Water boils at 100 degrees. Ice melts at zero degrees.", "What melts?", "Ice"),
]


def squad_json(root: Path) -> Path:
    data: dict[str, Any] = {"version": "1.1", "data": []}
    for n, (context, question, answer) in enumerate(QA):
        qas = [{"id": f"q{n}", "question": question,
                "answers": [{"text": answer, "answer_start": context.index(answer)}]}]  # fmt: skip
        data["data"].append({"title": f"t{n}", "paragraphs": [{"context": context, "qas": qas}]})
    path = root / "squad.json"
    path.write_text(json.dumps(data, indent=1), encoding="utf-8")
    return path


def vectors_txt(root: Path, words: list[str]) -> Path:
    rng = np.random.default_rng(0)
    path = root / "vectors.txt"
    rows = [f"{w} {' '.join(f'{x:.3f}' for x in rng.normal(size=4))}\n" for w in sorted(words)]
    path.write_text("".join(rows), encoding="utf-8")
    return path


def qa_run(root: Path) -> tuple[Path, Path]:
    from treeqa.data.squad import Tokenizer
    from treeqa.data.squad_prepare import prepare_squad

    root.mkdir()
    squad = squad_json(root)
    words = {t for c, q, _ in QA for text in (c, q) for t in Tokenizer().tokenize(text)[0]}
    vectors = vectors_txt(root, sorted(words))
    prepared = root / "prepared"
    with contextlib.redirect_stdout(io.StringIO()):
        prepare_squad(squad, squad, vectors, prepared, vectors_cache=root / "cache")
    tiny = ["--model.d_model=16", "--model.heads=2", "--model.char_dim=8", "--model.emb_convs=1",
            "--model.model_blocks=1", "--model.model_convs=1", "--train.batch_size=3",
            "--train.epochs=1", "--train.device=cpu", "--train.health=off"]  # fmt: skip
    with contextlib.redirect_stdout(io.StringIO()):
        assert main(["train", "qa", f"--prepared={prepared}", f"--out={root / 'qa'}", *tiny]) == 0
    return root / "qa", prepared


def read_prepared(folder: Path) -> list[Any]:
    """Everything training, evaluation and serving read from a prepared folder."""
    from treeqa.data.squad_prepared import PreparedSplit

    seen: list[Any] = []
    for split in ("train", "dev"):
        s = PreparedSplit(folder, split)
        seen += [s.word_vocab().tokens, s.char_vocab().tokens, s.word_vectors().tolist(), s.gold()]
        for batch in s.batches(2, shuffle=False):
            seen += [t.tolist() for t in vars(batch).values()]
        for row in range(len(s)):
            seen += [s.answer_text(row, 0, 0), s.question(row), s.question_id(row)]
    return seen


# ---------------------------------------------------------------------------------------------
# Readers: each takes (work folder, damaged bytes, rng) and returns (outcome, detail).


class Readers:
    def __init__(self, root: Path, timeout: float, with_qa: bool):
        from treeqa.data.demo import write_demo

        self.root, self.timeout = root, timeout
        demo = root / "demo"
        write_demo(demo, sizes=(40, 12, 12))
        self.demo = demo
        self.trees = (demo / "train.txt").read_bytes()
        self.sent_run = sentiment_run(root, demo)
        self.sent_ckpt = (self.sent_run / "best.safetensors").read_bytes()
        from treeqa.data.dependency import from_record, write_dependency_trees

        rng = random.Random(0)
        records = []
        for _ in range(20):
            n = rng.randint(1, 6)
            records.append({"tokens": [rng.choice(["a", "good", "film"]) for _ in range(n)],
                            "tags": ["NN"] * n, "rels": ["ROOT"] + ["dep"] * (n - 1),
                            "heads": [-1] + [rng.randrange(i) for i in range(1, n)],
                            "labels": [rng.randint(0, 4) for _ in range(n)]})  # fmt: skip
        write_dependency_trees([from_record(r) for r in records], root / "dep.jsonl")
        self.dep = (root / "dep.jsonl").read_bytes()
        self.squad_bytes = squad_json(root).read_bytes()
        self.vectors_bytes = vectors_txt(root, ["the", "film", "good", "bad", "is"]).read_bytes()
        self.configs = [p.read_bytes() for p in sorted(shipped_configs().values())]
        self.qa = qa_run(root / "qa-fixture") if with_qa else None
        if self.qa:
            self.qa_ckpt = (self.qa[0] / "best.safetensors").read_bytes()
            self.prepared_files = sorted(
                p.relative_to(self.qa[1]) for p in self.qa[1].rglob("*") if p.is_file()
            )
            self.prepared_read = read_prepared(self.qa[1])
            lines = [json.dumps({"context": c, "question": q}) + "\n" for c, q, _ in QA]
            self.qa_jsonl = "".join(lines).encode()
        self.server: Any = None

    def case_dir(self) -> Path:
        path = Path(tempfile.mkdtemp(dir=self.root))
        return path

    # -- SST trees
    def sst_stats(self, rng: random.Random) -> tuple[bytes, str, tuple[str, str]]:
        data, how = mutate(self.trees, rng)
        folder = self.case_dir()
        path = folder / "train.txt"
        path.write_bytes(data)
        return data, how, cli(["data", "stats", str(path)], [str(path)], self.timeout)

    def sst_train(self, rng: random.Random) -> tuple[bytes, str, tuple[str, str]]:
        data, how = mutate(self.trees, rng)
        folder = self.case_dir()
        for split in ("dev", "test"):
            shutil.copy(self.demo / f"{split}.txt", folder / f"{split}.txt")
        (folder / "train.txt").write_bytes(data)
        argv = ["train", f"--data={folder}", "--model=bow", "--epochs=1", f"--out={folder / 'r'}"]
        argv += ["--model.embed_dim=4", "--train.health=off"]
        return data, how, cli(argv, [str(folder / "train.txt"), str(folder)], self.timeout)

    def dependency(self, rng: random.Random) -> tuple[bytes, str, tuple[str, str]]:
        data, how = mutate(self.dep, rng)
        path = self.case_dir() / "train.jsonl"
        path.write_bytes(data)
        return data, how, cli(["data", "stats", str(path)], [str(path)], self.timeout)

    # -- SQuAD JSON
    def squad(self, rng: random.Random, gz: bool = False) -> tuple[bytes, str, tuple[str, str]]:
        from treeqa.data.squad import iter_articles

        data, how = mutate_gz(self.squad_bytes, rng) if gz else mutate(self.squad_bytes, rng)
        path = self.case_dir() / ("squad.json.gz" if gz else "squad.json")
        path.write_bytes(data)
        return data, how, call(lambda: list(iter_articles(path)), [str(path)], self.timeout)

    def squad_gz(self, rng: random.Random) -> tuple[bytes, str, tuple[str, str]]:
        return self.squad(rng, gz=True)

    def squad_prepare(self, rng: random.Random) -> tuple[bytes, str, tuple[str, str]]:
        data, how = mutate(self.squad_bytes, rng)
        folder = self.case_dir()
        (folder / "train.json").write_bytes(data)
        (folder / "vectors.txt").write_bytes(self.vectors_bytes)
        argv = ["data", "prepare", "squad", f"--train={folder / 'train.json'}"]
        argv += [f"--dev={folder / 'train.json'}", f"--vectors={folder / 'vectors.txt'}"]
        argv += [f"--out={folder / 'p'}"]
        return data, how, cli(argv, [str(folder / "train.json")], self.timeout)

    # -- word vectors
    def vectors(self, rng: random.Random, gz: bool = False) -> tuple[bytes, str, tuple[str, str]]:
        from treeqa.data.vectors import load_vectors, width

        data, how = mutate_gz(self.vectors_bytes, rng) if gz else mutate(self.vectors_bytes, rng)
        folder = self.case_dir()
        path = folder / ("vectors.txt.gz" if gz else "vectors.txt")
        path.write_bytes(data)
        keys = ["the", "film", "good", "bad", "is", "zzz", None]

        def read() -> None:
            width(path)
            load_vectors(path, keys, cache_dir=folder / "cache")
            load_vectors(path, keys, cache_dir=folder / "cache2", on_bad_line="skip")

        return data, how, call(read, [str(path), path.name], self.timeout)

    def vectors_gz(self, rng: random.Random) -> tuple[bytes, str, tuple[str, str]]:
        return self.vectors(rng, gz=True)

    def vectors_spacy(self, rng: random.Random) -> tuple[bytes, str, tuple[str, str]]:
        """A spaCy pair (a [R, D] .npy table and its key2row TSV), one of the two damaged."""
        from treeqa.data.vectors import load_vectors

        folder = self.case_dir()
        words = ["the", "film", "good", "bad", "is"]
        table = np.random.default_rng(0).normal(size=(len(words), 4)).astype(np.float32)
        np.save(folder / "v.vectors.npy", table)
        (folder / "v.key2row.tsv").write_text("".join(f"{w}\t{i}\n" for i, w in enumerate(words)))
        path = folder / rng.choice(["v.vectors.npy", "v.key2row.tsv"])
        data, how = mutate(path.read_bytes(), rng)
        path.write_bytes(data)
        read = lambda: load_vectors(folder / "v.vectors.npy", words, cache_dir=folder / "c")  # noqa: E731
        return data, f"{path.name}: {how}", call(read, [str(path), path.name], self.timeout)

    def vectors_cache(self, rng: random.Random) -> tuple[bytes, str, tuple[str, str]]:
        """A damaged file of the vectors cache: it is read again from the vectors file. "clean"
        here is an entry refused with a warning naming its damaged file (its arrays fail the
        checksums written with them), then rebuilt."""
        from treeqa.data.vectors import load_vectors

        folder = self.case_dir()
        path = folder / "vectors.txt"
        path.write_bytes(self.vectors_bytes)
        keys = ["the", "film", "good", "bad", "is", "zzz", None]
        first = load_vectors(path, keys, cache_dir=folder / "c")
        entry = rng.choice(sorted((folder / "c").iterdir()))
        data, how = mutate(entry.read_bytes(), rng)
        entry.write_bytes(data)

        def read() -> None:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                again = load_vectors(path, keys, cache_dir=folder / "c")
            same = np.array_equal(again.matrix, first.matrix) and again.report == first.report
            if not same or not np.array_equal(again.found, first.found):
                raise RuntimeError("a damaged cache entry read as other vectors or report")
            if caught:
                raise ValueError(" / ".join(str(w.message) for w in caught))

        return data, f"{entry.name}: {how}", call(read, [entry.name], self.timeout)

    # -- TOML configs
    def config(self, rng: random.Random) -> tuple[bytes, str, tuple[str, str]]:
        from treeqa.cli import flags
        from treeqa.recipes import qa, sentiment

        original = rng.choice(self.configs)
        data, how = mutate(original, rng)
        path = self.case_dir() / "config.toml"
        path.write_bytes(data)
        resolve = qa.resolve_config if b"prepared" in original else sentiment.resolve_config
        return (
            data,
            how,
            call(lambda: flags.resolve_file(resolve, path, [], []), [str(path)], self.timeout),
        )

    # -- predict inputs
    def predict_trees(self, rng: random.Random) -> tuple[bytes, str, tuple[str, str]]:
        data, how = mutate(b"".join(self.trees.splitlines(keepends=True)[:8]), rng)
        path = self.case_dir() / "trees.txt"
        path.write_bytes(data)
        argv = ["predict", "--checkpoint", str(self.sent_run), "--input", str(path), "--json"]
        return data, how, cli(argv, [str(path)], self.timeout)

    def predict_tree_arg(self, rng: random.Random) -> tuple[bytes, str, tuple[str, str]]:
        line = self.trees.splitlines()[rng.randrange(10)]
        data, how = mutate(line, rng)
        text = data.decode("utf-8", "surrogateescape")
        argv = ["predict", "--checkpoint", str(self.sent_run), text]
        return data, how, cli(argv, ["<command line>", "nothing to predict"], self.timeout)

    def predict_qa(self, rng: random.Random) -> tuple[bytes, str, tuple[str, str]]:
        assert self.qa
        data, how = mutate(self.qa_jsonl, rng)
        path = self.case_dir() / "questions.jsonl"
        path.write_bytes(data)
        argv = ["predict", "qa", "--checkpoint", str(self.qa[0]), "--input", str(path), "--json"]
        return data, how, cli(argv, [str(path)], self.timeout)

    # -- checkpoints
    def checkpoint(
        self, rng: random.Random, qa: bool = False
    ) -> tuple[bytes, str, tuple[str, str]]:
        base = self.qa_ckpt if qa else self.sent_ckpt
        data, how = mutate(base, rng)
        source = self.qa[0] if qa and self.qa else self.sent_run
        run = self.case_dir() / "run"
        shutil.copytree(source, run, ignore=shutil.ignore_patterns("*.safetensors"))
        shutil.copy(source / "last.safetensors", run / "last.safetensors")
        (run / "best.safetensors").write_bytes(data)
        names = [str(run / "best.safetensors"), str(run)]
        if qa:
            argv = ["predict", "qa", "--checkpoint", str(run), "--context", QA[0][0],
                    "--question", QA[0][1]]  # fmt: skip
        elif rng.random() < 0.5:
            argv = ["predict", "--checkpoint", str(run), "((a) (good) (film))"]
        else:
            argv = ["evaluate", "--checkpoint", str(run), f"--data={self.demo}", "--split=dev"]
        return data, how, cli(argv, names, self.timeout)

    def checkpoint_qa(self, rng: random.Random) -> tuple[bytes, str, tuple[str, str]]:
        return self.checkpoint(rng, qa=True)

    def resume(self, rng: random.Random) -> tuple[bytes, str, tuple[str, str]]:
        data, how = mutate((self.sent_run / "last.safetensors").read_bytes(), rng)
        run = self.case_dir() / "run"
        shutil.copytree(self.sent_run, run)
        (run / "last.safetensors").write_bytes(data)
        argv = ["train", f"--resume={run}", "--epochs=2"]
        return data, how, cli(argv, [str(run / "last.safetensors"), str(run)], self.timeout)

    # -- a prepared SQuAD folder
    def prepared(self, rng: random.Random) -> tuple[bytes, str, tuple[str, str]]:
        """A damaged file of a prepared folder, read as training, evaluation and serving read
        it: what is read without complaint must be what the undamaged folder gives."""
        assert self.qa
        folder = self.case_dir() / "prepared"
        shutil.copytree(self.qa[1], folder)
        name = rng.choice(
            [p for p in self.prepared_files if p.suffix in (".json", ".npy", ".jsonl", ".txt")]
        )
        data, how = mutate((folder / name).read_bytes(), rng)
        (folder / name).write_bytes(data)
        how = f"{name}: {how}"

        def read() -> None:
            if read_prepared(folder) != self.prepared_read:
                raise RuntimeError(f"a damaged {name} read as other data")

        return data, how, call(read, [str(folder)], self.timeout)

    # -- serve requests
    def serve(self, rng: random.Random) -> tuple[bytes, str, tuple[str, str]]:
        from treeqa.serve.app import make_server
        from treeqa.serve.models import Models

        if self.server is None:
            runs = [self.sent_run] + ([self.qa[0]] if self.qa else [])
            self.server = make_server(Models(runs), "127.0.0.1", 0, quiet=True)
            threading.Thread(target=self.server.serve_forever, daemon=True).start()
        port = self.server.server_address[1]
        if self.qa and rng.random() < 0.5:
            path, body = "/api/qa", json.dumps({"context": QA[0][0], "question": QA[0][1]})
        else:
            path, body = "/api/sentiment", json.dumps({"tree": "((a) (good) (film))"})
        raw = body.encode()
        request = (
            f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(raw)}\r\nConnection: close\r\n\r\n"
        ).encode() + raw
        head = len(request) - len(raw)
        # Mostly the body; a third of the time the whole request, headers included.
        if rng.random() < 0.66:
            damaged, how = mutate(raw, rng)
            request = request[:head] + damaged
        else:
            request, how = mutate(request, rng)
        return request, how, self.ask(port, request)

    def ask(self, port: int, request: bytes) -> tuple[str, str]:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=self.timeout) as conn:
                conn.sendall(request)
                conn.shutdown(socket.SHUT_WR)
                reply = b""
                while chunk := conn.recv(65536):
                    reply += chunk
        except TimeoutError:
            return "BAD", "no answer in time"
        except OSError as err:
            return "BAD", f"connection: {err}"
        if not reply:
            return "BAD", "connection closed with no answer"
        status = reply.split(b"\r\n", 1)[0]
        try:
            code = int(status.split()[1])
        except (IndexError, ValueError):
            return "BAD", f"no status line: {reply[:80]!r}"
        if code < 400:
            return "ok", ""
        body = reply.split(b"\r\n\r\n", 1)[-1]
        try:
            message = json.loads(body)["error"]
        except (ValueError, KeyError, TypeError):
            message = None
        if code >= 500 and code != 501 or message is None:
            return "BAD", f"{status.decode('latin-1')}: {body[:160]!r}"
        return "clean", f"{code}: {message[:160]}"


READERS = {
    "sst": "sst_stats", "sst-train": "sst_train", "dependency": "dependency", "squad": "squad",
    "squad-gz": "squad_gz", "squad-prepare": "squad_prepare", "vectors": "vectors",
    "vectors-gz": "vectors_gz", "vectors-spacy": "vectors_spacy",
    "vectors-cache": "vectors_cache", "config": "config", "predict-trees": "predict_trees",
    "predict-tree-arg": "predict_tree_arg", "predict-qa": "predict_qa",
    "checkpoint": "checkpoint", "checkpoint-qa": "checkpoint_qa", "resume": "resume",
    "prepared": "prepared", "serve": "serve",
}  # fmt: skip
"""Reader name -> method of Readers."""
NEED_QA = {"squad-prepare", "predict-qa", "checkpoint-qa", "prepared"}
FEWER = {"sst-train": 4, "squad-prepare": 4, "resume": 4, "checkpoint": 2, "checkpoint-qa": 2}
"""Readers that train or tokenise per case: --cases divided by this."""


def main_fuzz() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", type=int, default=200, help="mutations per reader")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--readers", default=",".join(READERS), help="comma-separated names")
    parser.add_argument("--timeout", type=float, default=10.0, help="seconds before a hang")
    parser.add_argument("--keep", type=Path, help="write each BAD group's input here")
    args = parser.parse_args()
    names = args.readers.split(",")
    unknown = [n for n in names if n not in READERS]
    if unknown:
        parser.error(f"unknown readers: {', '.join(unknown)}")
    with tempfile.TemporaryDirectory() as tmp:
        readers = Readers(
            Path(tmp), args.timeout, with_qa=bool(NEED_QA & set(names) or "serve" in names)
        )
        for name in names:
            rng = random.Random(f"{args.seed}:{name}")
            counts: Counter[str] = Counter()
            bad: dict[str, tuple[str, bytes, str]] = {}
            started = time.perf_counter()
            for _ in range(max(1, args.cases // FEWER.get(name, 1))):
                data, how, (outcome, detail) = getattr(readers, READERS[name])(rng)
                counts[outcome] += 1
                if outcome == "BAD":
                    # One example of each kind: the exception and where, without its message.
                    bad.setdefault(":".join(detail.split(":")[:2])[:120], (how, data, detail))
            took = time.perf_counter() - started
            print(
                f"{name:<17} ok {counts['ok']:>4}  clean {counts['clean']:>4}  BAD {counts['BAD']:>4}  ({took:.0f} s)"
            )
            for n, (how, data, detail) in enumerate(bad.values()):
                print(f"    BAD [{how}] {detail}")
                if args.keep:
                    args.keep.mkdir(parents=True, exist_ok=True)
                    (args.keep / f"{name}-{n}.bin").write_bytes(data)
            sys.stdout.flush()
        if readers.server is not None:
            readers.server.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main_fuzz())
