import copy
import subprocess
import sys
import typing
from pathlib import Path

import pytest
import yaml
from pydantic import BaseModel

from star.config import SECTIONS, ParamsError, load_params, parse_section, read_yaml

ROOT = Path(__file__).resolve().parents[1]
SCHEMA_MODULES = {
    "star",
    "star.agent",
    "star.agent.limits",
    "star.config",
    "star.endpoint",
    "star.models",
    "star.models.spec",
    "star.qa",
    "star.qa.specs",
    "star.sections",
    "star.service",
    "star.train",
    "star.train.copy_params",
    "star.train.grpo_params",
    "star.train.sft_params",
    "star.travel",
    "star.travel.specs",
}


def write(tmp_path, data) -> Path:
    path = tmp_path / "params.yaml"
    path.write_text(data if isinstance(data, str) else yaml.safe_dump(data))
    return path


def test_project_params_are_valid():
    params = load_params(ROOT / "params.yaml", ["world", "env"])
    assert params["world"].source == "synthetic"
    assert params["env"].row_cap >= 1


@pytest.mark.parametrize(
    "data, expect",
    [
        ({"world": {"synthetic": {"states": "four"}}}, ["world.synthetic.states", "'four'", "valid integer"]),
        ({"world": {"colour": 1}}, ["world.colour", "unknown key", "allowed: source, database, synthetic"]),
        ({"world": {"synthetic": {"cities_per_state": 0}}}, ["world.synthetic.cities_per_state", "0", "greater than or equal to 1"]),
        ({"env": {"fault_rate": 1.5}}, ["env.fault_rate", "1.5", "less than or equal to 1"]),
        ({"world": {"source": "web"}}, ["world.source", "'web'", "'synthetic' or 'travelplanner'"]),
        ({"world": {"synthetic": {"hotel_price": [300, 40]}}}, ["world.synthetic", "hotel_price"]),
        ({"world": [1, 2]}, ["world", "must be a mapping"]),
    ],
)
def test_bad_params_name_key_value_and_rule(tmp_path, data, expect):
    with pytest.raises(ParamsError) as info:
        load_params(write(tmp_path, data), ["world", "env"])
    message = str(info.value)
    assert "\n" not in message
    for part in expect:
        assert part in message


@pytest.mark.parametrize("section, data, key", [("filter", {"filter": {"max_tokens": 4096}}, "filter.max_tokens = 4096"), ("qa", {"qa": {"filter": {"max_tokens": 3000}}}, "qa.filter.max_tokens = 3000")])
def test_a_filter_keeping_what_sft_would_cut_is_refused(tmp_path, section, data, key):
    path = write(tmp_path, {**data, "sft": {"max_length": 2048}})
    with pytest.raises(ParamsError, match=rf"{key} exceeds sft.max_length = 2048"):
        load_params(path, [section])
    load_params(path, ["sft"])  # SFT alone reads no filter's limit
    load_params(write(tmp_path, {**data, "sft": {"max_length": 4096}}), [section])


def test_invalid_yaml_names_the_line(tmp_path):
    with pytest.raises(ParamsError, match="line 3 is not valid YAML"):
        load_params(write(tmp_path, "world:\n  source: synthetic\n  database: : :\n"), ["world"])


def test_stage_reads_only_its_sections(tmp_path):
    # A broken env section does not stop a stage that reads only `world`.
    params = load_params(write(tmp_path, {"env": {"row_cap": "many"}}), ["world"])
    assert set(params) == {"world"}


