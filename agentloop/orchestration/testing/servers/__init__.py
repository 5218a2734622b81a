"""Local model servers that speak the OpenAI and Anthropic protocols, for users' tests and ours."""
