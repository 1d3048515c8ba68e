"""``treeqa doctor`` on scripts that train with Hugging Face ``accelerate`` and the
``transformers`` ``Trainer``: a tiny BERT built from its config (no model download), random
tokens whose label is whether one token id appears. Skipped where the packages are missing;
slow (importing transformers takes seconds)."""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from treeqa.health import run_doctor

pytest.importorskip("transformers")
pytest.importorskip("accelerate")

pytestmark = pytest.mark.slow

COMMON = '''
import os
import sys

import torch
from transformers import BertConfig, BertForSequenceClassification

torch.manual_seed(0)
config = BertConfig(vocab_size=64, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                    intermediate_size=32, max_position_embeddings=16, num_labels=2)
model = BertForSequenceClassification(config)


class Tokens(torch.utils.data.Dataset):
    """The label: whether token 5 is in the sequence."""

    def __init__(self, n, seed):
        g = torch.Generator().manual_seed(seed)
        self.ids = torch.randint(6, 64, (n, 12), generator=g)
        self.labels = (torch.rand(n, generator=g) < 0.5).long()
        self.ids[self.labels.bool(), 3] = 5

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, i):
        return {"input_ids": self.ids[i], "labels": self.labels[i]}


lr = float(sys.argv[1])
'''

ACCELERATE = (
    COMMON
    + """
from accelerate import Accelerator

accelerator = Accelerator(cpu=True)
opt = torch.optim.Adam(model.parameters(), lr=lr)
train = torch.utils.data.DataLoader(Tokens(768, 0), batch_size=8, shuffle=True)
val = torch.utils.data.DataLoader(Tokens(192, 1), batch_size=32)
model, opt, train, val = accelerator.prepare(model, opt, train, val)
for epoch in range(2):
    model.train()
    for batch in train:
        loss = model(**batch).loss
        accelerator.backward(loss)
        opt.step()  # the line a finding on the optimiser's step names
        opt.zero_grad()
    model.eval()
    with torch.no_grad():
        correct = sum((model(**b).logits.argmax(-1) == b["labels"]).sum().item() for b in val)
    print(f"epoch {epoch} accuracy {correct / 192:.2f}")
"""
)

TRAINER = (
    COMMON
    + """
from transformers import Trainer, TrainingArguments

args = TrainingArguments(
    output_dir=os.getcwd(), per_device_train_batch_size=8, num_train_epochs=1, learning_rate=lr,
    report_to=[], save_strategy="no", eval_strategy="epoch", disable_tqdm=True, use_cpu=True,
    logging_strategy="no",
)
trainer = Trainer(model=model, args=args, train_dataset=Tokens(768, 0),
                  eval_dataset=Tokens(192, 1))
trainer.train()  # the line a finding on the Trainer's optimiser names
print("eval loss", round(trainer.evaluate()["eval_loss"], 3))
"""
)


