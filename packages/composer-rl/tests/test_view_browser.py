"""The rollout viewer in real headless Chromium, on the run directory of a short real RL run.

One RL run (tiny random policy, services in threads, real engine, sandboxes, plugins and
weight store) is made once for the session; the other directories are copies of it with
one thing changed: a live copy a test appends to, one with an episode spanning an in-flight
update and an adversarial episode appended, a half-written (killed) copy, an empty one and
one in an older version's format. The short run does not reliably produce an episode whose
tokens carry two policy versions (its episodes are 24 tokens long), so that episode is
built from one of the run's own group records with the second half of its tokens relabelled
as sampled by the next version, in the same format (composer-infra's `FinishedGroup` of `Trajectory`s).

Marked slow: the real run alone takes 1-2.5 minutes on the loaded 2-core box.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

import pytest
from _rl_helpers import tiny_checkpoint

from composer_rl.rl.config import load_config
from composer_rl.rl.fates import FATES_LOG, FateBook
from composer_rl.rl.run import run_rl
from composer_rl.view.server import ViewerServer

pytestmark = pytest.mark.slow

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")
if CHROMIUM is None or CHROMEDRIVER is None:
    pytest.skip(
        "Debian's chromium and chromium-driver are not installed "
        "(apt-get install -y chromium chromium-driver; .ci/run does)",
        allow_module_level=True,
    )
webdriver = pytest.importorskip("selenium.webdriver")
from selenium.common.exceptions import TimeoutException  # noqa: E402
from selenium.webdriver.common.action_chains import ActionChains  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.ui import Select, WebDriverWait  # noqa: E402

SCRIPT = '<script>window.pwned = 1; document.title = "pwned";</script>'
IMG = "<img src=x onerror=\"window.pwned = 2; document.title = 'pwned'\">"
SVG = '<svg onload="window.pwned = 3"></svg>'
ODD = "\u202eevil RTL\u202c zero\u200bwidth \U0001f600 nul\x00 lone\ud800 <b>bold</b> &amp;"
HUGE = 1_000_000
SHOTS = Path(__file__).resolve().parents[3] / "docs" / "rl" / "viewer"


# --- the run directories ------------------------------------------------------------------


@pytest.fixture(scope="session")
def real_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished 3-step RL run (2 episodes a group), with a held-out evaluation at v2.

    VIEW_TEST_RUN_DIR names a run directory made earlier the same way, to rerun the browser
    tests in seconds while working on the viewer (it is only read, never changed).
    """
    if os.environ.get("VIEW_TEST_RUN_DIR"):
        return Path(os.environ["VIEW_TEST_RUN_DIR"]).resolve()
    root = tmp_path_factory.mktemp("view-real")
    overrides = {
        "model": str(tiny_checkpoint(root / "sft")),
        "run_dir": str(root / "run"),
        "local": True,
        "tasks.per_template": 2,
        "rollout.max_turns": 2,
        "rollout.max_new_tokens": 24,
        "rollout.max_seq_len": 512,
        "rollout.max_batch_size": 8,
        "loop.group_size": 2,
        "loop.groups_per_step": 1,
        "loop.max_groups_in_flight": 2,
        "loop.drop_constant_groups": False,
        "loop.steps": 3,
        "train.checkpoint_every": 1,
        "train.optim.lr": 1e-3,
        "eval.every": 2,
        "eval.during_per_template": 1,
    }
    run_rl(load_config(None, overrides))
    return root / "run"


def _lines(run: Path) -> list[dict[str, Any]]:
    text = (run / "episodes" / "episodes.jsonl").read_text()
    return [json.loads(x) for x in text.splitlines()]


def _append(run: Path, record: dict[str, Any]) -> None:
    with (run / "episodes" / "episodes.jsonl").open("a") as out:
        out.write(json.dumps(record) + "\n")


def _copy(real: Path, where: Path) -> Path:
    shutil.copytree(real, where, ignore=shutil.ignore_patterns("weights", "final"))
    return where


