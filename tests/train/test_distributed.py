"""Data-parallel training under torchrun: two CPU processes (gloo) against one emulating them."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import fields
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from treeqa.data import batching
from treeqa.data.batching import EncodedTree, TreeBatch, batches, collate, encode
from treeqa.data.demo import demo_splits
from treeqa.data.vocab import Vocab
from treeqa.recipes.sentiment import load_model
from treeqa.train.distributed import World, shard

HERE = Path(__file__).parent


def test_shard_gives_each_process_every_nth_batch_in_full_rounds() -> None:
    batches = list(range(7))
    assert list(shard(batches, World(0, 2))) == [0, 2, 4]
    assert list(shard(batches, World(1, 2))) == [1, 3, 5]  # 6 alone would wait forever
    assert list(shard(batches, World(2, 3))) == [2, 5]


def test_shard_from_a_resumed_position_reads_no_batch_before_it() -> None:
    read: list[int] = []

    class Epoch(list):  # a sequence, as Collated is, that says which batches were read
        def __getitem__(self, i):  # type: ignore[no-untyped-def]
            read.append(i)
            return super().__getitem__(i)

    assert list(shard(Epoch(range(7)), World(1, 2), start=1)) == [3, 5]
    assert read == [3, 5]
    assert list(shard(Epoch(range(7)), World(), start=5)) == [5, 6]
    assert read == [3, 5, 5, 6]
    # Batches made as they come (a generator) are made all the same, and skipped.
    assert list(shard(iter(range(7)), World(1, 2), start=1)) == [3, 5]
    assert list(shard(iter(range(7)), World(), start=5)) == [5, 6]


def test_each_process_collates_only_the_batches_it_trains_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    trees = demo_splits()["train"][:38]
    vocab = Vocab.build(w for t in trees for w in t.leaves)
    encoded = [encode(t, vocab, "fine") for t in trees]
    every = list(batches(encoded, 4, True, seed=3))  # 10 batches, the last of 2 trees
    collated: list[int] = []

    def counting(trees: Sequence[EncodedTree]) -> TreeBatch:
        collated.append(len(trees))
        return collate(trees)

    monkeypatch.setattr(batching, "collate", counting)
    for rank in range(3):
        collated.clear()
        mine = list(shard(batches(encoded, 4, True, seed=3), World(rank, 3)))
        assert len(collated) == len(mine) == 3  # 3 full rounds of 3; the tenth is left out
        # The batches every process took when each collated all ten and kept its share.
        expected = list(shard(iter(every), World(rank, 3)))
        for got, want in zip(mine, expected, strict=True):
            for f in fields(TreeBatch):
                a, b = getattr(got, f.name), getattr(want, f.name)
                if f.name == "levels":
                    assert [x.tolist() for x in a] == [x.tolist() for x in b]
                elif isinstance(a, torch.Tensor):
                    assert torch.equal(a, b), f.name
                else:
                    assert a == b, f.name


def torchrun_command(nproc: int, *args: str) -> list[str]:
    # --standalone: a local rendezvous on a free port
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
    return [*command, "--nproc-per-node", str(nproc), *args]


def no_process_of_a_run() -> dict[str, str]:
    """This environment less a torchrun process's own place in a run (one it was started in)."""
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    return env | {"OMP_NUM_THREADS": "1"}


def torchrun(nproc: int, *args: str) -> subprocess.CompletedProcess[str]:
    command, env = torchrun_command(nproc, *args), no_process_of_a_run()
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)


def test_two_processes_train_as_one_with_averaged_gradients(tmp_path: Path) -> None:
    run = torchrun(2, str(HERE / "ddp_worker.py"), str(tmp_path))
    assert run.returncode == 0, run.stderr[-3000:]
    ranks = [load_file(str(tmp_path / f"rank{r}.safetensors")) for r in (0, 1)]
    assert ranks[0]["taken"].tolist() == [0, 2, 4, 6]  # batch 8 is an incomplete round
    assert ranks[1]["taken"].tolist() == [1, 3, 5, 7]
    # Each process collated the batches it trained on, not the other's nor the ninth.
    assert [rank["collated"].tolist() for rank in ranks] == [[0, 2, 4, 6], [1, 3, 5, 7]]

    # The same steps in one process: gradients of each pair of batches, averaged.
    sys.path.insert(0, str(HERE))
    from ddp_worker import setup

    model, optimizer, batches = setup()
    for k in range(4):
        grads: list[list[torch.Tensor]] = []
        for batch in batches[2 * k : 2 * k + 2]:
            optimizer.zero_grad(set_to_none=True)
            model(batch).loss.backward()
            grads.append([p.grad for p in model.parameters()])
        for p, g0, g1 in zip(model.parameters(), *grads, strict=True):
            p.grad = (g0 + g1) / 2  # sparse for the word vectors
        optimizer.step()
    expected = model.state_dict()
    for rank in ranks:
        for name, value in expected.items():
            torch.testing.assert_close(rank[name], value, rtol=1e-5, atol=1e-6, msg=name)
    before = setup()[0].state_dict()
    assert not torch.allclose(before["compose.weight"], expected["compose.weight"])


