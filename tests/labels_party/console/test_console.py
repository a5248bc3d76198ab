"""The operator console in Debian's headless Chromium, against a real labels-party process."""

from __future__ import annotations

import contextlib
import csv
import io
import re
import sqlite3
import time
from typing import Any

import httpx
import pytest

from labels_party.console import ASSETS, CONTENT_SECURITY_POLICY, asset
from tests.labels_party.conftest import ADV, OPS, PUB, TOKENS, Server
from tests.labels_party.console.conftest import make_release, seed, wait_for

pytestmark = pytest.mark.integration


def by_css(driver: Any, selector: str) -> list[Any]:
    from selenium.webdriver.common.by import By

    return driver.find_elements(By.CSS_SELECTOR, selector)


def one(driver: Any, selector: str) -> Any:
    found = wait_for(lambda: by_css(driver, selector), what=selector)
    return found[0]


def open_console(driver: Any, server: Server) -> None:
    driver.get(f"{server.url}/console")
    one(driver, "#login-form")
    driver.get_log("browser")  # start each test with an empty console log


def login(driver: Any, token: str) -> None:
    from selenium.webdriver.common.keys import Keys

    field = one(driver, 'input[name="token"]')
    field.clear()
    field.send_keys(token + Keys.ENTER)  # the keyboard alone signs in


def logged_in(driver: Any, server: Server, token: str) -> None:
    open_console(driver, server)
    login(driver, token)
    wait_for(lambda: not one(driver, "#views").get_attribute("hidden"), what="the views")


def view(driver: Any, name: str) -> None:
    one(driver, f'#views button[data-view="{name}"]').click()
    wait_for(lambda: not one(driver, f"#view-{name}").get_attribute("hidden"), what=name)


def dataset_row(driver: Any, name: str) -> Any:
    return one(driver, f'[data-testid="dataset-{name}"]')


def ledger_seqs(driver: Any) -> list[int]:
    return [int(tr.get_attribute("data-seq")) for tr in by_css(driver, "#ledger-body tr")]


def no_csp_violations(driver: Any) -> None:
    messages = [entry["message"] for entry in driver.get_log("browser")]
    assert not [m for m in messages if "Content Security Policy" in m], messages


# ---- the page itself -------------------------------------------------------------------------


def test_page_and_assets_carry_a_strict_csp_and_no_data(client: httpx.Client) -> None:
    seed(client, datasets={"secret-name": 5.0})
    for path in ("/console", *(f"/console/static/{n}" for n in ASSETS if n != "index.html")):
        response = client.get(path)
        assert response.status_code == 200, path
        assert response.headers["content-security-policy"] == CONTENT_SECURITY_POLICY
        assert response.headers["x-content-type-options"] == "nosniff"
        assert "secret-name" not in response.text  # the page holds no data
    assert "default-src 'self'" in CONTENT_SECURITY_POLICY
    assert "unsafe-inline" not in CONTENT_SECURITY_POLICY
    assert client.get("/console/static/../main.py").status_code == 404
    html = asset("index.html").decode()
    assert not re.search(r"<script(?![^>]*\bsrc=)", html)  # no inline script
    assert "<style" not in html and " style=" not in html and " on" + "click=" not in html
    for name in ASSETS:  # nothing is fetched from outside the service
        text = asset(name).decode()
        urls = set(re.findall(r"https?://[^\s'\"`)]+", text)) - {"http://www.w3.org/2000/svg"}
        assert not urls, (name, urls)


def test_without_a_token_the_console_shows_nothing(
    chromium: Any, console_server: Server, client: httpx.Client
) -> None:
    seed(client, datasets={"clicks": 4.0})
    make_release(client, "clicks", 1.0)
    open_console(chromium, console_server)
    assert one(chromium, "#login").is_displayed()
    assert not one(chromium, "#views").is_displayed()
    assert by_css(chromium, '[data-testid^="dataset-"]') == []
    assert by_css(chromium, "#ledger-body tr") == []
    assert not one(chromium, '[data-testid="ledger-table"]').is_displayed()
    assert "clicks" not in chromium.find_element("tag name", "body").text
    assert chromium.execute_script("return sessionStorage.length") == 0
    no_csp_violations(chromium)


