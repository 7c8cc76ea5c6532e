"""Imported only as a forkserver preload (:attr:`VllmCell.preload <workbench.cells.vllm.cell.VllmCell.preload>`):
register vLLM's CPU kernel overrides once, where every probe's child is forked from.

Each engine's worker registers them as it starts (``CpuPlatform.register_triton_kernel_overrides``,
vllm/platforms/cpu.py), and each registration walks every module in ``sys.modules`` (0.7 s in a forkserver child).
Registered here, a child inherits them, and its engines start without the walk
(:func:`workbench.cells.vllm.cell._kernels_registered_once`); vLLM's registry is the one record of them.
"""

from __future__ import annotations

from vllm.platforms import current_platform

current_platform.register_triton_kernel_overrides()
