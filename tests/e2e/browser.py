# SPDX-License-Identifier: GPL-2.0
"""Debian's Chromium, headless, driven through chromedriver (Selenium)."""
from __future__ import annotations

import tempfile
from contextlib import contextmanager
from typing import Iterator

from selenium import webdriver
from selenium.webdriver.chrome.options import Options
from selenium.webdriver.chrome.service import Service

# the machine has no network: keep Chromium from trying
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-dev-shm-usage"]


@contextmanager
def chromium() -> Iterator[webdriver.Chrome]:
    with tempfile.TemporaryDirectory(prefix="kstall-chromium-") as profile:
        o = Options()
        for f in FLAGS + [f"--user-data-dir={profile}"]:
            o.add_argument(f)
        o.binary_location = "/usr/bin/chromium"
        o.set_capability("goog:loggingPrefs", {"browser": "ALL"})
        drv = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=o)
        try:
            drv.set_page_load_timeout(60)
            yield drv
        finally:
            drv.quit()