def test_a_wrong_token_shows_a_clear_message(
    chromium: Any, console_server: Server, client: httpx.Client
) -> None:
    seed(client, datasets={"clicks": 4.0})
    open_console(chromium, console_server)
    login(chromium, "not-the-token")
    error = wait_for(lambda: one(chromium, "#login-error").text, what="the login error")
    assert "not accepted" in error and "401" in error
    assert by_css(chromium, '[data-testid^="dataset-"]') == []
    assert chromium.execute_script("return sessionStorage.length") == 0
    assert not one(chromium, "#views").is_displayed()


# ---- the operator's views --------------------------------------------------------------------


def test_operator_sees_the_budget_bar_change_after_a_release(
    chromium: Any, console_server: Server, client: httpx.Client
) -> None:
    seed(client, datasets={"clicks": 4.0, "visits": 2.0})
    logged_in(chromium, console_server, TOKENS.operator)
    assert chromium.execute_script("return Object.keys(sessionStorage)") == [
        "labeldp.console.token"
    ]
    assert one(chromium, "#role-name").text == "operator"

    def cells(name: str) -> list[str]:
        return [td.text for td in dataset_row(chromium, name).find_elements("tag name", "td")]

    def fill(name: str) -> str:
        return (
            dataset_row(chromium, name)
            .find_element("css selector", ".bar-fill")
            .get_attribute("style")
        )

    before = cells("clicks")
    assert before[3:7] == ["0", "4", "4", "0"]  # spent, left, budget, releases
    assert "width: 0%" in fill("clicks")
    make_release(client, "clicks", 1.0)
    one(chromium, "#datasets-refresh").click()
    wait_for(lambda: cells("clicks")[3] == "1", what="the new spend")
    after = cells("clicks")
    assert after[3:7] == ["1", "3", "4", "1"]
    assert "width: 25%" in fill("clicks")
    assert after[7] != "—"  # the last release's time
    assert cells("visits")[3:7] == ["0", "2", "2", "0"]  # the other dataset is untouched
    no_csp_violations(chromium)


def test_release_timeline_and_detail_with_the_histogram(
    chromium: Any, console_server: Server, client: httpx.Client
) -> None:
    seed(client, datasets={"clicks": 4.0})
    first = make_release(client, "clicks", 1.0)
    second = make_release(client, "clicks", 0.5, mechanism="rr_on_bins")
    logged_in(chromium, console_server, TOKENS.operator)
    dataset_row(chromium, "clicks").find_element("css selector", "button").click()
    wait_for(lambda: len(by_css(chromium, "#timeline li")) == 2, what="the timeline")
    items = by_css(chromium, "#timeline li")
    assert [li.get_attribute("data-testid") for li in items] == [
        f"release-{second['id']}",
        f"release-{first['id']}",
    ]
    items[1].find_element("tag name", "button").click()
    detail = wait_for(lambda: first["message_sha256"] in one(chromium, "#release-detail").text)
    text = one(chromium, "#release-detail").text
    assert detail and "rpwithprior" in text and "advertiser" in text
    assert str(first["epsilon1"]) in text and str(first["epsilon2"]) in text
    header = client.get(f"/v1/releases/{first['id']}/header", headers=OPS).json()
    bars = by_css(chromium, "#release-detail svg.histogram rect.bin")
    assert len(bars) == len(header["histogram"]["probs"])
    for key in header["params"]:
        assert key in text
    no_csp_violations(chromium)


