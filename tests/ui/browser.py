"""Debian's chromium, driven by Playwright through its executable path: no browser is ever downloaded.

Why the system browser: `playwright install` fetches a browser build from the network at test
time, which a CI machine may not reach and which would be one more moving part; Debian packages a
recent chromium that Playwright drives fine over CDP. The flags keep it from phoning home
(component updates, sync, QUIC probes) and from needing a GPU or a sandbox inside containers.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

CHROMIUM_CANDIDATES = ("/usr/bin/chromium",)

# Headless comes from `headless=True` (Playwright passes `--headless`, the new headless mode).
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--no-default-browser-check",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",  # /dev/shm is tiny in many containers
]

#: Tall enough for the whole StragglerLab panel, and as wide as the narrowest readability check
#: (readability.VIEWPORTS, with JupyterLab's file browser open, as it opens): that check then only changes the
#: height, and each plotly figure relayouts for it once less (about 2 s of chromium's CPU a notebook on 2 cores).
VIEWPORT = {"width": 1280, "height": 1300}


#: Which test file of this folder runs which notebooks top to bottom through JupyterLab's menus (every cell,
#: with its small test parameters, failing on any error output, then readability-checked at both viewports).
#: When these tests are part of a session and chromium is there, tests/notebooks does not execute them a
#: second time under papermill (tests/conftest.py).
RUN_IN_BROWSER_BY = {
    "test_notebooks_in_browser.py": ("00_welcome.ipynb", "04_layerwise_sync_and_prefetch.ipynb",
                                     "05_pseudo_gradient_penalty.ipynb"),
    "test_straggler_panel.py": ("06_stragglers_and_aedit.ipynb",),
    # the rest of the course in two files, so that two pytest workers run them side by side (about 360 s in one)
    "test_course_in_browser.py": ("01_synchronous_data_parallel.ipynb", "02_local_sgd_and_diloco.ipynb",
                                  "03_sharding_meets_local_sgd.ipynb"),
    "test_course_later_in_browser.py": ("07_scaling_out.ipynb", "08_capstone.ipynb", "09_streaming_diloco.ipynb",
                                        "10_surviving_a_death.ipynb"),
}
#: The notebooks whose only browser test is the generic one (run, drawn, readable), by file.
COURSE_IN_BROWSER = RUN_IN_BROWSER_BY["test_course_in_browser.py"]
COURSE_LATER_IN_BROWSER = RUN_IN_BROWSER_BY["test_course_later_in_browser.py"]


def find_chromium() -> str | None:
    """The system chromium's path, or None when it is not installed."""
    for path in CHROMIUM_CANDIDATES:
        if os.access(path, os.X_OK):
            return path
    return shutil.which("chromium")


def launch_context(playwright, executable: str, profile_dir: Path, timeout_s: float = 120.0):
    """A headless chromium with a fresh profile in `profile_dir`; close it with `.close()`."""
    profile_dir.mkdir(parents=True, exist_ok=True)
    context = playwright.chromium.launch_persistent_context(
        str(profile_dir), executable_path=executable, headless=True, args=CHROMIUM_ARGS,
        viewport=VIEWPORT, timeout=timeout_s * 1000, accept_downloads=False, service_workers="block")
    context.set_default_timeout(60_000)  # one click or lookup; a busy 2-core machine can be slow to paint
    return context