def _spanning_episode(run: Path) -> str:
    """An episode (and its group file) whose tokens two policy versions sampled."""
    source = next(p for p in sorted((run / "groups").glob("*.json")))
    group = json.loads(source.read_text())
    line = next(e for e in _lines(run) if e["group"] == group["group_id"])
    gid = f"g900001-{group['prompt_id']}"
    episode = f"{gid}.s0"
    records = []
    for sample, record in enumerate(group["episodes"]):
        first = record["sampled"].index(True)
        n = len(record["tokens"]) - first
        record["versions"][first:] = [0] * (n // 2) + [1] * (n - n // 2)
        record["episode_id"] = f"{gid}.s{sample}"
        record["group_id"] = gid
        records.append(record)
    group.update(group_id=gid, episodes=records)
    (run / "groups" / f"{gid}.json").write_text(json.dumps(group))
    # Its fate as the loop recorded the group it was made from.
    fate = FateBook.read(run / FATES_LOG).standing[source.stem]
    with (run / FATES_LOG).open("a") as out:
        out.write(json.dumps({**fate, "group": gid}) + "\n")
    for sample in range(len(records)):
        _append(
            run,
            {**line, "group": gid, "episode": f"{gid}.s{sample}", "versions": [0, 1]},
        )
    return episode


def _adversarial_episode(run: Path) -> str:
    line = _lines(run)[0]
    gid = "g900002-evil-0000000000"
    transcript = (
        f"<|system|>sys<|end_of_turn|><|user|>Fix it {SCRIPT}<|end_of_turn|><|assistant|>"
        f"<|tool_call|>write_file\n@@path\nevil.html\n@@content\n{IMG}{SCRIPT}{SVG}\n"
        f"<|/tool_call|><|tool_result|>{ODD}<|/tool_result|>" + "A" * HUGE + "<|end_of_turn|>"
    )
    record = {
        **line,
        "group": gid,
        "episode": f"{gid}.s0",
        "task": "evil-0000000000",
        "category": "<i>refactor</i>",
        "components": {f"{IMG}": 1.0},
        "flags": {"terminal_collapse": f"reason {SCRIPT}{IMG}"},
        "grading_failure": f"{SVG} {ODD}",
        "transcript": transcript,
    }
    with (run / "episodes" / "episodes.jsonl").open("a") as out:
        out.write(json.dumps(record, ensure_ascii=True) + "\n")
    return f"{gid}.s0"


def _make_running(run: Path) -> None:
    """What a job still going looks like: state.json not finished, its pid alive here."""
    path = run / "plugins" / "state.json"
    state = json.loads(path.read_text())
    state.update(finished=False, pid=os.getpid(), host=os.uname().nodename)
    path.write_text(json.dumps(state))


@pytest.fixture(scope="module")
def dirs(real_run: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    base = tmp_path_factory.mktemp("view-dirs")
    extra = _copy(real_run, base / "extra")
    spanning = _spanning_episode(extra)
    evil = _adversarial_episode(extra)
    live = _copy(real_run, base / "live")
    _make_running(live)
    half = _copy(real_run, base / "half")
    (half / "plugins" / "state.json").unlink()
    (half / "eval.jsonl").unlink()
    with (half / "episodes" / "episodes.jsonl").open("a") as out:
        out.write('{"episode": "g000009-cut.s0", "task": "cu')
    with (half / "metrics.jsonl").open("a") as out:
        out.write('{"step": 4, "kl_')
    day_ago = time.time() - 86400
    for path in half.rglob("*"):
        os.utime(path, (day_ago, day_ago))
    empty = base / "empty"
    empty.mkdir()
    older = base / "older"
    (older / "episodes").mkdir(parents=True)
    keep = ("episode", "task", "category", "reward", "solved", "transcript")
    for line in _lines(real_run):
        _append(older, {k: line[k] for k in keep})
    shutil.copy(real_run / "metrics.jsonl", older / "metrics.jsonl")
    return {
        "real": real_run,
        "extra": extra,
        "spanning": spanning,
        "evil": evil,
        "live": live,
        "half": half,
        "empty": empty,
        "older": older,
    }


@pytest.fixture(scope="module")
def server(dirs: dict[str, Any]) -> Iterator[ViewerServer]:
    paths = [dirs[k] for k in ("real", "extra", "live", "half", "empty", "older")]
    with ViewerServer(paths) as running:
        yield running


def _rid(server: ViewerServer, path: Path) -> str:
    (name,) = [n for n, r in server.app.state.viewer.runs.items() if r.path == path]
    return str(name)


@pytest.fixture
def browser() -> Iterator[Any]:
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--window-size=1400,1000",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-default-apps",
        "--disable-sync",
        "--metrics-recording-only",
        "--no-default-browser-check",
    ):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"performance": "ALL", "browser": "ALL"})
    driver = webdriver.Chrome(
        options=options, service=webdriver.ChromeService(executable_path=CHROMEDRIVER)
    )
    driver.set_page_load_timeout(60)
    try:
        yield driver
    finally:
        driver.quit()