def test_model_releases_share_the_timeline_and_show_their_charge(
    chromium: Any, console_server: Server, client: httpx.Client
) -> None:
    seed(client, datasets={"clicks": 4.0})
    rows = "".join(f"clicks-{i},{i % 7},{(i * 3) % 11}\n" for i in range(120))
    uploaded = client.post(
        "/v1/datasets/clicks/public-features",
        content=("example_id,x1,x2\n" + rows).encode(),
        headers={**PUB, "Content-Type": "text/csv"},
    )
    assert uploaded.status_code == 201, uploaded.text
    label = make_release(client, "clicks", 1.0)
    answer = client.post(
        "/v1/datasets/clicks/model-releases",
        json={"estimator": "ols", "privacy": "label", "epsilon": "0.5"},
        headers=ADV,
    )
    assert answer.status_code == 201, answer.text
    model = answer.json()
    logged_in(chromium, console_server, TOKENS.operator)
    dataset_row(chromium, "clicks").find_element("css selector", "button").click()
    wait_for(lambda: len(by_css(chromium, "#timeline li")) == 2, what="the timeline")
    items = by_css(chromium, "#timeline li")
    assert [li.get_attribute("data-testid") for li in items] == [
        f"model-release-{model['id']}",
        f"release-{label['id']}",
    ]
    assert "model ols (label)" in items[0].text and "ε 0.5" in items[0].text
    items[0].find_element("tag name", "button").click()
    wait_for(lambda: model["message_sha256"] in one(chromium, "#release-detail").text)
    text = one(chromium, "#release-detail").text
    assert model["features_id"] in text and "label DP" in text and "advertiser" in text
    no_csp_violations(chromium)


def test_switching_datasets_fast_shows_only_the_last_ones_releases(
    chromium: Any, console_server: Server, client: httpx.Client
) -> None:
    seed(client, datasets={"clicks": 4.0, "visits": 4.0})
    clicks = make_release(client, "clicks", 1.0)
    visits = make_release(client, "visits", 1.0)
    logged_in(chromium, console_server, TOKENS.operator)
    view(chromium, "releases")
    chromium.execute_script(  # two choices before either answer arrives: the first is superseded
        """const select = document.getElementById('releases-dataset');
        for (const name of ['clicks', 'visits']) {
          select.value = name;
          select.dispatchEvent(new Event('change'));
        }"""
    )
    wait_for(lambda: by_css(chromium, "#timeline li"), what="the timeline")
    time.sleep(0.5)  # both answers are in
    items = [li.get_attribute("data-testid") for li in by_css(chromium, "#timeline li")]
    assert items == [f"release-{visits['id']}"], (items, clicks["id"])
    no_csp_violations(chromium)


