"""treeqa: tree-structured sentiment models on SST and QANet on SQuAD."""

__version__ = "0.1.0"
