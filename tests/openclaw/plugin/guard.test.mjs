// The plugin's guard against a real retrysafe CLI in a scratch home.
// Run by tests/openclaw/test_plugin_node.py (RETRYSAFE_BIN names the CLI).
import { test } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { execFileSync } from "node:child_process";
import { canonicalJson, createGuard, cronJobId, evidenceFrom, stepName } from "../../../src/retrysafe/openclaw/plugin/guard.js";

const BIN = process.env.RETRYSAFE_BIN;
assert.ok(BIN, "set RETRYSAFE_BIN to the retrysafe executable");

function scratch(guards) {
  const home = mkdtempSync(join(tmpdir(), "rs-plugin-"));
  writeFileSync(join(home, "retrysafe.toml"), [
    "[jobs.report]",
    'key = "report:{occurrence}"',
    'schedule = "0 7 * * 1"',
    'tz = "Europe/Warsaw"',
    'params = { occurrence = "occurrence" }',
    "",
  ].join("\n"));
  const config = { retrysafe: BIN, home, jobs: { "job-1": "report" }, guards };
  return { home, config, guard: createGuard(config) };
}

const cron = (run) => ({ jobId: "job-1", sessionKey: `agent:main:cron:job-1:run:${run}`, runId: run });
const send = (text, id) => ({ toolName: "message", params: { action: "send", to: "ops", text }, toolCallId: id });
const sent = (call, messageId) => ({ ...call, result: { details: { ok: true, messageId } } });

function steps(home, key) {
  const out = execFileSync(BIN, ["--home", home, "status", key, "--json"], { encoding: "utf8" });
  return JSON.parse(out).steps;
}

test("a call outside cron-driven runs is not guarded", async () => {
  const { guard } = scratch();
  assert.equal(await guard.before(send("hi", "c0"), { sessionKey: "agent:main:main" }), undefined);
  assert.equal(cronJobId({ sessionKey: "agent:main:cron:abc:run:s1" }), "abc");
});

test("the same message twice in a run and again in a forced re-run is sent once", async () => {
  const { guard, home } = scratch();
  const call = send("weekly report", "c1");
  assert.equal(await guard.before(call, cron("r1")), undefined, "first call goes through");
  await guard.after(sent(call, "m-41"), cron("r1"));
  const again = await guard.before(send("weekly report", "c2"), cron("r1"));
  assert.equal(again.block, true);
  assert.match(again.blockReason, /already done: evidence m-41/);
  const rerun = await guard.before(send("weekly report", "c3"), cron("r2"));
  assert.equal(rerun.block, true);
  assert.match(rerun.blockReason, /already done/);
  const key = [...guard.attempts.values()][0].key;
  const step = steps(home, key).find((s) => s.name.startsWith("message-"));
  assert.equal(step.state, "done");
  assert.equal(step.evidence, "m-41");
});

test("the evidence is what the tool returned, never the model's text", async () => {
  assert.equal(evidenceFrom({ content: [{ type: "text", text: '{"messageId":"x-1"}' }] }), "x-1");
  assert.equal(evidenceFrom({ details: { result: { id: 7 } } }, ["result.id"]), "7");
  assert.equal(canonicalJson({ b: 1, a: [2, { d: 1, c: 2 }] }), '{"a":[2,{"c":2,"d":1}],"b":1}');
  assert.equal(stepName({}, "message", { a: 1, b: 2 }), stepName({}, "message", { b: 2, a: 1 }));
});

test("a run killed after the call and before the record: the re-run's lookup finds it", async () => {
  const { guard, config, home } = scratch([
    { tool: "message", class: "message", step: "send", lookup: 'echo "found $RETRYSAFE_STEP_KEY"; echo m-77' },
  ]);
  assert.equal(await guard.before(send("r", "k1"), cron("r1")), undefined);
  // the gateway dies here: no after_tool_call; a new gateway process, a new run
  const fresh = createGuard(config);
  const first = [...guard.attempts.values()][0];
  // the dead run's lease ends (here at once, as a person would with break-lease)
  execFileSync(BIN, ["--home", home, "break-lease", first.key]);
  const decided = await fresh.before(send("r", "k2"), cron("r2"));
  assert.equal(decided?.block, true, JSON.stringify(decided));
  assert.match(decided.blockReason, /found by lookup\): evidence m-77/);
});