def test_ledger_filters_paging_and_csv_export(
    chromium: Any, console_server: Server, client: httpx.Client
) -> None:
    names = {f"d{i:02d}": 3.0 for i in range(8)}
    seed(client, datasets=names, examples=20)
    rel = make_release(client, "d03", 1.0)
    make_release(client, "d05", 1.0)
    everything = client.get("/v1/ledger", headers=OPS).json()["entries"]
    assert len(everything) == 12
    logged_in(chromium, console_server, TOKENS.operator)
    view(chromium, "ledger")
    wait_for(lambda: ledger_seqs(chromium) == list(range(1, 13)), what="the whole ledger")

    def apply(**fields: str) -> None:
        from selenium.webdriver.support.ui import Select

        one(chromium, '#ledger-filters button[type="reset"]').click()
        for name, value in fields.items():
            element = one(chromium, f'#ledger-filters [name="{name}"]')
            if element.tag_name == "select":
                Select(element).select_by_value(value)
            elif element.get_attribute("type") == "datetime-local":
                chromium.execute_script("arguments[0].value = arguments[1]", element, value)
            else:
                element.send_keys(value)
        one(chromium, '#ledger-filters button[type="submit"]').click()

    apply(dataset="d03")
    expected = [e["seq"] for e in everything if e["dataset"] == "d03"]
    wait_for(lambda: ledger_seqs(chromium) == expected, what="the d03 entries")
    apply(kind="randomizer")
    expected = [e["seq"] for e in everything if e["kind"] == "randomizer"]
    wait_for(lambda: ledger_seqs(chromium) == expected, what="the randomizer entries")
    apply(release_id=rel["id"])
    expected = [e["seq"] for e in everything if e["release_id"] == rel["id"]]
    wait_for(lambda: ledger_seqs(chromium) == expected, what="the release's entries")
    apply(until="2001-01-01T00:00:00")
    wait_for(lambda: "no entry matches" in one(chromium, "#ledger-page").text, what="empty")
    assert ledger_seqs(chromium) == []
    apply(since="2001-01-01T00:00:00", kind="dataset")
    wait_for(lambda: ledger_seqs(chromium) == list(range(1, 9)), what="the creations")

    apply(limit="10")  # paging
    wait_for(lambda: ledger_seqs(chromium) == list(range(1, 11)), what="page 1")
    assert one(chromium, "#ledger-prev").get_attribute("disabled")
    chromium.execute_script(  # clicked twice before the page answers: still page 2
        "const next = document.getElementById('ledger-next'); next.click(); next.click();"
    )
    wait_for(lambda: ledger_seqs(chromium) == [11, 12], what="page 2")
    assert one(chromium, "#ledger-page").text.startswith("Page 2:")
    assert one(chromium, "#ledger-next").get_attribute("disabled")
    one(chromium, "#ledger-prev").click()
    wait_for(lambda: ledger_seqs(chromium) == list(range(1, 11)), what="page 1 again")

    apply(dataset="d05")  # CSV of the filtered view
    for old in chromium.downloads.glob("ledger*.csv"):
        old.unlink()
    one(chromium, "#ledger-export").click()
    link = wait_for(lambda: [a for a in by_css(chromium, "#ledger-csv") if a.is_displayed()])[0]
    assert "3 entries" in link.text
    api_csv = client.get("/v1/ledger", params={"dataset": "d05", "format": "csv"}, headers=OPS)
    downloaded = wait_for(lambda: list(chromium.downloads.glob("ledger*.csv")), what="download")
    wait_for(lambda: downloaded[0].read_text() == api_csv.text, what="the downloaded file")
    text = downloaded[0].read_text()
    rows = list(csv.DictReader(io.StringIO(text)))
    assert [int(r["seq"]) for r in rows] == [e["seq"] for e in everything if e["dataset"] == "d05"]
    no_csp_violations(chromium)


def test_verify_chain_turns_red_and_names_the_entry(
    chromium: Any, console_server: Server, client: httpx.Client
) -> None:
    seed(client, datasets={"clicks": 4.0, "visits": 2.0})
    make_release(client, "clicks", 1.0)
    make_release(client, "visits", 0.5)
    logged_in(chromium, console_server, TOKENS.operator)
    view(chromium, "verify")
    one(chromium, '[data-testid="verify-chain"]').click()
    result = one(chromium, '[data-testid="verify-result"]')
    wait_for(lambda: "OK" in result.text, what="OK")
    assert "ok" in result.get_attribute("class").split()
    green = result.value_of_css_property("color")

    entries = client.get("/v1/ledger", params={"kind": "histogram"}, headers=OPS).json()
    tampered = entries["entries"][-1]["seq"]
    with contextlib.closing(sqlite3.connect(console_server.db)) as conn, conn:
        conn.execute(  # the amount the hash chain commits to (its exact decimal text)
            "UPDATE ledger SET epsilon = epsilon / 10, epsilon_exact = '0.01' WHERE seq = ?",
            (tampered,),
        )
    chromium.execute_script(  # clicked twice before either answer: one report shows
        "const button = document.querySelector('[data-testid=\"verify-chain\"]');"
        "button.click(); button.click();"
    )
    wait_for(lambda: "FAILED" in result.text, what="FAILED")
    time.sleep(0.5)  # both answers are in
    report = client.get("/v1/ledger/verify", headers=OPS).json()
    assert len(by_css(chromium, "#verify-problems li")) == len(report["problems"])
    assert f"entry seq {tampered}" in result.text and "OK" not in result.text
    assert "bad" in result.get_attribute("class").split()
    red = result.value_of_css_property("color")
    r, g, b = (int(v) for v in re.findall(r"\d+", red)[:3])
    assert red != green and r > 120 and g < 60 and b < 60, red
    problems = [li.text for li in by_css(chromium, "#verify-problems li")]
    assert any(f"entry seq {tampered}:" in p for p in problems)

    loads_before = ledger_fetches(chromium)
    one(chromium, "#verify-show").click()  # the breaking entry, highlighted in the ledger
    seqs = wait_for(
        lambda: [tr.get_attribute("data-seq") for tr in by_css(chromium, "#ledger-body tr.broken")],
        what="the row",
    )
    assert seqs == [str(tampered)]
    time.sleep(0.5)  # a second load (the form's reset used to schedule one) would have begun
    assert ledger_fetches(chromium) == loads_before + 1
    no_csp_violations(chromium)


