// Names of the trainer's metric keys as people read them, shared by the run page and compare.
// The keys themselves (DESIGN.md) stay the contract; these are only how the pages show them.
var CrucibleMetrics = (function () {
  "use strict";
  var NAMES = {
    "reward/mean": "reward: total (weighted)", "reward/std": "reward: standard deviation",
    "reward/pass_rate": "reward: tests passed (train)", "pass@1/train": "train pass@1 (all tests pass)",
    "kl": "KL to the reference model", "clip_frac": "clip fraction", "entropy": "policy entropy",
    "grad_norm": "gradient norm", "lr": "learning rate", "tokens_per_s": "generated tokens/s",
    "time/step_s": "time: whole step (s)", "rollout/mismatch_kl": "sampler vs trainer: mismatch KL",
    "rollout/logprob_diff_max": "sampler vs trainer: largest |log-prob difference|",
    "rollout/truncated_frac": "truncated replies (hit max_new_tokens)",
    "completion_len/max": "completion length: longest", "completion_len/mean": "completion length: mean",
  };
  var PREFIXES = [["reward/", "reward: "], ["loss/", "loss: "], ["time/", "time: "], ["flags/", "flagged: "],
                  ["sampling/", "sampling: "], ["rollout/", "rollout: "], ["completion_len/", "completion length: "]];

  function label(key) {
    if (NAMES[key]) return NAMES[key];
    for (var i = 0; i < PREFIXES.length; i++) {
      var p = PREFIXES[i];
      if (key.indexOf(p[0]) === 0) {
        var rest = key.slice(p[0].length);
        var seconds = p[0] === "time/" && /_s$/.test(rest);
        return p[1] + rest.replace(/_s$/, seconds ? "" : "_s").replace(/_/g, " ") + (seconds ? " (s)" : "");
      }
    }
    return key.replace(/_/g, " ");
  }

  return {label: label};
})();
