"""The lab's numbers are the same bits on every x86 machine: MKL is pinned to one code path (edit_lab/__init__.py).

Without the pin, MKL picks its kernels by the CPU it finds, so a virtual run's validation loss differed in its
last bit between a machine with AVX-512 and one without, and notebook 07's nbval reference failed on the
machine it was not made on. The other machine is stood in for by MKL_ENABLE_INSTRUCTIONS=AVX2 (MKL then
dispatches as on a CPU without AVX-512): the same matmuls must give the same bits either way.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

SCRIPT = """
import hashlib
import edit_lab  # noqa: F401  (pins MKL's code path before anything computes)
import torch
torch.set_num_threads(1)
g = torch.Generator().manual_seed(0)
h = hashlib.sha256()
for m, k, n in ((512, 128, 384), (512, 512, 128), (37, 91, 53), (256, 128, 4096)):  # the lab's shapes, and odd ones
    a, b = torch.randn(m, k, generator=g), torch.randn(k, n, generator=g)
    h.update((a @ b).numpy().tobytes())
print(h.hexdigest())
"""


def _digest(**env: str) -> str:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("MKL_")}
    done = subprocess.run([sys.executable, "-c", SCRIPT], env={**clean, **env}, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.strip()


def test_importing_the_lab_pins_mkl_and_leaves_a_users_choice():
    done = subprocess.run([sys.executable, "-c", "import os, edit_lab; print(os.environ['MKL_CBWR'])"],
                          env={k: v for k, v in os.environ.items() if k != "MKL_CBWR"}, capture_output=True,
                          text=True, timeout=60)
    assert done.stdout.strip() == "AVX2,STRICT", done.stderr[-2000:]
    done = subprocess.run([sys.executable, "-c", "import os, edit_lab; print(os.environ['MKL_CBWR'])"],
                          env={**os.environ, "MKL_CBWR": "COMPATIBLE"}, capture_output=True, text=True, timeout=60)
    assert done.stdout.strip() == "COMPATIBLE"


def test_the_same_matmuls_give_the_same_bits_whatever_instructions_the_cpu_has():
    import torch

    if "mkl" not in torch.__config__.show().lower() or not torch.backends.mkl.is_available():
        pytest.skip("this torch has no MKL: its BLAS chooses its kernels in its own way")
    assert _digest() == _digest(MKL_ENABLE_INSTRUCTIONS="AVX2")