def ledger_fetches(driver: Any) -> int:
    """How many ledger pages the page has fetched so far (the browser's resource timing)."""
    return driver.execute_script(
        "return performance.getEntriesByType('resource')"
        ".filter((e) => e.name.includes('/v1/ledger?')).length"
    )


# ---- other roles -----------------------------------------------------------------------------


def test_advertiser_previews_a_release_and_spends_nothing(
    chromium: Any, console_server: Server, client: httpx.Client
) -> None:
    seed(client, datasets={"clicks": 4.0})
    make_release(client, "clicks", 1.0)
    before = client.get("/v1/datasets/clicks", headers=OPS).json()
    logged_in(chromium, console_server, TOKENS.advertiser)
    visible = [b.text for b in by_css(chromium, "#views button") if b.is_displayed()]
    assert visible == ["Datasets", "Releases", "Release preview"]
    view(chromium, "preview")
    epsilon = one(chromium, "#p-epsilon")
    epsilon.clear()
    epsilon.send_keys("0.5")
    chromium.execute_script(  # submitted twice before either answer: one preview shows
        "const form = document.getElementById('preview-form');"
        "form.requestSubmit(); form.requestSubmit();"
    )
    wait_for(lambda: one(chromium, "#preview-result").text, what="the preview")
    time.sleep(0.5)  # both answers are in
    out = one(chromium, "#preview-result").text
    assert out.count("Nothing was spent.") == 1, out
    body = {"epsilon": "0.5", "mechanism": "auto", "dry_run": True}  # the API, the same request
    answer = client.post("/v1/datasets/clicks/releases", json=body, headers=ADV)
    assert answer.status_code == 200, answer.text
    plan = answer.json()
    assert "Nothing was spent" in out
    assert str(plan["budget"]["left_after"]) in out and plan["plan"]["mechanism"] in out
    assert client.get("/v1/datasets/clicks", headers=OPS).json() == before
    no_csp_violations(chromium)


def test_publisher_sees_only_its_datasets_and_no_ledger(
    chromium: Any, console_server: Server, client: httpx.Client
) -> None:
    seed(client, datasets={"clicks": 4.0})
    body = {"name": "unregistered", "label_min": 0, "label_max": 1, "default_label": 0,
            "epsilon_budget": 1}  # fmt: skip
    assert client.post("/v1/datasets", json=body, headers=OPS).is_success
    logged_in(chromium, console_server, TOKENS.publisher)
    dataset_row(chromium, "clicks")
    assert by_css(chromium, '[data-testid="dataset-unregistered"]') == []
    visible = [b.text for b in by_css(chromium, "#views button") if b.is_displayed()]
    assert visible == ["Datasets", "Releases"]


