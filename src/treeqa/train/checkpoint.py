"""Self-describing checkpoints: one safetensors file whose header holds the JSON metadata.

The metadata (format version, model name and config, vocabularies, training config, metrics,
and for the ``last`` checkpoint the loop state and optimiser settings) sits in the safetensors
``__metadata__`` entry under the key ``treeqa``, beside a SHA-256 of the tensors (``CHECKSUM``)
that loading checks. Loading never unpickles anything.
Files are written to a temporary name and renamed, so a crash never leaves half a checkpoint.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import random
import re
import secrets
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import load_file, save
from torch import nn

FORMAT_VERSION = 1
CHECKSUM = "treeqa.sha256"
"""The header entry holding ``tensors_digest`` of the tensors (absent in older checkpoints)."""
BEST, LAST = "best.safetensors", "last.safetensors"
PARTIAL = ".tmp"
"""The suffix of a checkpoint being written; a kill during the write leaves one behind."""
TASK_COMMANDS = {
    "sentiment": "treeqa train sentiment, treeqa evaluate, treeqa predict",
    "qa": "treeqa train qa, treeqa evaluate qa, treeqa predict qa",
}
"""The commands that read a task's checkpoints, for an error that found the other task's."""


class CheckpointError(ValueError):
    pass


@dataclass(frozen=True)
class Checkpoint:
    meta: dict[str, Any]
    tensors: dict[str, torch.Tensor]
    file: Path | None = None
    """Where it was read from (for error messages)."""

    def weights(self) -> dict[str, torch.Tensor]:
        return {k[len("model.") :]: v for k, v in self.tensors.items() if k.startswith("model.")}

    def load_weights(self, model: nn.Module, averaged: bool = False) -> None:
        """Copy the model weights into ``model``; weights that do not fit it are a
        CheckpointError naming the file and the first mismatch. ``averaged``: where the
        checkpoint keeps moving averages beside the raw weights (``ema.*``, the last checkpoint
        of a run with ``train.ema_decay``), take those, which its evaluation scored."""
        weights = {**self.weights(), **(self.group("ema.") if averaged else {})}
        try:
            model.load_state_dict(weights)
        except RuntimeError as err:
            # torch lists every mismatch on its own line; the first says what is wrong.
            lines = [line.strip() for line in str(err).splitlines() if line.strip()]
            first = lines[1] if len(lines) > 1 else lines[0] if lines else ""
            raise CheckpointError(
                f"{self.file}: its weights do not fit the model's config ({first})"
            ) from err

    def group(self, prefix: str) -> dict[str, torch.Tensor]:
        return {k[len(prefix) :]: v for k, v in self.tensors.items() if k.startswith(prefix)}


def check_run_dir(out: Path, resume: bool) -> None:
    """Refuse run directory ``out`` for a new run when a run there left a checkpoint: it is
    only ever resumed, never trained over (that would replace its best and last weights)."""
    found = [name for name in (BEST, LAST) if (out / name).exists()]
    if found and not resume:
        raise FileExistsError(
            f"{out} already holds a run ({', '.join(found)}): continue it with --resume {out} "
            "(resume_run=True from Python), "
            "or give the new run another --out"
        )


LOCK = ".lock"


@contextlib.contextmanager
def run_lock(out: Path, main: bool = True, resume: bool = False) -> Iterator[None]:
    """Hold run directory ``out`` for one training at a time: a second run into it, new or
    resumed, is refused while the first goes on (an advisory lock on ``out/.lock``, which the
    system drops when the process ends, however it ends; the file holds the process id the
    refusal names and is removed when the run ends; a killed run's is taken over). ``main``:
    false for the other processes of a torchrun run, which share process 0's directory. A
    directory made here that holds nothing else when the run fails (its input checks) is
    removed. ``resume``: ``out`` must be there (a mistyped --resume is not a new run)."""
    if resume and not out.is_dir():
        raise FileNotFoundError(f"--resume {out}: no such run directory")
    try:
        import fcntl
    except ImportError:  # no advisory locks on this system (Windows): nothing to hold
        yield
        return
    if not main:
        yield
        return
    made = not out.exists()
    lock = _take_lock(out, fcntl)
    try:
        yield
    finally:
        # Removed while still held, so a run ended leaves only its own files: a run that
        # opened the file meanwhile finds, once it has the lock, that the file is no longer
        # there, and makes a new one (and the folder, if it is gone).
        (out / LOCK).unlink(missing_ok=True)
        if made and not any(out.iterdir()):
            with contextlib.suppress(OSError):  # another run's new lock file is in it
                out.rmdir()
        lock.close()  # drops the lock


def _take_lock(out: Path, fcntl: Any) -> Any:
    """``out/.lock`` open and locked by this process, its id written in it; a FileExistsError
    naming the process that holds it."""
    while True:
        try:
            out.mkdir(parents=True, exist_ok=True)
        except OSError as err:  # a folder this user may not write in, a read-only disk
            raise OSError(f"cannot create run directory {out}: {err.strerror or err}") from err
        try:
            lock = open(out / LOCK, "a+")  # noqa: SIM115 - held open for the run
        except FileNotFoundError:  # the run that made ``out`` removed it an instant ago
            continue
        except OSError as err:
            raise OSError(f"cannot write in run directory {out}: {err.strerror or err}") from err
        try:
            fcntl.flock(lock.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock.seek(0)
            pid = lock.read().strip()
            lock.close()
            who = f"process {pid}" if pid.isdigit() else "another process"
            raise FileExistsError(
                f"{out} is being trained by {who} right now: wait for it to end, or give "
                "another --out"
            ) from None
        if _still_at(out / LOCK, lock):
            lock.truncate(0)
            lock.write(f"{os.getpid()}\n")
            lock.flush()
            return lock
        lock.close()  # locked after its run removed it: no one else would see it held


def write_text_atomic(path: Path, text: str) -> None:
    """Write ``text`` to a temporary file beside ``path``, then rename it into place: a kill
    leaves the old file or the new one, never half of either. A link is followed (the file it
    names is replaced, the link kept); what is not a plain file (/dev/stdout, a pipe) is
    written directly, never replaced by one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    real = path.resolve()
    if real.exists() and not real.is_file():
        try:
            real.write_text(text, encoding="utf-8")
        except OSError as err:
            raise write_failed(path, err) from err
        return
    replace_with(real, text.encode("utf-8"), real.with_name(f".{real.name}.{os.getpid()}{PARTIAL}"))


def replace_with(path: Path, data: bytes, tmp: Path) -> None:
    """Write ``data`` to ``tmp`` (synced), then rename it over ``path``. A write or rename that
    fails leaves nothing at ``tmp`` and says which file it was."""
    try:
        with open(tmp, "wb") as f:  # the umask's usual mode
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as err:
        raise write_failed(path, err) from err
    finally:
        tmp.unlink(missing_ok=True)


def write_failed(path: Path, err: OSError) -> OSError:
    """The error of a write to ``path`` that failed (a full disk, a file size limit): the
    system's own names no file. Says whether the file already there was kept, as the
    temporary-file writes here keep it."""
    kept = (
        f"the {path.name} already there is kept as it was"
        if path.exists()
        else f"no {path.name} was written"
    )
    failed = OSError(f"{path}: could not be written ({err.strerror or err}); {kept}")
    failed.errno = err.errno
    return failed


def write_run_config(out: Path, text: str, resume: bool) -> None:
    """The run's resolved ``config.toml``. A new run into a folder that already holds another
    ``config.toml`` (the user's own, passed as --config, say) keeps it as ``config.1.toml``
    (or the next free number) rather than writing over it."""
    path = out / "config.toml"
    if not resume and path.is_file() and path.read_bytes() != text.encode("utf-8"):
        print(f"{path} held another config: kept as {keep_aside(path)}")
    write_text_atomic(path, text)


def keep_aside(path: Path) -> Path:
    """Move ``path`` to the first free ``stem.1.suffix``, ``stem.2.suffix``, ... beside it (a
    file a new run would otherwise write over) and return where it went."""
    n = 1
    while (kept := path.with_name(f"{path.stem}.{n}{path.suffix}")).exists():
        n += 1
    os.replace(path, kept)
    return kept


def tensors_digest(tensors: dict[str, torch.Tensor]) -> str:
    """SHA-256 over every tensor's name, dtype, shape and bytes, in name order: safetensors
    keeps no checksum, so bytes changed on disk would load as other weights, silently."""
    digest = hashlib.sha256()
    for name in sorted(tensors):
        tensor = tensors[name].contiguous()
        digest.update(f"{name}\0{tensor.dtype}\0{tuple(tensor.shape)}\0".encode())
        digest.update(tensor.reshape(-1).view(torch.uint8).numpy().data)
    return digest.hexdigest()


def atomic_save(tensors: dict[str, torch.Tensor], meta: dict[str, Any], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    header = {"treeqa": json.dumps({"format_version": FORMAT_VERSION, **meta}, ensure_ascii=False)}
    # safetensors refuses shared or non-contiguous storage; give it plain copies. Its bytes
    # are written here: its save_file writes a temporary file of its own first, which a kill
    # during the write would leave behind under a name no one cleans up.
    plain = {k: v.detach().cpu().contiguous().clone() for k, v in tensors.items()}
    data = save(plain, {**header, CHECKSUM: tensors_digest(plain)})
    tmp = path.with_name(f"{path.name}.{os.getpid()}.{secrets.token_hex(4)}{PARTIAL}")
    replace_with(path, data, tmp)


def is_run_file(name: str) -> bool:
    """Whether a run directory's file ``name`` is one a run writes (its checkpoints, config,
    metrics, health report and lock, and the earlier ones it kept aside)."""
    own = (BEST, LAST, "config.toml", "metrics.jsonl", "health.json", LOCK)
    kept = r"(config\.\d+\.toml|metrics\.\d+\.jsonl|health\.\d+\.json|best\.\d+\.safetensors)"
    return name in own or re.fullmatch(kept, name) is not None


def remove_partial_writes(run_dir: Path) -> None:
    """Delete the half-written checkpoints and run files a killed run left in ``run_dir``."""
    for name in (BEST, LAST):
        for partial in run_dir.glob(f"{name}.*{PARTIAL}"):
            partial.unlink(missing_ok=True)
    for name in ("config.toml", "metrics.jsonl"):  # write_text_atomic's
        for partial in run_dir.glob(f".{name}.*{PARTIAL}"):
            partial.unlink(missing_ok=True)


def resolve(path: str | Path, prefer: str = BEST) -> Path:
    """A checkpoint file, or a run directory (its best checkpoint, else its last)."""
    path = Path(path)
    if path.is_dir():
        for name in (prefer, BEST, LAST):
            if (path / name).is_file():
                return path / name
        raise CheckpointError(f"{path}: a run directory with no {BEST} or {LAST} in it")
    if not path.is_file():
        raise CheckpointError(f"{path}: no such checkpoint file or run directory")
    return path


def read_instead(path: str | Path) -> str | None:
    """What to tell a user who names run directory ``path`` to score, when it holds no best
    checkpoint and its last one is read instead (weights that no dev score chose); else None."""
    path = Path(path)
    if not path.is_dir() or (path / BEST).is_file() or not (path / LAST).is_file():
        return None
    return (
        f"{path} has no {BEST}: scoring its {LAST} instead (the weights where the run "
        "stopped, not the ones its dev score chose)"
    )


READS = 3
"""How often ``load`` reads a checkpoint that a training replaces while it is read."""


def _still_at(file: Path, held: Any) -> bool:
    """Whether ``file`` still names the open file ``held``, not one renamed over it since (a
    training writing its next checkpoint) nor one made after it was removed."""
    try:
        now = file.stat()
    except OSError:
        return False
    then = os.fstat(held.fileno())
    return (now.st_dev, now.st_ino) == (then.st_dev, then.st_ino)


def load(
    path: str | Path, prefer: str = BEST, task: str | None = None, needs: Sequence[str] = ()
) -> Checkpoint:
    """A checkpoint (file or run directory); with ``task``, refuse one made for another task,
    and one whose metadata lacks a key of ``needs``."""
    file = resolve(path, prefer)
    for _ in range(READS):
        try:
            held = file.open("rb")
        except OSError as err:
            raise CheckpointError(f"{file}: not a readable checkpoint ({err})") from err
        # A training renames its next checkpoint over this one: a header read before and
        # tensors read after would be of two files, whose checksums disagree. Held open, the
        # file keeps its inode number; the same number at the path afterwards means both
        # came from it.
        with held:
            header = read_header(file)
            meta = check_meta(file, header, task)
            missing = [key for key in needs if key not in meta]
            if missing:
                raise CheckpointError(f"{file}: its metadata has no {', '.join(missing)}")
            try:
                tensors = load_file(str(file))
            except (SafetensorError, OSError) as err:
                raise CheckpointError(
                    f"{file}: not a readable safetensors checkpoint ({err})"
                ) from err
            if _still_at(file, held):
                break
    else:
        raise CheckpointError(
            f"{file}: replaced by a newer one each of {READS} times it was read (a training "
            "writing it now?): read it again"
        )
    if CHECKSUM in header and tensors_digest(tensors) != header[CHECKSUM]:  # older: none
        raise CheckpointError(
            f"{file}: its tensors do not match the checksum written with them: the file changed "
            "on disk after it was written (a failing disk, a partial copy, another program); "
            "use the run's other checkpoint, or a copy of this one"
        )
    return Checkpoint(meta, tensors, file)


def read_meta(path: str | Path, task: str | None = None, prefer: str = BEST) -> dict[str, Any]:
    """A checkpoint's metadata alone (its header; no tensor is read), checked as ``load`` does."""
    file = resolve(path, prefer)
    return check_meta(file, read_header(file), task)


def read_header(file: Path) -> dict[str, str]:
    try:
        with safe_open(str(file), framework="pt") as f:
            header: dict[str, str] = f.metadata() or {}
    except (SafetensorError, OSError) as err:
        raise CheckpointError(f"{file}: not a readable safetensors checkpoint ({err})") from err
    return header


def check_meta(file: Path, header: dict[str, str], task: str | None) -> dict[str, Any]:
    """The treeqa metadata of header ``header``, checked: JSON, this format, task ``task``."""
    if "treeqa" not in header:
        raise CheckpointError(f"{file}: a safetensors file without treeqa metadata")
    try:
        meta = json.loads(header["treeqa"])
    except json.JSONDecodeError as err:
        raise CheckpointError(f"{file}: its treeqa metadata is not JSON ({err})") from err
    if not isinstance(meta, dict):
        raise CheckpointError(f"{file}: its treeqa metadata is not a JSON object")
    if meta.get("format_version") != FORMAT_VERSION:
        raise CheckpointError(
            f"{file}: checkpoint format {meta.get('format_version')}, this treeqa reads {FORMAT_VERSION}"
        )
    if task is not None and meta.get("task") != task:
        commands = TASK_COMMANDS.get(str(meta.get("task")))
        hint = f" (its commands: {commands})" if commands else ""
        if "task" not in meta:
            raise CheckpointError(f"{file}: a checkpoint with no task, not a {task!r} one{NO_TASK}")
        raise CheckpointError(
            f"{file}: a {meta.get('task')!r} checkpoint, not a {task!r} one{hint}"
        )
    meta_dict: dict[str, Any] = meta
    return meta_dict


NO_TASK = (
    " (a Checkpointer's meta of your own: the commands load one whose meta is the recipe's, "
    "treeqa.recipes.sentiment.run_meta(...) or treeqa.recipes.qa.run_meta(...))"
)


def optimizer_tensors(
    optimizer: torch.optim.Optimizer,
) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """Split an optimiser state into tensors (for safetensors) and JSON (everything else)."""
    sd = optimizer.state_dict()
    tensors: dict[str, torch.Tensor] = {}
    scalars: dict[str, dict[str, Any]] = {}
    for pid, entry in sd["state"].items():
        for key, value in entry.items():
            if isinstance(value, torch.Tensor):
                tensors[f"optim.{pid}.{key}"] = value
            else:
                scalars.setdefault(str(pid), {})[key] = value
    return tensors, {"param_groups": sd["param_groups"], "scalars": scalars}


def restore_optimizer(optimizer: torch.optim.Optimizer, ckpt: Checkpoint) -> None:
    saved = ckpt.meta["optimizer"]
    state: dict[int, dict[str, Any]] = {}
    for key, value in ckpt.group("optim.").items():
        pid, name = key.split(".", 1)
        state.setdefault(int(pid), {})[name] = value
    for pid, entry in saved["scalars"].items():
        state.setdefault(int(pid), {}).update(entry)
    optimizer.load_state_dict({"state": state, "param_groups": saved["param_groups"]})


def rng_tensors() -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """This process's random generators, split as ``optimizer_tensors`` splits a state:
    torch's (and each CUDA device's), and the global ones of Python and NumPy, which
    ``seed_everything`` seeds too and a model or callback may draw from (a word dropout)."""
    version, words, gauss = random.getstate()
    numpy = np.random.get_state(legacy=False)
    tensors = {
        "rng.torch": torch.get_rng_state(),
        "rng.python": torch.tensor(words, dtype=torch.int64),  # [625] 624 words, the position
        "rng.numpy": torch.from_numpy(numpy["state"]["key"].astype(np.int64)),  # [624] words
    }
    if torch.cuda.is_available():
        tensors |= {f"rng.cuda.{i}": s for i, s in enumerate(torch.cuda.get_rng_state_all())}
    scalars = {
        "python": {"version": version, "gauss": gauss},
        "numpy": {"pos": numpy["state"]["pos"], "has_gauss": numpy["has_gauss"]}
        | {"gauss": numpy["gauss"]},
    }
    return tensors, scalars


def restore_rng(ckpt: Checkpoint) -> None:
    """Put back the generators ``rng_tensors`` saved in ``ckpt`` (one of an earlier treeqa
    saved torch's alone)."""
    torch.set_rng_state(ckpt.tensors["rng.torch"])
    devices = sorted(int(k.rsplit(".", 1)[1]) for k in ckpt.tensors if k.startswith("rng.cuda."))
    if devices and torch.cuda.is_available():  # in device order: "rng.cuda.10" sorts before 2
        torch.cuda.set_rng_state_all([ckpt.tensors[f"rng.cuda.{i}"] for i in devices])
    saved = ckpt.meta.get("rng")
    if saved is None or "rng.python" not in ckpt.tensors:
        return
    python = saved["python"]
    words = tuple(ckpt.tensors["rng.python"].tolist())
    random.setstate((python["version"], words, python["gauss"]))
    numpy = saved["numpy"]
    key = ckpt.tensors["rng.numpy"].numpy().astype(np.uint32)
    np.random.set_state(
        {
            "bit_generator": "MT19937",
            "state": {"key": key, "pos": numpy["pos"]},
            "has_gauss": numpy["has_gauss"],
            "gauss": numpy["gauss"],
        }
    )
