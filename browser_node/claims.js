// Claims that follow the machine, on the join page: when the roll calls keep showing another speed than the
// claim (the last three answers all below 0.8 of it, or all above 1.25x), the page measures again and registers
// what the device does now, at most once per 15 min; the rule is capsule/claim_drift.py, run through Pyodide,
// as `ce-bench node` runs it. Between two measurements the roll calls still count what the device does; the
// claim is what its page and the claimed scoreboard show, and what caps the counted figure.

// Returns the live session's message handler. `remeasure()` measures, signs and posts, and resolves to the new
// profile; `say(line)` shows what happened. Answers that arrive while it measures are not read (the
// measurement takes the cores they were answered on).
export function followClaims(py, profile, remeasure, say) {
  const minGapMs = py.driftMinGapS() * 1000;
  let claimed = profile.cpu.gflops_fp32, results = [], lastAt = -Infinity, measuring = false;
  return (m) => {
    if (m.type !== "challenge_result" || measuring) return;
    results.push(m);
    if (results.length > 20) results.shift(); // the rule reads the last three; a tab may stay open for days
    const reason = py.drift(results, claimed);
    if (!reason || performance.now() - lastAt < minGapMs) return;
    measuring = true;
    lastAt = performance.now();
    const was = claimed;
    say(`${reason}: measuring again now`);
    remeasure()
      .then((fresh) => {
        claimed = fresh.cpu.gflops_fp32;
        say(`measured again: ${Number(claimed).toFixed(1)} GFLOP/s claimed now (was ${Number(was).toFixed(1)}), registered`);
      })
      .catch((err) => say(`measuring again failed (${err.message}); the claim stays ${Number(was).toFixed(1)} GFLOP/s`))
      .finally(() => { results = []; measuring = false; });
  };
}

// The workers a roll call's challenge to this profile is split over: one per whole-device instance, at most the
// relay's challenge_max_instances (64), as web/proof/challenges.py sizes it (capsule/challenge.py challenge_size).
export function answersWorkers(profile) {
  const listed = profile.evidence?.cpu?.gflops_fp32?.instances;
  return Math.max(1, Math.min(64, Array.isArray(listed) && listed.length ? listed.length : profile.cpu.cores || 1));
}
