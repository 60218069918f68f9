"""mini-swe-agent (from PyPI, through litellm) for a few steps against `execcritic serve`.

usage: mini_swe_agent.py BASE_URL MODEL WORKDIR EXPECT
EXPECT = "tool_calls": the model answers with bash tool calls (scripted model) that the agent runs;
EXPECT = "any": the model's output is nonsense (tiny random model); the protocol must hold.
"""
import os
import sys

os.environ.setdefault("MSWEA_COST_TRACKING", "ignore_errors")
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no network for the price list

import yaml  # noqa: E402
from minisweagent.agents.default import DefaultAgent  # noqa: E402
from minisweagent.config import builtin_config_dir  # noqa: E402
from minisweagent.environments.local import LocalEnvironment  # noqa: E402
from minisweagent.models.litellm_model import LitellmModel  # noqa: E402

base, model, workdir, expect = sys.argv[1:5]
agent_cfg = yaml.safe_load((builtin_config_dir / "mini.yaml").read_text())["agent"]
agent_cfg.update(step_limit=3, max_consecutive_format_errors=0, wall_time_limit_seconds=120)
lm = LitellmModel(
    model_name=f"openai/{model}",
    model_kwargs={"api_base": base, "api_key": "unused", "max_tokens": 256 if expect == "tool_calls" else 48, "temperature": 0.0, "timeout": 60},
    cost_tracking="ignore_errors",
)
agent = DefaultAgent(lm, LocalEnvironment(cwd=workdir, timeout=10), **agent_cfg)
result = agent.run("List the files in the repository.")
roles = [m.get("role") for m in agent.messages]
print("exit:", result, "| calls:", agent.n_calls, "| roles:", roles)
assert result.get("exit_status") == "LimitsExceeded", result
assert agent.n_calls == 3, agent.n_calls
if expect == "tool_calls":
    tool_msgs = [m for m in agent.messages if m.get("role") == "tool"]
    assert len(tool_msgs) == 3, roles
    assert all("marker-file.txt" in str(m.get("content")) for m in tool_msgs), tool_msgs
print("mini-swe-agent OK")
