"""Headless Chromium driven by Selenium, as the tests and the benchmarks open the fabric view.

Chromium, its driver and Selenium come with `make test` (the `test` extra and the Debian packages); a
benchmark without them reports what is missing instead of a figure."""

from __future__ import annotations

import shutil


def missing() -> str | None:
    """What is missing to open the view in a browser, or None."""
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium is not installed (make test installs it)"
    for exe in ("chromium", "chromedriver"):
        if not shutil.which(exe) and not shutil.which(exe, path="/usr/bin"):
            return f"{exe} is not installed (make test installs it)"
    return None


def chromium(width: int = 1600, height: int = 1000):
    """A headless Chromium (a Selenium driver); the caller quits it."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", f"--window-size={width},{height}",
                "--disable-gpu"):
        opts.add_argument(arg)
    opts.binary_location = shutil.which("chromium") or "/usr/bin/chromium"
    return webdriver.Chrome(service=Service(shutil.which("chromedriver") or "/usr/bin/chromedriver"), options=opts)
