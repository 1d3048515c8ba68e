"""``original_tree_gru_leak.py`` with the fix: cache ``h.detach()`` and drop ``retain_graph``.

python examples/original_tree_gru_fixed.py --epochs 6
"""

from __future__ import annotations

import runpy
from pathlib import Path

if __name__ == "__main__":
    leak = runpy.run_path(
        str(Path(__file__).with_name("original_tree_gru_leak.py")), run_name="tree_gru"
    )
    leak["main"].__globals__["FIXED"] = True
    leak["main"]()
