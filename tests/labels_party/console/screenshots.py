"""Screenshots of each console view (docs/console/*.png), taken in the tests' headless Chromium.

Run: ``.venv/bin/python -m tests.labels_party.console.screenshots docs/console``. Starts a real
labels-party process on a throwaway database, fills it with the demo's SYNTHETIC ad conversions
(``demo.synthetic_ads``: four datasets, a few releases through the API), and photographs the
views at a laptop's 1440 x 900. The last picture is of "verify chain" after one ledger entry of
that throwaway database was edited.
"""

from __future__ import annotations

import contextlib
import sqlite3
import sys
import tempfile
from pathlib import Path
from typing import Any

import httpx

from demo.synthetic_ads import LABEL_MAX, LABEL_MIN, example_ids, make_ads
from tests.labels_party.conftest import ADV, OPS, PUB, TOKENS, Server
from tests.labels_party.console import browser
from tests.labels_party.console.conftest import wait_for

# name -> (budget, examples, releases as (epsilon, mechanism))
DATASETS: dict[str, tuple[float, int, list[tuple[float, str]]]] = {
    "clicks-2026-11": (4.0, 20000, [(1.0, "auto"), (0.5, "rr_on_bins"), (0.75, "rpwithprior")]),
    "clicks-2026-10": (2.0, 15000, [(1.0, "auto"), (0.9, "auto")]),
    "search-q4": (3.0, 8000, [(0.5, "rpwithprior")]),
    "retargeting-pilot": (1.0, 5000, []),
}


def populate(client: httpx.Client) -> dict[str, list[str]]:
    """The datasets above with registered, labelled examples and their releases."""
    releases: dict[str, list[str]] = {}
    for seed, (name, (budget, n, plan)) in enumerate(DATASETS.items()):
        body = {"name": name, "label_min": LABEL_MIN, "label_max": LABEL_MAX,
                "default_label": 0.0, "epsilon_budget": budget}  # fmt: skip
        client.post("/v1/datasets", json=body, headers=OPS).raise_for_status()
        ids = example_ids(n, prefix=name.split("-")[0])
        _features, labels = make_ads(n, seed=seed)
        client.post(
            f"/v1/datasets/{name}/examples", json={"example_ids": ids}, headers=PUB
        ).raise_for_status()
        rows = [{"example_id": i, "value": float(v)} for i, v in zip(ids, labels, strict=True)]
        client.post(
            f"/v1/datasets/{name}/labels", json={"labels": rows}, headers=ADV
        ).raise_for_status()
        releases[name] = []
        for epsilon, mechanism in plan:
            response = client.post(
                f"/v1/datasets/{name}/releases",
                json={"epsilon": epsilon, "mechanism": mechanism},
                headers=ADV,
            )
            response.raise_for_status()
            releases[name].append(response.json()["id"])
    return releases


def shoot(driver: Any, out: Path, name: str) -> None:
    """The whole page at 1440 px wide (the window grows to the page's height, at least 900)."""
    driver.execute_script("document.activeElement && document.activeElement.blur()")
    driver.set_window_size(1440, 900)
    height = driver.execute_script("return document.documentElement.scrollHeight")
    driver.set_window_size(1440, max(900, int(height) + 140))
    path = out / f"{name}.png"
    driver.save_screenshot(str(path))
    print(f"wrote {path}")


def main(out: Path) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    reason = browser.missing()
    if reason:
        raise SystemExit(f"cannot take screenshots: {reason}")
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        server = Server(db=Path(tmp) / "labels.db", env={}).start()
        driver = browser.start(Path(tmp) / "profile", downloads=Path(tmp), width=1440, height=900)
        try:
            with server.client() as client:
                releases = populate(client)

            def css(selector: str) -> Any:
                return wait_for(lambda: driver.find_elements(By.CSS_SELECTOR, selector))[0]

            def sign_in(token: str) -> None:
                driver.get(f"{server.url}/console")
                css('input[name="token"]').send_keys(token + Keys.ENTER)
                css('[data-testid="dataset-clicks-2026-11"]')

            def open_view(view: str) -> None:
                css(f'#views button[data-view="{view}"]').click()
                wait_for(lambda: not css(f"#view-{view}").get_attribute("hidden"))

            driver.get(f"{server.url}/console")
            css('input[name="token"]')
            shoot(driver, out, "login")

            sign_in(TOKENS.operator)
            shoot(driver, out, "datasets")

            css('[data-testid="dataset-clicks-2026-11"] button').click()
            first = releases["clicks-2026-11"][0]
            css(f'[data-testid="release-{first}"] button').click()
            wait_for(lambda: driver.find_elements(By.CSS_SELECTOR, "svg.histogram rect.bin"))
            shoot(driver, out, "releases")

            open_view("ledger")
            wait_for(lambda: driver.find_elements(By.CSS_SELECTOR, "#ledger-body tr"))
            shoot(driver, out, "ledger")

            open_view("verify")
            css('[data-testid="verify-chain"]').click()
            wait_for(lambda: "OK" in css('[data-testid="verify-result"]').text)
            shoot(driver, out, "verify-ok")

            with contextlib.closing(sqlite3.connect(server.db)) as conn, conn:
                conn.execute(
                    "UPDATE ledger SET epsilon = epsilon / 10, epsilon_exact = '0.01' WHERE seq = 7"
                )
            css('[data-testid="verify-chain"]').click()
            wait_for(lambda: "FAILED" in css('[data-testid="verify-result"]').text)
            shoot(driver, out, "verify-failed")

            css("#sign-out").click()
            sign_in(TOKENS.advertiser)
            open_view("preview")
            field = css("#p-epsilon")
            field.clear()
            field.send_keys("0.5")
            css('#preview-form button[type="submit"]').click()
            wait_for(lambda: css("#preview-result").text)
            shoot(driver, out, "preview")
        finally:
            driver.quit()
            server.stop()


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "docs/console"))
