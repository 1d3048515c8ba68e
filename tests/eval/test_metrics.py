import torch

from treeqa.eval.metrics import SentimentMetrics, binary_predictions


def test_fine_and_binary_accuracies() -> None:
    # Two trees: nodes 0-2 (root 0) and 3-4 (root 3).
    labels = torch.tensor([4, 2, 0, 1, -1])
    logits = torch.full((5, 5), -5.0)
    logits[0, 3] = 5  # fine wrong (3 vs 4), binary right
    logits[1, 2] = 5  # fine right, neutral: not scored for binary
    logits[2, 0] = 5  # right
    logits[3, 4] = 5  # wrong both
    metrics = SentimentMetrics()
    metrics.update(logits, labels, torch.tensor([0, 3]))
    out = metrics.compute("fine")
    assert out["fine_root_acc"] == 0.0
    assert out["fine_all_acc"] == 2 / 4
    assert out["binary_root_acc"] == 1 / 2
    assert out["binary_all_acc"] == 2 / 3
    assert out["root_acc"] == out["fine_root_acc"]
    assert metrics.compute("binary")["root_acc"] == 0.5


def test_binary_from_fine_sums_class_probabilities() -> None:
    logits = torch.log(torch.tensor([[0.3, 0.1, 0.05, 0.25, 0.3], [0.2, 0.1, 0.4, 0.2, 0.1]]))
    assert binary_predictions(logits).tolist() == [1, 0]
    assert binary_predictions(torch.tensor([[0.0, 1.0], [2.0, 1.0]])).tolist() == [1, 0]


def test_three_class_model_is_scored_negative_against_positive() -> None:
    # negative / neutral / positive logits; neutral is never the binary answer.
    logits = torch.tensor([[2.0, 9.0, 1.0], [0.0, 9.0, 0.5], [3.0, 0.0, 3.0]])
    assert binary_predictions(logits).tolist() == [0, 1, 0]
    labels = torch.tensor([1, 3, 2])  # fine gold: negative, positive, neutral (not scored)
    metrics = SentimentMetrics()
    metrics.update(logits, labels, torch.tensor([0]))
    out = metrics.compute("binary3")
    assert out["root_acc"] == out["binary_root_acc"] == 1.0
    assert out["all_acc"] == out["binary_all_acc"] == 1.0
    assert "fine_root_acc" not in out
