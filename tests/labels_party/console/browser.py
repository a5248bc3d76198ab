"""Debian's Chromium, headless, driven through Debian's chromedriver (Selenium, nothing downloaded).

Used by the console's browser tests and by ``screenshots.py``. Selenium is given the driver's
path, so its selenium-manager never runs (it would try to download a browser and a driver).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--disable-extensions",
    "--hide-scrollbars",
    "--force-device-scale-factor=1",
    "--lang=en-US",
)


def missing() -> str | None:
    """Why the browser cannot run here, or None."""
    for path in (CHROMIUM, CHROMEDRIVER):
        if not (os.path.exists(path) and os.access(path, os.X_OK)):
            return (
                f"{path} is not installed (tests/run.sh installs Debian's chromium and "
                "chromium-driver with apt-get)"
            )
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium is not installed (pip install -e '.[test]')"
    return None


def start(
    profile: Path, *, downloads: Path | None = None, width: int = 1440, height: int = 900
) -> Any:
    """A headless Chromium WebDriver with a throwaway profile (and download directory)."""
    os.environ.setdefault("SE_OFFLINE", "true")  # belt and braces: selenium-manager stays offline
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={profile}")
    options.add_argument(f"--window-size={width},{height}")
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    if downloads is not None:
        options.add_experimental_option(
            "prefs",
            {
                "download.default_directory": str(downloads),
                "download.prompt_for_download": False,
                "safebrowsing.enabled": False,
            },
        )
    service = Service(executable_path=shutil.which(CHROMEDRIVER) or CHROMEDRIVER)
    driver = webdriver.Chrome(service=service, options=options)
    driver.set_page_load_timeout(60)
    driver.set_script_timeout(30)
    if downloads is not None:
        driver.execute_cdp_cmd(
            "Browser.setDownloadBehavior", {"behavior": "allow", "downloadPath": str(downloads)}
        )
    return driver