test("an ambiguous lookup asks a person; the ledger says blocked meanwhile", async () => {
  const { guard, config, home } = scratch([{ tool: "message", class: "message", step: "send", lookup: "exit 4" }]);
  await guard.before(send("r", "a1"), cron("r1"));
  const first = [...guard.attempts.values()][0];
  execFileSync(BIN, ["--home", home, "unknown", first.key, "send", "--reason", "timeout", "--attempt", first.attempt]);
  const decided = await guard.before(send("r", "a2"), cron("r1"));
  assert.ok(decided.requireApproval, JSON.stringify(decided));
  assert.equal(steps(home, first.key).find((s) => s.name === "send").state, "blocked");
  await decided.requireApproval.onResolution("deny");
  assert.equal(steps(home, first.key).find((s) => s.name === "send").state, "blocked");
  void config;
});

test("a payment waits for a person's approval, then is intended and recorded", async () => {
  const { guard, home } = scratch([{ tool: "stripe_charge", class: "payment", step: "charge" }]);
  const call = { toolName: "stripe_charge", params: { amount: 100 }, toolCallId: "p1" };
  const decided = await guard.before(call, cron("r1"));
  assert.ok(decided.requireApproval);
  assert.equal(decided.requireApproval.severity, "critical");
  await decided.requireApproval.onResolution("allow-once");
  await guard.after({ ...call, result: { details: { id: "ch_1" } } }, cron("r1"));
  const key = [...guard.attempts.values()][0].key;
  const step = steps(home, key).find((s) => s.name === "charge");
  assert.deepEqual([step.state, step.evidence], ["done", "ch_1"]);
});

test("a failed call marks the step unknown", async () => {
  const { guard, home } = scratch();
  const call = send("x", "e1");
  await guard.before(call, cron("r1"));
  await guard.after({ ...call, error: "timeout after 30s" }, cron("r1"));
  const key = [...guard.attempts.values()][0].key;
  assert.equal(steps(home, key)[0].state, "unknown");
});

test("guarded calls fail closed when the ledger cannot be reached", async () => {
  const guard = createGuard({ retrysafe: "/nonexistent/retrysafe", jobs: { "job-1": "report" } });
  const decided = await guard.before(send("x", "u1"), cron("r1"));
  assert.equal(decided.block, true);
  assert.match(decided.blockReason, /cannot be reached/);
});

test("an agent cannot run retrysafe approve or resolve from exec", async () => {
  const { guard } = scratch();
  const decided = await guard.before({ toolName: "exec", params: { command: "retrysafe --home /h approve K pay" } }, {});
  assert.equal(decided.block, true);
  const fine = await guard.before({ toolName: "exec", params: { command: "retrysafe status K" } }, {});
  assert.equal(fine, undefined);
});

test("a cron job without a retrysafe job is blocked unless allowed", async () => {
  const { guard } = scratch();
  const decided = await guard.before(send("x", "n1"), { jobId: "other", sessionKey: "agent:main:cron:other:run:s" });
  assert.equal(decided.block, true);
  assert.match(decided.blockReason, /has no retrysafe job/);
});

test("agent_end closes the attempt: done when every step is", async () => {
  const { guard, home } = scratch();
  const call = send("bye", "z1");
  await guard.before(call, cron("r1"));
  await guard.after(sent(call, "m-9"), cron("r1"));
  const key = [...guard.attempts.values()][0].key;
  await guard.end({ success: true }, cron("r1"));
  const out = JSON.parse(execFileSync(BIN, ["--home", home, "status", key, "--json"], { encoding: "utf8" }));
  assert.equal(out.outcome.state, "done");
});

test("a record still in flight (after_tool_call not awaited) is settled before the next call", async () => {
  const { guard } = scratch();
  const call = send("not awaited", "f1");
  assert.equal(await guard.before(call, cron("f")), undefined);
  const recordingNow = guard.after(sent(call, "m-90"), cron("f")); // OpenClaw observes without awaiting
  const again = await guard.before(send("not awaited", "f2"), cron("f"));
  assert.equal(again?.block, true, JSON.stringify(again));
  assert.match(again.blockReason, /already done: evidence m-90/);
  await recordingNow;
});
