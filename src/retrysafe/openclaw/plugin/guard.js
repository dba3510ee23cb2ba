// The guard's logic, free of OpenClaw's runtime so Node's test runner can drive
// it: decide before a guarded tool call, record after it, close at the end.
//
// Every decision comes from the retrysafe ledger through its CLI (--json), and
// every piece of evidence from the tool result this plugin observed, never
// from what the model says. Anything the guard cannot establish blocks the call.
import { execFile } from "node:child_process";
import { createHash } from "node:crypto";

export const AUTHORITY_CLASSES = new Set(["payment", "delete"]);
export const DEFAULT_GUARDS = [{ tool: "message", class: "message" }];
// Commands only a human may run: an agent must not settle its own block or
// approve its own irreversible effect from its exec shell.
const HUMAN_ONLY = /(^|[\s;&|/])retrysafe(\s+--?\S+(\s+\S+)?)*\s+(approve|resolve|retry|break-lease|forget)\b/;
const CRON_SESSION = /^agent:[^:]+:cron:([^:]+):run:/;
const EVIDENCE_KEYS = ["messageId", "message_id", "id", "ts", "url"];
// What a person runs to settle a step, as the ledger words it: <EVIDENCE> is the
// placeholder the shell refuses (a redirection before the end of the line, then
// '>' before '|'), so the line pasted unedited records nothing.
const settleLine = (key, step) => `retrysafe resolve ${key} ${step} --found <EVIDENCE> | --absent`;

/** The canonical JSON of a value: keys sorted, no spaces. */
export function canonicalJson(value) {
  if (Array.isArray(value)) return `[${value.map(canonicalJson).join(",")}]`;
  if (value && typeof value === "object") {
    const keys = Object.keys(value).filter((k) => value[k] !== undefined).sort();
    return `{${keys.map((k) => `${JSON.stringify(k)}:${canonicalJson(value[k])}`).join(",")}}`;
  }
  return JSON.stringify(value ?? null);
}

/** The step a call is: the declared name, else the tool and a hash of its parameters. */
export function stepName(guard, toolName, params) {
  if (guard.step) return guard.step;
  const digest = createHash("sha256").update(canonicalJson(params ?? {})).digest("hex");
  return `${toolName.replace(/[^A-Za-z0-9_-]/g, "-")}-${digest.slice(0, 12)}`;
}

/** The OpenClaw cron job id of a run, or null outside cron-driven runs. */
export function cronJobId(ctx) {
  if (ctx.jobId) return String(ctx.jobId);
  const match = CRON_SESSION.exec(String(ctx.sessionKey ?? ""));
  return match ? match[1] : null;
}

function commandOf(params) {
  const cmd = params?.command ?? params?.cmd ?? "";
  return Array.isArray(cmd) ? cmd.join(" ") : String(cmd);
}

/** The declared guard for a call, or null when the call is not guarded. */
export function matchGuard(guards, toolName, params) {
  for (const g of guards) {
    if (g.tool !== toolName) continue;
    if (g.command && !new RegExp(g.command).test(commandOf(params))) continue;
    return g;
  }
  return null;
}

/** An id the tool result carries (declared paths first), or null. */
export function evidenceFrom(result, paths = []) {
  const docs = [];
  if (result && typeof result === "object") {
    docs.push(result, result.details);
    for (const part of Array.isArray(result.content) ? result.content : []) {
      if (part?.type === "text" && typeof part.text === "string") {
        try {
          docs.push(JSON.parse(part.text));
        } catch {
          /* not JSON */
        }
      }
    }
  }
  const lookup = (doc, path) =>
    path.split(".").reduce((v, k) => (v && typeof v === "object" ? v[k] : undefined), doc);
  for (const path of [...paths, ...EVIDENCE_KEYS]) {
    for (const doc of docs) {
      const v = doc && typeof doc === "object" ? lookup(doc, path) : undefined;
      if ((typeof v === "string" && v.trim()) || typeof v === "number") return String(v).trim();
    }
  }
  return null;
}

/** Whether a result says the call failed (an exec exit status, an error status). */
export function resultFailed(result) {
  const d = result?.details ?? {};
  if (typeof d.exitCode === "number" && d.exitCode !== 0) return `exit ${d.exitCode}`;
  if (d.status === "error" || d.status === "failed" || d.ok === false || result?.isError) {
    return String(d.error ?? d.status ?? "error");
  }
  return null;
}

