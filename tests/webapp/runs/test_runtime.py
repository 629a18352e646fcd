"""The run page's runtime block and its sampler/trainer mismatch warning, from the stored events."""
import pytest
from asgiref.sync import sync_to_async

from webapp.runs import runtime
from webapp.runs.runtime import MISMATCH_KL_WARN, layer_mix, mismatch_warning, runtime_rows
from webapp.runs.services import ingest_event

from tests.factories import runtime_block, start_event, step_event

from .conftest import connect, receive_all, setup_run


def test_the_layer_mix_reads_as_counts_largest_first():
    assert layer_mix({"full_attention": 8, "linear_attention": 24}) == "24 linear attention + 8 full attention"
    assert layer_mix({"full_attention": 4}) == "4 full attention"
    assert layer_mix(None) == "" and layer_mix({"full_attention": "x"}) == ""


def test_runtime_rows_name_versions_device_kernels_and_keep_every_warning():
    shown = runtime_rows({"runtime": runtime_block(), "dropped": {"unsolved": 3, "solved": 2}})
    rows = dict(shown["rows"])
    assert rows["architecture"] == "Qwen3_5ForCausalLM" and rows["dtype"] == "bfloat16"
    assert rows["device"] == "cuda:0 (NVIDIA H200)"
    assert rows["layers"] == "24 linear attention + 8 full attention"
    assert rows["kernels"] == ("attention: sdpa · gated delta rule: torch (fallback; flash-linear-attention not in use)"
                               " · causal conv1d: torch (fallback; causal-conv1d not in use)")
    assert rows["versions"] == "torch 2.11.0 · transformers 5.17.0 · peft 0.18.0 · accelerate 1.12.0"
    assert rows["difficulty filter"] == "left out 3 never-solved and 2 always-solved problems"
    assert shown["warnings"] == runtime_block()["warnings"]


def test_rerouted_kernels_and_the_linear_attention_forms_have_rows_of_their_own():
    entry = {"kernel": "gated_delta_rule", "action": "rerouted", "from": "fla", "to": "torch",
             "combination": "flash-linear-attention 0.6.0 with triton 3.6.0 on NVIDIA H200 (compute capability 9.0)",
             "route": "chunked form on transformers' torch function", "error": "...", "fix": "upgrade Triton"}
    kernels = {"attention": "sdpa", "gated_delta_rule": "torch", "gated_delta_rule_decode": "fla",
               "causal_conv1d": "torch", "refused": [], "rerouted": [entry]}
    forms = {"sampler": "recurrent", "trainer": "chunked", "same_form": False,
             "kernels": {"sampler": "fla", "trainer": "torch"}}
    rows = dict(runtime_rows({"runtime": runtime_block(kernels=kernels, linear_attention=forms)})["rows"])
    assert "refused" not in rows["kernels"] and "gated delta rule (decode): fla" in rows["kernels"]
    assert rows["rerouted"].startswith("gated_delta_rule: chunked form") and "NVIDIA H200" in rows["rerouted"]
    assert rows["linear attention"] == "sampler recurrent (fla), trainer chunked (torch): different forms, see mismatch"


def test_a_start_event_without_runtime_shows_none_and_a_missing_package_says_so():
    assert runtime_rows({"event": "start", "config": {}}) is None and runtime_rows(None) is None
    rows = dict(runtime_rows({"runtime": runtime_block(peft=None, warnings=[], flush_denormal=True)})["rows"])
    assert "peft not installed" in rows["versions"]
    assert "float mode" not in rows  # a GPU run: the CPU's float mode says nothing
    cpu = dict(runtime_rows({"runtime": runtime_block(device="cpu", flush_denormal=True)})["rows"])
    assert cpu["float mode"].startswith("denormals flushed to zero")


def test_the_float_mode_line_is_only_for_models_with_linear_attention():
    dense = runtime_block(device="cpu", flush_denormal=True, layer_types={"full_attention": 4})
    rows = dict(runtime_rows({"runtime": dense})["rows"])
    assert "float mode" not in rows and rows["layers"] == "4 full attention"
    unknown = runtime_block(device="cpu", flush_denormal=True, layer_types=None)
    assert "float mode" not in dict(runtime_rows({"runtime": unknown})["rows"])


def test_mismatch_is_a_warning_only_above_the_threshold():
    assert mismatch_warning({"rollout/mismatch_kl": 1e-9}, 3) is None
    assert mismatch_warning({"rollout/mismatch_kl": MISMATCH_KL_WARN}, 3) is None
    assert mismatch_warning({}, 3) is None and mismatch_warning({"rollout/mismatch_kl": True}, 3) is None
    text = mismatch_warning({"rollout/mismatch_kl": 0.004}, 7)
    assert "0.004 at step 7, above 0.001" in text and "set ppo.tis_cap" in text and "kernels" in text