def test_sign_out_forgets_the_token(
    chromium: Any, console_server: Server, client: httpx.Client
) -> None:
    seed(client, datasets={"clicks": 4.0})
    logged_in(chromium, console_server, TOKENS.operator)
    dataset_row(chromium, "clicks")
    one(chromium, "#sign-out").click()
    wait_for(lambda: one(chromium, "#login").is_displayed(), what="the login form")
    assert chromium.execute_script("return sessionStorage.length") == 0
    assert by_css(chromium, '[data-testid^="dataset-"]') == []
    chromium.refresh()
    one(chromium, "#login-form")
    time.sleep(0.3)
    assert not one(chromium, "#views").is_displayed()


def test_a_token_revoked_mid_session_returns_to_the_login(
    chromium: Any, console_server: Server, client: httpx.Client
) -> None:
    seed(client, datasets={"clicks": 4.0})
    logged_in(chromium, console_server, TOKENS.operator)
    dataset_row(chromium, "clicks")
    chromium.execute_script("sessionStorage.setItem('labeldp.console.token', 'revoked')")
    one(chromium, "#datasets-refresh").click()
    error = wait_for(lambda: one(chromium, "#login-error").text, what="the message")
    assert "refused" in error
    assert by_css(chromium, '[data-testid^="dataset-"]') == []


def test_named_principals_show_who_acted(
    chromium: Any, console_server: Server, client: httpx.Client
) -> None:
    """A named operator signs in as itself; the ledger says which person released."""
    from labels_party.access import principals
    from labels_party.db.engine import Database, create_schema, make_engine

    seed(client, datasets={"clicks": 4.0})
    engine = make_engine(f"sqlite:///{console_server.db}")
    create_schema(engine)
    db = Database(engine)
    _, lee = principals.issue(db, name="lee", role="operator")
    _, alice = principals.issue(db, name="alice", role="advertiser")
    engine.dispose()
    made = client.post(
        "/v1/datasets/clicks/releases",
        json={"epsilon": 1.0},
        headers={"Authorization": f"Bearer {alice}"},
    )
    assert made.status_code == 201, made.text
    logged_in(chromium, console_server, lee)
    assert one(chromium, "#role-name").text == "lee (operator)"
    view(chromium, "ledger")
    wait_for(lambda: len(ledger_seqs(chromium)) == 3, what="the ledger")
    actors = [
        tr.find_elements("tag name", "td")[7].text for tr in by_css(chromium, "#ledger-body tr")
    ]
    assert actors == ["operator", "alice (advertiser)", "alice (advertiser)"]
    no_csp_violations(chromium)


def test_the_keyboard_alone_reaches_every_view(
    chromium: Any, console_server: Server, client: httpx.Client
) -> None:
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.keys import Keys

    seed(client, datasets={"clicks": 4.0})
    logged_in(chromium, console_server, TOKENS.operator)
    dataset_row(chromium, "clicks")

    def tab_to(selector: str) -> None:
        target = one(chromium, selector)
        for _ in range(60):
            ActionChains(chromium).send_keys(Keys.TAB).perform()
            if chromium.switch_to.active_element == target:
                return
        raise AssertionError(f"Tab never reached {selector}")

    tab_to('#views button[data-view="verify"]')
    ActionChains(chromium).send_keys(Keys.ENTER).perform()
    wait_for(lambda: one(chromium, "#view-verify").is_displayed(), what="the verify view")
    tab_to('[data-testid="verify-chain"]')
    ActionChains(chromium).send_keys(Keys.ENTER).perform()
    wait_for(lambda: "OK" in one(chromium, '[data-testid="verify-result"]').text, what="OK")
    outline = chromium.switch_to.active_element.value_of_css_property("outline-style")
    assert outline != "none"  # the focused control is visibly marked
