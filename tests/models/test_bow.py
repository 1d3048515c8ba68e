import torch

from treeqa.data.batching import collate, encode
from treeqa.data.tree import parse_tree
from treeqa.data.vocab import Vocab
from treeqa.models.baselines import BagOfWords, BowConfig

TREES = [
    parse_tree("(3 (2 (2 The) (2 Rock)) (4 (3 (2 is) (4 good)) (2 .)))"),
    parse_tree("(1 (2 a) (0 (1 not) (2 (3 fun) (2 film))))"),
]


def test_each_node_is_the_mean_of_its_leaves_and_batching_changes_nothing() -> None:
    vocab = Vocab.build(w for t in TREES for w in t.leaves)
    torch.manual_seed(0)
    model = BagOfWords(BowConfig(embed_dim=4, dropout=0.0), len(vocab)).eval()
    enc = [encode(t, vocab, "fine") for t in TREES]
    together = model(collate(enc)).logits
    apart = torch.cat([model(collate([e])).logits for e in enc])
    torch.testing.assert_close(together, apart)
    # Node 5 of tree 0 spans "is good".
    e = model.embed.weight[torch.tensor(vocab.ids(["is", "good"]))].mean(0)
    torch.testing.assert_close(together[5], model.classify(e))


def test_every_parameter_gets_a_gradient() -> None:
    vocab = Vocab.build(w for t in TREES for w in t.leaves)
    model = BagOfWords(BowConfig(embed_dim=4), len(vocab))
    out = model(collate([encode(t, vocab, "binary") for t in TREES]))
    assert out.loss is not None
    out.loss.backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in model.parameters())
