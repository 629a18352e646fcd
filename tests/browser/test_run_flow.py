"""The whole flow in a browser: upload a problem set, launch the CPU demo preset, watch it learn live,
open a failing candidate, download a checkpoint (real worker, real trainer, tiny model)."""
import json
import tarfile
from pathlib import Path

import pytest
import safetensors.torch

from .conftest import login, wait_until

DEMO = Path(__file__).resolve().parents[2] / "data" / "demo" / "problems.jsonl"


def small_demo_set() -> bytes:
    problems = [json.loads(line) for line in DEMO.read_text().splitlines() if line.strip()]
    train = [p for p in problems if p.get("split", "train") == "train"][:8]
    heldout = [p for p in problems if p.get("split") == "heldout"][:3]
    return "".join(json.dumps(p) + "\n" for p in train + heldout).encode()


def test_a_user_launches_the_cpu_demo_and_watches_it_learn(page, live_server_url, celery_worker, user, output_dir,
                                                          demo_tiny_model):
    login(page, live_server_url, "alice", "alice-password-1")

    # Upload a problem set and see its validation.
    page.goto(f"{live_server_url}/problem-sets/")
    page.fill("input[name=name]", "Demo subset")
    page.set_input_files("input[name=file]", files=[{"name": "demo.jsonl", "mimeType": "application/x-ndjson",
                                                     "buffer": small_demo_set()}])
    page.click("#upload-form button[type=submit]")
    page.wait_for_url("**/problem-sets/*/")
    page.wait_for_selector("#validation[data-status=done]", timeout=180_000)
    assert "11 problems ok" in page.locator("#validation").inner_text()

    # Launch the CPU demo preset, shortened to a few steps.
    page.click("text=New run with this set")
    page.wait_for_url("**/runs/new?problem_set=*")
    page.click("button.preset[data-preset=cpu-demo]")
    assert page.input_value("input[name='model.name_or_path']") == "models/tiny"
    page.fill("input[name=name]", "browser demo")
    for name, value in {"train.steps": "3", "sampling.problems_per_step": "2", "sampling.candidates_per_problem": "2",
                        "sampling.max_new_tokens": "24", "train.eval_every": "1", "train.eval_samples": "1",
                        "train.checkpoint_every": "1"}.items():
        page.fill(f"input[name='{name}']", value)
    page.fill("input[name='ppo.clip_range']", "3")  # a bad value first: the error shows on its field
    page.click("#launch")
    # refused in the browser, in the server's words
    assert "< 1.0; got 3" in page.locator("[data-field='ppo.clip_range'] .errorlist").inner_text()
    page.fill("input[name='ppo.clip_range']", "0.2")
    page.click("#launch")
    page.wait_for_url("**/runs/*/")

    # The reward chart gains points without a reload.
    page.evaluate("window.__sameDocument = true")
    wait_until(page, "Number(document.getElementById('chart-reward').dataset.points) >= 1", 300)
    wait_until(page, "Number(document.getElementById('chart-reward').dataset.points) >= 2", 300)
    assert page.evaluate("window.__sameDocument === true")
    assert page.evaluate("document.getElementById('chart-reward').data.length") >= 2  # total + dimensions

    # The runtime panel shows what the trainer reported at its start; float32 on CPU: no mismatch warning.
    wait_until(page, "document.getElementById('runtime').innerText.indexOf('Qwen3ForCausalLM') >= 0", 60)
    runtime = page.locator("#runtime").inner_text()
    assert "full attention" in runtime and "float32" in runtime and "transformers" in runtime
    assert page.locator("#mismatch-warning").is_hidden()
    assert page.evaluate("document.getElementById('chart-truncated').data.length") == 1

    # Open a failing candidate.
    page.wait_for_selector("#problems tr[data-problem]")
    page.locator("#problems tr[data-problem]").first.click()
    page.wait_for_selector("#candidates .candidate")
    candidate = page.locator("#candidates .candidate").first
    assert candidate.locator(".outcome").inner_text() != "passed"
    assert candidate.locator(".codehilite").count() == 1 and candidate.locator("table.tests tr").count() >= 2

    # The run finishes live; download its checkpoint.
    page.wait_for_selector("#run-status.status-succeeded", timeout=300_000)
    assert page.evaluate("window.__sameDocument === true")
    page.wait_for_selector("#checkpoints a.download")
    assert "held-out pass@1" in page.locator("#headline").inner_text()
    page.screenshot(path=str(output_dir / "run-detail.png"), full_page=True)
    with page.expect_download() as info:
        page.locator("#checkpoints a.download").last.click()
    path = output_dir / info.value.suggested_filename
    info.value.save_as(path)
    with tarfile.open(path, mode="r:gz") as tar:
        names = tar.getnames()
        assert any(n.endswith("/adapter_config.json") for n in names)
        weights = next(n for n in names if n.endswith("/adapter_model.safetensors"))
        adapter = safetensors.torch.load(tar.extractfile(weights).read())

    # It learned from the rewards: the policy starts as the reference (KL 0 at step 1), a step whose
    # groups' rewards differ gives the update a signal, the steps after it sample from a policy that
    # moved (KL > 0), and the downloaded adapter holds trained weights (LoRA's B starts at zero).
    run_id = int(page.url.rstrip("/").split("/")[-1])
    steps = {row["step"]: row["metrics"] for row in
             page.evaluate("async url => (await fetch(url)).json()", f"/api/runs/{run_id}/metrics")}
    assert sorted(steps) == [1, 2, 3]
    assert steps[1]["kl"] == pytest.approx(0.0, abs=1e-6)
    informative = [s for s in sorted(steps) if steps[s]["zero_variance_groups"] < 2]  # 2 problems per step
    assert informative, f"no step had a group whose candidates' rewards differ: nothing to learn from {steps}"
    assert all(steps[s]["kl"] > 1e-6 for s in steps if s > informative[0]), steps
    lora_b = [t for name, t in adapter.items() if "lora_B" in name]
    assert lora_b and any(t.abs().max().item() > 0 for t in lora_b)