@pytest.fixture(autouse=True)
def offline(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.chdir(tmp_path)
    yield


def doctor(tmp_path: Path, source: str, lr: float, *more: str) -> tuple[dict[str, Any], Path]:
    path = tmp_path / "train.py"
    path.write_text(source)
    command = ["python", str(path), str(lr), *more]
    with contextlib.redirect_stdout(io.StringIO()):
        code, report = run_doctor(command, every=10, stream=io.StringIO())
    assert code == 0 and not report["monitor_failures"]
    return report, path


def line_of(path: Path, text: str) -> str:
    lines = path.read_text().splitlines()
    return f"{os.path.realpath(path)}:{next(i for i, s in enumerate(lines, 1) if text in s)}"


# The Trainer's bf16 mixed precision (autocast on a CPU too).
BF16 = TRAINER.replace('logging_strategy="no",', 'logging_strategy="no", bf16=True,')


@pytest.mark.parametrize(
    "source", [ACCELERATE, TRAINER, BF16], ids=["accelerate", "trainer", "trainer-bf16"]
)
def test_a_clean_run_has_no_warnings(source: str, tmp_path: Path) -> None:
    report, _ = doctor(tmp_path, source, 1e-3)
    assert report["steps"] >= 96
    assert [f for f in report["findings"] if f["severity"] != "info"] == []


def test_a_diverged_loss_is_found_under_bf16_autocast(tmp_path: Path) -> None:
    report, _ = doctor(tmp_path, BF16, 50.0)
    assert "loss-diverged" in {f["code"] for f in report["findings"]}, report["findings"]


@pytest.mark.parametrize(
    ("source", "site"),
    [(ACCELERATE, "opt.step()"), (TRAINER, "trainer.train()")],
    ids=["accelerate", "trainer"],
)
def test_a_zero_learning_rate_is_named_at_the_scripts_line(
    source: str, site: str, tmp_path: Path
) -> None:
    report, path = doctor(tmp_path, source, 0.0)
    found = {f["code"]: f for f in report["findings"]}
    assert found["lr-zero"]["where"] == line_of(path, site)


def test_a_diverged_loss_is_found_through_accelerates_backward(tmp_path: Path) -> None:
    """``Accelerator.backward`` divides the loss by its accumulation steps (1) before it runs
    backward: the cross-entropy is still the step's loss."""
    report, _ = doctor(tmp_path, ACCELERATE, 50.0)
    assert "loss-diverged" in {f["code"] for f in report["findings"]}, report["findings"]


# BERT's layers recomputed in the backward (activation checkpointing), reentrant: each
# checkpoint's backward calls torch.autograd.backward on its recomputed outputs.
CHECKPOINTED = TRAINER.replace(
    'logging_strategy="no",',
    'logging_strategy="no", gradient_checkpointing=True,\n'
    '    gradient_checkpointing_kwargs={"use_reentrant": True},',
)


@pytest.mark.parametrize(("lr", "expected"), [(1e-3, set()), (50.0, {"loss-diverged"})])
def test_the_loss_under_reentrant_activation_checkpointing_is_the_models(
    lr: float, expected: set[str], tmp_path: Path
) -> None:
    """Under reentrant checkpointing the layer's recomputed output was read as the loss (its
    mean ~0 every step): lr 50 was not found diverged."""
    report, _ = doctor(tmp_path, CHECKPOINTED, lr)
    assert report["steps"] == 96
    assert {f["code"] for f in report["findings"] if f["severity"] != "info"} == expected
    assert min(report["series"]["loss"]) > 0.1


# Gradient accumulation over 4 batches. BERT's forward takes **kwargs, so the Trainer would
# leave the loss to divide itself by the items in the 4 batches, which its mean ignores:
# ``accepts_loss_kwargs = False`` has the Trainer divide it by 4 before its backward.
ACCUMULATED = TRAINER.replace(
    'logging_strategy="no",', 'logging_strategy="no", gradient_accumulation_steps=4,'
).replace("trainer = Trainer(", "model.accepts_loss_kwargs = False\ntrainer = Trainer(")


def test_a_clean_run_accumulating_gradients_has_no_warnings(tmp_path: Path) -> None:
    """72 steps of 4 batches: the loss backward is given, a quarter of the cross-entropy, is
    judged as the cross-entropy (``loss-diverged`` reads it from step 1)."""
    source = ACCUMULATED.replace("num_train_epochs=1,", "num_train_epochs=3,")
    report, _ = doctor(tmp_path, source, 1e-3)
    assert report["steps"] == 72
    assert [f for f in report["findings"] if f["severity"] != "info"] == []


def test_a_loss_at_chance_is_found_under_the_trainers_accumulation(tmp_path: Path) -> None:
    """Labels apart from their tokens, 200 steps of 4 batches: the quarter of the cross-entropy
    backward is given stays at log(2) / 4, the cross-entropy at log(2)."""
    source = ACCUMULATED.replace("self.ids[self.labels.bool(), 3] = 5", "pass")
    report, _ = doctor(tmp_path, source.replace("Tokens(768, 0)", "Tokens(6400, 0)"), 1e-3)
    assert report["steps"] == 200
    found = {f["code"]: f for f in report["findings"]}
    assert found["loss-at-chance"]["evidence"]["classes"] == 2, report["findings"]


def test_a_diverged_loss_is_found_under_the_trainers_accumulation(tmp_path: Path) -> None:
    source = ACCUMULATED.replace("Tokens(768, 0)", "Tokens(1280, 0)")  # 40 steps
    report, _ = doctor(tmp_path, source, 50.0)
    assert "loss-diverged" in {f["code"] for f in report["findings"]}, report["findings"]


# A causal language model under the Trainer: GPT-2's loss is a cross-entropy summed over the
# tokens, which the Trainer divides by the tokens of the step's batches (``num_items_in_batch``).
CAUSAL_LM = '''
import os
import sys

import torch
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments

torch.manual_seed(0)
config = GPT2Config(vocab_size=64, n_positions=16, n_embd=32, n_layer=1, n_head=2)
model = GPT2LMHeadModel(config)


class Counting(torch.utils.data.Dataset):
    """Each sequence counts up from a random token (mod 64): every next token is learnable."""

    def __init__(self, n, seed, shuffled=False):
        g = torch.Generator().manual_seed(seed)
        self.ids = (torch.randint(0, 64, (n, 1), generator=g) + torch.arange(12)) % 64
        self.labels = torch.randint(0, 64, (n, 12), generator=g) if shuffled else self.ids

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, i):
        return {"input_ids": self.ids[i], "labels": self.labels[i]}


lr, shuffled = float(sys.argv[1]), "shuffled" in sys.argv
args = TrainingArguments(
    output_dir=os.getcwd(), per_device_train_batch_size=8, num_train_epochs=1, learning_rate=lr,
    report_to=[], save_strategy="no", disable_tqdm=True, use_cpu=True, logging_strategy="no",
    gradient_accumulation_steps=2,
)
trainer = Trainer(model=model, args=args, train_dataset=Counting(N, 0, shuffled))
trainer.train()
'''


def test_a_causal_lm_s_loss_is_judged_as_a_mean_over_its_tokens(tmp_path: Path) -> None:
    """A clean run has no warnings; targets drawn apart from their sequences leave the mean over
    the tokens at log(64) (200 steps of 2 batches); a learning rate of 50 sends it far above."""
    report, _ = doctor(tmp_path, CAUSAL_LM.replace("N,", "1600,"), 1e-3)
    assert [f for f in report["findings"] if f["severity"] != "info"] == []
    report, _ = doctor(tmp_path, CAUSAL_LM.replace("N,", "3200,"), 1e-3, "shuffled")
    assert report["steps"] == 200
    found = {f["code"]: f for f in report["findings"]}
    assert found["loss-at-chance"]["evidence"]["classes"] == 64, report["findings"]
    report, _ = doctor(tmp_path, CAUSAL_LM.replace("N,", "800,"), 50.0)
    assert "loss-diverged" in {f["code"] for f in report["findings"]}, report["findings"]


def doctor_cli(tmp_path: Path, source: str, *args: str, torchrun: bool = False) -> Any:
    """``treeqa doctor -- python train.py ARGS`` (or ``-- torchrun --nproc-per-node 2
    train.py ARGS``: the merged report), and the script's path."""
    path, report = tmp_path / "train.py", tmp_path / "report.json"
    path.write_text(source)
    command = [sys.executable, "-m", "treeqa", "doctor", "--every", "10", "--json", str(report)]
    if torchrun:
        command += ["--", str(Path(sys.executable).with_name("torchrun")), "--standalone"]
        command += ["--nproc-per-node", "2", str(path), *args]
    else:
        command += ["--", "python", str(path), *args]
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    env.update(OMP_NUM_THREADS="1", HF_HOME=str(tmp_path))
    run = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    return dict(json.loads(report.read_text())), path


def doctor_torchrun(tmp_path: Path, source: str, *args: str) -> dict[str, Any]:
    """``treeqa doctor -- torchrun --nproc-per-node 2 train.py ARGS``: the merged report."""
    report: dict[str, Any] = doctor_cli(tmp_path, source, *args, torchrun=True)[0]
    return report


def test_the_trainer_on_two_processes_is_judged_as_on_one(tmp_path: Path) -> None:
    """Under torchrun the Trainer wraps the model in DDP with find_unused_parameters, whose
    outputs (the loss the model computed among them) come through a function of DDP's own, and
    multiplies the loss by the number of processes: the cross-entropy is still read. GPT-2's
    next tokens drawn apart from their sequences are at chance (200 steps on each process);
    BERT at a learning rate of 50 diverges (48 steps each)."""
    found = doctor_torchrun(tmp_path, CAUSAL_LM.replace("N,", "6400,"), "1e-3", "shuffled")
    assert [p["steps"] for p in found["processes"]] == [200, 200]
    codes = {f["code"]: f for f in found["findings"]}
    assert codes["loss-at-chance"]["evidence"]["classes"] == 64, found["findings"]
    found = doctor_torchrun(tmp_path, TRAINER, "50")
    assert "loss-diverged" in {f["code"] for f in found["findings"]}, found["findings"]
    found = doctor_torchrun(tmp_path, CAUSAL_LM.replace("N,", "1600,"), "1e-3")
    assert [f for f in found["findings"] if f["severity"] != "info"] == []


def test_bert_s_mean_loss_times_the_processes_under_the_trainer_is_named(tmp_path: Path) -> None:
    """The Trainer multiplies the loss of a model that takes loss keyword arguments by the
    processes, for a causal LM's sum over every process's tokens; BERT's classification loss is
    a mean of its own, so its gradients come out twice the mean's on two processes. With
    average_tokens_across_devices=False, as the fix says, the loss is left as it is."""
    found = doctor_torchrun(tmp_path, TRAINER, "1e-3")
    codes = {f["code"]: f for f in found["findings"] if f["severity"] != "info"}
    assert list(codes) == ["loss-times-processes"], found["findings"]
    assert codes["loss-times-processes"]["evidence"]["factor"] == 2.0
    fixed = TRAINER.replace(
        'logging_strategy="no",', 'logging_strategy="no", average_tokens_across_devices=False,'
    )
    found = doctor_torchrun(tmp_path, fixed, "1e-3")
    assert [f for f in found["findings"] if f["severity"] != "info"] == []


# A run that saves a checkpoint folder (weights, optimizer.pt, scheduler.pt), and its second
# invocation: the model read back with from_pretrained, trained on with or without the
# Trainer's resume_from_checkpoint.
FROM_CHECKPOINT = (
    TRAINER.replace(
        "model = BertForSequenceClassification(config)",
        "model = BertForSequenceClassification(config)\nif len(sys.argv) > 2:\n"
        '    model = BertForSequenceClassification.from_pretrained("checkpoint-96")',
    )
    .replace('save_strategy="no", eval_strategy="epoch",', 'save_strategy="epoch",')
    .replace(
        "output_dir=os.getcwd(), per_device_train_batch_size=8, num_train_epochs=1,",
        'output_dir="again" if len(sys.argv) > 2 else ".", per_device_train_batch_size=8,\n'
        "    num_train_epochs=1 + (len(sys.argv) > 2),",
    )
    .replace(
        "trainer.train()",
        'trainer.train(resume_from_checkpoint="checkpoint-96" if "resume" in sys.argv else None)',
    )
)


def test_a_trainer_checkpoint_read_with_from_pretrained_alone_is_found(tmp_path: Path) -> None:
    """``from_pretrained`` of a Trainer's ``checkpoint-N`` reads its weights alone: training
    on with a new Trainer starts AdamW and the schedule afresh, found at the
    ``from_pretrained`` line; ``resume_from_checkpoint`` reads them, and is clean."""
    doctor(tmp_path, FROM_CHECKPOINT, 1e-3)
    assert (tmp_path / "checkpoint-96" / "optimizer.pt").exists()
    # (from the command line: in this process transformers is imported already, and holds
    # the first run's wrapper of safetensors' safe_open, which tells the line)
    report, path = doctor_cli(tmp_path, FROM_CHECKPOINT, "1e-3", "weights")
    found = [f for f in report["findings"] if f["code"] == "optimiser-state-not-loaded"]
    assert [f["where"] for f in found] == [line_of(path, "from_pretrained(")], report["findings"]
    assert "resume_from_checkpoint" in found[0]["message"]
    assert "scheduler.pt" in found[0]["message"]  # (the Trainer's over accelerate's wrapper)
    report, _ = doctor(tmp_path, FROM_CHECKPOINT, 1e-3, "resume")
    assert [f for f in report["findings"] if f["severity"] != "info"] == []