def test_the_mismatch_warning_says_when_tis_already_corrects_the_update():
    text = mismatch_warning({"rollout/mismatch_kl": 0.01}, 2, tis_cap=2.0)
    assert "ppo.tis_cap = 2 corrects the update for it, but the cause remains" in text
    assert runtime.tis_cap_of({"ppo": {"tis_cap": 2}}) == 2.0 and runtime.tis_cap_of({}) is None


def test_a_run_sampling_ahead_is_told_that_one_update_of_drift_is_part_of_the_mismatch():
    text = mismatch_warning({"rollout/mismatch_kl": 0.004, "rollout/staleness": 1.0}, 5)
    assert "0.004 at step 5" in text and "sampling.staleness: 1" in text and "one update older" in text
    assert "set ppo.tis_cap" in text and "kernels" not in text
    capped = mismatch_warning({"rollout/mismatch_kl": 0.004, "rollout/staleness": 1.0}, 5, tis_cap=2.0)
    assert "ppo.tis_cap = 2 corrects the update for it" in capped
    # the run's first step samples its own policy: the usual diagnosis
    assert "kernels" in mismatch_warning({"rollout/mismatch_kl": 0.004, "rollout/staleness": 0.0}, 1)


def test_the_run_page_shows_the_newest_start_events_runtime_and_its_warnings(client_alice, run):
    html = client_alice.get(f"/runs/{run.pk}/").content.decode()
    assert "appear when the trainer starts" in html
    ingest_event(run, start_event(dtype="float32", device="cpu", warnings=[]), seq=0)
    ingest_event(run, start_event(), seq=1)  # resumed on a GPU worker: this one counts
    html = client_alice.get(f"/runs/{run.pk}/").content.decode()
    assert "24 linear attention + 8 full attention" in html and "cuda:0 (NVIDIA H200)" in html
    assert "gated delta rule: torch (fallback; flash-linear-attention not in use)" in html
    assert 'class="notice warning runtime-warning">⚠ gated_delta_rule runs transformers&#x27; PyTorch fallback' in html
    assert "transformers 5.17.0" in html


def test_the_runtime_fragment_is_the_panel_and_is_private(client, client_alice, other_user, run):
    ingest_event(run, start_event(), seq=0)
    html = client_alice.get(f"/runs/{run.pk}/runtime").content.decode()
    assert "Qwen3_5ForCausalLM" in html and "runtime-warning" in html and "<html" not in html
    client.force_login(other_user)
    assert client.get(f"/runs/{run.pk}/runtime").status_code == 404


def test_the_run_page_embeds_the_newest_steps_mismatch_warning(client_alice, run):
    ingest_event(run, {**step_event(1), "metrics": {"rollout/mismatch_kl": 0.02}}, seq=0)
    html = client_alice.get(f"/runs/{run.pk}/").content.decode()
    assert '"mismatch_warning": "Sampler and trainer disagree: rollout/mismatch_kl is 0.02 at step 1' in html
    assert '"mismatch_kl_threshold": 0.001' in html and 'id="mismatch-warning"' in html and 'id="chart-mismatch"' in html
    ingest_event(run, {**step_event(2), "metrics": {"rollout/mismatch_kl": 1e-8}}, seq=1)
    assert '"mismatch_warning": null' in client_alice.get(f"/runs/{run.pk}/").content.decode()


@pytest.mark.django_db(transaction=True)
async def test_step_messages_carry_their_mismatch_warning_live_and_replayed():
    _, run, token = await sync_to_async(setup_run)()
    high = {**step_event(1), "metrics": {"rollout/mismatch_kl": 0.05}}
    await sync_to_async(ingest_event)(run, high, seq=0)
    communicator, connected, _ = await connect(run, token)
    assert connected
    replayed = await receive_all(communicator)
    assert [m["event"] for m in replayed] == ["step"] and "0.05 at step 1" in replayed[0]["mismatch_warning"]
    await sync_to_async(ingest_event)(run, {**step_event(2), "metrics": {"rollout/mismatch_kl": 0.0}}, seq=1)
    await sync_to_async(ingest_event)(run, start_event(), seq=2)
    live = await receive_all(communicator)
    steps = [m for m in live if m["event"] == "step"]
    assert len(steps) == 1 and steps[0]["mismatch_warning"] is None
    assert all("mismatch_warning" not in m for m in live if m["event"] != "step")
    await communicator.disconnect()