def test_a_sigterm_to_one_process_stops_every_process_after_the_same_step(
    tmp_path: Path,
) -> None:
    run = torchrun(2, str(HERE / "ddp_worker.py"), str(tmp_path), "--sigterm-at", "2")
    assert run.returncode == 0, run.stderr[-3000:]
    stops = [(tmp_path / f"rank{r}.stop").read_text() for r in (0, 1)]
    assert stops == [f"{signal.SIGTERM.value} 2"] * 2  # process 0 was not sent it


def test_a_process_killed_mid_run_stops_the_other_with_a_clear_error(tmp_path: Path) -> None:
    # The two processes are started as torchrun starts them, without torchrun itself: it would
    # stop process 0 on seeing process 1 gone, and waiting out its monitor interval costs 30 s.
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    env = no_process_of_a_run() | {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}
    worker = [sys.executable, str(HERE / "ddp_worker.py"), str(tmp_path), "--kill-at", "2"]
    processes = [
        subprocess.Popen(worker, env=env | {"RANK": r, "LOCAL_RANK": r, "WORLD_SIZE": "2"})
        for r in ("0", "1")
    ]
    try:
        assert [p.wait(timeout=300) for p in processes] == [0, -signal.SIGKILL]
    finally:
        for p in processes:
            p.kill()
    lost = (tmp_path / "rank0.lost").read_text()
    assert lost.startswith("process 0 of 2: another process of this run stopped (killed, ")
    assert "--resume RUN_DIR goes on from there" in lost


def test_torchrun_trains_one_run_directory_from_the_cli(demo_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "run"
    run = torchrun(
        2,
        *("-m", "treeqa", "train", "sentiment", "--model", "tree_lstm", "--data", str(demo_dir)),
        *("--epochs", "1", "--out", str(out), "--json"),
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stderr.count("run directory:") == 1  # process 0 reports, the other trains only
    result = json.loads(run.stdout)  # under --json, stdout holds the JSON object alone
    # Each process took every second batch: the run made half the single-process steps.
    single = -(-len((demo_dir / "train.txt").read_text().splitlines()) // 25)
    assert result["steps"] == single // 2
    assert sorted(p.name for p in out.iterdir()) == [
        "best.safetensors",
        "config.toml",
        "health.json",
        "last.safetensors",
        "metrics.jsonl",
    ]
    logged = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert logged[-1]["epoch"] == 1 and logged[-1]["dev_root_acc"] == result["best_dev"]
    # Throughput counts both processes' examples: the 200 trees of the epoch, not 100.
    epoch = logged[-1]
    assert epoch["examples_per_s"] * epoch["epoch_time_s"] == pytest.approx(200)
    loaded = load_model(out).model  # the checkpoint holds the plain model's weights
    assert not isinstance(loaded, torch.nn.parallel.DistributedDataParallel)


def test_a_resumed_torchrun_run_draws_what_it_drew_and_keeps_its_processes(
    demo_dir: Path,
    tmp_path: Path,
    side_by_side: Callable[..., list[subprocess.CompletedProcess[str]]],
) -> None:
    from treeqa.cli.main import main

    args = ["-m", "treeqa", "train", "sentiment", "--model", "tree_lstm", "--data", str(demo_dir)]
    args += ["--health", "off", "--train.log_every=1"]  # dropout 0.5: every process draws masks
    full, cut = tmp_path / "full", tmp_path / "cut"
    runs = side_by_side(
        torchrun_command(2, *args, "--epochs", "2", "--out", str(full)),
        torchrun_command(2, *args, "--epochs", "1", "--out", str(cut)),
        timeout=300,
        env=no_process_of_a_run(),
    )
    assert [run.returncode for run in runs] == [0, 0], [run.stderr[-3000:] for run in runs]
    # One process would count its epoch position in batches of one, and halve the batch.
    assert main(["train", "--resume", str(cut), "--epochs", "2"]) == 2
    resumed = torchrun(2, "-m", "treeqa", "train", "--resume", str(cut), "--epochs", "2")
    assert resumed.returncode == 0, resumed.stderr[-3000:]

    def logged(run: Path) -> list[dict[str, float]]:
        lines = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
        return [{k: v for k, v in x.items() if k in ("step", "loss", "train_loss")} for x in lines]

    assert logged(cut) == logged(full)  # process 1's masks after the resume are its masks before
    a, b = (load_file(str(run / "last.safetensors")) for run in (full, cut))
    assert all(torch.equal(a[k], b[k]) for k in a if k.startswith("model."))


def test_an_epoch_with_no_batch_for_a_process_is_an_error(demo_dir: Path, tmp_path: Path) -> None:
    run = torchrun(
        2,
        *("-m", "treeqa", "train", "sentiment", "--model", "bow", "--data", str(demo_dir)),
        *("--batch_size", "2000", "--health", "off", "--out", str(tmp_path / "run")),
    )
    assert run.returncode != 0
    assert "epoch 1 gave this process no batch to train on: under torchrun" in run.stderr