def _wait(driver: Any, what: Callable[[Any], Any], timeout: float = 30) -> Any:
    try:
        return WebDriverWait(driver, timeout, poll_frequency=0.2).until(what)
    except TimeoutException:
        text = driver.find_element(By.TAG_NAME, "main").text[:2000]
        raise AssertionError(f"timed out; the page shows:\n{text}") from None


def _css(driver: Any, selector: str) -> list[Any]:
    return list(driver.find_elements(By.CSS_SELECTOR, selector))


def _open(driver: Any, url: str, ready: str) -> None:
    driver.get(url)
    _wait(driver, lambda d: _css(d, ready) or _css(d, "[data-role=error]"))
    errors = _css(driver, "[data-role=error]")
    assert not errors, errors[0].text


def _rows(driver: Any) -> list[str]:
    """The episode ids of the table's rows, read in one script (the table is redrawn live)."""
    return list(
        driver.execute_script(
            "return [...document.querySelectorAll('table[data-role=episodes] tbody tr')]"
            ".map(r => r.dataset.episode);"
        )
    )


# --- the tests ----------------------------------------------------------------------------


def test_each_view_loads(browser: Any, server: ViewerServer, dirs: dict[str, Any]) -> None:
    rid = _rid(server, dirs["real"])
    _open(browser, server.url, "table[data-role=runs]")
    assert rid in browser.find_element(By.TAG_NAME, "main").text
    _open(browser, f"{server.url}runs/{rid}", "[data-role=charts] svg")
    _wait(browser, lambda d: len(_css(d, "[data-role=charts] svg")) >= 6)
    main = browser.find_element(By.TAG_NAME, "main").text
    assert "finished" in main and "held-out pass@1" in main and "KL" in main
    assert "reward/length" in main  # reward by component
    episodes = _lines(dirs["real"])
    _open(browser, f"{server.url}runs/{rid}/episodes", "table[data-role=episodes] tbody tr")
    assert _rows(browser) == [e["episode"] for e in episodes]
    first = episodes[0]
    _open(
        browser,
        f"{server.url}runs/{rid}/episode?id={quote(first['episode'])}",
        "[data-role=tokens] .tok",
    )
    text = browser.find_element(By.TAG_NAME, "main").text
    assert "Reward by component" in text and "length" in text
    assert first["task"] in text
    assert _css(browser, "[data-role=transcript] .block.user")
    _open(browser, f"{server.url}runs/{rid}/group?id={quote(first['group'])}", "[data-role=fate]")
    fate = browser.find_element(By.CSS_SELECTOR, "[data-role=fate]").text
    assert fate.startswith("trained at step"), fate
    # Recorded by the loop when it trained the group, with the reason, not inferred.
    card = browser.find_element(By.CSS_SELECTOR, "[data-role=fate-card]")
    assert card.get_attribute("data-source") == "recorded"
    reason = browser.find_element(By.CSS_SELECTOR, "[data-role=fate-reason]").text
    assert reason.startswith("trained at step") and "behind the weights" in reason
    source = browser.find_element(By.CSS_SELECTOR, "[data-role=fate-source]").text
    assert "groups/fates.jsonl" in source and "inferred" not in source
    advantages = [e.text for e in _css(browser, "[data-role=advantage]")]
    assert len(advantages) == 2 and all(a != "–" for a in advantages)