/** Run the retrysafe CLI; resolves to { code, json, stdout, stderr } (code null: did not run). */
export function runCli(bin, home, args, timeoutMs) {
  const full = home ? ["--home", home, ...args] : args;
  // OPENCLAW_SHELL=plugin: the attempt records runner openclaw:plugin, not the
  // gateway's own context (it would read as a command job).
  const env = { ...process.env, OPENCLAW_SHELL: "plugin" };
  if (home) env.RETRYSAFE_HOME = home;
  return new Promise((resolve) => {
    execFile(bin, full, { timeout: timeoutMs, env, maxBuffer: 1 << 20 }, (error, stdout, stderr) => {
      let code = 0;
      if (error) code = typeof error.code === "number" ? error.code : null;
      let json = null;
      try {
        json = JSON.parse(stdout);
      } catch {
        /* not a JSON answer */
      }
      const why = code === null ? String(error?.message ?? error) : "";
      resolve({ code, json, stdout: String(stdout), stderr: String(stderr) || why });
    });
  });
}

/** Run a declared lookup: found (0, last line = evidence), absent (1), else ambiguous. */
export function runLookup(command, stepKey, home, timeoutMs) {
  const env = { ...process.env, RETRYSAFE_STEP_KEY: stepKey };
  if (home) env.RETRYSAFE_HOME = home;
  return new Promise((resolve) => {
    execFile("/bin/sh", ["-c", command], { timeout: timeoutMs, env }, (error, stdout, stderr) => {
      const code = error ? (typeof error.code === "number" ? error.code : null) : 0;
      const lines = String(stdout).split("\n").map((l) => l.trim()).filter(Boolean);
      if (code === 0) resolve({ found: lines.at(-1) || "(found by lookup; it printed nothing)" });
      else if (code === 1) resolve({ absent: true });
      else resolve({ ambiguous: `lookup exited ${code ?? "abnormally"}: ${String(stderr).trim().slice(-300)}` });
    });
  });
}