def test_stage_exits_2_with_one_line_before_any_work(tmp_path):
    write(tmp_path, {"world": {"synthetic": {"states": -3}}})
    proc = subprocess.run(
        [sys.executable, "-m", "stages.world"],
        cwd=tmp_path,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1
    assert "world.synthetic.states = -3" in lines[0]
    assert not (tmp_path / "data").exists()
    assert not (tmp_path / "mlflow.db").exists()


@pytest.mark.parametrize(
    "data, expect",
    [
        ({"qa": {"source": "hotpotqa"}}, ["qa", "needs path"]),
        ({"qa": {"reward": {"weights": {"bleu": 1.0}}}}, ["qa.reward.weights.bleu", "'em', 'f1', 'format' or 'process'"]),
        ({"qa": {"top_k": 0}}, ["qa.top_k", "greater than or equal to 1"]),
        ({"qa": {"world": {"num_countries": 50, "num_places": 10}}}, ["qa.world", "num_countries"]),
        ({"qa": {"filter": {"exampels": 3}}}, ["qa.filter.exampels", "unknown key", "examples"]),
    ],
)
def test_bad_qa_params(tmp_path, data, expect):
    with pytest.raises(ParamsError) as info:
        load_params(write(tmp_path, data), ["qa"])
    message = str(info.value)
    assert "\n" not in message
    for part in expect:
        assert part in message, message


def test_reading_params_imports_no_torch():
    """Every stage reads its params first; light stages (synthesis, evaluation, reports) should not pay for torch."""
    code = "import sys, star.config, flows.results, flows.travel.evaluate; print(sorted(m for m in ('torch', 'transformers', 'trl') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=Path(__file__).parent.parent)
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize("name", sorted(SECTIONS))
def test_params_yaml_states_the_code_defaults(name):
    """params.yaml and the schema's defaults are one set of values, so neither can drift from the other."""
    data = read_yaml(ROOT / "params.yaml")
    assert name in data
    assert parse_section(name, data[name]).model_dump() == SECTIONS[name]().model_dump()


def _models(annotation) -> list[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for arg in typing.get_args(annotation) for m in _models(arg)]


def _fields(model: type[BaseModel], path: str):
    for name, field in model.model_fields.items():
        yield f"{path}.{name}", field
        for sub in _models(field.annotation):
            yield from _fields(sub, f"{path}.{name}")


def test_every_knob_is_described():
    undescribed = [path for name, model in SECTIONS.items() for path, field in _fields(model, name) if not (field.description or "").strip()]
    assert undescribed == []


def test_reading_params_loads_only_the_schema():
    """A stage's import closure starts with star.config: it must not pull in the domain logic."""
    code = "import sys, star.config; print(' '.join(m for m in sys.modules if m == 'star' or m.startswith('star.')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert set(out.stdout.split()) - SCHEMA_MODULES == set()


@pytest.mark.slow
def test_a_dead_server_stops_a_stage_with_one_line_and_exit_3(tmp_path):
    """Synthesis with paraphrasing on, pointed at a closed port: an `error:` line, exit 3, no output."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed once the block ends
    dead = {"enabled": True, "base_url": f"http://127.0.0.1:{port}/v1", "retries": 0, "timeout": 60.0}
    write(tmp_path, {"synthesize": {"sizes": {"train": 4, "validation": 0, "test": 0}, "paraphrase": dead}})
    env = {"PYTHONPATH": str(ROOT), "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin", "HOME": str(tmp_path)}
    run = lambda stage: subprocess.run([sys.executable, "-m", stage], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)  # noqa: E731
    assert run("stages.world").returncode == 0
    proc = run("stages.synthesize")
    assert proc.returncode == 3, proc.stderr[-2000:]
    # the last line says what failed (Prefect's own log of the failed task comes before it)
    assert proc.stderr.strip().splitlines()[-1] == f"error: synthesize: paraphrase server http://127.0.0.1:{port}/v1 unreachable: APIConnectionError"
    assert not (tmp_path / "data" / "queries").exists()


PROFILES = sorted(p.name for p in ROOT.glob("params.*.yaml"))


@pytest.mark.parametrize("profile", PROFILES)
def test_a_profile_over_params_yaml_is_valid(profile, tmp_path):
    from stages.profile import WHOLE

    def merge(base: dict, over: dict) -> dict:
        out = dict(base)
        for key, value in over.items():
            out[key] = merge(base.get(key) or {}, value) if isinstance(value, dict) and key not in WHOLE else value
        return out

    over = read_yaml(ROOT / profile)
    assert set(over) <= set(SECTIONS), f"{profile}: unknown sections {set(over) - set(SECTIONS)}"
    merged = merge(read_yaml(ROOT / "params.yaml"), over)
    params = load_params(write(tmp_path, merged), list(SECTIONS))
    for section, values in over.items():
        # Every override lands: a typo in a key would fail validation, a wrong level would not change the value.
        assert params[section].model_dump(mode="json") != parse_section(section, read_yaml(ROOT / "params.yaml")[section]).model_dump(mode="json"), section


def _leaves(tree: dict, prefix: tuple[str, ...] = ()):
    for key, value in tree.items():
        if isinstance(value, dict) and value:
            yield from _leaves(value, (*prefix, key))
        else:
            yield (*prefix, key)


@pytest.mark.parametrize("name", ["params.yaml", *PROFILES])
def test_every_knob_reaches_the_run_cache_key_of_dvc(name):
    """Stages list whole sections (`params: [filter]`), and DVC's run cache leaves keys called size or nfiles out of
    its key at any depth: a change to such a knob would check out the last run's outputs instead of running again."""
    from dvc.stage.cache import _get_cache_hash

    def key(params: dict) -> str:
        return _get_cache_hash({"cmd": "stage", "params": {"params.yaml": params}, "outs": [{"path": "out"}]}, key=True)

    params = read_yaml(ROOT / name)
    before = key(copy.deepcopy(params))
    for path in _leaves(params):
        changed = copy.deepcopy(params)
        node = changed
        for part in path[:-1]:
            node = node[part]
        node[path[-1]] = ["changed"]
        assert key(changed) != before, f"{name}: {'.'.join(path)} does not reach DVC's run-cache key; rename it"


def test_qa_grpo_depends_on_every_grpo_knob_qa_does_not_set_itself():
    """dvc.yaml lists them one by one (a change to a knob QA overrides must not re-run QA's GRPO): none may be missed."""
    from star.qa.specs import QAGRPOParams
    from star.train.grpo_params import GRPOParams

    params = yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"]["qa_grpo"]["params"]
    listed = {p.removeprefix("grpo.") for p in params if isinstance(p, str) and p.startswith("grpo.")}
    assert listed == set(GRPOParams.model_fields) - set(QAGRPOParams.model_fields)
