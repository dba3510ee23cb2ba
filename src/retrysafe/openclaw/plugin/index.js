// The retrysafe plugin for OpenClaw: guards declared tool calls of cron-driven
// agent runs through the retrysafe CLI (see docs/openclaw.md, "The plugin").
import { createGuard } from "./guard.js";

export default {
  id: "retrysafe",
  name: "retrysafe",
  description: "Each guarded side effect of a cron-driven agent run happens once per occurrence.",
  register(api) {
    const config = api.pluginConfig ?? api.config?.plugins?.entries?.retrysafe?.config ?? {};
    const guard = createGuard(config, { logger: api.logger });
    api.on("before_tool_call", (event, ctx) => guard.before(event, ctx ?? {}), { priority: 100 });
    api.on("after_tool_call", (event, ctx) => guard.after(event, ctx ?? {}));
    api.on("agent_end", (event, ctx) => guard.end(event, ctx ?? {}));
    // An agent's exec shell has no RETRYSAFE_HOME of its own: give it this
    // plugin's home, so the skill's commands and the guard use one ledger.
    const home = config.home;
    api.on("resolve_exec_env", () => (home ? { RETRYSAFE_HOME: String(home) } : {}));
  },
};
