// Successive run times of OpenClaw cron jobs, computed by OpenClaw's own scheduler code.
//
// Usage: node openclaw_next_runs.mjs MODULE EXPORT < request.json
//   MODULE: the dist file of the installed openclaw that defines
//           computeJobNextRunAtMs (the function the gateway calls after every
//           run and when a job is added), EXPORT: the name it is exported as.
//   request: [{"job": <a job as 'openclaw cron add --json' returned it>,
//              "fromMs": <start>, "count": <n>, "runMs": <how long a run lasts>}, ...]
// Prints, for each request, the list of the next `count` run times (ms): from
// `fromMs`, then after each run as the gateway does it (the job's
// lastRunAtMs is the run's start, the next run is computed at its end).
import { readFileSync } from "node:fs";
import { pathToFileURL } from "node:url";

const [modulePath, exportName] = process.argv.slice(2);
const mod = await import(pathToFileURL(modulePath).href);
const computeJobNextRunAtMs = mod[exportName];
if (typeof computeJobNextRunAtMs !== "function") {
  console.error(`${modulePath} exports no function ${exportName}`);
  process.exit(2);
}
const requests = JSON.parse(readFileSync(0, "utf8"));
const answers = requests.map(({ job, fromMs, count, runMs }) => {
  const copy = structuredClone(job);
  copy.enabled = true;
  copy.state = {};
  const runs = [];
  let now = fromMs;
  for (let i = 0; i < count; i += 1) {
    const next = computeJobNextRunAtMs(copy, now);
    if (next === undefined) break;
    runs.push(next);
    copy.state.lastRunAtMs = next;
    copy.state.lastRunStatus = "ok";
    now = next + runMs;
  }
  return runs;
});
process.stdout.write(JSON.stringify(answers));
