"""Training-health monitor: names the cause when a run gets slow, leaky or wrong.

``HealthMonitor`` is a ``fit()`` callback with a loop-agnostic ``begin_step``/``end_step`` API;
``run_doctor`` runs any PyTorch script under it (``treeqa doctor -- python script.py``).
"""

from treeqa.health.findings import CODES, FIXES, Finding
from treeqa.health.launch import run_doctor
from treeqa.health.monitor import HealthError, HealthMonitor

__all__ = ["CODES", "FIXES", "Finding", "HealthError", "HealthMonitor", "run_doctor"]
