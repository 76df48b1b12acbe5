"""The MLflow UI as a user meets it: headless Chromium (Debian's chromium and chromium-driver,
driven by Selenium) against a real `mlflow server` that two stage runs logged into. The runs
table shows the pipeline's parent run, the Traces tab an episode, and the model registry the
SFT model; a screenshot of each page goes to reports/mlflow_ui/.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from test_shared_tracking import ROOT, Server

pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("error::star.tracking.TrackingWarning")]
CHROMIUM, CHROMEDRIVER = Path("/usr/bin/chromium"), Path("/usr/bin/chromedriver")
SHOTS = ROOT / "reports" / "mlflow_ui"


@pytest.fixture
def browser():
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    assert CHROMIUM.is_file() and CHROMEDRIVER.is_file(), "Debian's chromium and chromium-driver are missing: `make test` installs them"
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1600,1000"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=options)
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture
def server(tmp_path):
    (tmp_path / "server").mkdir()
    server = Server(tmp_path / "server")
    try:
        server.wait()
        yield server
    finally:
        server.stop()


def show(driver, url: str, text: str, shot: str, timeout: float = 60) -> None:
    """Open `url` and wait until the rendered page shows `text`; save a screenshot either way."""
    from selenium.webdriver.common.by import By

    driver.get(url)
    deadline = time.monotonic() + timeout
    body = ""
    while time.monotonic() < deadline:
        body = driver.find_element(By.TAG_NAME, "body").text
        if text in body:
            break
        time.sleep(0.5)
    SHOTS.mkdir(parents=True, exist_ok=True)
    driver.save_screenshot(str(SHOTS / shot))
    assert text in body, f"{url} never showed {text!r}; it shows:\n{body[:2000]}"


def test_the_ui_shows_the_pipeline_run_an_episode_trace_and_the_registered_model(tmp_path, monkeypatch, server, browser, synthetic_sandbox):
    import mlflow

    from star.tracking import log_episode_traces, log_model, stage_run
    from star.travel.planner.distill import ExpertTeacher, run_episode
    from star.travel.planner.expert import Expert
    from star.travel.specs import SynthesisSpec
    from star.travel.world.sandbox_index import index_for
    from star.travel.world.synthesize import Synthesizer
    from star.travel.world.tools import TravelTools

    for var in [v for v in os.environ if v.startswith(("MLFLOW_", "DVC_"))]:
        monkeypatch.delenv(var)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", server.uri)
    monkeypatch.setenv("DVC_EXP_NAME", "ui-check")
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    previous = mlflow.get_tracking_uri()
    repo = tmp_path / "repo"
    (repo / "models/sft").mkdir(parents=True)
    (repo / "params.yaml").write_text("sft: {learning_rate: 0.002}\n")

    queries = Synthesizer(synthetic_sandbox, SynthesisSpec(seed=3, sizes={"train": 0, "validation": 0, "test": 2})).run()["test"]
    tools, index = TravelTools(synthetic_sandbox), index_for(synthetic_sandbox)
    rows = [run_episode(ExpertTeacher(Expert()), tools, index, q, 0, seed=0, max_turns=16, fault_rate=0.0) for q in queries]
    try:
        with stage_run("sft", {"sft": {"learning_rate": 0.002}}, repo) as sft:
            log_model(repo / "models/sft", {"sft": {"learning_rate": 0.002}}, {"train_loss": 0.5})
        with stage_run("infer_teacher", {}, repo):
            assert len(log_episode_traces(rows, limit=1)) == 1
    finally:
        mlflow.set_tracking_uri(previous)

    experiment = sft.info.experiment_id
    show(browser, f"{server.uri}/#/experiments/{experiment}/runs", "pipeline ui-check", "runs.png")
    show(browser, f"{server.uri}/#/experiments/{experiment}/traces", queries[0].query, "traces.png")  # the episode's input
    show(browser, f"{server.uri}/#/models/star-sft", "Version 1", "model.png")