export function createGuard(config = {}, { logger, run = runCli, lookup = runLookup } = {}) {
  const bin = config.retrysafe || "retrysafe";
  const home = config.home || process.env.RETRYSAFE_HOME || "";
  const guards = config.guards ?? DEFAULT_GUARDS;
  const jobs = config.jobs ?? {};
  const timeoutMs = config.timeoutMs ?? 30_000;
  // OpenClaw denies an approval nobody answers once this runs out (a cron run's at
  // once: nobody can be asked); the step stays blocked in the ledger with its
  // unblock line.
  const approvalTimeoutMs = config.approvalTimeoutMs ?? 10 * 60_000;
  const attempts = new Map(); // run -> { key, attempt }
  const pending = new Map(); // toolCallId or run+step -> { key, step, attempt, cls, intended }
  // after_tool_call is an observing hook: OpenClaw may not await it before the
  // next before_tool_call of the same run. Records in flight, by run, are
  // awaited before deciding on the next call and before closing.
  const recording = new Map(); // run -> Set of promises
  const cli = (...args) => run(bin, home, args, timeoutMs);
  const log = (msg) => logger?.info?.(`retrysafe: ${msg}`);
  const block = (reason) => ({ block: true, blockReason: `retrysafe: ${reason}` });
  const unreachable = (answer) =>
    block(`the ledger cannot be reached, so this guarded call is not made (${answer.stderr.trim().slice(-300) || `exit ${answer.code}`})`);
  const runKeyOf = (ctx) => String(ctx.sessionKey ?? ctx.runId ?? "");
  const callKey = (event, ctx, step) => event.toolCallId ?? `${runKeyOf(ctx)}/${step}`;

  async function attemptFor(ctx, jobId) {
    const cached = attempts.get(runKeyOf(ctx));
    if (cached) return { ok: cached };
    const spec = typeof jobs[jobId] === "string" ? { job: jobs[jobId] } : jobs[jobId];
    const args = ["begin", spec.job, "--json", "--context", "runner=openclaw:plugin"];
    if (config.leaseSeconds) args.push("--lease", String(config.leaseSeconds));
    // OpenClaw's ids, recorded with the attempt (and with a done or busy answer), so
    // 'retrysafe openclaw runs' joins OpenClaw's run history to the ledger's
    const ids = { openclaw_run_id: ctx.runId, openclaw_job_id: jobId, openclaw_session: ctx.sessionKey };
    for (const [name, value] of Object.entries(ids)) {
      const text = String(value ?? "").replace(/[^\x20-\x7e]/g, "").slice(0, 200);
      if (text) args.push("--context", `${name}=${text}`);
    }
    for (const [k, v] of Object.entries(spec.params ?? {})) args.push("-p", `${k}=${v}`);
    const answer = await cli(...args);
    const info = answer.json;
    if (!info || typeof info !== "object") return { refusal: unreachable(answer) };
    if (info.attempt_id) {
      const entry = { key: info.key, attempt: info.attempt_id };
      attempts.set(runKeyOf(ctx), entry);
      return { ok: entry };
    }
    if (info.status === "done") return { done: info.key };
    if (info.status === "busy") return { busy: info.key };
    return { refusal: block(`blocked: ${info.key}: ${info.reason}; a human runs: ${info.unblock}`) };
  }

  function askHuman(title, description, onAllow) {
    return {
      requireApproval: {
        title,
        description,
        severity: "critical",
        timeoutMs: approvalTimeoutMs,
        allowedDecisions: ["allow-once", "deny"],
        onResolution: async (decision) => {
          if (decision === "allow-once" || decision === "allow-always") await onAllow();
        },
      },
    };
  }

  async function intend(entry, step, cls, call, absent) {
    const args = ["intent", entry.key, step, "--class", cls, "--attempt", entry.attempt];
    if (absent) args.push("--absent", absent);
    const answer = await cli(...args);
    if (answer.code === 0) pending.set(call, { ...entry, step, cls, intended: true });
    return answer;
  }

  async function settled(ctx) {
    const inFlight = recording.get(runKeyOf(ctx));
    if (inFlight?.size) await Promise.allSettled([...inFlight]);
  }

  async function before(event, ctx) {
    await settled(ctx);
    const toolName = String(event.toolName ?? "");
    const params = event.params ?? {};
    if (toolName === "exec" && HUMAN_ONLY.test(commandOf(params))) {
      return block("approve, resolve, retry, break-lease and forget are for a human, not for an agent");
    }
    const guard = matchGuard(guards, toolName, params);
    if (!guard) return undefined;
    const jobId = cronJobId(ctx);
    if (!jobId) return undefined; // not a cron-driven run
    if (!jobs[jobId]) {
      if (config.unmappedCron === "allow") return undefined;
      return block(`cron job ${jobId} has no retrysafe job: add it to plugins.entries.retrysafe.config.jobs`);
    }
    const begun = await attemptFor(ctx, jobId);
    if (begun.refusal) return begun.refusal;
    const step = stepName(guard, toolName, params);
    const cls = guard.class;
    if (begun.done || begun.busy) {
      // Another attempt holds the outcome, or it is closed: read what the ledger
      // knows about this step without claiming anything.
      const outcome = begun.done || begun.busy;
      const seen = await cli("check", outcome, step, "--class", cls, "--json");
      if (seen.json?.action === "skip") return block(`already done: evidence ${seen.json.evidence}; do not repeat it`);
      if (begun.done) return block(`already done: ${outcome} is done; do not repeat it`);
      return block(`busy: ${outcome} is being done by another live run; do not repeat this call`);
    }
    const entry = begun.ok;
    const call = callKey(event, ctx, step);
    const decided = await cli("check", entry.key, step, "--class", cls, "--attempt", entry.attempt, "--json");
    const d = decided.json;
    if (!d || typeof d !== "object" || !d.action) return unreachable(decided);
    if (d.action === "skip") return block(`already done: evidence ${d.evidence}; do not repeat it`);
    if (d.action === "busy") return block(`busy: ${d.step_key} is running in another attempt`);
    if (d.action === "blocked") {
      const approve = d.cause === "approval" || AUTHORITY_CLASSES.has(cls);
      const what = approve ? `a ${cls} step needs a person's approval` : `${d.reason}`;
      log(`${d.step_key} blocked: ${what}; to unblock: ${d.unblock}`);
      return askHuman(
        approve ? `Approve ${cls}: ${toolName}` : `Settle ${d.step_key}`,
        `${what}. Allow only if you checked it yourself; denying (or no answer) leaves it blocked. ` +
          `Or run: ${d.unblock}`,
        async () => {
          const settle = approve
            ? await cli("approve", entry.key, step)
            : await cli("resolve", entry.key, step, "--absent");
          if (settle.code === 0) await intend(entry, step, cls, call, approve ? null : "a person, asked by OpenClaw");
        },
      );
    }
    if (d.action === "lookup") {
      if (!guard.lookup) {
        const stopped = await cli("block", entry.key, step, "--reason", `${d.reason}; no lookup declared for ${toolName}`, "--attempt", entry.attempt, "--json");
        return block(`${d.step_key} may have happened already and no lookup is declared; a human decides: ${stopped.json?.unblock || settleLine(entry.key, step)}`);
      }
      const found = await lookup(guard.lookup, d.step_key, home, timeoutMs);
      if (found.found) {
        const rec = await cli("record", entry.key, step, "--evidence", found.found, "--attempt", entry.attempt);
        if (rec.code !== 0) return unreachable(rec);
        return block(`already done (found by lookup): evidence ${found.found}; do not repeat it`);
      }
      if (found.absent) {
        const answer = await intend(entry, step, cls, call, `lookup: ${guard.lookup}`);
        return answer.code === 0 ? undefined : unreachable(answer);
      }
      const stopped = await cli("block", entry.key, step, "--reason", found.ambiguous, "--attempt", entry.attempt, "--json");
      return askHuman(`Settle ${d.step_key}`, `${found.ambiguous}. Allow only if you checked it did not happen; or run: ${stopped.json?.unblock || settleLine(entry.key, step)}`,
        async () => {
          const settle = await cli("resolve", entry.key, step, "--absent");
          if (settle.code === 0) await intend(entry, step, cls, call, "a person, asked by OpenClaw");
        });
    }
    // execute: nothing recorded yet
    if (AUTHORITY_CLASSES.has(cls)) {
      return askHuman(`Approve ${cls}: ${toolName}`, `${d.step_key} needs a person's approval (class ${cls}); the agent cannot approve it.`,
        async () => {
          const settle = await cli("approve", entry.key, step);
          if (settle.code === 0) await intend(entry, step, cls, call, null);
        });
    }
    const answer = await intend(entry, step, cls, call, null);
    return answer.code === 0 ? undefined : unreachable(answer);
  }

  function after(event, ctx) {
    const run = runKeyOf(ctx);
    const work = recordAfter(event, ctx);
    if (!recording.has(run)) recording.set(run, new Set());
    recording.get(run).add(work);
    return work.finally(() => {
      recording.get(run)?.delete(work);
      if (recording.get(run)?.size === 0) recording.delete(run);
    });
  }

  async function recordAfter(event, ctx) {
    const toolName = String(event.toolName ?? "");
    const guard = matchGuard(guards, toolName, event.params ?? {});
    if (!guard) return;
    const step = stepName(guard, toolName, event.params ?? {});
    const call = callKey(event, ctx, step);
    const p = pending.get(call);
    if (!p) return;
    pending.delete(call);
    const failed = event.error ? String(event.error) : resultFailed(event.result);
    const evidence = failed || event.result === undefined ? null : evidenceFrom(event.result, guard.evidence);
    if (evidence) {
      await cli("record", p.key, p.step, "--evidence", evidence, "--attempt", p.attempt);
    } else if (event.result !== undefined && !failed) {
      const digest = createHash("sha256").update(canonicalJson(event.result)).digest("hex").slice(0, 16);
      await cli("record", p.key, p.step, "--evidence", `tool result sha256:${digest} (no id in it)`, "--attempt", p.attempt);
    } else {
      const why = failed ? `the tool call failed or timed out: ${failed}` : "the tool call returned no result";
      await cli("unknown", p.key, p.step, "--reason", why.slice(0, 500), "--attempt", p.attempt);
    }
  }

  async function end(event, ctx) {
    await settled(ctx);
    const entry = attempts.get(runKeyOf(ctx));
    if (!entry) return;
    attempts.delete(runKeyOf(ctx));
    const args = ["close", entry.key, "--attempt", entry.attempt, "--json"];
    if (event?.success === false) args.push("--failed", String(event.error ?? "the agent turn failed").slice(0, 300));
    await cli(...args);
  }

  return { before, after, end, attempts, pending };
}