def test_filters_and_sort_narrow_the_table(
    browser: Any, server: ViewerServer, dirs: dict[str, Any]
) -> None:
    rid = _rid(server, dirs["extra"])
    lines = _lines(dirs["extra"])
    _open(browser, f"{server.url}runs/{rid}/episodes", "table[data-role=episodes] tbody tr")
    assert len(_rows(browser)) == len(lines)
    category = lines[0]["category"]
    Select(browser.find_element(By.NAME, "category")).select_by_value(category)
    want = [e["episode"] for e in lines if e["category"] == category]
    _wait(browser, lambda d: _rows(d) == want)
    assert 0 < len(want) < len(lines)
    assert f"category={category}" in browser.current_url  # the filter is in the address
    browser.find_element(By.XPATH, "//button[text()='clear']").click()
    _wait(browser, lambda d: len(_rows(d)) == len(lines))
    cut = sorted(e["reward"] for e in lines)[len(lines) // 2]
    field = browser.find_element(By.NAME, "reward_min")
    field.send_keys(str(cut))
    field.send_keys("\t")
    want = [e["episode"] for e in lines if e["reward"] >= cut]
    _wait(browser, lambda d: _rows(d) == want)
    field.clear()
    field.send_keys("\t")
    Select(browser.find_element(By.NAME, "template")).select_by_value("evil")
    _wait(browser, lambda d: len(_rows(d)) == 1)
    browser.find_element(By.XPATH, "//button[text()='clear']").click()
    lag = browser.find_element(By.NAME, "lag_min")
    lag.send_keys("2")
    lag.send_keys("\t")
    want = [e["episode"] for e in lines if e["scored_after_step"] - min(e["versions"]) >= 2]
    _wait(browser, lambda d: _rows(d) == want)
    browser.find_element(By.XPATH, "//button[text()='clear']").click()
    _wait(browser, lambda d: len(_rows(d)) == len(lines))
    browser.find_element(By.CSS_SELECTOR, "th[data-key=reward]").click()
    by_reward = [e["episode"] for e in sorted(lines, key=lambda e: -e["reward"])]
    _wait(browser, lambda d: [r for r in _rows(d)] and _rewards(d) == sorted(_rewards(d))[::-1])
    assert set(_rows(browser)) == set(by_reward)


def _rewards(driver: Any) -> list[float]:
    cells = driver.execute_script(
        "return [...document.querySelectorAll('table[data-role=episodes] tbody tr td:nth-child(7)')]"
        ".map(c => c.textContent);"
    )
    return [float(c) for c in cells]


def test_tokens_are_coloured_by_the_version_that_sampled_them(
    browser: Any, server: ViewerServer, dirs: dict[str, Any]
) -> None:
    rid = _rid(server, dirs["extra"])
    url = f"{server.url}runs/{rid}/episode?id={quote(dirs['spanning'])}"
    _open(browser, url, "[data-role=tokens] .tok")
    spans = _css(browser, "[data-role=tokens] .tok:not(.ctx)")
    by_version: dict[str, set[str]] = {}
    for span in spans:
        colour = span.value_of_css_property("background-color")
        by_version.setdefault(span.get_attribute("data-version"), set()).add(colour)
    assert set(by_version) == {"0", "1"}
    assert by_version["0"].isdisjoint(by_version["1"])  # two versions, two colours
    assert all(len(c) == 1 for c in by_version.values())
    legend = browser.find_element(By.CSS_SELECTOR, "[data-role=legend]").text
    assert "v0" in legend and "v1" in legend
    last = spans[-1]
    browser.execute_script("arguments[0].scrollIntoView({block: 'center'});", last)
    ActionChains(browser).move_to_element(last).perform()
    info = _wait(browser, lambda d: d.find_element(By.ID, "tokinfo").text)
    assert "version 1" in info and f"logprob {last.get_attribute('data-logprob')}" in info
    assert last.get_attribute("title").startswith("version 1 · logprob -")


def test_a_new_episode_appears_on_an_open_page_without_reload(
    browser: Any, server: ViewerServer, dirs: dict[str, Any]
) -> None:
    live = dirs["live"]
    rid = _rid(server, live)
    _open(browser, f"{server.url}runs/{rid}/episodes", "table[data-role=episodes] tbody tr")
    _wait(browser, lambda d: "episodes ·" in d.find_element(By.ID, "live").text)
    browser.execute_script("window.__sameDocument = true;")
    before = _rows(browser)
    new = {**_lines(live)[0], "episode": "g000042-appended-live.s0", "group": "g000042-x"}
    _append(live, new)
    _wait(browser, lambda d: "g000042-appended-live.s0" in _rows(d), timeout=20)
    assert _rows(browser)[: len(before)] == before
    assert browser.execute_script("return window.__sameDocument === true;")
    assert "running" in browser.find_element(By.ID, "live").text
    # The run page follows new steps too.
    browser.get(f"{server.url}runs/{rid}")
    _wait(browser, lambda d: "episodes ·" in d.find_element(By.ID, "live").text)
    browser.execute_script("window.__sameDocument = true;")
    steps = len((live / "metrics.jsonl").read_text().splitlines())
    row = json.loads((live / "metrics.jsonl").read_text().splitlines()[-1])
    row.update(step=steps + 1, version=steps + 1, kl_k1=0.5)
    with (live / "metrics.jsonl").open("a") as out:
        out.write(json.dumps(row) + "\n")
    _wait(browser, lambda d: f"{steps + 1} of" in d.find_element(By.TAG_NAME, "main").text)
    assert browser.execute_script("return window.__sameDocument === true;")


def test_the_adversarial_episode_runs_no_script_and_shows_its_text(
    browser: Any, server: ViewerServer, dirs: dict[str, Any]
) -> None:
    rid = _rid(server, dirs["extra"])
    evil = dirs["evil"]
    for page, ready in (
        (f"runs/{rid}/episode?id={quote(evil)}", "[data-role=transcript] .block.tool_call"),
        (f"runs/{rid}/group?id={quote(evil.rpartition('.s')[0])}", "[data-role=fate]"),
        (f"runs/{rid}/episodes", "table[data-role=episodes] tbody tr"),
    ):
        started = time.monotonic()
        _open(browser, server.url + page, ready)
        assert time.monotonic() - started < 30
        time.sleep(0.5)  # an onerror or onload would have fired by now
        assert browser.execute_script("return window.pwned === undefined;")
        assert browser.title != "pwned"
    browser.get(f"{server.url}runs/{rid}/episode?id={quote(evil)}")
    _wait(browser, lambda d: _css(d, "[data-role=transcript] .block.tool_call"))
    # The page's text holds a lone surrogate, which WebDriver cannot send back: look in it here.
    shown = "return document.querySelector('main').textContent.includes(arguments[0]);"
    for piece in (
        SCRIPT,
        IMG,
        SVG,
        "<b>bold</b>",
        "zero\u200bwidth",
        "\u202eevil RTL",
        "\U0001f600",
    ):
        assert browser.execute_script(shown, piece), piece
    assert not _css(browser, "main img, main script, main svg, main iframe, main object, main b")
    # The megabyte line is cut, with a control that shows it all.
    (button,) = [b for b in _css(browser, "button.more") if "1,0" in b.text]
    length = "return document.querySelector('main').textContent.length;"
    assert browser.execute_script(length) < HUGE
    started = time.monotonic()
    button.click()
    total = browser.execute_script(
        "return Math.max(...[...document.querySelectorAll('main pre')]"
        ".map(p => p.textContent.length));"
    )
    assert total >= HUGE
    assert browser.execute_script("return 1 + 1;") == 2  # the page still answers
    assert time.monotonic() - started < 30
    assert browser.execute_script("return window.pwned === undefined;")


def test_missing_and_half_written_directories_open_with_a_note(
    browser: Any, server: ViewerServer, dirs: dict[str, Any]
) -> None:
    def notes_of(path: Path, page: str = "") -> str:
        rid = _rid(server, path)
        _open(browser, f"{server.url}runs/{rid}{page}", "[data-role=notes]")
        assert "Traceback" not in browser.page_source
        return str(browser.find_element(By.CSS_SELECTOR, "[data-role=notes]").text)

    half = notes_of(dirs["half"])
    assert "half-written" in half and "metrics.jsonl" in half and "episodes.jsonl" in half
    assert "no eval.jsonl" in half
    status = browser.find_element(By.CSS_SELECTOR, "[data-role=status]").text
    assert status == "stopped"
    assert "resumable from the step-3 checkpoint" in browser.find_element(By.TAG_NAME, "main").text
    assert "half-written" in notes_of(dirs["half"], "/episodes")
    empty = notes_of(dirs["empty"])
    for missing in ("config.toml", "metrics.jsonl", "episodes.jsonl", "groups/"):
        assert missing in empty
    older = notes_of(dirs["older"], "/episodes")
    assert "older version" in older and "scored_after_step" in older
    rid = _rid(server, dirs["older"])
    episode = _lines(dirs["older"])[0]["episode"]
    # the page first shows a "loading tokens…" placeholder; wait for the note that replaces it
    _open(browser, f"{server.url}runs/{rid}/episode?id={quote(episode)}", "[data-role=token-note]")
    assert "groups/" in browser.find_element(By.CSS_SELECTOR, "[data-role=token-note]").text
    # A run from before fates were recorded: the fate is inferred, and the page says so.
    group = _lines(dirs["older"])[0]["episode"].rpartition(".s")[0]
    _open(browser, f"{server.url}runs/{rid}/group?id={quote(group)}", "[data-role=fate]")
    assert browser.find_element(By.CSS_SELECTOR, "[data-role=fate]").text.startswith("trained")
    source = browser.find_element(By.CSS_SELECTOR, "[data-role=fate-source]").text
    assert source.startswith("inferred: this run predates recorded fates"), source


def test_no_request_leaves_loopback(
    browser: Any, server: ViewerServer, dirs: dict[str, Any]
) -> None:
    rid = _rid(server, dirs["extra"])
    pages = [
        ("", "table[data-role=runs]"),
        (f"runs/{rid}", "[data-role=charts] svg"),
        (f"runs/{rid}/episodes", "table[data-role=episodes] tbody tr"),
        (f"runs/{rid}/episode?id={quote(dirs['spanning'])}", "[data-role=tokens] .tok"),
        (f"runs/{rid}/episode?id={quote(dirs['evil'])}", "[data-role=transcript] .block"),
        (f"runs/{rid}/group?id={quote(dirs['spanning'].rpartition('.s')[0])}", "[data-role=fate]"),
    ]
    for page, ready in pages:
        _open(browser, server.url + page, ready)
    time.sleep(1.5)
    urls = []
    for entry in browser.get_log("performance"):
        message = json.loads(entry["message"])["message"]
        if message["method"] == "Network.requestWillBeSent":
            urls.append(message["params"]["request"]["url"])
    assert len(urls) >= len(pages) * 3  # pages, scripts, styles, API calls, events
    hosts = {urlsplit(u).hostname for u in urls if not u.startswith(("data:", "about:"))}
    assert hosts <= {"127.0.0.1", "localhost"}, sorted(u for u in urls)


def test_screenshots_of_each_view(
    browser: Any, server: ViewerServer, dirs: dict[str, Any], tmp_path: Path
) -> None:
    """PNGs of every view; into docs/rl/viewer/ when VIEWER_SCREENSHOTS=1 is set."""
    rid = _rid(server, dirs["extra"])
    out = SHOTS if os.environ.get("VIEWER_SCREENSHOTS") == "1" else tmp_path
    out.mkdir(parents=True, exist_ok=True)
    group = dirs["spanning"].rpartition(".s")[0]
    shots = {
        "runs": ("", "table[data-role=runs]"),
        "run": (f"runs/{rid}", "[data-role=charts] svg"),
        "episodes": (f"runs/{rid}/episodes", "table[data-role=episodes] tbody tr"),
        "episode": (f"runs/{rid}/episode?id={quote(dirs['spanning'])}", "[data-role=tokens] .tok"),
        "group": (f"runs/{rid}/group?id={quote(group)}", "[data-role=fate]"),
        "notes": (f"runs/{_rid(server, dirs['half'])}", "[data-role=notes]"),
    }
    browser.set_window_size(1400, 1800)
    for name, (page, ready) in shots.items():
        _open(browser, server.url + page, ready)
        if name == "episode":
            tokens = browser.find_element(By.CSS_SELECTOR, "[data-role=token-view]")
            browser.execute_script("arguments[0].scrollIntoView();", tokens)
            token = _css(browser, ".tok.v1")[-1]
            browser.execute_script("arguments[0].scrollIntoView({block: 'center'});", token)
            ActionChains(browser).move_to_element(token).perform()
        time.sleep(0.5)
        path = out / f"{name}.png"
        assert browser.save_screenshot(str(path))
        assert path.stat().st_size > 5000
