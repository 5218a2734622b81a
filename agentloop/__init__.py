"""agentloop: LLM agent loops and composite agent workflows whose procedure is code."""
